/**
 * The provider's lifecycle against moto behind test-peers' EC2 proxy (ClientToken idempotency,
 * eventual consistency, lost RunInstances answers, refused stops) and this package's fault proxy
 * (capacity and quota errors): every leak path the lifecycle issue lists, reproduced.
 */
import { Buffer } from "node:buffer";
import {
  CreateTagsCommand,
  DescribeInstancesCommand,
  DescribeVolumesCommand,
  type EC2Client,
  type Instance,
  RunInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { type ExitReport, encodeReportTags } from "@nebula/state-mapping";
import { decodeRecord, MemoryPodLedger } from "@nebula/teardown";
import { type Ec2ProxyHandle, type Moto, startEc2Proxy, startMoto } from "@nebula/test-peers";
import type { PodStatusChange } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProviderConfigInput } from "./config.js";
import { Ec2PodProvider } from "./provider.js";
import { countCalls } from "./testing/calls.js";
import { type FaultProxy, startFaultProxy } from "./testing/fault-proxy.js";
import { testPod } from "./testing/fixtures.js";
import { Mortal } from "./testing/mortal.js";
import {
  fakeClock,
  type MotoNetwork,
  motoConfig,
  nodeInstances,
  prepareMoto,
} from "./testing/moto-env.js";
import { type Reclaimed, testTeardown } from "./testing/teardown.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";

let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;
let proxy: Ec2ProxyHandle;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
  proxy = await startEc2Proxy({ upstream: moto, clientToken: true, refuseStops: true });
});

afterAll(async () => {
  await proxy?.close();
  ec2?.destroy();
  await moto?.stop();
});

function uid(n: number): string {
  return `11111111-0000-4000-8000-${n.toString().padStart(12, "0")}`;
}

/** A configuration whose EC2 is the realistic proxy. */
function viaProxy(node: string, overrides: Partial<ProviderConfigInput> = {}): ProviderConfigInput {
  return { ...motoConfig(moto, network, node), endpoint: proxy.endpoint, ...overrides };
}

function deleting(pod: V1Pod, gracePeriodSeconds = 30): V1Pod {
  return {
    ...pod,
    metadata: {
      ...pod.metadata,
      deletionTimestamp: new Date(),
      deletionGracePeriodSeconds: gracePeriodSeconds,
    },
  };
}

async function stateOf(instanceId: string): Promise<string | undefined> {
  const page = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
  return page.Reservations?.[0]?.Instances?.[0]?.State?.Name;
}

/**
 * The one teardown driver (the virtual node's PodTeardown over the provider and its ledger) until
 * the Pod's teardown completes (at most `rounds` rounds, `ms` apart, a poll between).
 */
function reclaim(provider: Ec2PodProvider, pod: V1Pod, rounds = 60, ms = 250): Promise<Reclaimed> {
  return testTeardown(provider).reclaim(pod, { rounds, ms });
}

const final = (exitCode: number): ExitReport => ({
  v: 1,
  seq: 2,
  time: "2026-11-30T05:00:00Z",
  final: true,
  containers: [
    {
      name: "app",
      init: false,
      state: "terminated",
      restarts: 0,
      exitCode,
      reason: exitCode === 0 ? "Completed" : "Error",
      startedAt: "2026-11-30T04:59:00Z",
      finishedAt: "2026-11-30T05:00:00Z",
    },
  ],
});

