/**
 * Several virtual nodes and Kubernetes' own scheduler (kube-scheduler with its default profile,
 * against kube-apiserver): three Nodes registered as the vnode registers them (`NodeController`,
 * one pool label), no sharding of Nebula's own. What docs/operating.md ("Several virtual nodes")
 * and the chart's README say about spreading:
 *
 * - the replicas of a Deployment are spread over the Nodes (the scheduler's default topology
 *   spread by `kubernetes.io/hostname` for Pods of a ReplicaSet);
 * - bare Pods are not spread by default (every virtual Node scores the same), and are with a
 *   `topologySpreadConstraints` of their own;
 * - a cordoned Node (a drain) gets none.
 *
 * No vnode serves these Nodes' Pods (they stay Pending): only where the scheduler binds them is
 * read. They are removed with grace 0.
 */
import { AppsV1Api, CoreV1Api, type V1Pod, type V1PodSpec } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { NodeController, parseVirtualNodeConfig, staticHealth } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deleteNode, until } from "./testing/e2e.js";

const { controlPlane } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const apps = admin.makeApiClient(AppsV1Api);
const NS = "vnode-spread";
const POOL = { "nebula.dev/pool": "spread" };
const NODES = ["spread-a", "spread-b", "spread-c", "spread-drained"];
const stop = new AbortController();
let runs: Promise<void>[] = [];

const podSpec = (extra: Partial<V1PodSpec> = {}): V1PodSpec => ({
  nodeSelector: POOL,
  tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
  containers: [{ name: "app", image: "busybox" }],
  ...extra,
});

/** Where the scheduler bound the Pods `labelSelector` selects, once all `count` are bound. */
async function placement(labelSelector: string, count: number): Promise<Record<string, number>> {
  return until(`${count} Pods bound (${labelSelector})`, async () => {
    const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector })).items;
    const bound = pods.filter((p: V1Pod) => p.spec?.nodeName);
    if (bound.length < count) return undefined;
    const counts: Record<string, number> = {};
    for (const p of bound) {
      const node = p.spec?.nodeName ?? "";
      counts[node] = (counts[node] ?? 0) + 1;
    }
    return counts;
  });
}

beforeAll(async () => {
  await core.createNamespace({ body: { metadata: { name: NS } } });
  runs = NODES.map((nodeName) =>
    new NodeController({
      kubeConfig: admin,
      config: parseVirtualNodeConfig({
        nodeName,
        labels: POOL,
        leaseRenewIntervalSeconds: 2,
        drain: nodeName === "spread-drained",
      }),
      health: staticHealth({ ready: true, reason: "EC2Reachable", message: "EC2 answers" }),
    }).run(stop.signal),
  );
  await until("four Ready Nodes, one cordoned", async () => {
    const nodes = await Promise.all(NODES.map((name) => core.readNode({ name })));
    const ready = nodes.every(
      (n) => n.status?.conditions?.find((c) => c.type === "Ready")?.status === "True",
    );
    return ready && nodes[3]?.spec?.unschedulable === true ? true : undefined;
  });
});

afterAll(async () => {
  await core.deleteCollectionNamespacedPod({ namespace: NS, gracePeriodSeconds: 0 });
  await core.deleteNamespace({ name: NS });
  stop.abort();
  await Promise.all(runs);
  for (const name of NODES) await deleteNode(admin, name);
});

describe("several virtual nodes under the default kube-scheduler", () => {
  it("spreads a Deployment's replicas over the Nodes, none on the cordoned one", async () => {
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "web" },
        spec: {
          replicas: 12,
          selector: { matchLabels: { app: "web" } },
          template: { metadata: { labels: { app: "web" } }, spec: podSpec() },
        },
      },
    });
    const counts = await placement("app=web", 12);
    console.log(`a Deployment's 12 replicas: ${JSON.stringify(counts)}`);
    expect(Object.keys(counts).sort()).toEqual(["spread-a", "spread-b", "spread-c"]);
    // The default spread is a preference (maxSkew 3, ScheduleAnyway), not a rule.
    expect(
      Math.max(...Object.values(counts)) - Math.min(...Object.values(counts)),
    ).toBeLessThanOrEqual(3);
    await apps.deleteNamespacedDeployment({ name: "web", namespace: NS });
  });

  it("spreads bare Pods only when they ask (topologySpreadConstraints on kubernetes.io/hostname)", async () => {
    for (let i = 0; i < 9; i++)
      await core.createNamespacedPod({
        namespace: NS,
        body: {
          metadata: { name: `spread-${i}`, labels: { app: "bare-spread" } },
          spec: podSpec({
            topologySpreadConstraints: [
              {
                maxSkew: 1,
                topologyKey: "kubernetes.io/hostname",
                whenUnsatisfiable: "DoNotSchedule",
                // A cordoned Node (a draining vnode) carries the node.kubernetes.io/unschedulable
                // taint: without Honor it still counts as a domain with no Pod, and holds the
                // skew at 1 after one Pod on each of the others.
                nodeTaintsPolicy: "Honor",
                labelSelector: { matchLabels: { app: "bare-spread" } },
              },
            ],
          }),
        },
      });
    expect(await placement("app=bare-spread", 9)).toEqual({
      "spread-a": 3,
      "spread-b": 3,
      "spread-c": 3,
    });
    // Without it, nothing in the scheduler's defaults spreads them: recorded, not required.
    for (let i = 0; i < 9; i++)
      await core.createNamespacedPod({
        namespace: NS,
        body: { metadata: { name: `bare-${i}`, labels: { app: "bare" } }, spec: podSpec() },
      });
    const bare = await placement("app=bare", 9);
    console.log(`bare Pods without a spread constraint: ${JSON.stringify(bare)}`);
    expect(bare["spread-drained"]).toBeUndefined();
  });
});
