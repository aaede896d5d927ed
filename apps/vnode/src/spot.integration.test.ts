/**
 * Spot end to end (issue #31): a Deployment on Spot-then-On-Demand whose smallest type has no Spot
 * capacity in the node's zone (the EC2 proxy of the test peers refuses that offering), run by the
 * real supervisor in the instance-host simulator, with the event channel on. Then EC2 interrupts
 * some replicas (the simulator serves the notice on their IMDS and reclaims them when the warning
 * ends) and recommends rebalancing another, with `capacity.onRebalance: evict` (and the optional
 * RBAC rule it needs). Asserted: every Pod runs, the dead offering is tried about once, not once
 * per Pod, and the Events say why; an interrupted Pod is marked (`DisruptionTarget`, not Ready)
 * while its containers still stop, then ends `Failed` / `SpotInterruption` with its containers'
 * final report; the rebalanced one is evicted through the API server (never marked as a Spot
 * interruption) and its instance terminated; every replacement runs; nothing leaks.
 * Printed: notice → marked, notice → Failed, notice → replacement Running, notice → old instance
 * terminated.
 */
import { DescribeSubnetsCommand } from "@aws-sdk/client-ec2";
import { CreateQueueCommand, SQSClient } from "@aws-sdk/client-sqs";
import {
  AppsV1Api,
  CoreV1Api,
  EventsV1Api,
  RbacAuthorizationV1Api,
  type V1Pod,
} from "@kubernetes/client-node";
import {
  createEc2EventRule,
  type Ec2EventRule,
  type Ec2ProxyHandle,
  type InstanceHosts,
  MOTO_CREDENTIALS,
  putEc2Events,
  startEc2Proxy,
} from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  deleteNode,
  nodeInstances,
  scrape,
  startVnode,
  startWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
  vnodeConfig,
} from "./testing/e2e.js";

const REPLICAS = Number(process.env.NEBULA_E2E_SPOT_REPLICAS ?? "10");
/** Replicas EC2 interrupts at once (their notices served together). */
const INTERRUPTED = 3;
/** The warning EC2 gives (two minutes in AWS; shorter here: the supervisor reads its `time`). */
const WARNING_MS = 60_000;
const NODE = "vnode-spot";
const NS = "vnode-spot";
const APP = "spot-web";
/** The optional RBAC rule `capacity.onRebalance: evict` needs. */
const EVICTION_RBAC = "rbac-rebalance-eviction.yaml";

const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const apps = admin.makeApiClient(AppsV1Api);
const eventsApi = admin.makeApiClient(EventsV1Api);
const ec2 = moto.ec2();

let hosts: InstanceHosts;
let proxy: Ec2ProxyHandle;
let vnode: VnodeProcess;
let rule: Ec2EventRule | undefined;
let zone: string;

beforeAll(async () => {
  const world = await startWorld({
    admin,
    ec2,
    moto,
    cluster: NODE,
    namespace: NS,
    manifests: [EVICTION_RBAC],
  });
  hosts = world.hosts;
  const subnets = await ec2.send(
    new DescribeSubnetsCommand({ SubnetIds: [world.network.subnetId] }),
  );
  zone = subnets.Subnets?.[0]?.AvailabilityZone ?? "";
  // EC2 has no Spot c7i.large in the node's zone; everything else is there.
  proxy = await startEc2Proxy({
    upstream: { endpoint: hosts.ec2Endpoint, region: moto.region },
    noCapacity: [{ instanceType: "c7i.large", availabilityZone: zone, capacityType: "spot" }],
  });
  const sqs = new SQSClient({
    endpoint: moto.endpoint,
    region: moto.region,
    credentials: MOTO_CREDENTIALS,
  });
  const queue = await sqs.send(new CreateQueueCommand({ QueueName: `${NODE}-events` }));
  sqs.destroy();
  rule = await createEc2EventRule(moto, queue.QueueUrl ?? "");
  const config = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: proxy.endpoint,
    capacity: { cpu: "1000", memory: "4Ti", pods: String(REPLICAS * 3) },
    pollIntervalSeconds: 10,
    batchWindowMs: 50,
  }) as { provider: Record<string, unknown> };
  config.provider.instanceTypes = {
    default: "t3.micro",
    catalogue: { allowed: ["c7i.large", "m7i.large"] },
  };
  config.provider.capacity = { default: "spot-then-on-demand", onRebalance: "evict" };
  config.provider.events = { queueUrl: queue.QueueUrl };
  vnode = await startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config,
  });
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await rule?.remove();
  await deleteNode(admin, NODE);
  await proxy?.close();
  await hosts?.close();
  // The optional eviction right goes with this file: the next files' vnodes run without it.
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  await rbac.deleteClusterRoleBinding({ name: "nebula-vnode-rebalance-eviction" });
  await rbac.deleteClusterRole({ name: "nebula-vnode-rebalance-eviction" });
  ec2.destroy();
  expect(code).toBe(0);
});

