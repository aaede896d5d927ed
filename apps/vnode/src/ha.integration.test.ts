/**
 * Two replicas of the virtual node with leader election: the standby does nothing while the
 * leader lives; when the leader is killed (SIGKILL, no release of the Lease) the standby takes the
 * Lease once it expires and carries on: a Pod started under the first leader finishes with its
 * real exit under the second, a teardown the first leader began is finished by the second, a Pod
 * created after the takeover runs, one instance each, none left.
 */
import { CoordinationV1Api, CoreV1Api } from "@kubernetes/client-node";
import type { InstanceHosts } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  nodeInstances,
  readPod as readPodIn,
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
const leases = admin.makeApiClient(CoordinationV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-ha";
const NS = "vnode-ha";
const LEASE = `nebula-vnode-${NODE}`;
const FINALIZER = "nebula.dev/instance-reclaim";

let hosts: InstanceHosts;
let config: object;
const running: VnodeProcess[] = [];

const readPod = (name: string) => readPodIn(core, NS, name);

async function holder(): Promise<string | undefined> {
  try {
    const lease = await leases.readNamespacedLease({ name: LEASE, namespace: "nebula-system" });
    return lease.spec?.holderIdentity || undefined;
  } catch (error) {
    if ((error as { code?: number }).code === 404) return undefined;
    throw error;
  }
}

function replica(identity: string): Promise<VnodeProcess> {
  return startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config,
    extraArgs: ["--leader-elect"],
    env: { POD_NAME: identity },
  }).then((p) => {
    running.push(p);
    return p;
  });
}

beforeAll(async () => {
  const world = await startWorld({ admin, ec2, moto, cluster: NODE, namespace: NS });
  hosts = world.hosts;
  config = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: hosts.ec2Endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "20" },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  });
}, 300_000);

afterAll(async () => {
  for (const p of running) if (p.child.exitCode === null) await p.kill();
  await deleteNode(admin, NODE);
  await hosts?.close();
  ec2.destroy();
});

describe("two replicas with leader election", () => {
  it("the standby takes over after the leader is killed, finishes its teardowns; Pods finish truthfully, one instance each, none left", async () => {
    const a = await replica("vnode-a");
    await until("vnode-a leads", async () => ((await holder()) === "vnode-a" ? true : undefined));
    const b = await replica("vnode-b");
    // Started under the first leader; exits with 3 after the takeover.
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("across", NODE, { command: ["sh", "-c", "sleep 30; exit 3"] }),
    });
    // Deleted just before the leader dies: its teardown (stop, wait, terminate) is begun by
    // vnode-a and must be finished by vnode-b. It ignores SIGTERM, so its instance stays
    // `stopping` for the whole 20 s grace, across the takeover.
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("deleted", NODE, {
        command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"],
      }),
    });
    for (const name of ["across", "deleted"]) {
      await until(
        `${name} running under vnode-a`,
        async () => ((await readPod(name))?.status?.phase === "Running" ? true : undefined),
        180_000,
        500,
      );
    }
    const deletedUid = (await readPod("deleted"))?.metadata?.uid ?? "";
    await core.deleteNamespacedPod({ name: "deleted", namespace: NS, gracePeriodSeconds: 20 });
    await until(
      "vnode-a begins the teardown (StopInstances sent)",
      async () => {
        const mine = (await nodeInstances(ec2, NODE)).find((i) =>
          i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === deletedUid),
        );
        return mine?.State?.Name === "stopping" || mine?.State?.Name === "stopped"
          ? true
          : undefined;
      },
      60_000,
      250,
    );
    expect(await holder()).toBe("vnode-a");
    const killedAt = Date.now();
    await a.kill();
    await until(
      "vnode-b leads",
      async () => ((await holder()) === "vnode-b" ? true : undefined),
      120_000,
      250,
    );
    const takeoverSeconds = (Date.now() - killedAt) / 1000;
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("after", NODE, { command: ["sh", "-c", "sleep 2; exit 0"] }),
    });
    const settled = async (name: string) =>
      until(
        `${name} terminal, its instance reclaimed`,
        async () => {
          const p = await readPod(name);
          const terminal = p?.status?.phase === "Succeeded" || p?.status?.phase === "Failed";
          return terminal && !(p?.metadata?.finalizers ?? []).includes(FINALIZER) ? p : undefined;
        },
        300_000,
        500,
      );
    const across = await settled("across");
    expect(across.status?.phase).toBe("Failed");
    expect(across.status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 3,
      reason: "Error",
    });
    const after = await settled("after");
    expect(after.status?.phase).toBe("Succeeded");
    await until(
      "the deleted Pod gone once vnode-b finished its teardown",
      async () => ((await readPod("deleted")) === undefined ? true : undefined),
      300_000,
      500,
    );
    const instances = await until("every instance terminated", async () => {
      const all = await nodeInstances(ec2, NODE);
      return all.every((i) => i.State?.Name === "terminated") ? all : undefined;
    });
    const perPod = new Map<string, number>();
    for (const i of instances) {
      const uid = i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value ?? "none";
      perPod.set(uid, (perPod.get(uid) ?? 0) + 1);
    }
    expect([...perPod.values()]).toEqual([1, 1, 1]);
    console.log(JSON.stringify({ ha: { takeoverSeconds, leaseDurationSeconds: 15 } }));
    await stopCleanly(b);
  }, 900_000);
});
