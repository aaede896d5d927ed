/**
 * Three virtual nodes of one cluster, end to end: the real bundles (one process each, as three
 * Deployments of the chart would run them) against kube-apiserver with its scheduler and controller
 * manager, moto and the instance-host simulator; one account, one Pod ledger namespace, one Pod
 * parameter path, as `vnode.nodes` installs them.
 *
 * 1. A Deployment spread by the scheduler over the three Nodes (its own `topologySpreadConstraints`
 *    on the hostname) runs, one instance per Pod.
 * 2. Node A is killed with SIGKILL while it tears one of its Pods down; another of its Pods is
 *    deleted while it is down; it stays down for twice the leak collector's grace. Nodes B and C,
 *    whose leak collectors run every few seconds with that short grace, touch nothing of A's: its
 *    instances keep running, its Pod parameters stay, its ledger entries stay.
 * 3. A is started again: it resumes both teardowns (the Pods go, their instances terminated) and
 *    its other Pods are Running and Ready on the instances they had, never restarted.
 * 4. Node C is scaled away as docs/operating.md says: drained (cordoned), its Pods deleted by the
 *    user, `Drained=True` once its instances are terminated, then stopped and its Node deleted.
 *    The Deployment's replacements run on A and B.
 * 5. Through all of it, no Pod of another node is touched (same UID, same instance, no restart),
 *    no leak collector collects anything, and in the end every instance is terminated, one per Pod.
 *
 * CI runs 9 replicas; `NEBULA_E2E_MANY_REPLICAS=30` (set by `npm run test:full`) runs 30.
 */
import type { Instance } from "@aws-sdk/client-ec2";
import { GetParametersByPathCommand } from "@aws-sdk/client-ssm";
import { AppsV1Api, CoreV1Api, EventsV1Api, type V1Pod } from "@kubernetes/client-node";
import type { InstanceHosts } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  deleteNode,
  type E2eWorld,
  motoSsm,
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

const REPLICAS = Number(process.env.NEBULA_E2E_MANY_REPLICAS ?? "9");
const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const apps = admin.makeApiClient(AppsV1Api);
const eventsApi = admin.makeApiClient(EventsV1Api);
const ec2 = moto.ec2();
const ssm = motoSsm(moto);
const CLUSTER = "vnode-many";
const NS = "vnode-many";
const [A, B, C] = ["many-a", "many-b", "many-c"] as const;
const NODES = [A, B, C];
const POOL = { "nebula.dev/pool": "many" };
const APP = { app: "many" };
/** The leak collector's grace on every node: short, so that node A stays down past it. */
const LEAK_GRACE_SECONDS = 15;

let world: E2eWorld;
let hosts: InstanceHosts;
const vnodes = new Map<string, VnodeProcess>();
const everyProcess: VnodeProcess[] = [];

async function start(node: string, drain = false): Promise<VnodeProcess> {
  const base = vnodeConfig({
    cluster: CLUSTER,
    region: moto.region,
    world,
    endpoint: hosts.ec2Endpoint,
    capacity: { cpu: "1000", memory: "4Ti", pods: String(REPLICAS * 2) },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  }) as { node: Record<string, unknown>; provider: Record<string, unknown> };
  const vnode = await startVnode({
    nodeName: node,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config: {
      node: { ...base.node, labels: POOL, drain, leaseRenewIntervalSeconds: 2 },
      provider: {
        ...base.provider,
        leakCollection: {
          graceSeconds: LEAK_GRACE_SECONDS,
          intervalSeconds: 3,
          parameterGraceSeconds: LEAK_GRACE_SECONDS,
        },
      },
    },
  });
  vnodes.set(node, vnode);
  everyProcess.push(vnode);
  return vnode;
}

/** The Deployment's Pods as the API server lists them. */
async function pods(): Promise<V1Pod[]> {
  return (await core.listNamespacedPod({ namespace: NS, labelSelector: "app=many" })).items;
}

const uidOf = (p: V1Pod) => p.metadata?.uid ?? "";
const podUidOf = (i: Instance) => i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value ?? "none";
const instanceOf = (p: V1Pod) => p.metadata?.annotations?.["nebula.dev/instance-id"];
const ready = (p: V1Pod) =>
  p.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";

/** What "untouched" compares: the same Pod on the same instance, running since the same moment. */
interface Seen {
  readonly name: string;
  readonly node: string;
  readonly instanceId: string | undefined;
  readonly startedAt: string | undefined;
}

