/**
 * The exited-container case this product exists for: a Deployment whose container prints and exits. Under
 * `Always` every Pod shows its restarts, back-off and last exit; once the restart limit is
 * reached every Pod is terminal with its real exit code and every instance is stopped and
 * terminated. CI runs 5 replicas; `NEBULA_E2E_REPLICAS=30` runs 30 (see the README).
 */
import { AppsV1Api, CoreV1Api, EventsV1Api, type V1Pod } from "@kubernetes/client-node";
import type { InstanceHosts } from "@nebula/test-peers";
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

const REPLICAS = Number(process.env.NEBULA_E2E_REPLICAS ?? "5");
const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const apps = admin.makeApiClient(AppsV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-deploy";
const NS = "vnode-deploy";

let hosts: InstanceHosts;
let vnode: VnodeProcess;

beforeAll(async () => {
  const world = await startWorld({ admin, ec2, moto, cluster: NODE, namespace: NS });
  hosts = world.hosts;
  vnode = await startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config: vnodeConfig({
      cluster: NODE,
      region: moto.region,
      world,
      endpoint: hosts.ec2Endpoint,
      capacity: { cpu: "1000", memory: "4Ti", pods: String(REPLICAS * 4) },
      pollIntervalSeconds: 5,
      batchWindowMs: 100,
    }),
  });
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  ec2.destroy();
  expect(code).toBe(0);
});

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return (
    sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN
  );
}

