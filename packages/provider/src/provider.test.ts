import { encodeReportTags } from "@nebula/state-mapping";
import { MemoryPodLedger } from "@nebula/teardown";
import type { PodStatusChange } from "@nebula/virtual-node";
import { describe, expect, it, vi } from "vitest";
import { ProviderError } from "./errors.js";
import type { Ec2PodProviderOptions } from "./options.js";
import { Ec2PodProvider } from "./provider.js";
import { T0 } from "./testing/context.js";
import { FakeGateway } from "./testing/fake-gateway.js";
import { EC2_INSTANCE_TYPES, testConfig, testPod } from "./testing/fixtures.js";

/** A provider over the fake gateway, a memory ledger and a fake clock. */
function fakeProvider(options: Partial<Ec2PodProviderOptions> = {}) {
  const gateway = new FakeGateway();
  const ledger = new MemoryPodLedger();
  const clock = { now: T0 };
  const provider = new Ec2PodProvider({
    config: testConfig(),
    livePodUids: () => [],
    ledger,
    gateway,
    now: () => clock.now,
    ...options,
  });
  const changes: PodStatusChange[] = [];
  provider.notifyPods((change) => void changes.push(change));
  return { provider, gateway, ledger, clock, changes };
}

/** Lets the background publication of `createPod` finish. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

describe("Ec2PodProvider over the fake gateway", () => {
  it("refuses user-data over 16 KiB: Failed with UserDataTooLarge, nothing recorded, no call", async () => {
    const { provider, gateway, ledger, changes } = fakeProvider({
      renderUserData: () => `#!/bin/bash\n${"x".repeat(20_000)}`,
    });
    await provider.createPod(testPod("big", "uid-big"));
    expect(provider.getPodStatus("uid-big")).toMatchObject({
      phase: "Failed",
      reason: "UserDataTooLarge",
    });
    expect(provider.getPodStatus("uid-big")?.message).toMatch(/16384/);
    await settle();
    expect(changes).toHaveLength(1);
    expect(changes[0]?.terminal).toBe(true);
    expect(changes[0]?.pod.metadata?.uid).toBe("uid-big");
    expect(changes.flatMap((c) => (c.events ?? []).map((e) => e.reason))).toEqual([
      "UserDataTooLarge",
    ]);
    expect(await ledger.get("uid-big")).toBeUndefined();
    expect(gateway.calls).toEqual([]);
  });

  it("a Pod deleted before it was launched makes no call, and has no instance to find", async () => {
    const { provider, gateway, ledger } = fakeProvider();
    const pod = testPod("gone", "uid-gone");
    pod.metadata = {
      ...pod.metadata,
      deletionTimestamp: new Date(T0),
      deletionGracePeriodSeconds: 0,
    };
    await provider.createPod(pod);
    expect(gateway.calls).toEqual([]);
    expect(await ledger.get("uid-gone")).toBeUndefined();
    await expect(provider.findInstance("uid-gone")).resolves.toBeUndefined();
    expect(gateway.count("runInstances")).toBe(0);
  });

  it("createPod launches once, records it, and a poll publishes the running Pod", async () => {
    const { provider, gateway, ledger, changes } = fakeProvider();
    const pod = testPod("web", "uid-web");
    await provider.createPod(pod);
    await provider.createPod(pod); // idempotent: the second call only refreshes the Pod
    expect(gateway.count("runInstances")).toBe(1);
    const id = [...gateway.instances.keys()][0] ?? "";
    expect((await ledger.get("uid-web"))?.launch).toMatchObject({
      instanceId: id,
      clientToken: "uid-web",
    });
    await settle();
    expect(changes.at(-1)?.status.phase).toBe("Pending");
    expect(changes.at(-1)?.instance?.instanceId).toBe(id);
    expect(changes.flatMap((c) => (c.events ?? []).map((e) => e.reason))).toContain("Launched");

    // The host runs the container and reports it in its instance's tags.
    gateway.setState(id, "running");
    const instance = gateway.instances.get(id);
    const report = encodeReportTags({
      v: 1,
      seq: 1,
      time: new Date(T0).toISOString(),
      final: false,
      containers: [
        {
          name: "app",
          init: false,
          state: "running",
          restarts: 0,
          startedAt: new Date(T0).toISOString(),
          containerID: "abc123",
          imageID: "sha256:feed",
        },
      ],
    });
    for (const [Key, Value] of Object.entries(report)) instance?.Tags.push({ Key, Value });
    const result = await provider.pollOnce();
    expect(result.ok).toBe(true);
    expect(provider.listedInstance("uid-web")).toEqual({ instanceId: id, state: "running" });
    expect(provider.instanceCounts()).toEqual({ running: 1 });
    // A warm-pool host no Pod took is the pool's, not counted with the Pods' instances.
    gateway.addInstance("", {
      State: { Name: "stopped" },
      Tags: [
        { Key: "nebula:cluster", Value: "test" },
        { Key: "nebula:node", Value: "nebula-node" },
        { Key: "nebula:pool", Value: "small" },
      ],
    });
    await provider.pollOnce();
    expect(provider.instanceCounts()).toEqual({ running: 1 });
    const last = changes.at(-1);
    expect(last?.terminal).toBe(false);
    expect(last?.status.phase).toBe("Running");
    expect(last?.status.containerStatuses?.[0]?.state?.running).toBeDefined();
    expect(provider.getPodStatus("uid-web")).toEqual(last?.status);
    expect(provider.listPods().map((p) => p.metadata?.uid)).toEqual(["uid-web"]);
  });

  it("adopts the instance the ledger recorded (a restart) instead of launching again", async () => {
    const { provider, gateway, ledger } = fakeProvider();
    const existing = gateway.addInstance("uid-r", { ClientToken: "uid-r" });
    await ledger.recordLaunch(
      { podUid: "uid-r", namespace: "default", name: "r" },
      { requestedAt: T0 - 10_000, clientToken: "uid-r", instanceId: existing.InstanceId },
    );
    await provider.createPod(testPod("r", "uid-r"));
    expect(gateway.count("runInstances")).toBe(0);
    await provider.pollOnce();
    expect(provider.listedInstance("uid-r")?.instanceId).toBe(existing.InstanceId);
  });

  it("rejects an error no retry fixes and forgets the attempt, so the next call tries again", async () => {
    const { provider, gateway } = fakeProvider();
    gateway.fail("runInstances", new ProviderError("Unauthorized", "not allowed"));
    await expect(provider.createPod(testPod("web", "uid-denied"))).rejects.toMatchObject({
      code: "Unauthorized",
    });
    expect(provider.listPods()).toEqual([]);
    await provider.createPod(testPod("web", "uid-denied"));
    expect(gateway.count("runInstances")).toBe(2);
  });

  it("forgetPod removes the Pod and its ledger entry", async () => {
    const { provider, ledger } = fakeProvider();
    await provider.createPod(testPod("web", "uid-f"));
    expect(await ledger.get("uid-f")).toBeDefined();
    await provider.forgetPod("uid-f");
    expect(await ledger.get("uid-f")).toBeUndefined();
    expect(provider.getPodStatus("uid-f")).toBeUndefined();
    expect(provider.listPods()).toEqual([]);
  });

  it("forgetPod logs, not throws, when the ledger entry cannot be removed", async () => {
    const log = vi.fn();
    const { provider, ledger } = fakeProvider({ log });
    await provider.createPod(testPod("web", "uid-f2"));
    vi.spyOn(ledger, "remove").mockRejectedValueOnce(new Error("apiserver down"));
    await expect(provider.forgetPod("uid-f2")).resolves.toBeUndefined();
    expect(log).toHaveBeenCalledWith("warn", expect.stringMatching(/ledger entry of pod uid-f2/));
  });

  it("the teardown's stop goes through the ownership proof", async () => {
    const { provider, gateway } = fakeProvider();
    const foreign = gateway.addInstance("uid-x", { ClientToken: "someone-else" });
    await expect(provider.stopInstance(foreign.InstanceId)).rejects.toMatchObject({
      code: "NotOwned",
    });
    expect(gateway.count("stopInstance")).toBe(0);
  });

  it("reports EC2's health to the Node and slows the poll down", async () => {
    const { provider, gateway } = fakeProvider({ config: testConfig({ outageAfterFailures: 1 }) });
    const seen: string[] = [];
    provider.onNodeHealth((h) => void seen.push(h.reason));
    gateway.fail("listNodeInstances", new ProviderError("Unavailable", "503"));
    expect((await provider.pollOnce()).ok).toBe(false);
    expect(provider.health()).toMatchObject({ ready: false, reason: "EC2Unavailable" });
    expect(provider.pollIntervalMs).toBe(20_000);
    await provider.pollOnce();
    expect(provider.health().ready).toBe(true);
    expect(seen).toEqual(["EC2Unavailable", "EC2Reachable"]);
  });

  it("collectLeaks polls first when it has no listing", async () => {
    const { provider, gateway } = fakeProvider();
    await provider.collectLeaks();
    expect(gateway.calls.map((c) => c.action).slice(0, 1)).toEqual(["listNodeInstances"]);
  });

  it("with parameters delivery names the Pod's parameters as its auxiliary object", () => {
    const { provider } = fakeProvider({ config: testConfig({ podDelivery: "parameters" }) });
    expect(provider.auxiliariesOf("uid-p")).toHaveLength(1);
    const plain = fakeProvider().provider;
    expect(plain.auxiliariesOf("uid-p")).toEqual([]);
  });
});

describe("Ec2PodProvider with instanceTypes.catalogue, over the fake gateway", () => {
  it("admits no Pod before EC2's types are read: createPod throws what to do, records nothing, and the next call launches", async () => {
    const { provider, gateway, ledger } = fakeProvider({
      config: testConfig({
        instanceTypes: { default: "m7i.large", catalogue: { allowed: ["m7i.*"] } },
      }),
    });
    gateway.instanceTypes = EC2_INSTANCE_TYPES;
    gateway.zones = new Map([["subnet-0a1b2c3d", "us-east-1a"]]);
    gateway.fail(
      "describeInstanceTypes",
      new ProviderError("Unauthorized", "not authorized to perform ec2:DescribeInstanceTypes"),
    );
    const pod = testPod("web", "uid-web", {
      resources: { requests: { cpu: "3", memory: "1Gi" } },
    });
    await expect(provider.createPod(pod)).rejects.toMatchObject({
      code: "Unauthorized",
      message: expect.stringContaining("the node's role needs ec2:DescribeInstanceTypes"),
    });
    expect(provider.getPodStatus("uid-web")).toBeUndefined();
    expect(await ledger.get("uid-web")).toBeUndefined();
    expect(gateway.calls.map((c) => c.action)).not.toContain("runInstances");

    await provider.createPod(pod);
    const launchedTypes = () =>
      gateway.calls
        .filter((c) => c.action === "runInstances")
        .map((c) => (c.arg as { InstanceType?: string }).InstanceType);
    expect(launchedTypes()).toEqual(["m7i.xlarge"]);
    // Read once: the second Pod is admitted from the catalogue already read.
    await provider.createPod(testPod("small", "uid-small"));
    expect(gateway.calls.filter((c) => c.action === "describeInstanceTypes")).toHaveLength(2);
    expect(launchedTypes()).toEqual(["m7i.xlarge", "m7i.large"]);
    await provider.stop();
  });

  it("a Pod held because no fitting type is offered in the node's zones launches once EC2 offers one (catalogue refreshed, no restart)", async () => {
    const { provider, gateway, clock, changes } = fakeProvider({
      config: testConfig({
        instanceTypes: {
          default: "m7i.large",
          catalogue: { allowed: ["m7i.*"], refreshMinutes: 1 },
        },
      }),
    });
    gateway.instanceTypes = EC2_INSTANCE_TYPES;
    gateway.zones = new Map([["subnet-0a1b2c3d", "us-east-1a"]]);
    gateway.offerings = new Map([
      ["m7i.large", new Set(["us-east-1b"])],
      ["m7i.xlarge", new Set(["us-east-1b"])],
    ]);
    await provider.createPod(testPod("web", "uid-web"));
    expect(provider.getPodStatus("uid-web")).toMatchObject({
      phase: "Pending",
      reason: "InsufficientCapacity",
    });
    const runs = () => gateway.calls.filter((c) => c.action === "runInstances");
    // Still not offered: polls change nothing and say nothing again.
    await provider.pollOnce();
    await settle();
    const heldEvents = changes.flatMap((c) => c.events ?? []).length;
    clock.now += 61_000;
    await provider.pollOnce();
    await provider.pollOnce();
    await settle();
    expect(runs()).toHaveLength(0);
    expect(changes.flatMap((c) => c.events ?? [])).toHaveLength(heldEvents);
    // EC2 offers m7i.large in the node's zone: the next catalogue read admits the Pod.
    gateway.offerings = new Map([
      ["m7i.large", new Set(["us-east-1a", "us-east-1b"])],
      ["m7i.xlarge", new Set(["us-east-1b"])],
    ]);
    clock.now += 61_000;
    await provider.pollOnce(); // The stale catalogue starts its refresh.
    await provider.pollOnce();
    await settle();
    expect(runs().map((c) => (c.arg as { InstanceType?: string }).InstanceType)).toEqual([
      "m7i.large",
    ]);
    const status = provider.getPodStatus("uid-web");
    expect(status?.reason).not.toBe("InsufficientCapacity");
    expect(status?.conditions?.map((c) => c.reason)).not.toContain("InsufficientCapacity");
    await provider.stop();
  });
});
