import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type WarmPoolEntry, WarmPoolEntrySchema } from "./config.js";
import {
  classifyPoolHost,
  type PoolHost,
  PREPARED_REASON,
  planWarmPool,
  poolSpecDigest,
  poolTarget,
  stoppedHostHourlyCost,
} from "./pool-plan.js";

const NOW = Date.parse("2026-12-04T12:00:00Z");

function entry(name: string, size: number, extra: Partial<WarmPoolEntry> = {}): WarmPoolEntry {
  return { ...WarmPoolEntrySchema.parse({ name, instanceType: "m7i.large", size }), ...extra };
}

function host(
  id: string,
  name: string,
  spec: string | undefined,
  state: string,
  options: { reason?: string; ageMs?: number } = {},
): PoolHost {
  return {
    instanceId: id,
    entry: name,
    spec,
    state,
    stateReasonCode: options.reason ?? (state === "stopped" ? PREPARED_REASON : undefined),
    launchTime: NOW - (options.ageMs ?? 60_000),
  };
}

const plan = (entries: WarmPoolEntry[], hosts: PoolHost[], inFlight: Record<string, number> = {}) =>
  planWarmPool({
    entries,
    digests: new Map(entries.map((e) => [e.name, `d-${e.name}`])),
    hosts,
    inFlight: new Map(Object.entries(inFlight)),
    now: NOW,
  });

describe("classifyPoolHost", () => {
  const e = entry("small", 2);
  it("a host that stopped itself is ready; one stopped otherwise is broken", () => {
    expect(classifyPoolHost(host("i-1", "small", "d", "stopped"), e, "d", NOW)).toBe("ready");
    expect(
      classifyPoolHost(
        host("i-1", "small", "d", "stopped", { reason: "Client.UserInitiatedShutdown" }),
        e,
        "d",
        NOW,
      ),
    ).toBe("broken");
  });

  it("preparing until the entry's prepareSeconds from its launch, broken after", () => {
    expect(classifyPoolHost(host("i-1", "small", "d", "running"), e, "d", NOW)).toBe("preparing");
    const late = host("i-1", "small", "d", "running", { ageMs: e.prepareSeconds * 1000 + 1 });
    expect(classifyPoolHost(late, e, "d", NOW)).toBe("broken");
  });

  it("stale when the entry is gone or its shape changed", () => {
    expect(classifyPoolHost(host("i-1", "small", "d", "stopped"), undefined, "d", NOW)).toBe(
      "stale",
    );
    expect(classifyPoolHost(host("i-1", "small", "old", "stopped"), e, "d", NOW)).toBe("stale");
    expect(classifyPoolHost(host("i-1", "small", undefined, "stopped"), e, "d", NOW)).toBe("stale");
  });
});

