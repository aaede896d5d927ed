import type { V1Pod } from "@kubernetes/client-node";
import type { Ec2PodProvider, WarmPoolEvent } from "@nebula/provider";
import { INSTANCE_ANNOTATIONS } from "@nebula/virtual-node";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { vnodeMetrics } from "./metrics.js";

/** A provider that reports nothing: only the Pods' annotations feed the cost gauges. */
const quiet = {
  gateway: { onCall: () => () => undefined, budgetState: () => [] },
  instanceCounts: () => ({}),
  onLeakCollected: () => () => undefined,
  onPoll: () => () => undefined,
  onDoorbells: () => () => undefined,
  onStartup: () => () => undefined,
  onSpotSignal: () => () => undefined,
  onWarmPool: () => () => undefined,
  warmPoolStatus: () => ({ entries: [], assigning: 0 }),
} as unknown as Parameters<typeof vnodeMetrics>[2];

function pod(
  namespace: string,
  annotations: Record<string, string>,
  phase: string = "Running",
): V1Pod {
  return { metadata: { namespace, name: "p", annotations }, status: { phase } };
}

/** The samples of one gauge, as `labels → value` (labels in name order). */
async function samples(registry: Registry, name: string): Promise<Record<string, number>> {
  const metric = await registry.getSingleMetric(name)?.get();
  return Object.fromEntries(
    (metric?.values ?? []).map((v) => [
      Object.entries(v.labels)
        .map(([k, l]) => `${k}=${l}`)
        .join(","),
      v.value,
    ]),
  );
}

