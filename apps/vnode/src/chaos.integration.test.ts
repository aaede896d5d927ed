/**
 * Chaos: the vnode killed with SIGKILL at random points, then restarted, while Pods launch,
 * finish and are deleted; EC2 in front of moto behaves as EC2 (ClientToken idempotency, refused
 * stops). Afterwards every Pod is where its own story says (its exit code's phase; gone if it was
 * deleted; a long-lived `sleep 3600` Pod still Running on its one instance), no duplicate instance,
 * no instance left running or stopped, every teardown complete. CI runs a small random sample (3 kills, 6 Pods), then the same with 30 %
 * of the vnode's EC2 calls throttled or failing with 5xx (2 kills, 4 Pods); the full runs are
 * `NEBULA_CHAOS_KILLS=20 NEBULA_CHAOS_PODS=30` and `NEBULA_CHAOS_FAULT_KILLS=10
 * NEBULA_CHAOS_FAULT_PODS=20` (see the app's README). `NEBULA_CHAOS_SEED` replays.
 */
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { type Ec2ProxyHandle, type InstanceHosts, startEc2Proxy } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  nodeInstances,
  shutdownLog,
  startVnode,
  startWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  vnodeConfig,
} from "./testing/e2e.js";

const KILLS = Number(process.env.NEBULA_CHAOS_KILLS ?? "3");
const PODS = Number(process.env.NEBULA_CHAOS_PODS ?? "6");
const SEED = Number(process.env.NEBULA_CHAOS_SEED ?? String(Date.now() % 1_000_000));
const FAULT_RATE = Number(process.env.NEBULA_CHAOS_FAULT_RATE ?? "0.3");
const FAULT_KILLS = Number(process.env.NEBULA_CHAOS_FAULT_KILLS ?? "2");
const FAULT_PODS = Number(process.env.NEBULA_CHAOS_FAULT_PODS ?? "4");
const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-chaos";
const NS = "vnode-chaos";
const FINALIZER = "nebula.dev/instance-reclaim";

/** mulberry32: a seeded generator, so a failing run can be replayed with its seed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let hosts: InstanceHosts;
let proxy: Ec2ProxyHandle;
let config: object;

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
    capacity: { cpu: "1000", memory: "4Ti", pods: String(PODS * 2) },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  });
}, 300_000);

afterAll(async () => {
  await proxy?.close();
  await deleteNode(admin, NODE);
  await hosts?.close();
  ec2.destroy();
});

/**
 * Starts `pods` Pods (a third deleted at random moments), kills the vnode `kills` times at random
 * moments, then lets a last vnode finish: every Pod settles, every instance is terminated, none is
 * a duplicate. `faultRate` of the vnode's EC2 calls fail (throttling or 5xx) throughout.
 */
