import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  applyMergePatch,
  mergeConditions,
  normalizeTimes,
  planStatus,
  serverTime,
  statusEquals,
} from "./status-values.js";

describe("serverTime", () => {
  it("truncates to whole seconds in UTC, never rounding up", () => {
    expect(serverTime(new Date("2026-11-30T15:25:52.999Z"))).toBe("2026-11-30T15:25:52Z");
    expect(serverTime("2026-11-30T15:25:52.123456Z")).toBe("2026-11-30T15:25:52Z");
    expect(serverTime("2026-11-30T16:25:52.5+01:00")).toBe("2026-11-30T15:25:52Z");
    expect(serverTime(new Date("1969-12-31T23:59:59.500Z"))).toBe("1969-12-31T23:59:59Z");
  });

  it("leaves a string that is not a time alone", () => {
    expect(serverTime("Running")).toBe("Running");
    expect(serverTime("2026-13-45")).toBe("2026-13-45");
  });

  it("is idempotent and within the same second (property)", () => {
    fc.assert(
      fc.property(fc.integer({ min: -8.64e12, max: 8.64e12 }), (ms) => {
        const once = serverTime(new Date(ms));
        expect(serverTime(once)).toBe(once);
        const back = Date.parse(once);
        expect(ms - back).toBeGreaterThanOrEqual(0);
        expect(ms - back).toBeLessThan(1000);
      }),
    );
  });
});

describe("normalizeTimes", () => {
  it("turns Dates and RFC 3339 strings into server times and drops undefined", () => {
    expect(
      normalizeTimes({
        startTime: new Date("2026-11-30T15:25:52.987Z"),
        conditions: [{ type: "Ready", lastTransitionTime: "2026-11-30T15:25:52.1Z", x: undefined }],
        message: "took 2026-11-30T15:25:52.1Z",
        removed: null,
      }),
    ).toEqual({
      startTime: "2026-11-30T15:25:52Z",
      conditions: [{ type: "Ready", lastTransitionTime: "2026-11-30T15:25:52Z" }],
      message: "took 2026-11-30T15:25:52.1Z",
      removed: null,
    });
  });

  it("keeps strings with exact precision and only serialises Dates", () => {
    expect(
      normalizeTimes(
        { a: "2026-11-30T15:25:52.1Z", b: new Date("2026-11-30T15:25:52.1Z") },
        "exact",
      ),
    ).toEqual({ a: "2026-11-30T15:25:52.1Z", b: "2026-11-30T15:25:52.100Z" });
  });
});

describe("statusEquals", () => {
  it("ignores key order, null versus absent and sub-second differences", () => {
    expect(
      statusEquals(
        {
          phase: "Running",
          startTime: "2026-11-30T15:25:52Z",
          conditions: [{ type: "Ready", status: "True" }],
        },
        {
          conditions: [{ status: "True", type: "Ready", lastProbeTime: null }],
          startTime: new Date("2026-11-30T15:25:52.400Z"),
          phase: "Running",
          message: null,
        },
      ),
    ).toBe(true);
  });

  it("sees real differences, including list order and a different second", () => {
    expect(statusEquals({ phase: "Running" }, { phase: "Failed" })).toBe(false);
    expect(statusEquals({ a: [1, 2] }, { a: [2, 1] })).toBe(false);
    expect(statusEquals({ t: "2026-11-30T15:25:52Z" }, { t: "2026-11-30T15:25:53Z" })).toBe(false);
    expect(
      statusEquals({ t: "2026-11-30T15:25:52.1Z" }, { t: "2026-11-30T15:25:52.2Z" }, "exact"),
    ).toBe(false);
  });

  it("is reflexive and insensitive to key order (property)", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(statusEquals(value, value)).toBe(true);
        const reversed = JSON.parse(JSON.stringify(value), (_k, v) =>
          v && typeof v === "object" && !Array.isArray(v)
            ? Object.fromEntries(Object.entries(v).reverse())
            : v,
        );
        expect(statusEquals(value, reversed)).toBe(true);
      }),
    );
  });
});

describe("mergeConditions", () => {
  const scheduled = {
    type: "PodScheduled",
    status: "True",
    lastTransitionTime: "2026-01-01T00:00:00Z",
  };
  const disruption = { type: "DisruptionTarget", status: "True", reason: "EvictionByEvictionAPI" };

  it("keeps conditions of types it does not own exactly as stored, in place", () => {
    const stored = [scheduled, { type: "Ready", status: "False" }, disruption];
    const merged = mergeConditions(stored, [
      { type: "Ready", status: "True", lastTransitionTime: "t2" },
    ]);
    expect(merged).toEqual([
      scheduled,
      { type: "Ready", status: "True", lastTransitionTime: "t2" },
      disruption,
    ]);
    expect(merged?.[0]).toBe(scheduled);
  });

  it("keeps the stored transition time when the status did not change", () => {
    const merged = mergeConditions(
      [{ type: "Ready", status: "True", lastTransitionTime: "t1", reason: "A" }],
      [{ type: "Ready", status: "True", lastTransitionTime: "t9", reason: "B" }],
    );
    expect(merged).toEqual([
      { type: "Ready", status: "True", lastTransitionTime: "t1", reason: "B" },
    ]);
  });

  it("removes owned types the desired list leaves out and appends new ones", () => {
    expect(
      mergeConditions(
        [scheduled, { type: "Initialized", status: "True" }],
        [{ type: "Ready", status: "True" }],
        ["Initialized"],
      ),
    ).toEqual([scheduled, { type: "Ready", status: "True" }]);
  });

  it("says nothing when nothing about conditions is desired", () => {
    expect(mergeConditions([scheduled], undefined)).toBeUndefined();
    expect(mergeConditions([scheduled], undefined, ["Ready"])).toEqual([scheduled]);
  });

  it("never loses or alters a condition of a type it does not own (property)", () => {
    const condition = fc.record({
      type: fc.constantFrom("PodScheduled", "DisruptionTarget", "Ready", "Initialized", "Custom"),
      status: fc.constantFrom("True", "False", "Unknown"),
      reason: fc.string({ maxLength: 5 }),
    });
    fc.assert(
      fc.property(
        fc.uniqueArray(condition, { selector: (c) => c.type }),
        fc.uniqueArray(condition, { selector: (c) => c.type }),
        fc.subarray(["Ready", "Initialized"]),
        (stored, desired, owned) => {
          const merged = mergeConditions(stored, desired, owned) ?? stored;
          const ownedTypes = new Set([...owned, ...desired.map((c) => c.type)]);
          for (const c of stored) if (!ownedTypes.has(c.type)) expect(merged).toContain(c);
          for (const c of desired) {
            expect(merged.filter((m) => (m as { type: string }).type === c.type)).toHaveLength(1);
          }
          const types = merged.map((m) => (m as { type: string }).type);
          expect(new Set(types).size).toBe(types.length);
        },
      ),
    );
  });
});