const instanceOf = (p: V1Pod) => p.metadata?.annotations?.["nebula.dev/instance-id"];
const condition = (p: V1Pod | undefined, type: string) =>
  p?.status?.conditions?.find((c) => c.type === type);
const runningReady = (p: V1Pod) =>
  p.status?.phase === "Running" && condition(p, "Ready")?.status === "True";
const quantile = (values: readonly number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN;
};
const seconds = (ms: number) => (ms / 1000).toFixed(1);

/** On a failure: the Pods' phases and reasons, and the vnode's last warnings. */
async function explain<T>(what: Promise<T>): Promise<T> {
  try {
    return await what;
  } catch (error) {
    const pods = await appPods().catch(() => []);
    const warnings = vnode.lines
      .filter((l) => l.level === "warn" || l.level === "error" || Number(l.level) >= 40)
      .slice(-40)
      .map((l) => String(l.msg));
    console.log(
      `Pods:\n${pods.map((p) => `${p.metadata?.name} ${p.status?.phase} ${p.status?.reason ?? ""} ${p.status?.message ?? ""}`).join("\n")}\nvnode warnings:\n${warnings.join("\n")}`,
    );
    throw error;
  }
}

async function appPods(): Promise<V1Pod[]> {
  return (await core.listNamespacedPod({ namespace: NS, labelSelector: `app=${APP}` })).items;
}