describe("teardown acts on the recorded instance, not on the last poll", () => {
  it("a Pod deleted before any poll listed its instance gets StopInstances and TerminateInstances; 'not listed' is not absence", async () => {
    proxy.configure({ consistencyWindowMs: 2_000 });
    try {
      const ledger = new MemoryPodLedger();
      const provider = new Ec2PodProvider({
        config: viaProxy("unlisted"),
        renderUserData: () => USER_DATA,
        livePodUids: () => [uid(1)],
        ledger,
      });
      const calls = countCalls(provider.client);
      const pod = testPod("early", uid(1));
      await provider.createPod(pod);
      const instanceId = (await ledger.get(uid(1)))?.launch.instanceId ?? "";
      expect(instanceId).toMatch(/^i-/);
      // Deleted at once: no poll has listed the instance, and EC2 does not list it yet.
      const state = await reclaim(provider, deleting(pod), 80, 250);
      expect(state.seen.length).toBeGreaterThan(0);
      expect(state.seen.every((s) => s.status !== "complete")).toBe(true);
      expect(state).toMatchObject({ complete: true, instanceId });
      expect(calls.get("StopInstancesCommand")).toBeGreaterThanOrEqual(1);
      expect(calls.get("TerminateInstancesCommand")).toBeGreaterThanOrEqual(1);
      expect(await stateOf(instanceId)).toBe("terminated");
      await provider.stop();
    } finally {
      proxy.configure({ consistencyWindowMs: 0 });
    }
  });

  it("a launch whose answer was lost, then a crash: the restarted provider finds the instance by its Pod UID tag and reclaims it", async () => {
    const ledger = new MemoryPodLedger();
    const config = viaProxy("lost", { maxAttempts: 1 });
    const first = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(2)],
      ledger,
    });
    const pod = testPod("lost", uid(2));
    const before = proxy.counts().launched;
    proxy.configure({ loseRunInstancesResponses: 1 });
    await first.createPod(pod);
    expect(first.getPodStatus(uid(2))?.phase).toBe("Pending");
    const entry = await ledger.get(uid(2));
    // The intent was recorded before the call; the instance ID never came back.
    expect(entry?.launch.requestedAt).toBeTypeOf("number");
    expect(entry?.launch.instanceId).toBeUndefined();
    await first.stop(); // crash

    const second = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(2)],
      ledger,
    });
    const state = await reclaim(second, deleting(pod));
    expect(state.complete).toBe(true);
    expect(proxy.counts().launched - before).toBe(1);
    const instances = await nodeInstances(ec2, "lost");
    expect(instances.map((i) => i.State?.Name)).toEqual(["terminated"]);
    expect(state.instanceId).toBe(instances[0]?.InstanceId);
    await second.stop();
  });

  it("a one-time Spot instance, which EC2 will not stop, is terminated without a StopInstances; the other Pod of the batch is stopped normally", async () => {
    const ledger = new MemoryPodLedger();
    const config = viaProxy("spot");
    const provider = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(3), uid(4)],
      ledger,
    });
    const normal = testPod("normal", uid(4));
    await provider.createPod(normal);
    // A Spot instance of the same node and Pod identity, as a Spot-capable launch would make it.
    const spotPod = testPod("spot", uid(3));
    const ec2ViaProxy = proxy.ec2();
    const tags = [
      { Key: "nebula:cluster", Value: "it" },
      { Key: "nebula:node", Value: "spot" },
      { Key: "nebula:pod-uid", Value: uid(3) },
      { Key: "nebula:pod", Value: "default/spot" },
    ];
    const launched = await ec2ViaProxy.send(
      new RunInstancesCommand({
        ImageId: "ami-0a1b2c3d",
        InstanceType: "t3.micro",
        MinCount: 1,
        MaxCount: 1,
        ClientToken: uid(3),
        SubnetId: network.subnetId,
        IamInstanceProfile: { Name: "nebula-host" },
        InstanceMarketOptions: {
          MarketType: "spot",
          SpotOptions: { SpotInstanceType: "one-time" },
        },
        TagSpecifications: [{ ResourceType: "instance", Tags: tags }],
        UserData: Buffer.from(USER_DATA).toString("base64"),
      }),
    );
    ec2ViaProxy.destroy();
    const spotId = launched.Instances?.[0]?.InstanceId ?? "";
    await ledger.recordLaunch(
      { podUid: uid(3), namespace: "default", name: "spot" },
      { requestedAt: Date.now(), clientToken: uid(3), instanceId: spotId, launchedAt: Date.now() },
    );
    await provider.createPod(spotPod);
    await provider.pollOnce();
    const refusedBefore = proxy.counts().refused.UnsupportedOperation ?? 0;
    const [spot, plain] = await Promise.all([
      reclaim(provider, deleting(spotPod)),
      reclaim(provider, deleting(normal)),
    ]);
    expect(spot.complete && plain.complete).toBe(true);
    // The proxy refuses a one-time Spot instance's stop as EC2 does: none was sent (the reclaimer
    // saw InstanceLifecycle spot and terminated it; reclaimer.test.ts covers the refusal itself).
    expect((proxy.counts().refused.UnsupportedOperation ?? 0) - refusedBefore).toBe(0);
    expect(await stateOf(spotId)).toBe("terminated");
    expect(plain.instanceId && (await stateOf(plain.instanceId))).toBe("terminated");
    await provider.stop();
  });
});

