/**
 * Restart safety against moto through the SDK: a provider that starts again (a new process: no
 * memory, the same ledger) computes no state from no observation, and a deleted Pod gets no
 * instance. Each test failed on the code before the restart-safety issue.
 */
import {
  CreateTagsCommand,
  DescribeInstancesCommand,
  type EC2Client,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { type ExitReport, encodeReportTags } from "@nebula/state-mapping";
import { MemoryPodLedger } from "@nebula/teardown";
import { type Ec2ProxyHandle, type Moto, startEc2Proxy, startMoto } from "@nebula/test-peers";
import type { PodStatusChange } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider } from "./provider.js";
import { countCalls } from "./testing/calls.js";
import { type FaultProxy, startFaultProxy } from "./testing/fault-proxy.js";
import { testPod } from "./testing/fixtures.js";
import { type MotoNetwork, motoConfig, prepareMoto } from "./testing/moto-env.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";
/** Ten minutes: far past every grace an unlisted instance gets (60 s absent, 120 s consistency). */
const LATER = 10 * 60_000;

const RUNNING: ExitReport = {
  v: 1,
  seq: 1,
  time: "2026-11-30T05:00:00Z",
  final: false,
  containers: [
    {
      name: "app",
      init: false,
      state: "running",
      restarts: 0,
      ready: true,
      startedAt: "2026-11-30T04:59:00Z",
    },
  ],
};

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
  return `22222222-0000-4000-8000-${n.toString().padStart(12, "0")}`;
}

function withStatus(pod: V1Pod, status: V1PodStatus | undefined): V1Pod {
  return status === undefined ? pod : { ...pod, status };
}

/** A first process: launches the Pods and polls until each has a status; returns the stored Pods. */
async function firstLife(node: string, ledger: MemoryPodLedger, pods: V1Pod[]): Promise<V1Pod[]> {
  const provider = new Ec2PodProvider({
    config: { ...motoConfig(moto, network, node), endpoint: proxy.endpoint },
    renderUserData: () => USER_DATA,
    livePodUids: () => pods.map((p) => p.metadata?.uid ?? ""),
    ledger,
  });
  const delivered: PodStatusChange[] = [];
  provider.notifyPods((change) => void delivered.push(change));
  for (const pod of pods) {
    await provider.createPod(pod);
    // The host's supervisor reports its container running, on the instance's own tags.
    const instanceId = (await ledger.get(pod.metadata?.uid ?? ""))?.launch.instanceId ?? "";
    await ec2.send(
      new CreateTagsCommand({
        Resources: [instanceId],
        Tags: Object.entries(encodeReportTags(RUNNING)).map(([Key, Value]) => ({ Key, Value })),
      }),
    );
  }
  await provider.pollOnce();
  const stored = pods.map((pod) => withStatus(pod, provider.getPodStatus(pod.metadata?.uid ?? "")));
  for (const pod of stored) expect(pod.status?.phase).toBe("Running");
  // What the first poll observed (the Availability Zone) is delivered by this life, not left for
  // the next process to write.
  for (const pod of pods) {
    const last = delivered.filter((c) => c.pod.metadata?.uid === pod.metadata?.uid).at(-1);
    expect(last?.instance?.availabilityZone).toMatch(/^[a-z]{2}-[a-z]+-\d[a-z]$/);
  }
  await provider.stop();
  provider.client.destroy();
  return stored;
}

/** A second process, ten minutes later, on the same ledger. */
function secondLife(
  node: string,
  ledger: MemoryPodLedger,
  pods: V1Pod[],
): { provider: Ec2PodProvider; changes: PodStatusChange[]; calls: Map<string, number> } {
  const provider = new Ec2PodProvider({
    config: { ...motoConfig(moto, network, node), endpoint: proxy.endpoint, maxAttempts: 1 },
    renderUserData: () => USER_DATA,
    livePodUids: () => pods.map((p) => p.metadata?.uid ?? ""),
    ledger,
    now: () => Date.now() + LATER,
  });
  const changes: PodStatusChange[] = [];
  provider.notifyPods((change) => void changes.push(change));
  return { provider, changes, calls: countCalls(provider.client) };
}

