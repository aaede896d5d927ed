/**
 * The warm pool end to end: the real `nebula-vnode` bundle with `provider.warmPool`, against
 * kube-apiserver with its scheduler and controller manager, moto, and the instance-host simulator
 * booting the real pool user-data (images pulled, hosts powered off by themselves) and, once a Pod
 * takes a host, the Pod's own user-data served live by IMDS after `StartInstances`.
 *
 * 1. The pool fills: `POOL` hosts prepared and stopped by themselves (`Client.InstanceInitiatedShutdown`).
 * 2. A Deployment of `2 × POOL` replicas: exactly `POOL` Pods start on the pool's hosts (the same
 *    instance IDs, launched with the pool's `ClientToken` and `nebula:pool` tag, now tagged with
 *    their Pod), the others launch cold; all Running and Ready; the pool refills to `POOL` ready;
 *    the StartupTimes Events and `/metrics` tell warm from cold; the pool's gauges and takes.
 * 3. The vnode is killed (SIGKILL) between a take's assignment and its `StartInstances` (held at
 *    the EC2 proxy in front of the simulator, and dropped with its caller): the next process
 *    starts that very host for that Pod.
 * 4. The vnode is killed while the pool refills (a pool host launched, held before its boot): the
 *    next process adopts it, and the pool converges to `POOL` ready.
 * 5. The Deployment goes, the entry's size is set to 0: every instance terminated.
 *
 * Throughout: no host ever carries two Pod UIDs, no two Pods name one host, and every live
 * instance is a Pod's or a free pool host. CI runs 10 replicas over a pool of 5 (about 2 minutes
 * here); `NEBULA_E2E_POOL_REPLICAS=<n>` runs n over a pool of n/2.
 */
import { EC2Client, type Instance } from "@aws-sdk/client-ec2";
import {
  AppsV1Api,
  CoreV1Api,
  EventsV1Api,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
} from "@kubernetes/client-node";
import {
  type Ec2ProxyHandle,
  type InstanceHosts,
  MOTO_CREDENTIALS,
  startEc2Proxy,
} from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  deleteNode,
  type E2eWorld,
  nodeInstances,
  scrape,
  startVnode,
  startWorld,
  stopCleanly,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
  vnodeConfig,
} from "./testing/e2e.js";

const REPLICAS = Number(process.env.NEBULA_E2E_POOL_REPLICAS ?? "10");
/** The pool's size: half the replicas, so half start warm and half cold. */
const POOL = Math.floor(REPLICAS / 2);
const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const apps = admin.makeApiClient(AppsV1Api);
const eventsApi = admin.makeApiClient(EventsV1Api);
const ec2 = moto.ec2();
/**
 * EC2 as the vnode sees it: the simulator's endpoint shows what moto does not (`pending` while a
 * host boots, `Client.InstanceInitiatedShutdown` for a host that powered itself off).
 */
let shown: EC2Client;
const NODE = "vnode-pool";
const NS = "vnode-pool";
const APP = { app: "pool" };
const ENTRY = "small";
const INSTANCE_TYPE = "t3.micro";
const PREPARED = "Client.InstanceInitiatedShutdown";

let world: E2eWorld;
let hosts: InstanceHosts;
let proxy: Ec2ProxyHandle;
let vnode: VnodeProcess | undefined;
const everyProcess: VnodeProcess[] = [];

/**
 * New instances whose boot the test holds (`beforeBoot`): while `bootGate.armed`, any instance
 * not in `bootGate.known` waits for `bootGate.open` before it boots (EC2 shows it `pending`).
 */
const bootGate: {
  armed: boolean;
  known: Set<string>;
  held: string[];
  open: Promise<void>;
  release: () => void;
} = { armed: false, known: new Set(), held: [], open: Promise.resolve(), release: () => {} };