describe("InstanceReclaimer (for a caller that drives its own teardown)", () => {
  it("findInstance and stopInstance never answer 'absent' while EC2 may still hide a new instance; the provider starts no teardown of its own", async () => {
    proxy.configure({ consistencyWindowMs: 1_500 });
    try {
      const ledger = new MemoryPodLedger();
      const provider = new Ec2PodProvider({
        config: viaProxy("reclaimer"),
        renderUserData: () => USER_DATA,
        livePodUids: () => [uid(10)],
        ledger,
      });
      await provider.createPod(testPod("hidden", uid(10)));
      const instanceId = (await ledger.get(uid(10)))?.launch.instanceId ?? "";
      await expect(provider.findInstance(uid(10))).rejects.toMatchObject({ code: "NotVisibleYet" });
      await expect(provider.stopInstance(instanceId)).rejects.toMatchObject({
        code: "NotVisibleYet",
      });
      let found = await provider.findInstance(uid(10)).catch(() => undefined);
      for (let i = 0; i < 40 && found === undefined; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        found = await provider.findInstance(uid(10)).catch(() => undefined);
      }
      expect(found).toEqual({ instanceId, state: "running" });
      await provider.terminateInstance(instanceId);
      await provider.pollOnce();
      expect(await stateOf(instanceId)).toBe("terminated");
      // Terminal or not, a caller-driven provider records no teardown by itself.
      expect((await ledger.get(uid(10)))?.record).toBeUndefined();
      await provider.stop();
    } finally {
      proxy.configure({ consistencyWindowMs: 0 });
    }
  });
});

describe("InstanceReclaimer on a terminated instance", () => {
  it("stop and terminate of an instance that is already terminated are done, not refused as unproven", async () => {
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: viaProxy("reclaimer-done"),
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(912)],
      ledger,
    });
    await provider.createPod(testPod("done", uid(912)));
    const instanceId = (await ledger.get(uid(912)))?.launch.instanceId ?? "";
    expect(instanceId).toMatch(/^i-/);
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
    expect(await stateOf(instanceId)).toBe("terminated");
    // A teardown that resumes after the instance is gone must be able to finish.
    await expect(provider.stopInstance(instanceId)).resolves.toBeUndefined();
    await expect(provider.terminateInstance(instanceId)).resolves.toBeUndefined();
    await provider.stop();
  });
});

describe("restarts", () => {
  it("a Pod terminal in the API is never relaunched after a restart, and its interrupted reclaim resumes", async () => {
    const ledger = new MemoryPodLedger();
    const config = viaProxy("restart");
    const statuses: V1PodStatus[] = [];
    const first = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(5)],
      ledger,
    });
    first.notifyPods((change: PodStatusChange) => void statuses.push(change.status));
    const pod = testPod("finished", uid(5));
    await first.createPod(pod);
    const instanceId = (await ledger.get(uid(5)))?.launch.instanceId ?? "";
    await ec2.send(
      new CreateTagsCommand({
        Resources: [instanceId],
        Tags: Object.entries(encodeReportTags(final(0))).map(([Key, Value]) => ({ Key, Value })),
      }),
    );
    await ec2.send(new StopInstancesCommand({ InstanceIds: [instanceId] }));
    for (let i = 0; i < 20 && statuses.at(-1)?.phase !== "Succeeded"; i++) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      await first.pollOnce();
    }
    expect(statuses.at(-1)?.phase).toBe("Succeeded");
    // The terminal status is published: the Pod controller starts the teardown (one reconcile of
    // the one driver, `deleting: false`), and the process dies before it finishes.
    const stored: V1Pod = { ...pod, status: statuses.at(-1) ?? {} };
    const started = await testTeardown(first).step(stored, { deleting: false });
    expect(started.status).not.toBe("complete");
    await first.stop(); // crash: the reclaim has started, not finished
    const record = decodeRecord((await ledger.get(uid(5)))?.record);
    expect(record.ok).toBe(true);
    expect(record.ok && record.record.phase).not.toBe("complete");

    const second = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(5)],
      ledger,
    });
    const calls = countCalls(second.client);
    await second.createPod(stored);
    // A fresh PodTeardown on the same ledger finishes the teardown the first process left.
    const state = await testTeardown(second).reclaim(stored, { deleting: false, rounds: 40 });
    expect(state.complete).toBe(true);
    expect(state.phases.at(-1)).toBe("complete");
    expect(calls.get("RunInstancesCommand")).toBeUndefined();
    expect(second.getPodStatus(uid(5))?.phase).toBe("Succeeded");
    expect(await stateOf(instanceId)).toBe("terminated");
    await second.stop();
  });
});