function seen(p: V1Pod): Seen {
  const c = p.status?.containerStatuses?.[0];
  return {
    name: p.metadata?.name ?? "",
    node: p.spec?.nodeName ?? "",
    instanceId: instanceOf(p),
    startedAt: c?.state?.running?.startedAt?.toISOString(),
  };
}

/** Every Deployment Pod Running and Ready on an instance, none being deleted; keyed by UID. */
async function allRunning(what: string, count: number): Promise<Map<string, V1Pod>> {
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
      if (good.length === count && list.length === count) {
        return new Map(good.map((p) => [uidOf(p), p]));
      }
      throw new Error(
        `${good.length} of ${count} Running and Ready: ${list.map((p) => `${p.metadata?.name} ${p.spec?.nodeName ?? "-"} ${p.status?.phase}`).join(", ")}`,
      );
    },
    600_000,
    1_000,
  );
}

/** The Pods of `nodes` in `before` are all still there, untouched. */
async function expectUntouched(before: ReadonlyMap<string, V1Pod>, nodes: readonly string[]) {
  const now = new Map((await pods()).map((p) => [uidOf(p), p]));
  const instances = new Map<string, string | undefined>();
  for (const node of nodes) {
    for (const i of await nodeInstances(ec2, node))
      instances.set(i.InstanceId ?? "", i.State?.Name);
  }
  for (const [uid, pod] of before) {
    if (!nodes.includes(pod.spec?.nodeName ?? "")) continue;
    const after = now.get(uid);
    expect(after, `${pod.metadata?.name} still there`).toBeDefined();
    if (after === undefined) continue;
    expect(seen(after)).toEqual(seen(pod));
    expect(after.metadata?.deletionTimestamp).toBeUndefined();
    expect(after.status?.phase).toBe("Running");
    expect(after.status?.containerStatuses?.[0]?.restartCount).toBe(0);
    expect(instances.get(instanceOf(pod) ?? "")).toBe("running");
  }
}

/** The Pod parameters in Parameter Store, by Pod UID. */
async function parameterPods(): Promise<Set<string>> {
  const out = new Set<string>();
  let token: string | undefined;
  do {
    const page = await ssm.send(
      new GetParametersByPathCommand({
        Path: `/nebula/${CLUSTER}/pods`,
        Recursive: true,
        ...(token ? { NextToken: token } : {}),
      }),
    );
    for (const p of page.Parameters ?? []) out.add(p.Name?.split("/")[4] ?? "");
    token = page.NextToken;
  } while (token);
  return out;
}

/** The ledger's entries (ConfigMaps in the vnode's namespace), by Pod UID. */
async function ledgerPods(): Promise<Set<string>> {
  const maps = await core.listNamespacedConfigMap({
    namespace: "nebula-system",
    labelSelector: "teardown.nebula.dev/pod-ledger=true",
  });
  return new Set(maps.items.map((m) => m.metadata?.labels?.["teardown.nebula.dev/pod-uid"] ?? ""));
}

beforeAll(async () => {
  world = await startWorld({ admin, ec2, moto, cluster: CLUSTER, namespace: NS });
  hosts = world.hosts;
  for (const node of NODES) await start(node);
  await until("three Ready Nodes", async () => {
    const nodes = await Promise.all(NODES.map((name) => core.readNode({ name })));
    return nodes.every(
      (n) => n.status?.conditions?.find((c) => c.type === "Ready")?.status === "True",
    )
      ? true
      : undefined;
  });
}, 300_000);

afterAll(async () => {
  await apps.deleteNamespacedDeployment({ name: "many", namespace: NS }).catch(() => undefined);
  for (const vnode of everyProcess) if (vnode.child.exitCode === null) await vnode.kill();
  for (const node of NODES) await deleteNode(admin, node);
  await hosts?.close();
  ec2.destroy();
  ssm.destroy();
});

