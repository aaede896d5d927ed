import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type Condition,
  DEFAULT_REASON_CATALOG,
  findCondition,
  progressConditions,
  rollupWorkload,
  rollupWorkloadDeployment,
  setConditions,
  type WorkloadDeploymentInput,
} from "./index.js";
import { KSTATUS_CONDITION_TYPES, kstatusConditions } from "./kstatus.js";

const now = new Date("2026-11-30T05:00:00Z");
const crash =
  'container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.';

/** What kstatus' generic rules read from the two conditions: InProgress, Failed or Current. */
function kstatusOf(conditions: readonly Condition[]): string {
  if (findCondition(conditions, "Reconciling")?.status === "True") return "InProgress";
  if (findCondition(conditions, "Stalled")?.status === "True") return "Failed";
  return "Current";
}

function deployment(input: WorkloadDeploymentInput) {
  const status = rollupWorkloadDeployment(input, { now });
  const conditions = setConditions(status.conditions, kstatusConditions(status), now);
  return { ...status, conditions };
}

const instance = (name: string, reason?: string, message?: string) =>
  reason === undefined ? { name, ready: true } : { name, ready: false, reason, message };

describe("the truth table", () => {
  const rows: [string, WorkloadDeploymentInput, string, string][] = [
    [
      "crash loop",
      { desiredReplicas: 1, generation: 3, instances: [instance("a", "InstanceCrashing", crash)] },
      "Failed",
      "InstanceCrashing",
    ],
    [
      "OOM",
      {
        desiredReplicas: 1,
        generation: 3,
        instances: [instance("a", "OutOfMemory", 'container "app" ran out of memory.')],
      },
      "Failed",
      "OutOfMemory",
    ],
    [
      "image",
      {
        desiredReplicas: 2,
        generation: 3,
        instances: [instance("a", "ImageUnavailable"), instance("b", "ImageUnavailable")],
      },
      "Failed",
      "ImageUnavailable",
    ],
    [
      "quota",
      {
        desiredReplicas: 2,
        generation: 3,
        blockers: [
          {
            reason: "QuotaExceeded",
            replicas: 2,
            message: "2 of 2 desired instances are pending quota.",
          },
        ],
        instances: [],
      },
      "Failed",
      "QuotaExceeded",
    ],
    [
      "provisioning",
      { desiredReplicas: 3, generation: 3, instances: [instance("a", "Provisioning")] },
      "InProgress",
      "Provisioning",
    ],
    [
      "partial: one of three crashing",
      {
        desiredReplicas: 3,
        generation: 3,
        instances: [instance("a"), instance("b"), instance("c", "InstanceCrashing", crash)],
      },
      "Failed",
      "InstanceCrashing",
    ],
    [
      "partial: one of three starting",
      {
        desiredReplicas: 3,
        generation: 3,
        instances: [instance("a"), instance("b"), instance("c", "Starting")],
      },
      "InProgress",
      "Starting",
    ],
    [
      "healthy",
      { desiredReplicas: 2, generation: 3, instances: [instance("a"), instance("b")] },
      "Current",
      "NotStalled",
    ],
  ];

  it.each(rows)("%s → %s (%s)", (_, input, expected, reason) => {
    const status = deployment(input);
    expect(kstatusOf(status.conditions)).toBe(expected);
    const abnormal = status.conditions.find(
      (c) => (c.type === "Reconciling" || c.type === "Stalled") && c.status === "True",
    );
    expect(abnormal?.reason ?? findCondition(status.conditions, "Stalled")?.reason).toBe(reason);
    for (const type of ["Reconciling", "Stalled"]) {
      expect(findCondition(status.conditions, type)?.observedGeneration).toBe(3);
    }
  });

  it("carries the ReplicasReady message into Stalled", () => {
    const status = deployment({
      desiredReplicas: 1,
      generation: 1,
      instances: [instance("a", "InstanceCrashing", crash)],
    });
    expect(findCondition(status.conditions, "Stalled")?.message).toBe(
      findCondition(status.conditions, "ReplicasReady")?.message,
    );
  });

  it("reads a Workload the same way", () => {
    const wd = deployment({
      desiredReplicas: 1,
      generation: 1,
      instances: [instance("a", "ImageUnavailable")],
    });
    const workload = rollupWorkload(
      { generation: 7, placements: [{ ...wd, name: "eu" }] },
      { now },
    );
    const updates = kstatusConditions(workload);
    expect(updates.map((u) => [u.type, u.status, u.reason, u.observedGeneration])).toEqual([
      ["Reconciling", "False", "NothingPending", 7],
      ["Stalled", "True", "ImageUnavailable", 7],
    ]);
  });
});

describe("progressConditions", () => {
  it("treats completed instances as done and an unknown reason as still in progress", () => {
    expect(
      kstatusOf(
        setConditions(
          [],
          progressConditions({ generation: 1, done: false, reason: "Completed" }),
          now,
        ),
      ),
    ).toBe("Current");
    const unknown = progressConditions({ generation: 1, done: false, reason: "Unknown" });
    expect(unknown[0]).toMatchObject({ type: "Reconciling", status: "True", reason: "Unknown" });
  });

  it("gives a message when none is passed", () => {
    const [, stalled] = progressConditions({ generation: 1, done: false, reason: "QuotaExceeded" });
    expect(stalled?.message).toMatch(/^An instance .+\.$/);
  });

  it("never sets both, and sets neither when done (property, any input)", () => {
    const reasons = [...DEFAULT_REASON_CATALOG.names(), "Made-up reason", "CustomThing"];
    fc.assert(
      fc.property(
        fc.record({
          generation: fc.oneof(fc.integer(), fc.constant(Number.NaN)),
          done: fc.boolean(),
          reason: fc.option(fc.oneof(fc.constantFrom(...reasons), fc.string()), { nil: undefined }),
          message: fc.option(fc.string(), { nil: undefined }),
        }),
        (input) => {
          const updates = progressConditions(input);
          expect(updates.map((u) => u.type)).toEqual([
            KSTATUS_CONDITION_TYPES.Reconciling,
            KSTATUS_CONDITION_TYPES.Stalled,
          ]);
          const trues = updates.filter((u) => u.status === "True");
          expect(trues.length).toBeLessThanOrEqual(1);
          if (input.done) expect(trues).toEqual([]);
          const applied = setConditions([], updates, now);
          expect(applied).toHaveLength(2);
        },
      ),
    );
  });

  it("is total on garbage", () => {
    for (const value of [null, undefined, 5, "x", {}]) {
      expect(progressConditions(value as never)).toHaveLength(2);
      expect(kstatusConditions(value as never)).toHaveLength(2);
    }
  });
});