describe("a reused Pod name (StatefulSet)", () => {
  it("the replacement launches while the old Pod's instance is reclaimed; neither blocks the other", async () => {
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: viaProxy("sts"),
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(8), uid(9)],
      ledger,
    });
    const old = testPod("web-0", uid(8));
    await provider.createPod(old);
    const oldId = (await ledger.get(uid(8)))?.launch.instanceId ?? "";
    const driver = testTeardown(provider);
    const first = await driver.step(deleting(old));
    expect(first.status).not.toBe("complete");
    // The StatefulSet controller creates web-0 again, with a new UID, while the old one is torn down.
    const replacement = testPod("web-0", uid(9));
    await provider.createPod(replacement);
    const newId = (await ledger.get(uid(9)))?.launch.instanceId ?? "";
    expect(newId).toMatch(/^i-/);
    expect(newId).not.toBe(oldId);
    const state = await driver.reclaim(deleting(old));
    expect(state).toMatchObject({ complete: true, instanceId: oldId });
    expect(await stateOf(oldId)).toBe("terminated");
    expect(await stateOf(newId)).toBe("running");
    // No teardown was ever recorded for the replacement.
    expect(await driver.phase(uid(9))).toBeUndefined();
    await provider.stop();
  });
});

describe("cost", () => {
  it("volumes carry the instance's tags and the Pod's labels; the Pod learns its instance, type, zone and capacity type", async () => {
    const changes: PodStatusChange[] = [];
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: viaProxy("cost", {
        tags: { "cost-center": "ml" },
        podLabelTags: { "app.kubernetes.io/name": "app" },
      }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(11)],
      ledger,
    });
    provider.notifyPods((change) => void changes.push(change));
    const pod = testPod("billed", uid(11));
    pod.metadata = { ...pod.metadata, labels: { "app.kubernetes.io/name": "trainer" } };
    await provider.createPod(pod);
    await provider.pollOnce();
    const instanceId = (await ledger.get(uid(11)))?.launch.instanceId ?? "";
    const volumes = await ec2.send(
      new DescribeVolumesCommand({
        Filters: [{ Name: "attachment.instance-id", Values: [instanceId] }],
      }),
    );
    expect(volumes.Volumes?.length).toBeGreaterThan(0);
    for (const volume of volumes.Volumes ?? []) {
      const tags = Object.fromEntries((volume.Tags ?? []).map((t) => [t.Key, t.Value]));
      expect(tags).toMatchObject({
        "cost-center": "ml",
        app: "trainer",
        "nebula:pod-uid": uid(11),
        "nebula:cluster": "it",
      });
    }
    const launched = changes.flatMap((c) => c.events ?? []).find((e) => e.reason === "Launched");
    expect(launched?.message).toContain(instanceId);
    expect(launched?.message).toContain("t3.micro");
    expect(changes.at(-1)?.instance).toMatchObject({
      instanceId,
      instanceType: "t3.micro",
      capacityType: "on-demand",
      availabilityZone: expect.stringMatching(/^us-east-1/),
    });
    await provider.stop();
  });
});