function configWith(size: number): object {
  const base = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: proxy.endpoint,
    capacity: { cpu: "1000", memory: "4Ti", pods: String(REPLICAS * 4) },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  }) as { node: Record<string, unknown>; provider: Record<string, unknown> };
  return {
    node: base.node,
    provider: {
      ...base.provider,
      instanceTypes: { default: INSTANCE_TYPE },
      warmPool: [{ name: ENTRY, instanceType: INSTANCE_TYPE, size, images: ["busybox"] }],
    },
  };
}

async function start(size = POOL): Promise<VnodeProcess> {
  const started = await startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config: configWith(size),
  });
  vnode = started;
  everyProcess.push(started);
  return started;
}

const tag = (i: Instance, key: string) => i.Tags?.find((t) => t.Key === key)?.Value;
const live = (i: Instance) => !["shutting-down", "terminated"].includes(i.State?.Name ?? "");
const isPoolHost = (i: Instance) => tag(i, "nebula:pool") !== undefined;
const uidOf = (p: V1Pod) => p.metadata?.uid ?? "";
const instanceOf = (p: V1Pod) => p.metadata?.annotations?.["nebula.dev/instance-id"];
const ready = (p: V1Pod) =>
  p.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";

/** The pool's free hosts (no Pod) that are live, and those of them prepared and stopped. */
async function freePoolHosts(): Promise<{ live: Instance[]; ready: Instance[] }> {
  const free = (await nodeInstances(shown, NODE)).filter(
    (i) => isPoolHost(i) && live(i) && tag(i, "nebula:pod-uid") === undefined,
  );
  return {
    live: free,
    ready: free.filter((i) => i.State?.Name === "stopped" && i.StateReason?.Code === PREPARED),
  };
}

/** Resolves once the pool is exactly `POOL` free hosts, every one prepared and stopped. */
function poolReady(what: string): Promise<Instance[]> {
  return until(
    what,
    async () => {
      const free = await freePoolHosts();
      if (free.live.length === POOL && free.ready.length === POOL) return free.ready;
      throw new Error(
        `free pool hosts: ${free.live.map((i) => `${i.InstanceId} ${i.State?.Name} ${i.StateReason?.Code ?? ""}`).join(", ")}`,
      );
    },
    300_000,
    1_000,
  );
}

/** The Deployment's Pods as the API server lists them. */
async function pods(): Promise<V1Pod[]> {
  return (await core.listNamespacedPod({ namespace: NS, labelSelector: "app=pool" })).items;
}

/** Every replica Running and Ready on an instance, none restarted or being deleted. */
async function allRunning(what: string, count: number): Promise<V1Pod[]> {
  return until(
    what,
    async () => {
      const list = (await pods()).filter((p) => p.metadata?.deletionTimestamp === undefined);
      const good = list.filter(
        (p) =>
          p.status?.phase === "Running" &&
          ready(p) &&
          instanceOf(p) !== undefined &&
          (p.status?.containerStatuses?.[0]?.restartCount ?? 0) === 0,
      );
      if (good.length === count && list.length === count) return good;
      throw new Error(
        `${good.length} of ${count} Running and Ready: ${list.map((p) => `${p.metadata?.name} ${p.status?.phase} ${instanceOf(p) ?? "-"}`).join(", ")}`,
      );
    },
    300_000,
    1_000,
  );
}

/** Each instance's Pod UID as first seen, and each Pod's instance: neither ever changes. */
const ownerOf = new Map<string, string>();
const hostOf = new Map<string, string>();

/**
 * What must hold at every moment: no host changes Pod (its `nebula:pod-uid` is the one first
 * seen), no two Pods name one host nor one Pod two, one live instance per Pod UID, and every live
 * instance is a Pod's (its Pod in the API) or a free host of the pool (while `poolConfigured`).
 */