describe(`a Deployment of ${REPLICAS} replicas on Spot-then-On-Demand`, () => {
  it("runs every Pod past a dead Spot offering; interrupted replicas are marked at the notice, end as Spot interruptions and are replaced; the rebalanced one is evicted and replaced; nothing leaks", async () => {
    await until("the Node Ready", async () => {
      const node = await core.readNode({ name: NODE });
      return condition(node as V1Pod, "Ready")?.status === "True" ? node : undefined;
    });
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: APP },
        spec: {
          replicas: REPLICAS,
          selector: { matchLabels: { app: APP } },
          template: {
            metadata: { labels: { app: APP } },
            spec: {
              terminationGracePeriodSeconds: 10,
              nodeSelector: { "kubernetes.io/hostname": NODE },
              tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
              containers: [
                {
                  name: "app",
                  image: "busybox",
                  resources: { requests: { cpu: "1", memory: "1Gi" } },
                  // Drains on SIGTERM: says so in its termination message, then exits 0.
                  command: [
                    "sh",
                    "-c",
                    "trap 'echo drained >/dev/termination-log; sleep 2; exit 0' TERM; while :; do sleep 0.2; done",
                  ],
                },
              ],
            },
          },
        },
      },
    });

    // 1. Every replica runs, on Spot, none on the dead offering.
    const first = await explain(
      until(
        `${REPLICAS} replicas Running and Ready`,
        async () => {
          const pods = await appPods();
          return pods.length === REPLICAS && pods.every(runningReady) ? pods : undefined;
        },
        240_000,
        500,
      ),
    );
    const instances = new Map((await nodeInstances(ec2, NODE)).map((i) => [i.InstanceId ?? "", i]));
    for (const pod of first) {
      const instance = instances.get(instanceOf(pod) ?? "");
      expect(instance?.InstanceLifecycle, pod.metadata?.name).toBe("spot");
      expect(instance?.InstanceType, pod.metadata?.name).toBe("m7i.large");
      expect(pod.metadata?.annotations?.["nebula.dev/capacity-type"]).toBe("spot");
    }
    // The price at launch (moto's Spot price history says $0.00001/h for every type), on each Pod,
    // and their sum by namespace in the vnode's cost gauge.
    await until("every replica shows its Spot price", async () => {
      const pods = await appPods();
      return pods.every(
        (p) => p.metadata?.annotations?.["nebula.dev/spot-price-usd-per-hour"] === "0.00001",
      )
        ? true
        : undefined;
    });
    const cost = (await scrape(vnode.url)).get(
      `nebula_vnode_spot_hourly_cost_usd{namespace="${NS}"}`,
    );
    expect(cost).toBeCloseTo(REPLICAS * 0.00001, 8);
    const deadTries = proxy.counts().noCapacity[`c7i.large/${zone}/spot`] ?? 0;
    const runCalls = proxy.counts().calls.RunInstances ?? 0;
    console.log(
      `dead offering c7i.large/${zone}/spot: tried ${deadTries} time(s) for ${REPLICAS} Pods; RunInstances calls per launched Pod ${(runCalls / REPLICAS).toFixed(2)}`,
    );
    // Tried, refused, and then left alone: not once per Pod.
    expect(deadTries).toBeGreaterThanOrEqual(1);
    expect(deadTries).toBeLessThan(REPLICAS / 2);
    const launchEvents = (await eventsApi.listNamespacedEvent({ namespace: NS })).items;
    const said = launchEvents.map((e) => `${e.reason}: ${e.note ?? ""}`).join("\n");
    expect(said).toMatch(/InsufficientInstanceCapacity|capacity/);
    expect(said).toContain("m7i.large, Spot at $0.00001/h");

    // 2. EC2 interrupts some replicas and recommends rebalancing another.
    const victims = first.slice(0, INTERRUPTED);
    const rebalanced = first[INTERRUPTED] as V1Pod;
    const noticeAt = new Map<string, number>();
    await Promise.all(
      victims.map(async (pod) => {
        const id = instanceOf(pod) ?? "";
        await hosts.interruptSpot(id, { warningMs: WARNING_MS });
        noticeAt.set(pod.metadata?.uid ?? "", Date.now());
      }),
    );
    // EC2 also sends its warning to EventBridge, as it does in AWS: the channel reads it too.
    await putEc2Events(
      moto,
      victims.map((p) => ({ kind: "interruption", instanceId: instanceOf(p) ?? "" })),
    );
    await hosts.recommendRebalance(instanceOf(rebalanced) ?? "");
    const rebalancedAt = Date.now();
    let evictedAt: number | undefined;

    const markedAt = new Map<string, number>();
    const markedWhileRunning = new Set<string>();
    const failedAt = new Map<string, number>();
    const terminatedAt = new Map<string, number>();
    const originals = new Set(first.map((p) => p.metadata?.uid ?? ""));
    const replacementRunningAt: number[] = [];
    let rebalancedTerminated = false;
    const ended = await until(
      "the interrupted replicas Failed, the rebalanced one evicted, their instances terminated, and the Deployment whole again",
      async () => {
        const now = Date.now();
        const pods = await appPods();
        for (const pod of pods) {
          const uid = pod.metadata?.uid ?? "";
          if (!noticeAt.has(uid)) continue;
          const mark = condition(pod, "DisruptionTarget");
          if (mark?.status === "True" && !markedAt.has(uid)) markedAt.set(uid, now);
          if (mark?.status === "True" && pod.status?.phase === "Running") {
            markedWhileRunning.add(uid);
          }
          if (pod.status?.phase === "Failed" && !failedAt.has(uid)) failedAt.set(uid, now);
        }
        const live = await nodeInstances(ec2, NODE);
        for (const pod of victims) {
          const i = live.find((x) => x.InstanceId === instanceOf(pod));
          if (i?.State?.Name === "terminated" && !terminatedAt.has(pod.metadata?.uid ?? "")) {
            terminatedAt.set(pod.metadata?.uid ?? "", now);
          }
        }
        const rebalancedInstance = live.find((x) => x.InstanceId === instanceOf(rebalanced));
        if (rebalancedInstance?.State?.Name === "terminated") rebalancedTerminated = true;
        const evicting = pods.find((p) => p.metadata?.uid === rebalanced.metadata?.uid);
        if (evictedAt === undefined && evicting?.metadata?.deletionTimestamp !== undefined) {
          evictedAt = now;
        }
        const rebalancedGone = evicting === undefined;
        const fresh = pods.filter((p) => !originals.has(p.metadata?.uid ?? "") && runningReady(p));
        while (replacementRunningAt.length < fresh.length) replacementRunningAt.push(now);
        return failedAt.size === INTERRUPTED &&
          terminatedAt.size === INTERRUPTED &&
          rebalancedGone &&
          rebalancedTerminated &&
          fresh.length === INTERRUPTED + 1
          ? pods
          : undefined;
      },
      WARNING_MS + 120_000,
      100,
    );
    const firstNotice = Math.min(...noticeAt.values());
    const delays = (m: Map<string, number>) =>
      [...m].map(([uid, at]) => at - (noticeAt.get(uid) ?? at));
    const marked = delays(markedAt);
    console.log(
      [
        `notice served → Pod marked DisruptionTarget (API): p50 ${seconds(quantile(marked, 0.5))} s, max ${seconds(quantile(marked, 1))} s (n = ${marked.length})`,
        `notice → Pod Failed: max ${seconds(quantile(delays(failedAt), 1))} s`,
        `first notice → replacements Running: ${replacementRunningAt.map((t) => seconds(t - firstNotice)).join(", ")} s`,
        `notice → old instance terminated: ${delays(terminatedAt).map(seconds).join(", ")} s (EC2 reclaims at ${seconds(WARNING_MS)} s)`,
        `rebalance recommended → Pod evicted (deleting): ${evictedAt === undefined ? "not seen (already gone)" : `${seconds(evictedAt - rebalancedAt)} s`}`,
      ].join("\n"),
    );
    // The Deployment was whole again while EC2's warning still ran: no replacement waited for the
    // old instance to go.
    expect(Math.max(...replacementRunningAt) - firstNotice).toBeLessThan(WARNING_MS);
    for (const pod of victims) {
      const uid = pod.metadata?.uid ?? "";
      const now = ended.find((p) => p.metadata?.uid === uid);
      // Marked while its containers still stopped, not only at the end.
      expect(markedWhileRunning.has(uid), pod.metadata?.name).toBe(true);
      expect(now?.status).toMatchObject({ phase: "Failed", reason: "SpotInterruption" });
      expect(condition(now, "DisruptionTarget")).toMatchObject({
        status: "True",
        reason: "SpotInterruption",
      });
      // The containers' final report, from the host: the drain's exit and message.
      expect(now?.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
        exitCode: 0,
        message: "drained\n",
      });
      // Marked before it failed: the mark came with the notice, not with the end.
      expect(markedAt.get(uid) ?? Number.POSITIVE_INFINITY).toBeLessThan(
        failedAt.get(uid) ?? Number.NEGATIVE_INFINITY,
      );
    }
    // The rebalanced replica was evicted (capacity.onRebalance: evict), told why, and replaced;
    // never taken for a Spot interruption.
    const events = (await eventsApi.listNamespacedEvent({ namespace: NS })).items;
    const about = (uid: string | undefined, reason: string) =>
      events.filter((e) => e.regarding?.uid === uid && e.reason === reason);
    for (const pod of victims) {
      expect(about(pod.metadata?.uid, "SpotInterruption"), pod.metadata?.name).toHaveLength(1);
    }
    const recommended = about(rebalanced.metadata?.uid, "RebalanceRecommendation");
    expect(recommended).toHaveLength(1);
    expect(recommended[0]?.note).toContain("evicting the Pod so that its ReplicaSet replaces it");
    expect(about(rebalanced.metadata?.uid, "RebalanceEviction")).toHaveLength(1);
    expect(about(rebalanced.metadata?.uid, "SpotInterruption")).toEqual([]);
    const metrics = await scrape(vnode.url);
    expect(
      metrics.get(`nebula_vnode_spot_signals_total{kind="interruption",namespace="${NS}"}`),
    ).toBe(INTERRUPTED);
    expect(metrics.get(`nebula_vnode_spot_signals_total{kind="rebalance",namespace="${NS}"}`)).toBe(
      1,
    );
    expect(metrics.get("nebula_vnode_spot_notice_to_mark_seconds_count")).toBe(INTERRUPTED);
    const sum = metrics.get("nebula_vnode_spot_notice_to_mark_seconds_sum") ?? Number.NaN;
    console.log(
      `vnode: host saw the notice → marked status published, mean ${(sum / INTERRUPTED).toFixed(2)} s (whole seconds on the host side)`,
    );

    // 3. The Deployment goes; every instance ends terminated, one per Pod.
    await apps.deleteNamespacedDeployment({ namespace: NS, name: APP });
    await until("every Pod gone", async () => ((await appPods()).length === 0 ? true : undefined));
    const all = await until(
      "every instance terminated",
      async () => {
        const list = await nodeInstances(ec2, NODE);
        return list.every((i) => i.State?.Name === "terminated") ? list : undefined;
      },
      120_000,
      500,
    );
    const uids = all.map((i) => i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value);
    expect(new Set(uids).size).toBe(uids.length);
    expect(uids.length).toBe(REPLICAS + INTERRUPTED + 1);
  });
});
