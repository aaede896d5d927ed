import { describe, expect, it } from "vitest";
import {
  Condition,
  type ConditionUpdate,
  findCondition,
  formatTime,
  setCondition,
  setConditions,
  statusChanged,
} from "./condition.js";

const t0 = new Date("2026-11-30T05:00:00.750Z");
const t1 = new Date("2026-11-30T06:00:00Z");

const crashing: ConditionUpdate = {
  type: "Available",
  status: "False",
  reason: "InstanceCrashing",
  message: "1 of 1 instances is repeatedly exiting and restarting.",
  observedGeneration: 3,
};

describe("formatTime", () => {
  it("formats RFC 3339 in whole seconds, UTC", () => {
    expect(formatTime(t0)).toBe("2026-11-30T05:00:00Z");
  });

  it("formats an invalid date as the epoch instead of throwing", () => {
    expect(formatTime(new Date(Number.NaN))).toBe("1970-01-01T00:00:00Z");
    expect(formatTime("yesterday" as unknown as Date)).toBe("1970-01-01T00:00:00Z");
    expect(formatTime(new Date("+010000-01-01T00:00:00Z"))).toBe("1970-01-01T00:00:00Z");
    expect(formatTime(new Date("9999-12-31T23:59:59Z"))).toBe("9999-12-31T23:59:59Z");
    expect(formatTime(new Date("0000-01-01T00:00:00Z"))).toBe("0000-01-01T00:00:00Z");
  });
});

describe("setCondition", () => {
  it("appends a new condition stamped with now and the observed generation", () => {
    const conditions = setCondition(undefined, crashing, t0);
    expect(conditions).toEqual([{ ...crashing, lastTransitionTime: "2026-11-30T05:00:00Z" }]);
    expect(Condition.array().safeParse(conditions).success).toBe(true);
  });

  it("keeps lastTransitionTime when only reason, message or generation change", () => {
    const first = setCondition(undefined, crashing, t0);
    const second = setCondition(
      first,
      { ...crashing, reason: "ImageUnavailable", message: "other", observedGeneration: 4 },
      t1,
    );
    expect(second).toEqual([
      {
        ...crashing,
        reason: "ImageUnavailable",
        message: "other",
        observedGeneration: 4,
        lastTransitionTime: "2026-11-30T05:00:00Z",
      },
    ]);
  });

  it("moves lastTransitionTime when the status flips", () => {
    const first = setCondition(undefined, crashing, t0);
    const second = setCondition(first, { ...crashing, status: "True", reason: "Ready" }, t1);
    expect(second[0]?.lastTransitionTime).toBe("2026-11-30T06:00:00Z");
  });

  it("keeps the position of an existing condition, drops duplicates, and leaves others alone", () => {
    const other: Condition = {
      type: "Paused",
      status: "False",
      reason: "NotPaused",
      message: "",
      lastTransitionTime: "2026-01-01T00:00:00Z",
    };
    const stored: Condition[] = [
      { ...crashing, lastTransitionTime: "2026-01-02T00:00:00Z" },
      other,
      { ...crashing, status: "True", lastTransitionTime: "2026-01-03T00:00:00Z" },
    ];
    const next = setCondition(stored, { ...crashing, message: "changed" }, t1);
    expect(next).toEqual([
      { ...crashing, message: "changed", lastTransitionTime: "2026-01-02T00:00:00Z" },
      other,
    ]);
    expect(stored).toHaveLength(3);
  });

  it("makes every condition valid for the API server", () => {
    const [condition] = setCondition(
      [],
      { type: "Available", status: "False", reason: "not camel", message: "x".repeat(40000) },
      t0,
    );
    expect(condition?.reason).toBe("Unknown");
    expect(Condition.safeParse(condition).success).toBe(true);
  });
});