async function expectHostsSound(when: string, poolConfigured = true): Promise<void> {
  const instances = await nodeInstances(shown, NODE);
  const podUids = new Set((await pods()).map(uidOf));
  for (const pod of await pods()) {
    const id = instanceOf(pod);
    if (id === undefined) continue;
    const before = hostOf.get(uidOf(pod));
    expect(before ?? id, `${pod.metadata?.name}'s instance ${when}`).toBe(id);
    hostOf.set(uidOf(pod), id);
  }
  const podsOfHost = new Map<string, string[]>();
  for (const [uid, id] of hostOf) podsOfHost.set(id, [...(podsOfHost.get(id) ?? []), uid]);
  expect(
    [...podsOfHost].filter(([, uids]) => uids.length > 1),
    `hosts named by two Pods ${when}`,
  ).toEqual([]);
  const liveByUid = new Map<string, string[]>();
  for (const i of instances) {
    const id = i.InstanceId ?? "";
    const uid = tag(i, "nebula:pod-uid");
    if (uid !== undefined) {
      const first = ownerOf.get(id) ?? uid;
      expect(uid, `${id}'s Pod UID ${when}`).toBe(first);
      ownerOf.set(id, uid);
    }
    if (!live(i)) continue;
    if (uid !== undefined) liveByUid.set(uid, [...(liveByUid.get(uid) ?? []), id]);
    const belongs =
      uid !== undefined ? podUids.has(uid) : poolConfigured && tag(i, "nebula:pool") === ENTRY;
    expect(
      belongs,
      `${id} (${i.State?.Name}, pod-uid ${uid ?? "-"}, pool ${tag(i, "nebula:pool") ?? "-"}) belongs to a Pod or the pool ${when}`,
    ).toBe(true);
  }
  expect(
    [...liveByUid].filter(([, ids]) => ids.length > 1),
    `Pods with two live instances ${when}`,
  ).toEqual([]);
}

/**
 * Watches every instance's `nebula:pod-uid` once a second until stopped: the hosts whose Pod UID
 * ever changed (a host carrying a second Pod), as `id: first → later` lines.
 */
function watchHosts(): { stop(): Promise<string[]> } {
  const changes: string[] = [];
  const seen = new Map<string, string>();
  let running = true;
  const loop = (async () => {
    while (running) {
      for (const i of await nodeInstances(shown, NODE).catch(() => [])) {
        const uid = tag(i, "nebula:pod-uid");
        if (uid === undefined) continue;
        const first = seen.get(i.InstanceId ?? "");
        if (first === undefined) seen.set(i.InstanceId ?? "", uid);
        else if (first !== uid) changes.push(`${i.InstanceId}: ${first} → ${uid}`);
      }
      await new Promise((r) => setTimeout(r, 1_000));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return changes;
    },
  };
}

let watcher: ReturnType<typeof watchHosts> | undefined;

/** The vnode's log lines about the pool's events of one kind. */
function poolLog(vnodeProcess: VnodeProcess, kind: string): Array<Record<string, unknown>> {
  return vnodeProcess.lines.filter((l) => l.msg === `warm pool ${kind}`);
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return (
    sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN
  );
}

async function scale(replicas: number): Promise<void> {
  await apps.patchNamespacedDeploymentScale(
    { name: "pool", namespace: NS, body: { spec: { replicas } } },
    setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
  );
}

beforeAll(async () => {
  world = await startWorld({
    admin,
    ec2,
    moto,
    cluster: NODE,
    namespace: NS,
    beforeBoot: async (instanceId) => {
      if (!bootGate.armed || bootGate.known.has(instanceId)) return;
      bootGate.held.push(instanceId);
      await bootGate.open;
    },
  });
  hosts = world.hosts;
  shown = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: MOTO_CREDENTIALS,
  });
  // The vnode's EC2 goes through a proxy in front of the simulator: the test holds calls there.
  proxy = await startEc2Proxy({ upstream: { endpoint: hosts.ec2Endpoint, region: moto.region } });
  await start();
  await until("the Node Ready", async () => {
    const node = await core.readNode({ name: NODE });
    return node.status?.conditions?.find((c) => c.type === "Ready")?.status === "True"
      ? node
      : undefined;
  });
}, 300_000);