/** One series' value in the text exposition (`name{labels}` as prom-client writes it). */
async function series(registry: Registry, name: string): Promise<number | undefined> {
  const line = (await registry.metrics()).split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

describe("the cost gauges", () => {
  it("sum the live Pods' prices at launch by namespace and capacity type; the Spot one keeps Spot only", async () => {
    const { price, spotPrice, capacityType } = INSTANCE_ANNOTATIONS;
    const pods = [
      pod("a", { [capacityType]: "on-demand", [price]: "0.1008000000" }),
      pod("a", { [capacityType]: "on-demand", [price]: "0.0960000000" }),
      pod("a", { [capacityType]: "spot", [price]: "0.031200", [spotPrice]: "0.031200" }),
      pod("b", { [capacityType]: "on-demand", [price]: "0.5" }),
      // Not counted: finished, no price read, a price that is not one.
      pod("b", { [capacityType]: "on-demand", [price]: "0.5" }, "Succeeded"),
      pod("b", { [capacityType]: "on-demand" }),
      pod("b", { [capacityType]: "on-demand", [price]: "" }),
      pod("b", { [capacityType]: "on-demand", [price]: "cheap" }),
    ];
    const registry = new Registry();
    vnodeMetrics(registry, { list: () => pods }, quiet);
    const cost = await samples(registry, "nebula_vnode_hourly_cost_usd");
    expect(Object.keys(cost).sort()).toEqual([
      "namespace=a,capacity_type=on-demand",
      "namespace=a,capacity_type=spot",
      "namespace=b,capacity_type=on-demand",
    ]);
    expect(cost["namespace=a,capacity_type=on-demand"]).toBeCloseTo(0.1968, 10);
    expect(cost["namespace=a,capacity_type=spot"]).toBeCloseTo(0.0312, 10);
    expect(cost["namespace=b,capacity_type=on-demand"]).toBeCloseTo(0.5, 10);
    expect(await samples(registry, "nebula_vnode_spot_hourly_cost_usd")).toEqual({
      "namespace=a": 0.0312,
    });
  });
});

describe("the warm pool's metrics and the start-up histograms", () => {
  type Status = ReturnType<Ec2PodProvider["warmPoolStatus"]>;
  type Startup = Parameters<Parameters<Ec2PodProvider["onStartup"]>[0]>[0];
  /** A provider whose pool status the test sets and whose listeners it calls. */
  function pooled() {
    const state: { status: Status } = { status: { entries: [], assigning: 0 } };
    const pool: Array<(event: WarmPoolEvent) => void> = [];
    const startups: Array<(startup: Startup) => void> = [];
    const provider = {
      ...(quiet as object),
      onWarmPool: (l: (event: WarmPoolEvent) => void) => {
        pool.push(l);
        return () => undefined;
      },
      onStartup: (l: (startup: Startup) => void) => {
        startups.push(l);
        return () => undefined;
      },
      warmPoolStatus: () => state.status,
    } as unknown as Parameters<typeof vnodeMetrics>[2];
    const registry = new Registry();
    vnodeMetrics(registry, { list: () => [] }, provider);
    return {
      registry,
      state,
      emit: (event: WarmPoolEvent) => {
        for (const l of pool) l(event);
      },
      started: (breakdown: Partial<Startup["breakdown"]>) => {
        for (const l of startups)
          l({ breakdown: { phases: [], warm: false, ...breakdown } } as Startup);
      },
    };
  }

  const entry = (name: string, counts: Partial<Status["entries"][number]>) => ({
    entry: name,
    target: 0,
    preparing: 0,
    ready: 0,
    stale: 0,
    broken: 0,
    hourlyCostUsd: 0,
    ...counts,
  });

  it("read the pool's hosts, targets and costs per entry at each scrape; a removed entry leaves them", async () => {
    const { registry, state } = pooled();
    expect(await samples(registry, "nebula_vnode_warm_pool_hosts")).toEqual({});
    state.status = {
      entries: [
        entry("small", { target: 3, preparing: 1, ready: 2, hourlyCostUsd: 0.0017 }),
        entry("big", { target: 1, stale: 1, broken: 1 }),
      ],
      assigning: 1,
    };
    expect(await samples(registry, "nebula_vnode_warm_pool_hosts")).toEqual({
      "entry=small,state=preparing": 1,
      "entry=small,state=ready": 2,
      "entry=small,state=stale": 0,
      "entry=small,state=broken": 0,
      "entry=big,state=preparing": 0,
      "entry=big,state=ready": 0,
      "entry=big,state=stale": 1,
      "entry=big,state=broken": 1,
    });
    expect(await samples(registry, "nebula_vnode_warm_pool_target")).toEqual({
      "entry=small": 3,
      "entry=big": 1,
    });
    expect(await samples(registry, "nebula_vnode_warm_pool_hourly_cost_usd")).toEqual({
      "entry=small": 0.0017,
      "entry=big": 0,
    });
    expect(await samples(registry, "nebula_vnode_warm_pool_assigning")).toEqual({ "": 1 });
    state.status = { entries: [entry("small", { target: 3, ready: 3 })], assigning: 0 };
    expect(Object.keys(await samples(registry, "nebula_vnode_warm_pool_target"))).toEqual([
      "entry=small",
    ]);
    expect(await samples(registry, "nebula_vnode_warm_pool_hosts")).toMatchObject({
      "entry=small,state=ready": 3,
    });
    expect(JSON.stringify(await samples(registry, "nebula_vnode_warm_pool_hosts"))).not.toContain(
      "big",
    );
  });

  it("count takes by result, launches, terminations by reason, and time refills", async () => {
    const { registry, emit } = pooled();
    const pod = { podUid: "u", pod: "ns/p" };
    emit({ kind: "hit", entry: "small", instanceId: "i-1", ...pod });
    emit({ kind: "hit", entry: "small", instanceId: "i-2", ...pod });
    emit({ kind: "miss", entry: "small", reason: "empty", ...pod });
    emit({ kind: "miss", entry: "small", reason: "unrecorded", ...pod });
    emit({ kind: "launched", entry: "small", instanceId: "i-3" });
    emit({ kind: "ready", entry: "small", instanceId: "i-3", seconds: 42 });
    emit({ kind: "ready", entry: "small", instanceId: "i-4", seconds: 100 });
    emit({
      kind: "terminated",
      entry: "small",
      instanceId: "i-5",
      reason: "broken",
      message: "did not prepare",
    });
    emit({
      kind: "terminated",
      entry: "old",
      instanceId: "i-6",
      reason: "removed",
      message: "gone",
    });
    expect(await samples(registry, "nebula_vnode_warm_pool_takes_total")).toEqual({
      "entry=small,result=hit": 2,
      "entry=small,result=miss": 2,
    });
    expect(await samples(registry, "nebula_vnode_warm_pool_launched_total")).toEqual({
      "entry=small": 1,
    });
    expect(await samples(registry, "nebula_vnode_warm_pool_terminated_total")).toEqual({
      "entry=small,reason=broken": 1,
      "entry=old,reason=removed": 1,
    });
    const refill = "nebula_vnode_warm_pool_refill_seconds";
    expect(await series(registry, `${refill}_count{entry="small"}`)).toBe(2);
    expect(await series(registry, `${refill}_sum{entry="small"}`)).toBe(142);
    expect(await series(registry, `${refill}_bucket{le="45",entry="small"}`)).toBe(1);
    expect(await series(registry, `${refill}_bucket{le="120",entry="small"}`)).toBe(2);
  });

  it("label each start-up warm or cold, its phases too", async () => {
    const { registry, started } = pooled();
    started({ warm: true, totalSeconds: 4, phases: [{ phase: "launch", seconds: 0.5 }] });
    started({ warm: false, totalSeconds: 30, phases: [{ phase: "launch", seconds: 1 }] });
    started({ warm: false, totalSeconds: 20, phases: [{ phase: "boot", seconds: 15 }] });
    // No creation time known: phases only.
    started({ warm: true, phases: [{ phase: "ready", seconds: 2 }] });
    expect(await series(registry, 'nebula_vnode_startup_seconds_count{start="warm"}')).toBe(1);
    expect(await series(registry, 'nebula_vnode_startup_seconds_sum{start="warm"}')).toBe(4);
    expect(await series(registry, 'nebula_vnode_startup_seconds_count{start="cold"}')).toBe(2);
    expect(await series(registry, 'nebula_vnode_startup_seconds_sum{start="cold"}')).toBe(50);
    expect(
      await series(registry, 'nebula_vnode_startup_phase_seconds_sum{phase="launch",start="warm"}'),
    ).toBe(0.5);
    expect(
      await series(registry, 'nebula_vnode_startup_phase_seconds_sum{phase="launch",start="cold"}'),
    ).toBe(1);
    expect(
      await series(registry, 'nebula_vnode_startup_phase_seconds_count{phase="boot",start="cold"}'),
    ).toBe(1);
    expect(
      await series(
        registry,
        'nebula_vnode_startup_phase_seconds_count{phase="ready",start="warm"}',
      ),
    ).toBe(1);
  });
});
