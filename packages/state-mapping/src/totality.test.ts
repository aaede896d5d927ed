import fc from "fast-check";
import { describe, expect, it } from "vitest";
import * as bootTimelineModule from "./boot-timeline.js";
import * as instanceModule from "./instance.js";
import * as instanceReasonModule from "./instance-reason.js";
import * as podStatusModule from "./pod-status.js";
import * as reasonsModule from "./reasons.js";
import * as reportModule from "./report.js";
import * as reportBudgetModule from "./report-budget.js";
import * as stateModule from "./state.js";

// Every function the package's modules export (the entry exports a few of them).
const mapping = {
  ...bootTimelineModule,
  ...instanceModule,
  ...instanceReasonModule,
  ...podStatusModule,
  ...reasonsModule,
  ...reportModule,
  ...reportBudgetModule,
  ...stateModule,
};

import { crashLooping, ec2, exited, NOW, pod, report, running } from "./test-fixtures.js";

// Anything at all: holes in arrays, null prototypes, boxed values, Maps, Sets, typed arrays,
// dates, big integers, `undefined` properties.
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
const HUGE = `${"\u001b[31m😀e\u0301\u0000\u202e".repeat(5_000)}\ud83d`;
const text = fc.oneof(fc.string(), fc.constantFrom(HUGE, "\ud800", ""));

/** Something shaped like what the function expects, with any part replaced by anything. */
function damaged<T extends object>(base: T): fc.Arbitrary<unknown> {
  const keys = Object.keys(base);
  return fc
    .record({
      key: fc.constantFrom(...keys),
      value: fc.oneof(anything, text),
      drop: fc.boolean(),
    })
    .map(({ key, value, drop }) => {
      const copy: Record<string, unknown> = { ...(base as Record<string, unknown>) };
      if (drop) delete copy[key];
      else copy[key] = value;
      return copy;
    });
}

const aState = fc.constantFrom(
  mapping.toInstanceState(ec2("running", { report: report(1, false, [running()]) }), { now: NOW }),
  mapping.toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), { now: NOW }),
  mapping.toInstanceState(ec2("stopped", { report: report(2, true, [exited(1)]) }), { now: NOW }),
  mapping.toInstanceState(ec2("running", { report: report(3, false, [crashLooping(2)]) }), {
    now: NOW,
  }),
);
const hostileState = fc.oneof(
  anything,
  aState.chain((s) => damaged(s)),
);
const hostilePod = fc.oneof(
  anything,
  damaged(pod()),
  fc.record({
    spec: damaged(pod().spec ?? {}),
    status: fc.oneof(anything, damaged({ phase: "Failed", conditions: [] })),
  }),
);
const hostileOptions = fc.oneof(
  anything,
  fc.record({
    now: fc.oneof(fc.date(), anything),
    previous: fc.oneof(anything, hostileState),
    consoleOutput: fc.oneof(text, anything),
    launchedAt: fc.oneof(fc.date(), anything),
    absentGraceMs: anything,
    bootTimeoutMs: anything,
  }),
);
const hostileInstance = fc.oneof(
  anything,
  damaged(ec2("running", { report: report(1, false, [running()]) })),
);

// biome-ignore lint/suspicious/noExplicitAny: calling exported functions with hostile input is the point.
type Loose = (...args: any[]) => unknown;
const call = (name: string, ...args: unknown[]) =>
  ((mapping as unknown as Record<string, Loose>)[name] as Loose)(...args);

/** Functions the modules export for each other, not for consumers: covered by their own tests. */
const INTERNAL_HELPERS = new Set([
  "allocate",
  "cutMessage",
  "lostMessage",
  "messageSlots",
  "stopFacts",
]);

describe("no exported function throws, whatever it is handed", () => {
  it("every exported function is covered below", () => {
    const functions = Object.entries(mapping)
      .filter(([, value]) => typeof value === "function" && !/^[A-Z]/.test(value.name))
      .filter(([name]) => !INTERNAL_HELPERS.has(name))
      .map(([name]) => name)
      .sort();
    expect(functions).toEqual([
      "bootTimeline",
      "decodeConsoleOutput",
      "decodeReportTags",
      "ec2Cause",
      "encodeConsoleLine",
      "encodeReportTags",
      "instanceTags",
      "isInstanceReason",
      "isSpotInterruptionMarked",
      "needsConsoleOutput",
      "parseDescribeInstancesPage",
      "parseEc2Instance",
      "toInstanceReason",
      "toInstanceState",
      "toPodStatus",
      "utf8Head",
      "utf8Tail",
    ]);
  });

  it("toInstanceState", () => {
    fc.assert(
      fc.property(hostileInstance, hostileOptions, (instance, options) => {
        expect(typeof (call("toInstanceState", instance, options) as { kind: string }).kind).toBe(
          "string",
        );
      }),
      { numRuns: 400 },
    );
  });

  it("toPodStatus", () => {
    fc.assert(
      fc.property(hostilePod, hostileState, hostileOptions, (p, state, options) => {
        expect(call("toPodStatus", p, state, options)).toBeTypeOf("object");
      }),
      { numRuns: 400 },
    );
  });

  it("isSpotInterruptionMarked", () => {
    fc.assert(
      fc.property(fc.oneof(hostilePod, anything), (value) => {
        expect(call("isSpotInterruptionMarked", value)).toBeTypeOf("boolean");
      }),
      { numRuns: 400 },
    );
  });

  it("toInstanceReason", () => {
    fc.assert(
      fc.property(fc.oneof(hostilePod, anything), (value) => {
        expect(typeof (call("toInstanceReason", value) as { reason: string }).reason).toBe(
          "string",
        );
      }),
      { numRuns: 400 },
    );
  });

  it("the readers, predicates and the report decoders", () => {
    fc.assert(
      fc.property(anything, anything, (a, b) => {
        for (const name of [
          "bootTimeline",
          "decodeConsoleOutput",
          "decodeReportTags",
          "ec2Cause",
          "instanceTags",
          "isInstanceReason",
          "needsConsoleOutput",
          "parseDescribeInstancesPage",
          "parseEc2Instance",
          "utf8Head",
          "utf8Tail",
        ]) {
          call(name, a, b);
        }
      }),
      { numRuns: 400 },
    );
  });

  it("the byte cutters, with a limit that is no number", () => {
    // A limit that cannot even be compared (no valueOf, no toString) once threw a TypeError.
    const bytes = new Uint8Array([0xe2, 0x82, 0xac]);
    for (const max of [Object.create(null), {}, "2", Number.NaN, -1, undefined]) {
      expect(call("utf8Head", bytes, max)).toEqual(new Uint8Array(0));
      expect(call("utf8Tail", bytes, max)).toEqual(new Uint8Array(0));
    }
    expect(call("utf8Head", bytes, Number.POSITIVE_INFINITY)).toEqual(bytes);
  });

  it("the report encoders", () => {
    fc.assert(
      fc.property(fc.oneof(anything, damaged(report(1, false, [running()]))), (value) => {
        call("encodeReportTags", value);
        call("encodeConsoleLine", value);
      }),
      { numRuns: 200 },
    );
  });
});
