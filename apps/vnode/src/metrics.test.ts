import type { V1Pod } from "@kubernetes/client-node";
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