afterAll(async () => {
  await watcher?.stop();
  bootGate.release();
  await apps.deleteNamespacedDeployment({ name: "pool", namespace: NS }).catch(() => undefined);
  for (const p of everyProcess) if (p.child.exitCode === null) await p.kill();
  await deleteNode(admin, NODE);
  await proxy?.close();
  await hosts?.close();
  shown?.destroy();
  ec2.destroy();
});

describe(`a warm pool of ${POOL} and a Deployment of ${REPLICAS}`, () => {
  it("half the Pods start on the pool's hosts, the pool refills, a vnode killed mid-take or mid-refill leaves nothing behind, size 0 terminates every host", async () => {
    const began = Date.now();
    watcher = watchHosts();
    const figures: Record<string, unknown> = { replicas: REPLICAS, pool: POOL };
    // 1. The pool fills: its hosts boot, pull busybox and power themselves off.
    const filled = await poolReady(`${POOL} pool hosts ready`);
    figures.poolFilledSeconds = (Date.now() - began) / 1000;
    const poolIds = new Set(filled.map((i) => i.InstanceId ?? ""));
    for (const host of filled) {
      expect(tag(host, "nebula:pool")).toBe(ENTRY);
      expect(tag(host, "nebula:cluster")).toBe(NODE);
      expect(tag(host, "nebula:node")).toBe(NODE);
      expect(host.ClientToken).toMatch(/^pool-/);
      expect(host.InstanceType).toBe(INSTANCE_TYPE);
    }
    await expectHostsSound("once the pool filled");
    const filledMetrics = await until("the pool's gauges", async () => {
      const m = await scrape(vnode?.url ?? "");
      return m.get(`nebula_vnode_warm_pool_hosts{entry="${ENTRY}",state="ready"}`) === POOL
        ? m
        : undefined;
    });
    expect(filledMetrics.get(`nebula_vnode_warm_pool_target{entry="${ENTRY}"}`)).toBe(POOL);
    expect(
      filledMetrics.get(`nebula_vnode_warm_pool_hosts{entry="${ENTRY}",state="preparing"}`),
    ).toBe(0);
    // A stopped host bills its volume only: 8 GiB at 0.08 USD per GiB-month, each.
    expect(
      filledMetrics.get(`nebula_vnode_warm_pool_hourly_cost_usd{entry="${ENTRY}"}`),
    ).toBeCloseTo((POOL * 8 * 0.08) / 730, 10);

    // 2. The Deployment: POOL Pods warm, the rest cold.
    const deploymentAt = Date.now();
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "pool" },
        spec: {
          replicas: REPLICAS,
          selector: { matchLabels: APP },
          template: {
            metadata: { labels: APP },
            spec: {
              terminationGracePeriodSeconds: 5,
              // This test's node only: the end-to-end files share the control plane.
              nodeSelector: { "kubernetes.io/hostname": NODE },
              tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
              containers: [
                {
                  name: "app",
                  image: "busybox",
                  // What a warm pool is for: the image its hosts pulled is used as it is.
                  imagePullPolicy: "IfNotPresent",
                  command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
                  readinessProbe: {
                    exec: { command: ["true"] },
                    periodSeconds: 2,
                    timeoutSeconds: 10,
                  },
                },
              ],
            },
          },
        },
      },
    });
    const first = await allRunning(`${REPLICAS} Pods Running and Ready`, REPLICAS);
    figures.deploymentReadySeconds = (Date.now() - deploymentAt) / 1000;
    await expectHostsSound("once the Deployment ran");
    const warm = first.filter((p) => poolIds.has(instanceOf(p) ?? ""));
    const cold = first.filter((p) => !poolIds.has(instanceOf(p) ?? ""));
    expect(warm).toHaveLength(POOL);
    expect(cold).toHaveLength(REPLICAS - POOL);
    const described = new Map(
      (await nodeInstances(shown, NODE)).map((i) => [i.InstanceId ?? "", i] as const),
    );
    for (const pod of warm) {
      const host = described.get(instanceOf(pod) ?? "");
      // The pool's host, launched as the pool's, now the Pod's.
      expect(host?.ClientToken, pod.metadata?.name).toMatch(/^pool-/);
      expect(tag(host as Instance, "nebula:pool")).toBe(ENTRY);
      expect(tag(host as Instance, "nebula:pod-uid")).toBe(uidOf(pod));
      expect(tag(host as Instance, "nebula:pod")).toBe(`${NS}/${pod.metadata?.name}`);
      expect(host?.State?.Name).toBe("running");
    }
    for (const pod of cold) {
      const host = described.get(instanceOf(pod) ?? "");
      expect(host?.ClientToken, pod.metadata?.name).toBe(uidOf(pod));
      expect(tag(host as Instance, "nebula:pool")).toBeUndefined();
    }
    // The pool refills with new hosts; none of the taken ones comes back.
    const refilled = await poolReady(`the pool refilled to ${POOL} ready`);
    for (const host of refilled) expect(poolIds.has(host.InstanceId ?? "")).toBe(false);
    await expectHostsSound("once the pool refilled");
    // StartupTimes: the warm ones were started, the cold ones launched.
    const startups = await until("a StartupTimes Event for every Pod", async () => {
      const events = (await eventsApi.listNamespacedEvent({ namespace: NS })).items.filter(
        (e) => e.reason === "StartupTimes",
      );
      const byUid = new Map(events.map((e) => [e.regarding?.uid ?? "", e.note ?? ""]));
      return first.every((p) => byUid.has(uidOf(p))) ? byUid : undefined;
    });
    const total = (note: string) => Number(/^Ready ([\d.]+) s after creation/.exec(note)?.[1]);
    for (const pod of warm) {
      expect(startups.get(uidOf(pod))).toMatch(
        /^Ready [\d.]+ s after creation: scheduled [\d.]+ s, admitted [\d.]+ s, StartInstances \(warm pool\) [\d.]+ s, host boot [\d.]+ s, /,
      );
    }
    for (const pod of cold) {
      expect(startups.get(uidOf(pod))).toMatch(
        /^Ready [\d.]+ s after creation: scheduled [\d.]+ s, admitted [\d.]+ s, RunInstances [\d.]+ s, host boot [\d.]+ s, /,
      );
    }
    // created → Running: the container's start as the host reported it (whole seconds).
    const running = (p: V1Pod) => {
      const started = p.status?.containerStatuses?.[0]?.state?.running?.startedAt;
      const created = p.metadata?.creationTimestamp;
      return started && created
        ? (new Date(started).getTime() - new Date(created).getTime()) / 1000
        : Number.NaN;
    };
    const stats = (values: number[]) => ({
      p50: percentile(values, 50),
      p99: percentile(values, 99),
    });
    figures.createdToRunningSeconds = {
      warm: stats(warm.map(running)),
      cold: stats(cold.map(running)),
    };
    figures.createdToReadySeconds = {
      warm: stats(warm.map((p) => total(startups.get(uidOf(p)) ?? ""))),
      cold: stats(cold.map((p) => total(startups.get(uidOf(p)) ?? ""))),
    };
    figures.warmStartups = warm.slice(0, 2).map((p) => startups.get(uidOf(p)));
    figures.coldStartups = cold.slice(0, 2).map((p) => startups.get(uidOf(p)));
    // /metrics: the pool's gauges and takes, and start-ups by warm or cold.
    const metrics = await until("the pool's metrics after the refill", async () => {
      const m = await scrape(vnode?.url ?? "");
      return m.get(`nebula_vnode_warm_pool_hosts{entry="${ENTRY}",state="ready"}`) === POOL
        ? m
        : undefined;
    });
    expect(metrics.get(`nebula_vnode_warm_pool_takes_total{entry="${ENTRY}",result="hit"}`)).toBe(
      POOL,
    );
    expect(metrics.get(`nebula_vnode_warm_pool_takes_total{entry="${ENTRY}",result="miss"}`)).toBe(
      REPLICAS - POOL,
    );
    expect(metrics.get(`nebula_vnode_warm_pool_launched_total{entry="${ENTRY}"}`)).toBe(2 * POOL);
    // Every host this process launched was timed to ready: the first fill and the refill.
    const refills = metrics.get(`nebula_vnode_warm_pool_refill_seconds_count{entry="${ENTRY}"}`);
    expect(refills).toBe(2 * POOL);
    figures.refillSecondsMean =
      (metrics.get(`nebula_vnode_warm_pool_refill_seconds_sum{entry="${ENTRY}"}`) ?? 0) /
      (refills ?? 1);
    figures.refillSeconds = stats(
      poolLog(vnode as VnodeProcess, "ready").map((l) => Number(l.seconds)),
    );
    expect(metrics.get('nebula_vnode_startup_seconds_count{start="warm"}')).toBe(POOL);
    expect(metrics.get('nebula_vnode_startup_seconds_count{start="cold"}')).toBe(REPLICAS - POOL);
    expect(
      metrics.get('nebula_vnode_startup_phase_seconds_count{phase="launch",start="warm"}'),
    ).toBe(POOL);
    expect(metrics.get(`nebula_vnode_warm_pool_assigning`)).toBe(0);
    // The log says each take.
    expect(
      poolLog(vnode as VnodeProcess, "hit")
        .map((l) => l.instanceId)
        .sort(),
    ).toEqual([...poolIds].sort());

    // 3. SIGKILL between a take's assignment and its StartInstances (held at the proxy).
    const held = proxy.hold("StartInstances");
    const killed = vnode as VnodeProcess;
    await scale(REPLICAS + 1);
    await held.whenHeld();
    const hit = await until("the take logged", () => poolLog(killed, "hit")[POOL]);
    const takenId = String(hit?.instanceId);
    const takerUid = String(hit?.podUid);
    expect(refilled.map((i) => i.InstanceId)).toContain(takenId);
    await killed.kill();
    // Its StartInstances died with it: dropped at the proxy, never sent.
    await until("the held StartInstances dropped with its caller", () =>
      (proxy.counts().dropped.StartInstances ?? 0) >= 1 && held.waiting() === 0 ? true : undefined,
    );
    held.release();
    const untouched = (await nodeInstances(shown, NODE)).find((i) => i.InstanceId === takenId);
    expect(untouched?.State?.Name).toBe("stopped");
    await expectHostsSound("with the vnode killed mid-take");
    await start();
    const second = await allRunning("the taken host's Pod Running and Ready", REPLICAS + 1);
    const taker = second.find((p) => uidOf(p) === takerUid);
    expect(taker, "the Pod that took the host is still the same Pod").toBeDefined();
    expect(instanceOf(taker as V1Pod)).toBe(takenId);
    const takenHost = (await nodeInstances(shown, NODE)).find((i) => i.InstanceId === takenId);
    expect(takenHost?.State?.Name).toBe("running");
    expect(tag(takenHost as Instance, "nebula:pod-uid")).toBe(takerUid);
    // Every other Pod untouched: the same instance, never restarted.
    for (const pod of first) {
      const now = second.find((p) => uidOf(p) === uidOf(pod));
      expect(instanceOf(now as V1Pod), pod.metadata?.name).toBe(instanceOf(pod));
    }
    await expectHostsSound("after the restart mid-take");
    await poolReady("the pool refilled after the take");

    // 4. SIGKILL while the pool refills: a new pool host launched, held before its boot.
    bootGate.known = new Set((await nodeInstances(shown, NODE)).map((i) => i.InstanceId ?? ""));
    bootGate.held = [];
    bootGate.open = new Promise<void>((resolve) => {
      bootGate.release = resolve;
    });
    bootGate.armed = true;
    const refilling = vnode as VnodeProcess;
    await scale(REPLICAS + 2);
    const launchedId = await until(
      "a refill host launched, held before its boot",
      () => bootGate.held[0],
    );
    const launched = (await nodeInstances(shown, NODE)).find((i) => i.InstanceId === launchedId);
    expect(tag(launched as Instance, "nebula:pool")).toBe(ENTRY);
    expect(tag(launched as Instance, "nebula:pod-uid")).toBeUndefined();
    expect(launched?.State?.Name).not.toBe("stopped");
    await refilling.kill();
    await expectHostsSound("with the vnode killed mid-refill");
    await start();
    bootGate.armed = false;
    bootGate.release();
    const converged = await poolReady("the pool converged after the restart mid-refill");
    // The held host was adopted (prepared and ready), not orphaned nor replaced.
    expect(converged.map((i) => i.InstanceId)).toContain(launchedId);
    const third = await allRunning("every replica after the restart mid-refill", REPLICAS + 2);
    for (const pod of second) {
      const now = third.find((p) => uidOf(p) === uidOf(pod));
      expect(instanceOf(now as V1Pod), pod.metadata?.name).toBe(instanceOf(pod));
    }
    await expectHostsSound("after the restart mid-refill");
    const brokenOrReplaced = everyProcess
      .flatMap((p) => poolLog(p, "terminated"))
      .map((l) => `${l.instanceId} ${l.reason}`);
    expect(brokenOrReplaced).toEqual([]);

    // 5. The Deployment goes; size 0: every host terminated.
    await apps.deleteNamespacedDeployment({
      name: "pool",
      namespace: NS,
      propagationPolicy: "Foreground",
    });
    await until(
      "no Pods and every Pod's instance terminated",
      async () => {
        const left = await pods();
        if (left.length > 0) throw new Error(`pods left: ${left.map((p) => p.metadata?.name)}`);
        const podHosts = (await nodeInstances(shown, NODE)).filter(
          (i) => live(i) && tag(i, "nebula:pod-uid") !== undefined,
        );
        if (podHosts.length > 0) {
          throw new Error(
            `instances left: ${podHosts.map((i) => `${i.InstanceId} ${i.State?.Name}`)}`,
          );
        }
        return true;
      },
      300_000,
      1_000,
    );
    await expectHostsSound("once the Deployment went");
    await stopCleanly(vnode);
    const emptied = await start(0);
    const all = await until(
      "every instance terminated",
      async () => {
        const instances = await nodeInstances(shown, NODE);
        const alive = instances.filter((i) => i.State?.Name !== "terminated");
        if (alive.length > 0) {
          throw new Error(
            `instances left: ${alive.map((i) => `${i.InstanceId} ${i.State?.Name}`)}`,
          );
        }
        return instances;
      },
      300_000,
      1_000,
    );
    await expectHostsSound("at the end", false);
    const shrunk = await until("the shrink counted", async () => {
      const m = await scrape(emptied.url);
      return m.get(`nebula_vnode_warm_pool_terminated_total{entry="${ENTRY}",reason="shrunk"}`) ===
        POOL
        ? m
        : undefined;
    });
    expect(shrunk.get(`nebula_vnode_warm_pool_target{entry="${ENTRY}"}`)).toBe(0);
    // Every Pod had one instance; every pool host either served one Pod or was shrunk away.
    const pooled = all.filter(isPoolHost);
    const served = pooled.filter((i) => tag(i, "nebula:pod-uid") !== undefined);
    expect(pooled.length - served.length).toBe(POOL);
    expect(served).toHaveLength(POOL + 2);
    expect(new Set(all.map((i) => tag(i, "nebula:pod-uid")).filter(Boolean)).size).toBe(
      REPLICAS + 2,
    );
    await stopCleanly(emptied);
    expect(await watcher.stop(), "hosts that changed Pod, watched every second").toEqual([]);
    figures.proxy = { held: proxy.counts().held, dropped: proxy.counts().dropped };
    figures.instances = all.length;
    figures.seconds = (Date.now() - began) / 1000;
    console.log(JSON.stringify({ warmPool: figures }));
  }, 1_200_000);
});
