import type { EC2Client } from "@aws-sdk/client-ec2";
import { type Moto, startMoto } from "@nebula/test-peers";
import type { NodeHealth } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider } from "./provider.js";
import { type FaultProxy, startFaultProxy } from "./testing/fault-proxy.js";
import { testPod } from "./testing/fixtures.js";
import {
  type MotoNetwork,
  motoConfig,
  nodeInstances,
  prepareMoto,
  statusLog,
} from "./testing/moto-env.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";

let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;
let proxy: FaultProxy;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
  proxy = await startFaultProxy(moto.endpoint);
});

afterAll(async () => {
  await proxy?.close();
  ec2?.destroy();
  await moto?.stop();
});

function uid(n: number): string {
  return `11111111-0000-4000-8000-${n.toString().padStart(12, "0")}`;
}

function liveByUid(instances: Awaited<ReturnType<typeof nodeInstances>>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const i of instances) {
    if (i.State?.Name === "terminated" || i.State?.Name === "shutting-down") continue;
    const u = i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value ?? "?";
    counts.set(u, (counts.get(u) ?? 0) + 1);
  }
  return counts;
}

describe("faults between the SDK and EC2", () => {
  it("throttling bursts, 5xx and dropped connections: no Pod fails, no duplicate survives, it converges", async () => {
    proxy.clear();
    const log = statusLog();
    const provider = new Ec2PodProvider({
      config: { ...motoConfig(moto, network, "faults"), endpoint: proxy.endpoint },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    provider.notifyPods(log.listener);
    proxy.inject(
      { action: "RunInstances", kind: "drop", times: 1 },
      { action: "RunInstances", kind: "drop-after-forward", times: 1 },
      { action: "RunInstances", kind: "throttle", times: 3 },
      { action: "RunInstances", kind: "server-error", times: 2 },
      { action: "DescribeInstances", kind: "throttle", times: 4 },
      { action: "DescribeInstances", kind: "server-error", times: 2 },
      { action: "DescribeInstances", kind: "drop", times: 1 },
    );
    const pods = Array.from({ length: 5 }, (_, i) => testPod(`f-${i}`, uid(i)));
    for (const pod of pods) await provider.createPod(pod);
    for (let i = 0; i < 6; i++) await provider.pollOnce();

    expect(proxy.injected.get("throttle")).toBe(7);
    expect(proxy.injected.get("server-error")).toBe(4);
    expect(proxy.injected.get("drop")).toBe(2);
    expect(proxy.injected.get("drop-after-forward")).toBe(1);
    // Every launch of one Pod carried the same ClientToken: its UID.
    const tokens = proxy.log
      .filter((r) => r.action === "RunInstances")
      .map((r) => r.params.get("ClientToken"));
    expect(new Set(tokens)).toEqual(new Set(pods.map((p) => p.metadata?.uid)));
    // No Pod was ever reported failed; every Pod has exactly one live instance.
    for (const pod of pods) {
      const name = pod.metadata?.name ?? "";
      expect(log.all(name).filter((s) => s.phase === "Failed")).toEqual([]);
      expect(provider.getPodStatus(pod.metadata?.uid ?? "")?.phase).toBe("Pending");
    }
    // The launch whose response was lost is resolved either way: an SDK retry with the same token
    // (moto ignores ClientToken and starts a second instance, which the poll terminates), or the
    // poll adopting the instance by its Pod UID tag before the launch is retried.
    const all = await nodeInstances(ec2, "faults");
    expect(proxy.forwarded.get("RunInstances") ?? 0).toBeGreaterThanOrEqual(pods.length);
    const counts = liveByUid(all);
    expect([...counts.keys()].sort()).toEqual(pods.map((p) => p.metadata?.uid).sort());
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    expect(provider.health().ready).toBe(true);
    await provider.stop();
  });

  it("slows the poll loop down under throttling and speeds up again", async () => {
    proxy.clear();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "slow"),
        endpoint: proxy.endpoint,
        pollIntervalSeconds: 1,
        maxPollIntervalSeconds: 8,
        maxAttempts: 1,
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const intervals = [provider.pollIntervalMs];
    proxy.inject({ action: "DescribeInstances", kind: "throttle", times: 5 });
    for (let i = 0; i < 5; i++) {
      const result = await provider.pollOnce();
      expect(result.error?.code).toBe("Throttled");
      intervals.push(provider.pollIntervalMs);
    }
    expect(provider.health()).toMatchObject({ ready: true, reason: "EC2Throttled" });
    for (let i = 0; i < 3; i++) {
      expect((await provider.pollOnce()).ok).toBe(true);
      intervals.push(provider.pollIntervalMs);
    }
    expect(intervals).toEqual([1000, 2000, 4000, 8000, 8000, 8000, 4000, 2000, 1000]);
    expect(provider.health().reason).toBe("EC2Reachable");
    await provider.stop();
  });

  it("spends only its EC2 budget: a call past the share fails as Throttled before it reaches EC2", async () => {
    proxy.clear();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "budget"),
        endpoint: proxy.endpoint,
        // Two reads at once, then (practically) none: the third poll would wait far too long.
        ec2Budget: { reads: { perSecond: 0.001, burst: 2 }, maxWaitSeconds: 1 },
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const before = proxy.received.get("DescribeInstances") ?? 0;
    expect((await provider.pollOnce()).ok).toBe(true);
    expect((await provider.pollOnce()).ok).toBe(true);
    const third = await provider.pollOnce();
    expect(third.error?.code).toBe("Throttled");
    expect(third.error?.message).toContain("EC2 budget");
    expect((proxy.received.get("DescribeInstances") ?? 0) - before).toBe(2);
    await provider.stop();
  });

  it("halves an API's rate when EC2 throttles it, and climbs back to its share", async () => {
    proxy.clear();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "budget-aimd"),
        endpoint: proxy.endpoint,
        maxAttempts: 1,
        ec2Budget: { reads: { perSecond: 40, burst: 100 } },
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const rate = () =>
      provider.gateway.budgetState().find((b) => b.action === "DescribeInstances")?.rate;
    proxy.inject({ action: "DescribeInstances", kind: "throttle", times: 2 });
    expect((await provider.pollOnce()).error?.code).toBe("Throttled");
    expect(rate()).toBe(20);
    expect((await provider.pollOnce()).error?.code).toBe("Throttled");
    expect(rate()).toBe(10);
    const rates = [];
    for (let i = 0; i < 8; i++) {
      expect((await provider.pollOnce()).ok).toBe(true);
      rates.push(rate());
    }
    expect(rates).toEqual([14, 18, 22, 26, 30, 34, 38, 40]);
    await provider.stop();
  });

  it("reports a region outage on the Node and the Pods, then recovers", async () => {
    proxy.clear();
    const log = statusLog();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "outage"),
        endpoint: proxy.endpoint,
        maxAttempts: 2,
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    provider.notifyPods(log.listener);
    const health: NodeHealth[] = [];
    provider.onNodeHealth((h) => health.push(h));
    await provider.createPod(testPod("o-1", uid(100)));
    expect((await provider.pollOnce()).ok).toBe(true);

    proxy.inject({ kind: "server-error", times: 1000 });
    for (let i = 0; i < 3; i++) expect((await provider.pollOnce()).ok).toBe(false);
    expect(provider.health()).toMatchObject({ ready: false, reason: "EC2Unavailable" });
    const during = log.last("o-1");
    expect(during?.phase).toBe("Pending");
    expect(during?.conditions?.find((c) => c.type === "Ready")).toMatchObject({
      status: "False",
      reason: "EC2Unavailable",
    });

    proxy.clear();
    expect((await provider.pollOnce()).ok).toBe(true);
    expect(provider.health()).toMatchObject({ ready: true, reason: "EC2Reachable" });
    expect(log.last("o-1")?.conditions?.find((c) => c.type === "Ready")?.reason).not.toBe(
      "EC2Unavailable",
    );
    expect(health.map((h) => h.reason)).toEqual(["EC2Reachable", "EC2Unavailable", "EC2Reachable"]);
    expect(liveByUid(await nodeInstances(ec2, "outage")).get(uid(100))).toBe(1);
    await provider.stop();
  });
});