describe("grace", () => {
  /** The grace the Pod's teardown runs with (its ledger record) and the one tagged for its host. */
  async function graces(ledger: MemoryPodLedger, podUid: string) {
    const decoded = decodeRecord((await ledger.get(podUid))?.record);
    const instanceId = (await ledger.get(podUid))?.launch.instanceId ?? "";
    const page = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
    const tags = page.Reservations?.[0]?.Instances?.[0]?.Tags ?? [];
    return {
      recorded: decoded.ok ? decoded.record.params.gracePeriodSeconds : undefined,
      tagged: tags.find((t) => t.Key === "nebula:stop-grace-seconds")?.Value,
    };
  }

  it("the deletion's grace period wins over the spec's, in the teardown record and on the host", async () => {
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: viaProxy("grace", { maxGracePeriodSeconds: 300 }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      ledger,
    });
    const short = testPod("short", uid(6));
    if (short.spec) short.spec.terminationGracePeriodSeconds = 600;
    await provider.createPod(short);
    await testTeardown(provider).step(deleting(short, 5));
    expect(await graces(ledger, uid(6))).toEqual({ recorded: 5, tagged: "5" });
    await provider.stop();
  });

  // The cap lives on the one path: PodTeardown bounds the recorded grace (the vnode passes the
  // provider's maxGracePeriodSeconds), and stopInstance bounds the grace it tags for the host.
  it("every grace is capped (maxGracePeriodSeconds): a 100,000,000 s grace is recorded and tagged as 300", async () => {
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: viaProxy("grace-cap", { maxGracePeriodSeconds: 300 }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      ledger,
    });
    const long = testPod("long", uid(7));
    if (long.spec) long.spec.terminationGracePeriodSeconds = 100_000_000;
    await provider.createPod(long);
    await testTeardown(provider).step({
      ...long,
      metadata: { ...long.metadata, deletionTimestamp: new Date() },
    });
    expect(await graces(ledger, uid(7))).toEqual({ recorded: 300, tagged: "300" });
    await provider.stop();
  });
});