describe("no state from no observation after a restart", () => {
  it("before its first poll a restarted provider publishes nothing for instances it adopted from the ledger, and its first poll gives back the stored status", async () => {
    const ledger = new MemoryPodLedger();
    const pods = [testPod("long-a", uid(1)), testPod("long-b", uid(2))];
    const stored = await firstLife("restart-quiet", ledger, pods);
    const { provider, changes, calls } = secondLife("restart-quiet", ledger, stored);
    for (const pod of stored) await provider.createPod(pod);
    // Adopted, not observed: no state, nothing published, nothing acted on.
    await new Promise((resolve) => setTimeout(resolve, 200));
    for (const pod of stored)
      expect(provider.getPodStatus(pod.metadata?.uid ?? "")).toBeUndefined();
    expect(changes).toEqual([]);
    await provider.pollOnce();
    for (const pod of stored) {
      expect(provider.getPodStatus(pod.metadata?.uid ?? "")?.phase).toBe("Running");
    }
    expect(changes.every((c) => c.status.phase === "Running")).toBe(true);
    expect(calls.get("StopInstancesCommand") ?? 0).toBe(0);
    expect(calls.get("TerminateInstancesCommand") ?? 0).toBe(0);
    expect(calls.get("RunInstancesCommand") ?? 0).toBe(0);
    await provider.stop();
  });

  it("while EC2 fails, a restarted provider keeps every adopted Pod's status unknown to it (never Lost, never Pending)", async () => {
    const ledger = new MemoryPodLedger();
    const pods = [testPod("failing-a", uid(3))];
    const stored = await firstLife("restart-failing", ledger, pods);
    const { provider, changes } = secondLife("restart-failing", ledger, stored);
    proxy.configure({ faultRate: 1 });
    try {
      for (const pod of stored) await provider.createPod(pod);
      for (let i = 0; i < 3; i++) await provider.pollOnce();
      expect(provider.getPodStatus(uid(3))).toBeUndefined();
      expect(changes.filter((c) => c.status.phase !== "Running")).toEqual([]);
    } finally {
      proxy.configure({ faultRate: 0 });
    }
    await provider.pollOnce();
    expect(provider.getPodStatus(uid(3))?.phase).toBe("Running");
    await provider.stop();
  });

  it("an adopted instance terminated while the provider was down is observed by ID (terminated), not guessed", async () => {
    const ledger = new MemoryPodLedger();
    const pods = [testPod("gone-while-down", uid(4))];
    const stored = await firstLife("restart-gone", ledger, pods);
    const instanceId = (await ledger.get(uid(4)))?.launch.instanceId ?? "";
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
    const { provider, calls } = secondLife("restart-gone", ledger, stored);
    for (const pod of stored) await provider.createPod(pod);
    expect(provider.getPodStatus(uid(4))).toBeUndefined();
    const before = calls.get("DescribeInstancesCommand") ?? 0;
    await provider.pollOnce();
    // The listing (live states) misses it; one describe by ID finds it terminated.
    expect((calls.get("DescribeInstancesCommand") ?? 0) - before).toBe(2);
    const status = provider.getPodStatus(uid(4));
    expect(status?.phase).toBe("Failed");
    expect(status?.containerStatuses?.[0]?.state?.terminated?.reason).toBe(
      "ContainerStatusUnknown",
    );
    await provider.stop();
  });
});

describe("a deleted Pod never gets an instance", () => {
  let faults: FaultProxy;

  beforeAll(async () => {
    faults = await startFaultProxy(moto.endpoint);
  });
  afterAll(async () => {
    await faults?.close();
  });

  it("a Pod whose only launch EC2 refused for capacity is provably without an instance at once, not after EC2's consistency window", async () => {
    faults.clear();
    faults.inject({
      action: "RunInstances",
      kind: "error",
      code: "InsufficientInstanceCapacity",
      status: 500,
      times: 1,
    });
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "deleted-waiting"),
        endpoint: faults.endpoint,
        maxAttempts: 1,
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const pod = testPod("held", uid(10));
    await provider.createPod(pod);
    expect(provider.getPodStatus(uid(10))?.reason).toBe("InsufficientCapacity");
    const before = faults.received.get("RunInstances") ?? 0;
    await provider.updatePod({
      ...pod,
      metadata: { ...pod.metadata, deletionTimestamp: new Date(), deletionGracePeriodSeconds: 30 },
    });
    // Every attempt had a definite "no": nothing to wait for.
    await expect(provider.findInstance(uid(10))).resolves.toBeUndefined();
    await provider.pollOnce();
    expect((faults.received.get("RunInstances") ?? 0) - before).toBe(0);
    const page = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: "tag:nebula:pod-uid", Values: [uid(10)] }],
      }),
    );
    expect(page.Reservations ?? []).toEqual([]);
    await provider.stop();
  });

  it("while RunInstances is under way the Pod's instance cannot be declared absent; once it answers, it is found", async () => {
    proxy.configure({ runInstancesDelayMs: 1_500 });
    try {
      const ledger = new MemoryPodLedger();
      const provider = new Ec2PodProvider({
        config: { ...motoConfig(moto, network, "in-flight"), endpoint: proxy.endpoint },
        renderUserData: () => USER_DATA,
        livePodUids: () => [],
        ledger,
      });
      const pod = testPod("in-flight", uid(11));
      const launching = provider.createPod(pod);
      await new Promise((resolve) => setTimeout(resolve, 500));
      await expect(provider.findInstance(uid(11))).rejects.toMatchObject({ code: "NotVisibleYet" });
      await launching;
      const found = await provider.findInstance(uid(11));
      expect(found?.instanceId).toBe((await ledger.get(uid(11)))?.launch.instanceId);
      await provider.stop();
    } finally {
      proxy.configure({ runInstancesDelayMs: 0 });
    }
  });
});