describe("applyMergePatch", () => {
  it("follows RFC 7386", () => {
    expect(applyMergePatch({ a: 1, b: { c: 2, e: 5 } }, { b: { c: null, d: 3 }, f: [1] })).toEqual({
      a: 1,
      b: { e: 5, d: 3 },
      f: [1],
    });
    expect(applyMergePatch({ a: 1 }, [1, 2])).toEqual([1, 2]);
    expect(applyMergePatch("x", { a: 1 })).toEqual({ a: 1 });
  });

  it("does not modify its arguments, and a patch equal to the target changes nothing (property)", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue()),
        fc.dictionary(fc.string(), fc.jsonValue()),
        (target, patch) => {
          const before = JSON.stringify([target, patch]);
          applyMergePatch(target, patch);
          expect(JSON.stringify([target, patch])).toBe(before);
        },
      ),
    );
  });
});

describe("planStatus", () => {
  const stored = {
    phase: "Running",
    qosClass: "BestEffort",
    startTime: "2026-11-30T10:00:00Z",
    conditions: [
      { type: "PodScheduled", status: "True", lastTransitionTime: "2026-11-30T09:59:00Z" },
      { type: "Ready", status: "True", lastTransitionTime: "2026-11-30T10:00:01Z" },
    ],
  };

  it("is unchanged for the same status recomputed later (fresh transition times, milliseconds)", () => {
    const plan = planStatus({
      stored,
      desired: {
        phase: "Running",
        startTime: new Date("2026-11-30T10:00:00.250Z"),
        conditions: [
          { type: "Ready", status: "True", lastTransitionTime: new Date("2026-11-30T11:00:00.5Z") },
        ],
      },
    });
    expect(plan.changed).toBe(false);
  });

  it("plans a patch that keeps foreign conditions and fields it does not mention", () => {
    const plan = planStatus({
      stored,
      desired: {
        phase: "Failed",
        conditions: [
          {
            type: "Ready",
            status: "False",
            lastTransitionTime: new Date("2026-11-30T11:00:00.5Z"),
          },
        ],
      },
    });
    expect(plan.changed).toBe(true);
    expect(plan.patch).toEqual({
      phase: "Failed",
      conditions: [
        stored.conditions[0],
        { type: "Ready", status: "False", lastTransitionTime: "2026-11-30T11:00:00Z" },
      ],
    });
    expect(plan.next).toMatchObject({
      qosClass: "BestEffort",
      startTime: "2026-11-30T10:00:00Z",
      phase: "Failed",
    });
  });

  it("accepts a stored status from a typed client (Dates) and sends JSON times", () => {
    const typed = {
      phase: "Running",
      conditions: [
        {
          type: "PodScheduled",
          status: "True",
          lastTransitionTime: new Date("2026-11-30T09:59:00Z"),
        },
      ],
    };
    const same = planStatus({ stored: typed, desired: { phase: "Running" } });
    expect(same.changed).toBe(false);
    const plan = planStatus({
      stored: typed,
      desired: {
        conditions: [
          { type: "Ready", status: "True", lastTransitionTime: new Date("2026-11-30T10:00:00.7Z") },
        ],
      },
    });
    expect(plan.patch.conditions).toEqual([
      { type: "PodScheduled", status: "True", lastTransitionTime: "2026-11-30T09:59:00Z" },
      { type: "Ready", status: "True", lastTransitionTime: "2026-11-30T10:00:00Z" },
    ]);
  });

  it("uses the caller's equality", () => {
    const plan = planStatus({ stored, desired: { phase: "Failed" }, equal: () => true });
    expect(plan.changed).toBe(false);
  });

  it("a plan applied to the stored status is then unchanged (property)", () => {
    const status = fc.record(
      {
        phase: fc.constantFrom("Pending", "Running", "Failed"),
        message: fc.string({ maxLength: 8 }),
        startTime: fc.integer({ min: 0, max: 4e12 }).map((ms) => new Date(ms)),
        conditions: fc.uniqueArray(
          fc.record({
            type: fc.constantFrom("Ready", "Initialized", "PodScheduled"),
            status: fc.constantFrom("True", "False"),
            lastTransitionTime: fc.integer({ min: 0, max: 4e12 }).map((ms) => new Date(ms)),
          }),
          { selector: (c) => c.type },
        ),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(status, status, (before, desired) => {
        const first = planStatus({ stored: normalizeTimes(before) as object, desired });
        const second = planStatus({ stored: first.next, desired });
        expect(second.changed).toBe(false);
      }),
    );
  });
});