describe("setConditions / findCondition", () => {
  it("applies updates in order and finds them by type", () => {
    const conditions = setConditions(
      [],
      [crashing, { ...crashing, type: "ReplicasReady", reason: "InstanceCrashing" }],
      t0,
    );
    expect(conditions.map((c) => c.type)).toEqual(["Available", "ReplicasReady"]);
    expect(findCondition(conditions, "ReplicasReady")?.status).toBe("False");
    expect(findCondition(conditions, "Degraded")).toBeUndefined();
    expect(findCondition(undefined, "Available")).toBeUndefined();
  });
});

describe("malformed stored conditions", () => {
  const foreign = {
    type: "DisruptionTarget",
    status: "True",
    lastTransitionTime: "2026-11-30T04:00:00Z",
    reason: "EvictionByEvictionAPI",
    message: "",
  };
  const stored = [
    null,
    { type: 5 },
    "x",
    foreign,
    { ...foreign, type: "Other", reason: "not camel case" },
  ] as unknown as Condition[];

  it("setConditions drops entries that are not valid conditions and keeps valid foreign types", () => {
    const result = setConditions(stored, [crashing], t0);
    expect(result).toEqual([foreign, { ...crashing, lastTransitionTime: "2026-11-30T05:00:00Z" }]);
    for (const c of result) expect(Condition.safeParse(c).success).toBe(true);
  });

  it("setCondition drops them too, also when there is nothing to set", () => {
    expect(setCondition(stored, crashing, t0).map((c) => c.type)).toEqual([
      "DisruptionTarget",
      "Available",
    ]);
    expect(setConditions(stored, [], t0)).toEqual([foreign]);
  });
});

describe("statusChanged", () => {
  const stored = {
    readyReplicas: 0,
    conditions: setConditions([], [crashing, { ...crashing, type: "ReplicasReady" }], t0),
  };

  it("is false when only lastTransitionTime or condition order differ", () => {
    const next = {
      readyReplicas: 0,
      conditions: [...stored.conditions]
        .reverse()
        .map((c) => ({ ...c, lastTransitionTime: "2030-01-01T00:00:00Z" })),
    };
    expect(statusChanged(stored, next)).toBe(false);
  });

  it("treats a property set to undefined like a missing one", () => {
    expect(statusChanged({ a: 1 }, { a: 1, b: undefined })).toBe(false);
  });

  it("is true when a count, a reason, a message or the generation changes", () => {
    expect(statusChanged(stored, { ...stored, readyReplicas: 1 })).toBe(true);
    for (const change of [{ reason: "Other" }, { message: "m" }, { observedGeneration: 9 }]) {
      const next = {
        ...stored,
        conditions: stored.conditions.map((c, i) => (i === 0 ? { ...c, ...change } : c)),
      };
      expect(statusChanged(stored, next)).toBe(true);
    }
  });

  it("is true when a condition appears or disappears, and for no stored status", () => {
    expect(statusChanged(stored, { ...stored, conditions: stored.conditions.slice(1) })).toBe(true);
    expect(statusChanged(undefined, stored)).toBe(true);
  });

  it("answers for cyclic values instead of overflowing the stack", () => {
    const a: Record<string, unknown> = {};
    a.self = a;
    const b: Record<string, unknown> = {};
    b.self = b;
    expect(statusChanged(a, b)).toBe(true);
  });
});

describe("setCondition on values outside its types", () => {
  it("turns a bad status into Unknown and leaves out a bad observedGeneration", () => {
    const [condition] = setCondition(
      undefined,
      {
        type: "Available",
        status: "Yes" as unknown as "True",
        reason: "Fine",
        message: "",
        observedGeneration: -2,
      },
      t0,
    );
    expect(condition).toEqual({
      type: "Available",
      status: "Unknown",
      reason: "Fine",
      message: "",
      lastTransitionTime: "2026-11-30T05:00:00Z",
    });
  });

  it("returns the conditions unchanged for a missing update", () => {
    const stored = setCondition(undefined, crashing, t0);
    expect(setCondition(stored, undefined as unknown as ConditionUpdate, t1)).toEqual(stored);
  });
});