describe("the deletion's grace reaches the host", () => {
  it("stopInstance with a grace tags it on the instance (nebula:stop-grace-seconds) before StopInstances", async () => {
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: { ...motoConfig(moto, network, "stop-grace"), endpoint: proxy.endpoint },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      ledger,
    });
    const calls: string[] = [];
    provider.client.middlewareStack.add(
      (next, context) => async (args) => {
        calls.push(String(context.commandName));
        return next(args);
      },
      { step: "initialize", name: "order" },
    );
    await provider.createPod(testPod("graceful", uid(20)));
    const instanceId = (await ledger.get(uid(20)))?.launch.instanceId ?? "";
    calls.length = 0;
    await provider.stopInstance(instanceId, { graceSeconds: 5 });
    const page = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
    const tags = page.Reservations?.[0]?.Instances?.[0]?.Tags ?? [];
    expect(tags.find((t) => t.Key === "nebula:stop-grace-seconds")?.Value).toBe("5");
    expect(calls.indexOf("CreateTagsCommand")).toBeGreaterThanOrEqual(0);
    expect(calls.indexOf("CreateTagsCommand")).toBeLessThan(calls.indexOf("StopInstancesCommand"));
    await provider.stop();
  });
});

describe("a graceful stop reports what really happened", () => {
  const FINAL: ExitReport = {
    v: 1,
    seq: 2,
    time: "2026-11-30T05:00:00Z",
    final: true,
    stopRequested: true,
    containers: [
      {
        name: "app",
        init: false,
        state: "terminated",
        restarts: 0,
        exitCode: 143,
        signal: 15,
        reason: "Error",
        startedAt: "2026-11-30T04:59:00Z",
        finishedAt: "2026-11-30T05:00:00Z",
      },
    ],
  };

  async function stoppedByHost(instanceId: string, terminate: boolean): Promise<void> {
    // The host's supervisor: the containers stopped, the final report on its own tags, then off.
    await ec2.send(
      new CreateTagsCommand({
        Resources: [instanceId],
        Tags: Object.entries(encodeReportTags(FINAL)).map(([Key, Value]) => ({ Key, Value })),
      }),
    );
    await ec2.send(new StopInstancesCommand({ InstanceIds: [instanceId] }));
    if (terminate) await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
  }

  it("an instance stopped and terminated between two polls: the next poll reads the final report by ID (exit 143), not ContainerStatusUnknown", async () => {
    const ledger = new MemoryPodLedger();
    const [stored] = await firstLife("graceful-poll", ledger, [testPod("graceful-poll", uid(30))]);
    const { provider } = secondLife("graceful-poll", ledger, stored ? [stored] : []);
    await provider.createPod(stored as V1Pod);
    await provider.pollOnce();
    expect(provider.getPodStatus(uid(30))?.phase).toBe("Running");
    await stoppedByHost((await ledger.get(uid(30)))?.launch.instanceId ?? "", true);
    await provider.pollOnce();
    const status = provider.getPodStatus(uid(30));
    expect(status?.phase).toBe("Failed");
    expect(status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 143,
      reason: "Error",
    });
    await provider.stop();
  });

  it("a vnode restarted during a teardown: the teardown's own lookup (before any poll) reads the host's final report from the terminated instance", async () => {
    const ledger = new MemoryPodLedger();
    const [stored] = await firstLife("graceful-find", ledger, [testPod("graceful-find", uid(31))]);
    const instanceId = (await ledger.get(uid(31)))?.launch.instanceId ?? "";
    await stoppedByHost(instanceId, true);
    const { provider } = secondLife("graceful-find", ledger, stored ? [stored] : []);
    await provider.createPod(stored as V1Pod);
    await expect(provider.findInstance(uid(31))).resolves.toMatchObject({
      instanceId,
      state: "terminated",
    });
    expect(provider.getPodStatus(uid(31))?.containerStatuses?.[0]?.state?.terminated).toMatchObject(
      { exitCode: 143 },
    );
    await provider.stop();
  });
});