describe("planWarmPool", () => {
  it("fills an empty entry to its size, counting launches in flight", () => {
    expect(plan([entry("small", 3)], []).plan.launch).toEqual([{ entry: "small", count: 3 }]);
    expect(plan([entry("small", 3)], [], { small: 2 }).plan.launch).toEqual([
      { entry: "small", count: 1 },
    ]);
  });

  it("size 0 (the default) launches nothing and collects what is there", () => {
    const result = plan([entry("small", 0)], [host("i-1", "small", "d-small", "stopped")]);
    expect(result.plan.launch).toEqual([]);
    expect(result.plan.terminate.map((t) => [t.instanceId, t.reason])).toEqual([["i-1", "shrunk"]]);
  });

  it("terminates every host of a removed entry at once", () => {
    const result = plan(
      [],
      [host("i-1", "gone", "x", "stopped"), host("i-2", "gone", "x", "running")],
    );
    expect(result.plan.terminate.map((t) => t.reason)).toEqual(["removed", "removed"]);
    expect(result.plan.launch).toEqual([]);
  });

  it("rolls a changed entry one host at a time, one host over its size at most", () => {
    const e = entry("small", 2);
    // Two stale hosts: one fresh launch, nothing terminated yet.
    let hosts = [host("i-1", "small", "old", "stopped"), host("i-2", "small", "old", "stopped")];
    let result = plan([e], hosts);
    expect(result.plan.launch).toEqual([{ entry: "small", count: 1 }]);
    expect(result.plan.terminate).toEqual([]);
    // The fresh one is ready: one stale goes, another fresh one is launched.
    hosts = [...hosts, host("i-3", "small", "d-small", "stopped")];
    result = plan([e], hosts);
    expect(result.plan.terminate.map((t) => [t.instanceId, t.reason])).toEqual([
      ["i-1", "replaced"],
    ]);
    expect(result.plan.launch).toEqual([{ entry: "small", count: 1 }]);
  });

  it("keeps fewer hosts than its size when they would cost more than its cap", () => {
    const e = entry("small", 10, { maxHourlyCostUsd: stoppedHostHourlyCost(entry("x", 1)) * 3 });
    expect(poolTarget(e)).toBe(3);
    expect(plan([e], []).plan.launch).toEqual([{ entry: "small", count: 3 }]);
  });

  it("the shape digest changes with each part of the shape", () => {
    const base = { subnetId: "subnet-a", imageId: "ami-1", userDataSha256: "aa" };
    const d = poolSpecDigest(entry("s", 1), base);
    expect(d).toMatch(/^[0-9a-f]{16}$/);
    expect(poolSpecDigest(entry("s", 1, { instanceType: "m7i.xlarge" }), base)).not.toBe(d);
    expect(poolSpecDigest(entry("s", 1, { images: ["busybox"] }), base)).not.toBe(d);
    expect(poolSpecDigest(entry("s", 1), { ...base, imageId: "ami-2" })).not.toBe(d);
    expect(poolSpecDigest(entry("s", 1), { ...base, userDataSha256: "bb" })).not.toBe(d);
    // Not the name or the size: resizing or renaming does not replace hosts by itself.
    expect(poolSpecDigest(entry("t", 5), base)).toBe(d);
  });

  const arbHost = fc.record({
    entry: fc.constantFrom("a", "b", "gone"),
    fresh: fc.boolean(),
    state: fc.constantFrom("pending", "running", "stopping", "stopped"),
    prepared: fc.boolean(),
    ageMs: fc.integer({ min: 0, max: 3_600_000 }),
  });
  const arbInput = fc.record({
    sizes: fc.record({ a: fc.integer({ min: 0, max: 6 }), b: fc.integer({ min: 0, max: 6 }) }),
    hosts: fc.array(arbHost, { maxLength: 30 }),
    inFlight: fc.record({ a: fc.integer({ min: 0, max: 4 }), b: fc.integer({ min: 0, max: 4 }) }),
  });

  it("never launches past the target, never terminates a host twice or one it was not given", () => {
    fc.assert(
      fc.property(arbInput, ({ sizes, hosts, inFlight }) => {
        const entries = [entry("a", sizes.a), entry("b", sizes.b)];
        const given = hosts.map((h, i) =>
          host(`i-${i}`, h.entry, h.fresh ? `d-${h.entry}` : "old", h.state, {
            reason: h.prepared ? PREPARED_REASON : "Client.UserInitiatedShutdown",
            ageMs: h.ageMs,
          }),
        );
        const { plan: p, counts } = plan(entries, given, inFlight);
        const ids = p.terminate.map((t) => t.instanceId);
        expect(new Set(ids).size).toBe(ids.length);
        const known = new Set(given.map((g) => g.instanceId));
        for (const id of ids) expect(known.has(id)).toBe(true);
        for (const { entry: name, count } of p.launch) {
          expect(count).toBeGreaterThan(0);
          const c = counts.find((x) => x.entry === name);
          expect(c).toBeDefined();
          if (c === undefined) continue;
          // What stays fresh after the plan, with the launches, never passes the target.
          const terminatedFresh = p.terminate.filter(
            (t) => t.entry === name && (t.reason === "shrunk" || t.reason === "broken"),
          ).length;
          const freshAfter =
            c.ready + c.preparing + c.broken - terminatedFresh + inFlight[name as "a" | "b"];
          expect(freshAfter + count).toBeLessThanOrEqual(c.target + c.broken);
        }
        // Every host of a removed entry goes, and nothing is launched for it.
        for (const g of given.filter((x) => x.entry === "gone")) {
          expect(p.terminate.some((t) => t.instanceId === g.instanceId)).toBe(true);
        }
        expect(p.launch.some((l) => l.entry === "gone")).toBe(false);
        // Broken hosts always go.
        for (const t of p.terminate) expect(t.message.length).toBeGreaterThan(0);
      }),
    );
  });

  it("over passes that play the plan out, an entry converges to its size with no stale host left", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 5 }),
        fc.integer({ min: 0, max: 5 }),
        (size, staleCount) => {
          const e = entry("a", size);
          let hosts: PoolHost[] = Array.from({ length: staleCount }, (_, i) =>
            host(`i-old-${i}`, "a", "old", "stopped"),
          );
          let next = 0;
          let peak = hosts.length;
          for (let pass = 0; pass < 40; pass++) {
            const { plan: p } = plan([e], hosts);
            const gone = new Set(p.terminate.map((t) => t.instanceId));
            hosts = hosts.filter((h) => !gone.has(h.instanceId));
            // Launched hosts prepare and stop by the next pass.
            for (const l of p.launch) {
              for (let i = 0; i < l.count; i++) {
                hosts.push(host(`i-new-${next++}`, "a", "d-a", "stopped"));
              }
            }
            peak = Math.max(peak, hosts.length);
          }
          expect(hosts.filter((h) => h.spec === "old")).toEqual([]);
          expect(hosts.length).toBe(size);
          // Rolled: never more than one host over the larger of the size and what was there.
          expect(peak).toBeLessThanOrEqual(Math.max(size, staleCount) + 1);
        },
      ),
    );
  });
});
