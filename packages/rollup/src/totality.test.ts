import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { reasonClassRank } from "./catalog.js";
import { formatTime, setCondition } from "./condition.js";
import * as entry from "./index.js";
import {
  DEFAULT_REASON_CATALOG,
  findCondition,
  parseWorkloadDeploymentInput,
  parseWorkloadInput,
  progressConditions,
  rollupWorkload,
  rollupWorkloadDeployment,
  setConditions,
  statusChanged,
} from "./index.js";
import { kstatusConditions } from "./kstatus.js";

/** A lone surrogate (what the API server would turn into U+FFFD). */
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

// Anything at all: holes in arrays, null prototypes, boxed values, Maps, Sets, typed arrays,
// `undefined` properties, very deep and very wide values.
const anything = fc.anything({
  withSparseArray: true,
  withNullPrototype: true,
  withBoxedValues: true,
  withMap: true,
  withSet: true,
  withBigInt: true,
  withDate: true,
  withTypedArray: true,
  withObjectString: true,
  maxDepth: 4,
});

const HUGE = `${"\u001b[31m😀e\u0301\u0000\u202e".repeat(50_000)}${"x".repeat(100_000)}`;
const LONG = HUGE.slice(0, 40_000);
const huge = fc.constantFrom(LONG, `\ud83d${LONG}\ude00`, "\ud800", "");

/** Holes, undefined, null and wrong types in the places the roll-ups read. */
const hostileInstance = fc.oneof(
  anything,
  fc.record({
    name: fc.oneof(fc.string(), huge, anything),
    ready: fc.oneof(fc.boolean(), anything),
    reason: fc.oneof(fc.constantFrom("InstanceCrashing", "Ready", "Unknown"), huge, anything),
    message: fc.oneof(fc.string(), huge, anything),
  }),
);
const sparse = <T>(item: fc.Arbitrary<T>) =>
  fc.sparseArray(item, { maxLength: 8, noTrailingHole: false });
const deploymentLike = fc.oneof(
  anything,
  fc.record({
    desiredReplicas: fc.oneof(fc.nat(10), anything),
    generation: fc.oneof(fc.nat(10), anything),
    blockers: fc.oneof(
      sparse(fc.oneof(anything, fc.record({ reason: huge, message: huge }))),
      anything,
    ),
    instances: fc.oneof(sparse(hostileInstance), anything),
  }),
);
const placementLike = fc.oneof(
  anything,
  fc.record({
    name: fc.oneof(fc.string(), huge, anything),
    desiredReplicas: fc.oneof(fc.nat(10), anything),
    replicas: fc.oneof(fc.nat(10), anything),
    readyReplicas: fc.oneof(fc.nat(10), anything),
    reasons: fc.oneof(
      sparse(
        fc.oneof(
          anything,
          fc.record({
            reason: fc.oneof(huge, anything),
            count: fc.oneof(fc.nat(5), anything),
            message: fc.oneof(huge, anything),
            instances: fc.oneof(sparse(fc.oneof(fc.string(), huge)), anything),
          }),
        ),
      ),
      anything,
    ),
  }),
);
const workloadLike = fc.oneof(
  anything,
  fc.record({ generation: anything, placements: fc.oneof(sparse(placementLike), anything) }),
);
const optionsLike = fc.oneof(
  anything,
  fc.record({
    now: fc.oneof(fc.date(), anything),
    previous: fc.oneof(sparse(anything), anything),
    catalog: anything,
  }),
);

// biome-ignore lint/suspicious/noExplicitAny: calling exported functions with hostile input is the point.
type Loose = (...args: any[]) => unknown;
const loose = (f: unknown): Loose => f as Loose;

describe("no exported function throws, whatever it is handed", () => {
  it("every exported function is covered below", () => {
    // The entry's functions and the helpers it no longer exports (still used by the roll-ups).
    const rollup = { ...entry, formatTime, kstatusConditions, reasonClassRank, setCondition };
    const functions = Object.entries(rollup)
      .filter(([, value]) => typeof value === "function" && !/^[A-Z]/.test(value.name))
      .map(([name]) => name)
      .sort();
    expect(functions).toEqual([
      "findCondition",
      "formatTime",
      "kstatusConditions",
      "parseWorkloadDeploymentInput",
      "parseWorkloadInput",
      "progressConditions",
      "reasonClassRank",
      "rollupWorkload",
      "rollupWorkloadDeployment",
      "setCondition",
      "setConditions",
      "statusChanged",
    ]);
  });

  it("rollupWorkloadDeployment", () => {
    fc.assert(
      fc.property(deploymentLike, optionsLike, (input, options) => {
        const status = loose(rollupWorkloadDeployment)(input, options) as ReturnType<
          typeof rollupWorkloadDeployment
        >;
        expect(Array.isArray(status.conditions)).toBe(true);
      }),
      { numRuns: 150 },
    );
  });

  it("rollupWorkload, sparse placements included", () => {
    // biome-ignore lint/suspicious/noSparseArray: the hole is the point.
    const holes = [, { name: "eu", desiredReplicas: 1 }, ,];
    expect(
      rollupWorkload({ generation: 1, placements: holes } as never, { now: new Date(0) }),
    ).toBeTypeOf("object");
    fc.assert(
      fc.property(workloadLike, optionsLike, (input, options) => {
        const status = loose(rollupWorkload)(input, options) as ReturnType<typeof rollupWorkload>;
        expect(Array.isArray(status.conditions)).toBe(true);
      }),
      { numRuns: 150 },
    );
  });

  it("the parsers, conditions and catalog", () => {
    fc.assert(
      fc.property(anything, anything, anything, (a, b, c) => {
        loose(parseWorkloadDeploymentInput)(a);
        loose(parseWorkloadInput)(a);
        loose(setCondition)(a, b, c);
        loose(setConditions)(a, b, c);
        loose(findCondition)(a, b);
        loose(formatTime)(a);
        loose(statusChanged)(a, b);
        loose(reasonClassRank)(a);
        loose(kstatusConditions)(a, b);
        loose(progressConditions)(a, b);
        DEFAULT_REASON_CATALOG.extend(a);
        DEFAULT_REASON_CATALOG.resolve(a);
        loose(DEFAULT_REASON_CATALOG.get.bind(DEFAULT_REASON_CATALOG))(a);
      }),
      { numRuns: 500 },
    );
  });

  it("huge and hostile text", () => {
    for (const text of [HUGE, `\ud83d${HUGE}`]) {
      const status = rollupWorkloadDeployment(
        {
          desiredReplicas: 2,
          generation: 1,
          instances: [
            { name: text, ready: false, reason: "InstanceCrashing", message: text },
            { name: "b", ready: false, reason: text, message: text },
          ],
          blockers: [{ reason: "InvalidSpec", message: text }],
        },
        { now: new Date(0) },
      );
      for (const c of status.conditions) {
        expect([...c.message].length).toBeLessThanOrEqual(32768);
        expect(c.message).not.toMatch(
          // biome-ignore lint/suspicious/noControlCharactersInRegex: no control character may remain.
          /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e]/,
        );
        expect(c.message).not.toMatch(LONE);
      }
      const condition = setCondition(
        [],
        { type: "Ready", status: "True", reason: "Fine", message: text },
        new Date(0),
      )[0];
      expect(condition?.message).not.toMatch(LONE);
    }
  });
});