describe("capacity", () => {
  let faults: FaultProxy;
  let second: MotoNetwork;

  beforeAll(async () => {
    faults = await startFaultProxy(moto.endpoint);
    second = await prepareMoto(moto);
  });
  afterAll(async () => {
    await faults?.close();
  });

  it("20 Pods and a subnet without capacity: one failed RunInstances, every Pod placed in the other subnet", async () => {
    faults.clear();
    const full = network.subnetId;
    faults.inject({
      action: "RunInstances",
      kind: "error",
      code: "InsufficientInstanceCapacity",
      status: 500,
      times: 1000,
      match: (params) => params.get("SubnetId") === full,
    });
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "ice"),
        endpoint: faults.endpoint,
        subnetIds: [network.subnetId, second.subnetId],
        maxAttempts: 1,
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      now: fakeClock().now,
    });
    const before = faults.received.get("RunInstances") ?? 0;
    const pods = Array.from({ length: 20 }, (_, i) => testPod(`ice-${i}`, uid(100 + i)));
    for (const pod of pods) await provider.createPod(pod);
    await provider.pollOnce();
    const instances = await nodeInstances(ec2, "ice");
    expect(instances).toHaveLength(20);
    expect(new Set(instances.map((i) => i.SubnetId))).toEqual(new Set([second.subnetId]));
    expect((faults.received.get("RunInstances") ?? 0) - before).toBe(21);
    await provider.stop();
  });

  it("no capacity anywhere: Pending with InsufficientCapacity, one Warning each, and no RunInstances storm", async () => {
    faults.clear();
    faults.inject({
      action: "RunInstances",
      kind: "error",
      code: "InsufficientInstanceCapacity",
      status: 500,
      times: 1000,
    });
    const changes: PodStatusChange[] = [];
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "ice-all"),
        endpoint: faults.endpoint,
        subnetIds: [network.subnetId, second.subnetId],
        instanceTypes: { default: "t3.micro", fallbacks: { "t3.micro": ["t3.small"] } },
        maxAttempts: 1,
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      // The pools cool down for 60 s of this clock: the polls below all fall inside it.
      now: fakeClock().now,
    });
    provider.notifyPods((change) => void changes.push(change));
    const before = faults.received.get("RunInstances") ?? 0;
    const pods = Array.from({ length: 20 }, (_, i) => testPod(`full-${i}`, uid(200 + i)));
    for (const pod of pods) await provider.createPod(pod);
    for (let i = 0; i < 5; i++) await provider.pollOnce();
    // Four pools (2 subnets × 2 types): one failed call each, then every Pod waits.
    expect((faults.received.get("RunInstances") ?? 0) - before).toBe(4);
    for (const pod of pods) {
      const status = provider.getPodStatus(pod.metadata?.uid ?? "");
      expect(status?.phase).toBe("Pending");
      expect(status?.reason).toBe("InsufficientCapacity");
      expect(
        status?.conditions?.find((c) => c.type === "nebula.dev/InstanceLaunched"),
      ).toMatchObject({
        status: "False",
        reason: "InsufficientCapacity",
      });
    }
    // One Warning per Pod (for the caller to record as an Event), not one per poll.
    const warnings = changes.flatMap((c) =>
      (c.events ?? []).filter((e) => e.type === "Warning").map(() => c.pod.metadata?.uid),
    );
    expect(warnings.sort()).toEqual(pods.map((p) => p.metadata?.uid).sort());
    expect(await nodeInstances(ec2, "ice-all")).toEqual([]);
    await provider.stop();
  });

  it("a quota error holds every Pod back with QuotaExceeded after one call", async () => {
    faults.clear();
    faults.inject({
      action: "RunInstances",
      kind: "error",
      code: "VcpuLimitExceeded",
      status: 400,
      times: 1000,
    });
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "quota"),
        endpoint: faults.endpoint,
        maxAttempts: 1,
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      now: fakeClock().now,
    });
    const before = faults.received.get("RunInstances") ?? 0;
    const pods = Array.from({ length: 5 }, (_, i) => testPod(`q-${i}`, uid(300 + i)));
    for (const pod of pods) await provider.createPod(pod);
    await provider.pollOnce();
    expect((faults.received.get("RunInstances") ?? 0) - before).toBe(1);
    expect(pods.map((p) => provider.getPodStatus(p.metadata?.uid ?? "")?.reason)).toEqual(
      Array(5).fill("QuotaExceeded"),
    );
    // Deleting a Pod that never got an instance completes at once.
    expect(await testTeardown(provider).step(deleting(pods[0] as V1Pod))).toMatchObject({
      status: "complete",
    });
    faults.clear();
    await provider.stop();
  });
});

describe("Pods that are not launched", () => {
  it("a DaemonSet Pod is held Pending with a reason; a Pod with a Secret env or an unlisted type is Failed at once; no instance", async () => {
    const changes: PodStatusChange[] = [];
    const provider = new Ec2PodProvider({
      config: viaProxy("refused"),
      livePodUids: () => [],
    });
    provider.notifyPods((change) => void changes.push(change));
    const ds = testPod("agent-abcde", uid(400));
    ds.metadata = {
      ...ds.metadata,
      ownerReferences: [
        { apiVersion: "apps/v1", kind: "DaemonSet", name: "agent", uid: "d", controller: true },
      ],
    };
    const secret = testPod("secret", uid(401));
    const container = secret.spec?.containers[0];
    if (container) {
      container.env = [
        { name: "TOKEN", valueFrom: { secretKeyRef: { name: "creds", key: "token" } } },
      ];
    }
    const big = testPod("big", uid(402), {
      nodeSelector: { "node.kubernetes.io/instance-type": "p5.48xlarge" },
    });
    for (const pod of [ds, secret, big]) await provider.createPod(pod);
    expect(provider.getPodStatus(uid(400))).toMatchObject({
      phase: "Pending",
      reason: "DaemonSetPodNotLaunched",
    });
    expect(provider.getPodStatus(uid(401))).toMatchObject({
      phase: "Failed",
      reason: "SecretInUserData",
    });
    expect(provider.getPodStatus(uid(401))?.message).toMatch(/TOKEN/);
    expect(provider.getPodStatus(uid(402))).toMatchObject({
      phase: "Failed",
      reason: "InstanceTypeNotAllowed",
    });
    expect(provider.getPodStatus(uid(402))?.message).toMatch(/spec\.nodeSelector/);
    const events = changes.flatMap((c) => (c.events ?? []).map((e) => `${e.type} ${e.reason}`));
    expect(events.sort()).toEqual([
      "Normal DaemonSetPodNotLaunched",
      "Warning InstanceTypeNotAllowed",
      "Warning SecretInUserData",
    ]);
    // Nothing more is delivered for them on later polls.
    const delivered = changes.length;
    await provider.pollOnce();
    await provider.pollOnce();
    expect(changes.length).toBe(delivered);
    expect(await nodeInstances(ec2, "refused")).toEqual([]);
    await provider.stop();
  });
});