async function chaos(
  prefix: string,
  kills: number,
  pods: number,
  faultRate: number,
): Promise<void> {
  proxy.configure({ faultRate, faultSeed: SEED });
  try {
    const rand = random(SEED);
    const kubeconfig = controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS);
    const created: V1Pod[] = [];
    const deleted = new Set<string>();
    /** The phase each Pod's own story ends in (its exit code), unless it is deleted. */
    const story = new Map<string, string>();
    const timers: ReturnType<typeof setTimeout>[] = [];
    // One long-lived Pod no one deletes: after every kill it must still be Running.
    const longLived = `${prefix}-long`;
    story.set(longLived, "Running");
    created.push(
      await core.createNamespacedPod({
        namespace: NS,
        body: barePod(longLived, NODE, { command: ["sleep", "3600"] }),
      }),
    );
    for (let i = 0; i < pods; i++) {
      const code = rand() < 0.5 ? 0 : 1;
      story.set(`${prefix}-${i}`, code === 0 ? "Succeeded" : "Failed");
      const pod = barePod(`${prefix}-${i}`, NODE, {
        command: ["sh", "-c", `sleep ${2 + Math.floor(rand() * 20)}; exit ${code}`],
      });
      // A third of the Pods are deleted at a random moment (some while running).
      if (rand() < 0.34) {
        const name = `${prefix}-${i}`;
        const force = rand() < 0.5;
        timers.push(
          setTimeout(
            () => {
              deleted.add(name);
              void core
                .deleteNamespacedPod({
                  name,
                  namespace: NS,
                  ...(force ? { gracePeriodSeconds: 0 } : {}),
                })
                .catch(() => undefined);
            },
            3_000 + rand() * 40_000,
          ),
        );
      }
      created.push(await core.createNamespacedPod({ namespace: NS, body: pod }));
    }
    for (let kill = 0; kill < kills; kill++) {
      const vnode = await startVnode({ nodeName: NODE, kubeconfig, moto, config });
      await new Promise((r) => setTimeout(r, 1_000 + rand() * 12_000));
      await vnode.kill();
    }
    const vnode = await startVnode({ nodeName: NODE, kubeconfig, moto, config });
    let stopped: number | null = null;
    try {
      await until(
        "every Pod settled and every instance terminated",
        async () => {
          for (const pod of created) {
            const name = pod.metadata?.name ?? "";
            const now = await core
              .readNamespacedPod({ name, namespace: NS })
              .catch((e: { code?: number }) => (e.code === 404 ? undefined : Promise.reject(e)));
            if (now === undefined) {
              if (!deleted.has(name)) throw new Error(`pod ${name} vanished without being deleted`);
              continue;
            }
            const expected = story.get(name);
            // Thrown, not returned: a timeout then says which Pod is stuck and how.
            const stuck = () =>
              new Error(
                `pod ${name} not settled: phase ${now.status?.phase} (its story: ${deleted.has(name) ? "deleted" : expected}), finalizers ${JSON.stringify(now.metadata?.finalizers ?? [])}, deleting ${now.metadata?.deletionTimestamp !== undefined}`,
              );
            // A deleted Pod is gone in the end, whatever its phase was.
            if (deleted.has(name)) throw stuck();
            if (now.status?.phase !== expected) throw stuck();
            if (expected !== "Running" && (now.metadata?.finalizers ?? []).includes(FINALIZER)) {
              throw stuck();
            }
          }
          const instances = await nodeInstances(ec2, NODE);
          const longUid = created[0]?.metadata?.uid;
          // The long-lived Pod's instance runs; every other is terminated.
          const alive = instances.filter(
            (i) =>
              i.State?.Name !== "terminated" &&
              i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value !== longUid,
          );
          if (alive.length > 0) {
            throw new Error(
              `instances not terminated: ${alive.map((i) => `${i.InstanceId} ${i.State?.Name} pod-uid=${i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value}`).join(", ")}`,
            );
          }
          return instances;
        },
        900_000,
        2_000,
      );
      const uids = new Set(created.map((p) => p.metadata?.uid ?? ""));
      const perPod = new Map<string, number>();
      for (const i of await nodeInstances(ec2, NODE)) {
        const uid = i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value ?? "none";
        // Only this run's Pods (the node's earlier runs left terminated instances).
        if (uid !== "none" && !uids.has(uid)) continue;
        perPod.set(uid, (perPod.get(uid) ?? 0) + 1);
      }
      const duplicates = [...perPod.entries()].filter(([, n]) => n > 1);
      expect(duplicates).toEqual([]);
      expect(perPod.has("none")).toBe(false);
      console.log(
        JSON.stringify({
          chaos: {
            seed: SEED,
            kills,
            pods,
            faultRate,
            deleted: deleted.size,
            instances: [...perPod.values()].reduce((a, b) => a + b, 0),
            proxy: proxy.counts(),
          },
        }),
      );
      // The long-lived Pod kept one instance through every kill; then it is deleted and goes.
      const longInstances = (await nodeInstances(ec2, NODE)).filter(
        (i) => i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value === created[0]?.metadata?.uid,
      );
      expect(longInstances.map((i) => i.State?.Name)).toEqual(["running"]);
      await core.deleteNamespacedPod({ name: longLived, namespace: NS });
      await until(
        `${longLived} deleted and its instance terminated`,
        async () => {
          const pod = await core
            .readNamespacedPod({ name: longLived, namespace: NS })
            .catch((e: { code?: number }) => (e.code === 404 ? undefined : Promise.reject(e)));
          if (pod !== undefined) return undefined;
          const left = (await nodeInstances(ec2, NODE)).filter(
            (i) => i.State?.Name !== "terminated",
          );
          return left.length === 0 ? true : undefined;
        },
        300_000,
        2_000,
      );
    } finally {
      for (const t of timers) clearTimeout(t);
      // Stopped in `finally`, asserted after it: a failure above is reported as itself.
      stopped = await vnode.stop();
    }
    expect(stopped, shutdownLog(vnode)).toBe(0);
  } finally {
    proxy.configure({ faultRate: 0 });
  }
}

describe(`chaos (seed ${SEED})`, () => {
  it(`${KILLS} SIGKILLs of the vnode while ${PODS} Pods launch, finish and are deleted: no duplicate instance, none left running or stopped, no Pod stuck, every teardown complete`, async () => {
    await chaos("chaos", KILLS, PODS, 0);
  }, 1_200_000);

  it(`the same with ${FAULT_RATE * 100} % of the vnode's EC2 calls throttled or failing with 5xx (${FAULT_KILLS} kills, ${FAULT_PODS} Pods)`, async () => {
    await chaos("faults", FAULT_KILLS, FAULT_PODS, FAULT_RATE);
  }, 1_200_000);
});
