import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { planLeakCollection } from "./leaks.js";
import type { ObservedInstance } from "./poll.js";

const NOW = Date.parse("2026-11-30T06:00:00Z");

function instance(
  id: string,
  podUid: string | undefined,
  ageMs: number,
  markedAgoMs?: number,
  state = "running",
): ObservedInstance {
  const tags = new Map<string, string>();
  if (podUid) tags.set("nebula:pod-uid", podUid);
  if (markedAgoMs !== undefined)
    tags.set("nebula:orphaned-at", new Date(NOW - markedAgoMs).toISOString());
  return {
    instanceId: id,
    state,
    stateReasonCode: undefined,
    stateReasonMessage: undefined,
    launchTime: NOW - ageMs,
    podUid,
    podKey: undefined,
    orphanedAt: markedAgoMs === undefined ? undefined : NOW - markedAgoMs,
    privateIp: undefined,
    publicIp: undefined,
    instanceType: undefined,
    tags,
    raw: { InstanceId: id },
  };
}

const base = { now: NOW, graceMs: 300_000, confirmAfterMs: 60_000 };

describe("planLeakCollection", () => {
  it("marks, then terminates on a later pass, and unmarks a Pod that came back", () => {
    const plan = planLeakCollection({
      ...base,
      livePodUids: new Set(["live", "back"]),
      instances: [
        instance("i-live", "live", 3_600_000),
        instance("i-young", "gone", 10_000),
        instance("i-old", "gone", 3_600_000),
        instance("i-marked", "gone", 3_600_000, 120_000),
        instance("i-justmarked", "gone", 3_600_000, 1_000),
        instance("i-back", "back", 3_600_000, 120_000),
        instance("i-untagged", undefined, 3_600_000),
        instance("i-dying", "gone", 3_600_000, 120_000, "shutting-down"),
      ],
    });
    expect(plan).toEqual({
      mark: ["i-old", "i-untagged"],
      terminate: ["i-marked"],
      unmark: ["i-back"],
    });
  });

  it("never terminates an instance whose Pod is live, nor one not marked before", () => {
    const arb = fc.array(
      fc.record({
        live: fc.boolean(),
        age: fc.nat(10_000_000),
        marked: fc.option(fc.nat(10_000_000), { nil: undefined }),
      }),
      { maxLength: 30 },
    );
    fc.assert(
      fc.property(arb, (rows) => {
        const instances = rows.map((r, i) =>
          instance(`i-${i}`, r.live ? `live-${i}` : `gone-${i}`, r.age, r.marked),
        );
        const live = new Set(rows.flatMap((r, i) => (r.live ? [`live-${i}`] : [])));
        const plan = planLeakCollection({ ...base, instances, livePodUids: live });
        for (const id of plan.terminate) {
          const i = Number(id.slice(2));
          expect(rows[i]?.live).toBe(false);
          expect(rows[i]?.marked).toBeGreaterThanOrEqual(base.confirmAfterMs);
          expect(rows[i]?.age).toBeGreaterThanOrEqual(base.graceMs);
        }
        for (const id of plan.mark) expect(rows[Number(id.slice(2))]?.live).toBe(false);
      }),
    );
  });
});