describe(`three virtual nodes, a Deployment of ${REPLICAS} spread over them`, () => {
  it("one node killed past the leak grace and one scaled away: no Pod of the others touched, every teardown resumed, nothing leaked", async () => {
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "many" },
        spec: {
          replicas: REPLICAS,
          selector: { matchLabels: APP },
          template: {
            metadata: { labels: APP },
            spec: {
              // Ignores SIGTERM: a teardown waits out the grace (stopping), so it is in
              // progress when node A is killed.
              terminationGracePeriodSeconds: 15,
              nodeSelector: POOL,
              tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
              topologySpreadConstraints: [
                {
                  maxSkew: 1,
                  topologyKey: "kubernetes.io/hostname",
                  whenUnsatisfiable: "DoNotSchedule",
                  // A cordoned (draining) Node is no domain.
                  nodeTaintsPolicy: "Honor",
                  labelSelector: { matchLabels: APP },
                },
              ],
              containers: [
                {
                  name: "app",
                  image: "busybox",
                  command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
                },
              ],
            },
          },
        },
      },
    });

    // 1. Spread, running, one instance each.
    const first = await allRunning(`${REPLICAS} Pods Running and Ready`, REPLICAS);
    const byNode = (m: ReadonlyMap<string, V1Pod>, node: string) =>
      [...m.values()].filter((p) => p.spec?.nodeName === node);
    const spread = Object.fromEntries(NODES.map((n) => [n, byNode(first, n).length]));
    console.log(JSON.stringify({ spread }));
    for (const node of NODES) expect(byNode(first, node).length).toBeGreaterThanOrEqual(2);
    // Each Pod's start-up, broken down at its first Ready: an Event in one line and the metrics.
    const startups = await until("a StartupTimes Event for every Pod", async () => {
      const events = (await eventsApi.listNamespacedEvent({ namespace: NS })).items.filter(
        (e) => e.reason === "StartupTimes",
      );
      const regarding = new Set(events.map((e) => e.regarding?.uid));
      return [...first.keys()].every((uid) => regarding.has(uid)) ? events : undefined;
    });
    for (const e of startups) {
      expect(e.note).toMatch(
        /^Ready [\d.]+ s after creation: scheduled [\d.]+ s, admitted [\d.]+ s, RunInstances [\d.]+ s, host boot [\d.]+ s, (image pull [\d.]+ s, )?container start [\d.]+ s, ready [\d.]+ s$/,
      );
    }
    // Every one a cold start: these nodes keep no warm pool.
    const startupCounts = await Promise.all(
      NODES.map(
        async (n) =>
          (await scrape(vnodes.get(n)?.url ?? "")).get(
            'nebula_vnode_startup_seconds_count{start="cold"}',
          ) ?? 0,
      ),
    );
    expect(startupCounts.reduce((a, b) => a + b, 0)).toBe(REPLICAS);
    console.log(JSON.stringify({ startup: startups.slice(0, 3).map((e) => e.note) }));
    const parametersBefore = await parameterPods();
    for (const uid of first.keys()) expect(parametersBefore).toContain(uid);

    // 2. A killed mid-teardown; another of its Pods deleted while it is down.
    const [a1, a2] = byNode(first, A);
    if (a1 === undefined || a2 === undefined) throw new Error("node A has fewer than two Pods");
    await core.deleteNamespacedPod({ name: a1.metadata?.name ?? "", namespace: NS });
    await until(
      "node A begins a1's teardown (StopInstances sent)",
      async () => {
        const mine = (await nodeInstances(ec2, A)).find((i) => i.InstanceId === instanceOf(a1));
        return mine?.State?.Name === "stopping" || mine?.State?.Name === "stopped"
          ? true
          : undefined;
      },
      60_000,
      250,
    );
    await vnodes.get(A)?.kill();
    const killedAt = Date.now();
    await core.deleteNamespacedPod({ name: a2.metadata?.name ?? "", namespace: NS });
    const ledgerWhileDown = await ledgerPods();
    for (const p of [a1, a2]) expect(ledgerWhileDown).toContain(uidOf(p));
    // Down for twice the grace: B and C run a leak collection every 3 s all the while.
    await new Promise((r) => setTimeout(r, 2 * LEAK_GRACE_SECONDS * 1000 + 5_000));
    const aInstances = await nodeInstances(ec2, A);
    const aLive = byNode(first, A).filter((p) => p !== a1 && p !== a2);
    for (const p of [a2, ...aLive]) {
      expect(aInstances.find((i) => i.InstanceId === instanceOf(p))?.State?.Name).toBe("running");
    }
    const parametersWhileDown = await parameterPods();
    for (const p of [a2, ...aLive]) expect(parametersWhileDown).toContain(uidOf(p));
    const ledgerAfterGrace = await ledgerPods();
    for (const p of [a1, a2, ...aLive]) expect(ledgerAfterGrace).toContain(uidOf(p));
    await expectUntouched(first, [B, C]);

    // 3. A again: both teardowns resumed, its other Pods Running and Ready as they were.
    await start(A);
    const downSeconds = (Date.now() - killedAt) / 1000;
    for (const p of [a1, a2]) {
      await until(
        `${p.metadata?.name} gone, its instance terminated`,
        async () => {
          const still = (await pods()).some((q) => uidOf(q) === uidOf(p));
          const instance = (await nodeInstances(ec2, A)).find(
            (i) => i.InstanceId === instanceOf(p),
          );
          return !still && instance?.State?.Name === "terminated" ? true : undefined;
        },
        300_000,
        1_000,
      );
    }
    const second = await allRunning("the replacements too", REPLICAS);
    const kept = new Map([...first].filter(([uid]) => uid !== uidOf(a1) && uid !== uidOf(a2)));
    await expectUntouched(kept, [A, B, C]);

    // 4. C scaled away: drained, its Pods deleted by the user, Drained, stopped, Node deleted.
    await stopCleanly(vnodes.get(C));
    await start(C, true);
    await until("node C cordoned", async () =>
      (await core.readNode({ name: C })).spec?.unschedulable === true ? true : undefined,
    );
    const cPods = byNode(second, C);
    for (const p of cPods) {
      await core.deleteNamespacedPod({ name: p.metadata?.name ?? "", namespace: NS });
    }
    await until(
      "node C Drained",
      async () => {
        const node = await core.readNode({ name: C });
        const drained = node.status?.conditions?.find((c) => c.type === "Drained");
        if (drained?.status === "True") return true;
        throw new Error(`Drained: ${drained?.status} ${drained?.message}`);
      },
      300_000,
      1_000,
    );
    await stopCleanly(vnodes.get(C));
    await deleteNode(admin, C);
    const third = await allRunning("every replica on A and B", REPLICAS);
    expect(byNode(third, C)).toEqual([]);
    const cLeft = (await nodeInstances(ec2, C)).filter((i) => i.State?.Name !== "terminated");
    expect(cLeft.map((i) => `${i.InstanceId} ${i.State?.Name} ${podUidOf(i)}`)).toEqual([]);
    const survivors = new Map([...second].filter(([, p]) => p.spec?.nodeName !== C));
    await expectUntouched(survivors, [A, B]);

    // 5. Nobody collected anything; the Deployment goes; one instance per Pod, all terminated.
    for (const vnode of everyProcess) {
      const collected = vnode.lines.filter((l) =>
        /leak collection: (marked|deleted)|leak collector terminated/.test(String(l.msg)),
      );
      expect(collected).toEqual([]);
    }
    await apps.deleteNamespacedDeployment({
      name: "many",
      namespace: NS,
      propagationPolicy: "Foreground",
    });
    const instances = await until(
      "no Pods and every instance terminated",
      async () => {
        const left = await pods();
        if (left.length > 0) throw new Error(`pods left: ${left.map((p) => p.metadata?.name)}`);
        const all = (await Promise.all(NODES.map((n) => nodeInstances(ec2, n)))).flat();
        const alive = all.filter((i) => i.State?.Name !== "terminated");
        if (alive.length > 0) {
          throw new Error(
            `instances left: ${alive.map((i) => `${i.InstanceId} ${i.State?.Name}`)}`,
          );
        }
        return all;
      },
      600_000,
      2_000,
    );
    const perPod = new Map<string, string[]>();
    for (const i of instances) {
      const uid = podUidOf(i);
      perPod.set(uid, [
        ...(perPod.get(uid) ?? []),
        `${i.InstanceId} (${i.Tags?.find((t) => t.Key === "nebula:node")?.Value})`,
      ]);
    }
    expect([...perPod.entries()].filter(([, ids]) => ids.length !== 1)).toEqual([]);
    // The Deployment's Pods: the first REPLICAS, a1's and a2's replacements, C's.
    expect(perPod.size).toBe(REPLICAS + 2 + cPods.length);
    console.log(
      JSON.stringify({
        manyVnodes: { replicas: REPLICAS, spread, downSeconds, instances: instances.length },
      }),
    );
    for (const node of [A, B]) await stopCleanly(vnodes.get(node));
  }, 1_800_000);
});
