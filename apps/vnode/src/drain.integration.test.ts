/**
 * A virtual node drained before its removal (`node.drain`), end to end against kube-apiserver with
 * its scheduler and controller manager, moto and the instance-host simulator:
 *
 * 1. a Pod runs on the vnode; the vnode is restarted with `drain: true` (what a configuration
 *    change does to its Deployment);
 * 2. it cordons its Node, keeps the Pod running (never deletes it) and says what is left
 *    (`Drained=False`, `nebula_vnode_drain_pods_left`); the scheduler places no new Pod there; a
 *    `kubectl uncordon` is undone;
 * 3. the user deletes the Pod: its instance is torn down as usual, then `Drained=True`, the log
 *    line, both gauges 0;
 * 4. restarted with the drain off, it uncordons the Node and removes the condition.
 */
import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1Node } from "@kubernetes/client-node";
import type { InstanceHosts } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  type E2eWorld,
  nodeInstances,
  readPod as readPodIn,
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

const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-drain";
const CLUSTER = "vnode-drain";
const NS = "vnode-drain";

let world: E2eWorld;
let hosts: InstanceHosts;
let vnode: VnodeProcess | undefined;

const readPod = (name: string) => readPodIn(core, NS, name);
const drained = (node: V1Node) => node.status?.conditions?.find((c) => c.type === "Drained");

async function start(drain: boolean): Promise<VnodeProcess> {
  const config = vnodeConfig({
    cluster: CLUSTER,
    region: moto.region,
    world,
    endpoint: hosts.ec2Endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "50" },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  }) as { node: Record<string, unknown> };
  return startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    // Short Lease ticks: the drain is checked on every tick.
    config: {
      ...config,
      node: { ...config.node, drain, leaseRenewIntervalSeconds: 2 },
    },
  });
}

beforeAll(async () => {
  world = await startWorld({ admin, ec2, moto, cluster: CLUSTER, namespace: NS });
  hosts = world.hosts;
  vnode = await start(false);
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  ec2.destroy();
  expect(code).toBe(0);
});

describe("a vnode drained before removal (node.drain)", () => {
  it("cordons its Node, keeps its running Pod and reports what is left; the user's delete tears it down, then Drained; drain off uncordons", async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("stays", NODE, { command: ["sh", "-c", "sleep 3600"] }),
    });
    const running = await until(
      "the Pod running",
      async () => {
        const pod = await readPod("stays");
        return pod?.status?.phase === "Running" ? pod : undefined;
      },
      180_000,
      500,
    );
    const uid = running.metadata?.uid ?? "";

    // 1. The drain: the vnode restarted with it on.
    await stopCleanly(vnode);
    vnode = await start(true);
    const cordoned = await until("the Node cordoned and Draining", async () => {
      const node = await core.readNode({ name: NODE });
      return node.spec?.unschedulable === true && drained(node)?.reason === "Draining"
        ? node
        : undefined;
    });
    expect(cordoned.metadata?.annotations?.["nebula.dev/drain-cordoned"]).toBe("true");
    const left = await until("1 Pod and 1 instance left", async () => {
      const node = await core.readNode({ name: NODE });
      const message = drained(node)?.message ?? "";
      return message.includes("1 Pod bound and 1 instance not terminated") ? message : undefined;
    });
    expect(left).toContain("drain is on");
    const gauges = await until("the drain gauges", async () => {
      const metrics = await scrape(vnode?.url ?? "");
      return metrics.get("nebula_vnode_drain_pods_left") === 1 ? metrics : undefined;
    });
    expect(gauges.get("nebula_vnode_drain_instances_left")).toBe(1);

    // 2. The Pod keeps running on its instance; the vnode deletes nothing.
    await new Promise((r) => setTimeout(r, 6_000));
    const kept = await readPod("stays");
    expect(kept?.status?.phase).toBe("Running");
    expect(kept?.metadata?.deletionTimestamp).toBeUndefined();
    const instances = (await nodeInstances(ec2, NODE)).filter((i) =>
      i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid),
    );
    expect(instances.map((i) => i.State?.Name)).toEqual(["running"]);

    // The scheduler places no new Pod on the cordoned Node.
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: "refused" },
        spec: {
          nodeSelector: { "kubernetes.io/hostname": NODE },
          tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
          containers: [{ name: "app", image: "busybox" }],
        },
      },
    });
    const unschedulable = await until("the new Pod unschedulable", async () => {
      const pod = await readPod("refused");
      const scheduled = pod?.status?.conditions?.find((c) => c.type === "PodScheduled");
      return scheduled?.status === "False" ? scheduled : undefined;
    });
    expect(unschedulable.message).toMatch(/unschedulable/);
    expect((await readPod("refused"))?.spec?.nodeName).toBeUndefined();
    await core.deleteNamespacedPod({ name: "refused", namespace: NS });

    // `kubectl uncordon` while the drain is on: the vnode cordons it again.
    await core.patchNode(
      { name: NODE, body: { spec: { unschedulable: false } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await until("cordoned again", async () =>
      (await core.readNode({ name: NODE })).spec?.unschedulable === true ? true : undefined,
    );

    // 3. The user deletes the Pod: torn down as usual (its instance terminated), then Drained.
    await core.deleteNamespacedPod({ name: "stays", namespace: NS });
    await until("the Pod gone", async () => ((await readPod("stays")) ? undefined : true), 180_000);
    const done = await until(
      "Drained=True",
      async () => {
        const node = await core.readNode({ name: NODE });
        return drained(node)?.status === "True" ? node : undefined;
      },
      60_000,
    );
    expect(drained(done)).toMatchObject({ reason: "Drained" });
    expect(
      (await nodeInstances(ec2, NODE))
        .filter((i) => i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid))
        .map((i) => i.State?.Name),
    ).toEqual(["terminated"]);
    await until("the drained log line", () =>
      vnode?.lines.some((l) => String(l.msg).includes(`node ${NODE} drained`)) ? true : undefined,
    );
    const after = await scrape(vnode?.url ?? "");
    expect(after.get("nebula_vnode_drain_pods_left")).toBe(0);
    expect(after.get("nebula_vnode_drain_instances_left")).toBe(0);
    expect(vnode?.lines.filter((l) => /forbidden/i.test(JSON.stringify(l)))).toEqual([]);

    // 4. The drain turned off again (the entry kept after all): uncordoned, condition gone.
    await stopCleanly(vnode);
    vnode = await start(false);
    const back = await until("uncordoned, no Drained condition", async () => {
      const node = await core.readNode({ name: NODE });
      return node.spec?.unschedulable !== true && drained(node) === undefined ? node : undefined;
    });
    expect(back.metadata?.annotations?.["nebula.dev/drain-cordoned"]).toBeUndefined();
  }, 600_000);
});