describe("security", () => {
  it("a forged teardown annotation on the Pod is ignored: only the Pod's own instance is reclaimed", async () => {
    // The victim: another tenant's instance, launched without Nebula's instance profile.
    const victim = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-0a1b2c3d",
        InstanceType: "t3.micro",
        MinCount: 1,
        MaxCount: 1,
        SubnetId: network.subnetId,
        // Someone with ec2:CreateTags copied Nebula's tags onto it.
        TagSpecifications: [
          {
            ResourceType: "instance",
            Tags: [
              { Key: "nebula:cluster", Value: "it" },
              { Key: "nebula:node", Value: "forged" },
              { Key: "nebula:pod-uid", Value: uid(500) },
              { Key: "nebula:orphaned-at", Value: "2020-01-01T00:00:00Z" },
            ],
          },
        ],
      }),
    );
    const victimId = victim.Instances?.[0]?.InstanceId ?? "";
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: viaProxy("forged", { leakCollection: { graceSeconds: 0, intervalSeconds: 10 } }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      ledger,
    });
    const attacker = testPod("attacker", uid(500), {
      annotations: {
        "teardown.nebula.dev/record": JSON.stringify({
          v: 1,
          def: "nebula.dev/pod",
          cause: "DeletionRequested",
          startedAt: 0,
          phase: "terminating",
          idx: 1,
          since: 0,
          attempt: 1,
          issuedAt: 0,
          params: {
            namespace: "default",
            name: "attacker",
            podUid: uid(500),
            instanceId: victimId,
          },
        }),
      },
    });
    await provider.createPod(attacker);
    const own = (await ledger.get(uid(500)))?.launch.instanceId ?? "";
    expect(own).not.toBe(victimId);
    const state = await reclaim(provider, deleting(attacker));
    expect(state).toMatchObject({ complete: true, instanceId: own });
    expect(await stateOf(own)).toBe("terminated");
    expect(await stateOf(victimId)).toBe("running");
    // The Pod controller forgets a Pod once its teardown completed: its UID is no longer live.
    await provider.forgetPod(uid(500));
    // The leak collector, twice (mark, then confirm), leaves the forged-tag victim alone.
    await provider.pollOnce();
    const first = await provider.collectLeaks();
    expect(first.unproven.map((u) => u.instanceId)).toContain(victimId);
    expect(first.terminate).not.toContain(victimId);
    expect((await provider.collectLeaks()).terminate).not.toContain(victimId);
    expect(await stateOf(victimId)).toBe("running");
    await provider.stop();
  });
});

/**
 * Kills a process before or after each of its first `sideEffects` side effects (EC2 mutations and
 * ledger writes, {@link Mortal}) while it launches a Pod, observes it and tears it down; then a
 * fresh process on the same ledger reclaims it. Returns the runs that died and what went wrong:
 * a reclaim not complete, more than one instance, one left running, or `extra`'s own finding.
 */