describe(`a Deployment of ${REPLICAS} replicas that print and exit`, () => {
  it("restarts, back-off and last exit shown; at the restart limit every Pod terminal and every instance terminated", async () => {
    await until("the Node Ready", async () => {
      const node = await core.readNode({ name: NODE });
      return node.status?.conditions?.find((c) => c.type === "Ready")?.status === "True"
        ? node
        : undefined;
    });
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "prints-and-exits" },
        spec: {
          replicas: REPLICAS,
          selector: { matchLabels: { app: "prints-and-exits" } },
          template: {
            metadata: {
              labels: { app: "prints-and-exits" },
              annotations: { "nebula.dev/restart-limit": "2" },
            },
            spec: {
              terminationGracePeriodSeconds: 5,
              // This test's node only: the end-to-end files share the control plane.
              nodeSelector: { "kubernetes.io/hostname": NODE },
              tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
              containers: [
                {
                  name: "app",
                  image: "busybox",
                  command: ["sh", "-c", "echo no nvidia-smi; sleep 1"],
                },
              ],
            },
          },
        },
      },
    });
    const counted = await until(
      "the vnode's metrics count the Deployment's instances and its polls",
      async () => {
        const m = await scrape(vnode.url);
        const live = [...m.entries()].filter(
          ([k]) => k.startsWith("nebula_vnode_instances{") && !k.includes('"terminated"'),
        );
        const polls = m.get('nebula_vnode_poll_duration_seconds_count{outcome="ok"}') ?? 0;
        return live.reduce((sum, [, v]) => sum + v, 0) > 0 && polls > 0 ? m : undefined;
      },
    );
    // The EC2 budget as configured by default: nothing throttled, so each API at its full share.
    expect(counted.get('nebula_vnode_ec2_budget_rate{action="DescribeInstances"}')).toBe(10);
    expect(counted.get('nebula_vnode_ec2_budget_rate{action="RunInstances"}')).toBe(2);
    const seen = new Map<string, V1Pod>();
    const restartsSeen = new Set<string>();
    const firstTerminalAt = new Map<string, number>();
    const pods = await until(
      `${REPLICAS} Pods terminal`,
      async () => {
        const list = await core.listNamespacedPod({ namespace: NS });
        for (const pod of list.items) {
          const uid = pod.metadata?.uid ?? "";
          seen.set(uid, pod);
          const c = pod.status?.containerStatuses?.[0];
          if ((c?.restartCount ?? 0) > 0 && c?.lastState?.terminated !== undefined) {
            restartsSeen.add(uid);
          }
          if (
            (pod.status?.phase === "Failed" || pod.status?.phase === "Succeeded") &&
            !firstTerminalAt.has(uid)
          ) {
            firstTerminalAt.set(uid, Date.now());
          }
        }
        const terminal = [...seen.values()].filter((p) =>
          firstTerminalAt.has(p.metadata?.uid ?? ""),
        );
        return terminal.length >= REPLICAS ? terminal : undefined;
      },
      900_000,
      1_000,
    );
    // Every Pod showed its restarts and last exit while it ran.
    for (const pod of pods) expect(restartsSeen.has(pod.metadata?.uid ?? "")).toBe(true);
    for (const pod of pods.slice(0, REPLICAS)) {
      const fresh = await core.readNamespacedPod({ name: pod.metadata?.name ?? "", namespace: NS });
      const c = fresh.status?.containerStatuses?.[0];
      // Every run exited 0: at the limit the Pod is terminal with that real exit code.
      expect(["Succeeded", "Failed"]).toContain(fresh.status?.phase);
      expect(c?.restartCount).toBe(2);
      expect(c?.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
    }
    const events = await admin.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: NS });
    const reasons = new Set(events.items.map((e) => e.reason));
    for (const reason of ["Launched", "ContainerExited", "BackOff", "RestartLimitReached"]) {
      expect(reasons).toContain(reason);
    }
    // Exit → truthful status: from each terminal container's finishedAt to the test seeing it
    // (finishedAt has whole-second precision; the test polls every second).
    const latencies = pods.flatMap((p) => {
      const finished = p.status?.containerStatuses?.[0]?.state?.terminated?.finishedAt;
      const at = firstTerminalAt.get(p.metadata?.uid ?? "");
      return finished && at ? [(at - new Date(finished).getTime()) / 1000] : [];
    });
    const before = await scrape(vnode.url);

    // The Deployment goes; its Pods (bound, so deleted gracefully) go once reclaimed.
    await apps.deleteNamespacedDeployment({
      name: "prints-and-exits",
      namespace: NS,
      propagationPolicy: "Foreground",
    });
    await until(
      "no Pods and every instance terminated",
      async () => {
        const list = await core.listNamespacedPod({ namespace: NS });
        // Thrown, not returned: a timeout then says which Pod or instance is left, and how.
        if (list.items.length > 0) {
          throw new Error(
            `pods left: ${list.items.map((p) => `${p.metadata?.name} ${p.status?.phase} node=${p.spec?.nodeName ?? "-"} deleting=${p.metadata?.deletionTimestamp !== undefined} finalizers=${JSON.stringify(p.metadata?.finalizers ?? [])}`).join("; ")}`,
          );
        }
        const instances = await nodeInstances(ec2, NODE);
        const alive = instances.filter((i) => i.State?.Name !== "terminated");
        if (alive.length > 0) {
          throw new Error(
            `instances left: ${alive.map((i) => `${i.InstanceId} ${i.State?.Name} pod-uid=${i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value}`).join("; ")}`,
          );
        }
        return instances;
      },
      900_000,
      2_000,
    );
    const metric = (m: Map<string, number>, prefix: string) =>
      [...m.entries()].filter(([k]) => k.startsWith(prefix)).reduce((s, [, v]) => s + v, 0);
    // The instances-by-state metric follows EC2: nothing pending, running, stopping or stopped.
    const billing = ["pending", "running", "stopping", "stopped"].map(
      (state) => `nebula_vnode_instances{state="${state}"}`,
    );
    await until("the vnode's metric shows no live instance", async () => {
      const m = await scrape(vnode.url);
      return billing.every((k) => (m.get(k) ?? 0) === 0) ? m : undefined;
    });
    const after = await scrape(vnode.url);
    const byPod = new Map<string, number>();
    for (const i of await nodeInstances(ec2, NODE)) {
      const uid = i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value ?? "";
      byPod.set(uid, (byPod.get(uid) ?? 0) + 1);
    }
    // One instance per Pod, never a duplicate.
    expect([...byPod.values()].every((n) => n === 1)).toBe(true);
    console.log(
      JSON.stringify({
        figures: {
          replicas: REPLICAS,
          podsSeen: seen.size,
          exitToStatusSeconds: { p50: percentile(latencies, 50), p99: percentile(latencies, 99) },
          terminalToTerminatedSeconds: {
            sum: metric(after, "nebula_vnode_terminal_to_terminated_seconds_sum"),
            count: metric(after, "nebula_vnode_terminal_to_terminated_seconds_count"),
          },
          ec2Calls: metric(after, "nebula_vnode_ec2_calls_total"),
          describeCalls: metric(after, 'nebula_vnode_ec2_calls_total{action="DescribeInstances"'),
          statusWritesBeforeDelete: metric(
            before,
            'nebula_vnode_pod_status_writes_total{outcome="written"}',
          ),
          residentMemoryBytes: metric(after, "process_resident_memory_bytes"),
        },
      }),
    );
  }, 1_900_000);
});
