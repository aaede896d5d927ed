/**
 * Teardown without a gap, on the real `nebula-vnode` bundle, the real control plane and moto behind
 * the EC2 proxy: a Pod deleted while EC2 has no capacity never gets an instance once capacity is
 * back; a Pod whose ledger entry was deleted is still stopped and terminated when it is deleted; a
 * force-deleted Pod goes within a few poll intervals (no requeue waits for a resync); a Pod that
 * vanished while the vnode was down (its finalizer taken off by hand) has its instance reclaimed by
 * the vnode itself, long before the leak collector would, and its ledger entry dropped.
 */
import { CoreV1Api, PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import { type Ec2ProxyHandle, type InstanceHosts, startEc2Proxy } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  nodeInstances,
  readPod,
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
const NODE = "vnode-teardown";
const NS = "vnode-teardown";
const LEDGER_NS = "nebula-system";

let hosts: InstanceHosts;
let proxy: Ec2ProxyHandle;
let config: object;
let vnode: VnodeProcess | undefined;

function start(): Promise<VnodeProcess> {
  return startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config,
  });
}

async function instancesOf(uid: string) {
  return (await nodeInstances(ec2, NODE)).filter((i) =>
    i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid),
  );
}

async function runningPod(name: string): Promise<string> {
  const created = await core.createNamespacedPod({
    namespace: NS,
    body: barePod(name, NODE, { command: ["sleep", "3600"] }),
  });
  await until(
    `${name} running`,
    async () => ((await readPod(core, NS, name))?.status?.phase === "Running" ? true : undefined),
    180_000,
    500,
  );
  return created.metadata?.uid ?? "";
}

async function gone(name: string, ms: number): Promise<number> {
  const started = Date.now();
  await until(
    `${name} gone`,
    async () => ((await readPod(core, NS, name)) ? undefined : true),
    ms,
    250,
  );
  return (Date.now() - started) / 1000;
}

async function ledgerEntry(uid: string) {
  try {
    return await core.readNamespacedConfigMap({ name: `nebula-pod-${uid}`, namespace: LEDGER_NS });
  } catch (error) {
    if ((error as { code?: number }).code === 404) return undefined;
    throw error;
  }
}

beforeAll(async () => {
  const world = await startWorld({ admin, ec2, moto, cluster: NODE, namespace: NS });
  hosts = world.hosts;
  proxy = await startEc2Proxy({
    upstream: hosts.ec2Endpoint,
    clientToken: true,
    refuseStops: true,
  });
  config = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: proxy.endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "40" },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  });
  vnode = await start();
}, 300_000);

afterAll(async () => {
  proxy?.configure({ insufficientCapacity: false });
  try {
    if (vnode) await stopCleanly(vnode);
    vnode = undefined;
    const left = (await nodeInstances(ec2, NODE)).filter((i) => i.State?.Name !== "terminated");
    expect(left).toEqual([]);
  } finally {
    if (vnode) await vnode.kill();
    await proxy?.close();
    await deleteNode(admin, NODE);
    await hosts?.close();
    ec2.destroy();
  }
}, 300_000);

describe("teardown without a gap", () => {
  it("Pods held by InsufficientInstanceCapacity, then deleted while capacity comes back: no instance is launched for any of them", async () => {
    proxy.configure({ insufficientCapacity: true });
    const names = Array.from({ length: 4 }, (_, i) => `held-${i}`);
    const uids: string[] = [];
    try {
      for (const name of names) {
        const pod = await core.createNamespacedPod({
          namespace: NS,
          body: barePod(name, NODE, { command: ["sleep", "3600"] }),
        });
        uids.push(pod.metadata?.uid ?? "");
      }
      await until(
        "every Pod Pending with InsufficientCapacity",
        async () => {
          for (const name of names) {
            if ((await readPod(core, NS, name))?.status?.reason !== "InsufficientCapacity")
              return undefined;
          }
          return true;
        },
        120_000,
        500,
      );
      const launched = proxy.counts().launched;
      for (const name of names) await core.deleteNamespacedPod({ name, namespace: NS });
      // Capacity comes back while the deletions are under way.
      proxy.configure({ insufficientCapacity: false });
      for (const name of names) await gone(name, 120_000);
      // A few more polls: a launch still retried would happen now.
      await new Promise((resolve) => setTimeout(resolve, 8_000));
      expect(proxy.counts().launched - launched).toBe(0);
      for (const uid of uids) expect(await instancesOf(uid)).toEqual([]);
    } finally {
      proxy.configure({ insufficientCapacity: false });
    }
  });

  it("a running Pod whose ledger entry was deleted is still stopped and terminated when it is deleted", async () => {
    const uid = await runningPod("no-ledger");
    expect(await ledgerEntry(uid)).toBeDefined();
    await core.deleteNamespacedConfigMap({ name: `nebula-pod-${uid}`, namespace: LEDGER_NS });
    const calls = { ...proxy.counts().calls };
    await core.deleteNamespacedPod({ name: "no-ledger", namespace: NS, gracePeriodSeconds: 2 });
    await gone("no-ledger", 120_000);
    const after = proxy.counts().calls;
    expect((after.StopInstances ?? 0) - (calls.StopInstances ?? 0)).toBeGreaterThanOrEqual(1);
    expect(
      (after.TerminateInstances ?? 0) - (calls.TerminateInstances ?? 0),
    ).toBeGreaterThanOrEqual(1);
    expect((await instancesOf(uid)).map((i) => i.State?.Name)).toEqual(["terminated"]);
  });

  it("a force-deleted Pod goes within a few poll intervals: every teardown step follows the last at once", async () => {
    const uid = await runningPod("forced");
    await core.deleteNamespacedPod({ name: "forced", namespace: NS, gracePeriodSeconds: 0 });
    // Stop (grace 0), stopped, terminate, terminated, release, remove: each a poll or two. It took
    // 181 s when a step's "again at once" was dropped and waited for the 60 s resync.
    const seconds = await gone("forced", 60_000);
    expect((await instancesOf(uid)).map((i) => i.State?.Name)).toEqual(["terminated"]);
    console.log(JSON.stringify({ forceDelete: { goneAfterSeconds: seconds } }));
  });

  it("a Pod that vanished while the vnode was down (its finalizer taken off by hand) is reclaimed by the vnode: graceful stop, terminate, ledger entry dropped", async () => {
    const uid = await runningPod("vanished");
    await stopCleanly(vnode);
    vnode = undefined;
    // Deleted (grace 0: nothing but the finalizer holds it), then the finalizer taken off by hand.
    await core.deleteNamespacedPod({ name: "vanished", namespace: NS, gracePeriodSeconds: 0 });
    await core.patchNamespacedPod(
      {
        name: "vanished",
        namespace: NS,
        body: { metadata: { finalizers: null } },
      },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await gone("vanished", 30_000);
    const calls = { ...proxy.counts().calls };
    vnode = await start();
    // The leak collector would wait its 300 s grace; the vnode's own sweep acts after one poll.
    await until(
      "the vanished Pod's instance terminated and its ledger entry dropped",
      async () => {
        const states = (await instancesOf(uid)).map((i) => i.State?.Name);
        if (states.join() !== "terminated") return undefined;
        return (await ledgerEntry(uid)) === undefined ? true : undefined;
      },
      90_000,
      1_000,
    );
    const after = proxy.counts().calls;
    // Stopped first (the host's final report, the containers' grace), not only terminated.
    expect((after.StopInstances ?? 0) - (calls.StopInstances ?? 0)).toBeGreaterThanOrEqual(1);
  });
});