async function crashAtEverySideEffect(options: {
  readonly name: string;
  readonly uidBase: number;
  readonly sideEffects: number;
  readonly config: (node: string) => ProviderConfigInput;
  readonly extra?: (node: string, instances: readonly Instance[]) => string | undefined;
}): Promise<{ runs: number; failures: string[] }> {
  const failures: string[] = [];
  let runs = 0;
  for (let k = 0; k < options.sideEffects; k++) {
    for (const when of ["before", "after"] as const) {
      const node = `${options.name}-${k}-${when}`;
      const podUid = uid(options.uidBase + k * 2 + (when === "after" ? 1 : 0));
      const inner = new MemoryPodLedger();
      const mortal = new Mortal(k, when);
      const pod = testPod("victim", podUid);
      const config = options.config(node);
      const first = new Ec2PodProvider({
        config: { ...config, maxAttempts: 1 },
        renderUserData: () => USER_DATA,
        livePodUids: () => [podUid],
        ledger: mortal.ledger(inner),
      });
      mortal.clients(first);
      // The first process (provider and teardown driver): launch, observe, delete, until done or dead.
      const teardown = testTeardown(first);
      try {
        await first.createPod(pod);
        await first.pollOnce();
        for (let i = 0; i < 30 && !mortal.dead; i++) {
          const result = await teardown.step(deleting(pod));
          if (result.status === "complete") break;
          await first.pollOnce();
        }
      } catch {
        // died
      }
      await first.stop().catch(() => undefined);
      if (!mortal.dead) break; // k is past the last side effect
      runs++;
      // A fresh process on the same ledger: the Pod is still there, being deleted.
      // A launch recorded but never sent is only declared absent after the consistency window
      // (3 s here): until then "not found" is not proof.
      const second = new Ec2PodProvider({
        config,
        renderUserData: () => USER_DATA,
        livePodUids: () => [podUid],
        ledger: inner,
      });
      await second.createPod(deleting(pod));
      // A fresh PodTeardown too; the Pod object is where the first left it (one API server).
      const state = await testTeardown(second, { removed: teardown.removed }).reclaim(
        deleting(pod),
        { rounds: 120, ms: 100 },
      );
      await second.stop();
      const instances = await nodeInstances(ec2, node);
      const alive = instances.filter((i) => i.State?.Name !== "terminated");
      if (!state.complete) {
        failures.push(`${node}: reclaim not complete (${JSON.stringify(state.result)})`);
      }
      if (instances.length > 1) failures.push(`${node}: ${instances.length} instances launched`);
      if (alive.length > 0) failures.push(`${node}: ${alive.length} instance(s) left running`);
      const found = options.extra?.(node, instances);
      if (found !== undefined) failures.push(found);
    }
  }
  return { runs, failures };
}

describe("crash at every side effect", () => {
  it("killed before or after each EC2 mutation and ledger write, a fresh process launches at most one instance and reclaims it", async () => {
    const { runs, failures } = await crashAtEverySideEffect({
      name: "crash",
      uidBase: 900,
      sideEffects: 16,
      config: (node) => viaProxy(node, { eventualConsistencySeconds: 3 }),
    });
    expect(runs).toBeGreaterThanOrEqual(10);
    expect(failures).toEqual([]);
  }, 600_000);

  it("killed at each side effect of a launch EC2 refuses for Spot capacity and retries at once On-Demand, a fresh process launches at most one instance and reclaims it", async () => {
    // Spot-then-On-Demand with no Spot capacity at all: the launch is refused once, its intent
    // cleared, and the next placement (On-Demand) taken in the same launch; a kill may land
    // between any two of those writes.
    proxy.configure({ noCapacity: [{ capacityType: "spot" }] });
    try {
      const { runs, failures } = await crashAtEverySideEffect({
        name: "crash-ice",
        uidBase: 960,
        sideEffects: 10,
        config: (node) =>
          viaProxy(node, {
            eventualConsistencySeconds: 3,
            capacity: { default: "spot-then-on-demand" },
          }),
        extra: (node, instances) =>
          instances.some((i) => i.InstanceLifecycle === "spot")
            ? `${node}: a Spot instance exists although EC2 refused every Spot launch`
            : undefined,
      });
      // The refused launch is a side effect too: the kills land before and after it, its
      // intent's clear, the On-Demand intent and launch, and the teardown's writes.
      expect(runs).toBeGreaterThanOrEqual(8);
      expect(proxy.counts().noCapacity).not.toEqual({});
      expect(failures).toEqual([]);
    } finally {
      proxy.configure({ noCapacity: [] });
    }
  }, 600_000);
});
