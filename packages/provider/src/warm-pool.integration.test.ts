/**
 * The warm pool against moto and the instance-host simulator: real pool user-data booted, images
 * pulled, hosts powered off by themselves; Pods that take them run their real user-data after
 * `ModifyInstanceAttribute` and `StartInstances`; a process that dies at each step of a take
 * leaves the host to the Pod, and the next process starts it; used hosts are terminated, never
 * given back; a removed entry's hosts are collected.
 */
import { EC2Client, type Instance } from "@aws-sdk/client-ec2";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { MemoryPodLedger } from "@nebula/teardown";
import {
  type InstanceHosts,
  MOTO_CREDENTIALS,
  type Moto,
  startInstanceHosts,
  startMoto,
} from "@nebula/test-peers";
import { DEFAULT_POD_FINALIZER } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAwsClients } from "./clients.js";
import { type ProviderConfigInput, parseProviderConfig } from "./config.js";
import { AwsGateway } from "./gateway.js";
import { Ec2PodProvider } from "./provider.js";
import { type MotoNetwork, motoConfig, nodeInstances, prepareMoto } from "./testing/moto-env.js";
import { testTeardown } from "./testing/teardown.js";
import type { WarmPoolEvent } from "./warm-pool.js";

const CLUSTER = "pool-it";

let moto: Moto;
let hosts: InstanceHosts;
let network: MotoNetwork;
/** EC2 as the provider sees it: through the simulator's proxy (the states and reasons moto skips). */
let ec2: EC2Client;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    cluster: CLUSTER,
    bootDelayMs: 500,
  });
  ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
});

afterAll(async () => {
  ec2?.destroy();
  await hosts?.close();
  await moto?.stop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function config(node: string, size: number, images = ["busybox"]): ProviderConfigInput {
  return {
    ...motoConfig(moto, network, node),
    clusterName: CLUSTER,
    endpoint: hosts.ec2Endpoint,
    pollIntervalSeconds: 1,
    apiHeadroomSeconds: 5,
    podDelivery: "parameters",
    warmPool: size < 0 ? [] : [{ name: "small", instanceType: "t3.micro", size, images }],
  };
}

function pod(node: string, name: string, n: number): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: "default",
      uid: `33333333-0000-4000-8000-${n.toString().padStart(12, "0")}`,
      finalizers: [DEFAULT_POD_FINALIZER],
      creationTimestamp: new Date(),
    },
    spec: {
      nodeName: node,
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 5,
      containers: [{ name: "app", image: "busybox", command: ["sh", "-c", "sleep 1; exit 0"] }],
    },
  };
}

interface Run {
  readonly provider: Ec2PodProvider;
  readonly statuses: Map<string, V1PodStatus>;
  readonly events: WarmPoolEvent[];
}

function start(
  node: string,
  size: number,
  pods: () => V1Pod[],
  ledger: MemoryPodLedger,
  gateway?: (config: ProviderConfigInput) => AwsGateway,
  images?: string[],
): Run {
  const cfg = config(node, size, images);
  const provider = new Ec2PodProvider({
    config: cfg,
    ledger,
    livePodUids: () => pods().map((p) => p.metadata?.uid ?? ""),
    ...(gateway ? { gateway: gateway(cfg) } : {}),
  });
  const statuses = new Map<string, V1PodStatus>();
  const events: WarmPoolEvent[] = [];
  provider.notifyPods(({ pod: changed, status }) => {
    statuses.set(changed.metadata?.uid ?? "", status);
  });
  provider.onWarmPool((event) => events.push(event));
  return { provider, statuses, events };
}

/** Polls and reconciles the pool until `done` (at most `seconds`); throws with `what` after. */
async function until(
  provider: Ec2PodProvider,
  what: string,
  done: () => boolean | Promise<boolean>,
  seconds = 180,
): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    await provider.pollOnce();
    await provider.reconcileWarmPool();
    if (await done()) return;
    await sleep(500);
  }
  const pods = provider.listPods().map((p) => ({
    pod: p.metadata?.name,
    phase: p.status?.phase,
    instanceId: (p.status as { instanceId?: string } | undefined)?.instanceId,
  }));
  throw new Error(
    `not within ${seconds}s: ${what} (pool: ${JSON.stringify(provider.warmPoolStatus())}; pods: ${JSON.stringify(pods)})`,
  );
}

const ready = (provider: Ec2PodProvider) => provider.warmPoolStatus().entries[0]?.ready ?? 0;
const tag = (i: Instance, key: string) => i.Tags?.find((t) => t.Key === key)?.Value;
const poolHosts = async (node: string) =>
  (await nodeInstances(ec2, node)).filter((i) => tag(i, "nebula:pool") !== undefined);

describe("the warm pool", () => {
  it("Pods take prepared hosts, the rest launch cold, the pool refills, used hosts are terminated", async () => {
    const node = "pool-a";
    const pods = [pod(node, "warm-0", 0), pod(node, "warm-1", 1), pod(node, "cold-2", 2)];
    const ledger = new MemoryPodLedger();
    const { provider, statuses, events } = start(node, 2, () => pods, ledger);
    await until(provider, "two hosts ready", () => ready(provider) === 2);
    const prepared = (await poolHosts(node)).filter((i) => i.State?.Name === "stopped");
    expect(prepared).toHaveLength(2);
    for (const host of prepared)
      expect(host.StateReason?.Code).toBe("Client.InstanceInitiatedShutdown");

    for (const p of pods) await provider.createPod(p);
    expect(events.filter((e) => e.kind === "hit")).toHaveLength(2);
    expect(events.filter((e) => e.kind === "miss")).toHaveLength(1);
    const instanceOf = async (p: V1Pod) =>
      (await ledger.get(p.metadata?.uid ?? ""))?.launch.instanceId;
    const taken = new Set(prepared.map((i) => i.InstanceId));
    expect(taken.has(await instanceOf(pods[0] as V1Pod))).toBe(true);
    expect(taken.has(await instanceOf(pods[1] as V1Pod))).toBe(true);
    expect(taken.has(await instanceOf(pods[2] as V1Pod))).toBe(false);

    const teardown = testTeardown(provider);
    const finished = (p: V1Pod) =>
      ["Succeeded", "Failed"].includes(statuses.get(p.metadata?.uid ?? "")?.phase ?? "");
    // The Pod controller tears each finished Pod down (the one driver, `deleting: false`).
    const complete = new Set<string>();
    await until(
      provider,
      "every Pod finished and torn down, and the pool ready again",
      async () => {
        for (const p of pods.filter(finished)) {
          const result = await teardown.step(p, { deleting: false });
          if (result.status === "complete") complete.add(p.metadata?.uid ?? "");
        }
        return complete.size === pods.length && ready(provider) === 2;
      },
      240,
    );
    for (const p of pods) {
      const status = statuses.get(p.metadata?.uid ?? "");
      expect(status?.phase).toBe("Succeeded");
      expect(status?.containerStatuses?.[0]?.state?.terminated).toMatchObject({ exitCode: 0 });
    }
    // The used hosts were terminated with their Pods, never given back to the pool.
    const after = await nodeInstances(ec2, node);
    for (const id of taken) {
      expect(after.find((i) => i.InstanceId === id)?.State?.Name).toBe("terminated");
    }
    const refilled = (await poolHosts(node)).filter((i) => i.State?.Name === "stopped");
    expect(refilled).toHaveLength(2);
    for (const host of refilled) {
      expect(taken.has(host.InstanceId)).toBe(false);
      expect(tag(host, "nebula:pod-uid")).toBeUndefined();
    }
    // Removed from the configuration: its hosts are collected.
    await provider.stop();
    const gone = start(node, -1, () => [], ledger);
    await until(gone.provider, "the removed entry's hosts terminated", async () =>
      (await poolHosts(node)).every((i) =>
        ["shutting-down", "terminated"].includes(i.State?.Name ?? ""),
      ),
    );
    expect(
      gone.events
        .filter((e) => e.kind === "terminated")
        .map((e) => e.kind === "terminated" && e.reason),
    ).toEqual(["removed", "removed"]);
    await gone.provider.stop();
  }, 600_000);

  it("an entry whose images change is rolled: one host over its size at most, every old host replaced", async () => {
    const node = "pool-roll";
    const ledger = new MemoryPodLedger();
    const before = start(node, 2, () => [], ledger);
    await until(before.provider, "two hosts ready", () => ready(before.provider) === 2);
    const old = new Set((await poolHosts(node)).map((i) => i.InstanceId));
    await before.provider.stop();

    // The same entry, another image list: another shape.
    const after = start(node, 2, () => [], ledger, undefined, []);
    let peak = 0;
    await until(after.provider, "the old hosts replaced by two ready new ones", async () => {
      const live = (await poolHosts(node)).filter(
        (i) => !["shutting-down", "terminated"].includes(i.State?.Name ?? ""),
      );
      peak = Math.max(peak, live.length);
      return (
        ready(after.provider) === 2 &&
        live.every((i) => !old.has(i.InstanceId)) &&
        live.length === 2
      );
    });
    expect(peak).toBeLessThanOrEqual(3);
    const replaced = after.events.filter((e) => e.kind === "terminated");
    expect(replaced.map((e) => e.kind === "terminated" && e.reason)).toEqual([
      "replaced",
      "replaced",
    ]);
    // Each old host went only after a new one was ready to stand in for it.
    const order = after.events
      .filter((e) => e.kind === "ready" || e.kind === "terminated")
      .map((e) => e.kind);
    const firstGone = order.indexOf("terminated");
    const secondReady = order.indexOf("ready", firstGone);
    expect(firstGone).toBeGreaterThan(order.indexOf("ready"));
    expect(secondReady).toBeGreaterThan(firstGone);
    expect(order.lastIndexOf("terminated")).toBeGreaterThan(secondReady);
    await after.provider.stop();
    const gone = start(node, -1, () => [], ledger);
    await until(gone.provider, "the pool collected", async () =>
      (await poolHosts(node)).every((i) =>
        ["shutting-down", "terminated"].includes(i.State?.Name ?? ""),
      ),
    );
    await gone.provider.stop();
  }, 600_000);

  const steps = ["tagInstance", "setUserData", "startInstance"] as const;
  it.each(steps)(
    "a process that dies before %s leaves the host to its Pod, and the next process starts it",
    async (step) => {
      const node = `pool-${step.toLowerCase()}`;
      const pods = [pod(node, "crash", 10)];
      const ledger = new MemoryPodLedger();
      // The first process: its gateway dies at the step (nothing after it is sent).
      const first = start(
        node,
        1,
        () => pods,
        ledger,
        (cfg) => {
          const parsed = parseProviderConfig(cfg);
          const gateway = new AwsGateway(createAwsClients(parsed), parsed);
          gateway[step] = async () => {
            throw new Error(`killed before ${step}`);
          };
          return gateway;
        },
      );
      await until(first.provider, "one host ready", () => ready(first.provider) === 1);
      const [host] = (await poolHosts(node)).filter((i) => i.State?.Name === "stopped");
      await first.provider.createPod(pods[0] as V1Pod);
      expect(first.events.filter((e) => e.kind === "hit")).toHaveLength(1);
      expect((await ledger.get(pods[0]?.metadata?.uid ?? ""))?.launch.instanceId).toBe(
        host?.InstanceId,
      );
      await first.provider.stop();
      first.provider.client.destroy();
      // Still stopped: nothing started it.
      const still = (await poolHosts(node)).find((i) => i.InstanceId === host?.InstanceId);
      expect(still?.State?.Name).toBe("stopped");

      // The next process, on the same ledger.
      const second = start(node, 1, () => pods, ledger);
      await second.provider.pollOnce();
      await second.provider.createPod(pods[0] as V1Pod);
      const teardown = testTeardown(second.provider);
      const uid = pods[0]?.metadata?.uid ?? "";
      let complete = false;
      await until(
        second.provider,
        "the Pod ran on its host and was torn down, the pool refilled",
        async () => {
          if (second.statuses.get(uid)?.phase === "Succeeded") {
            const result = await teardown.step(pods[0] as V1Pod, { deleting: false });
            complete ||= result.status === "complete";
          }
          return complete && ready(second.provider) === 1;
        },
        240,
      );
      expect(second.statuses.get(uid)?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
        exitCode: 0,
      });
      const all = await nodeInstances(ec2, node);
      // One instance ever carried the Pod: the host it was assigned; no host was taken twice.
      const carriers = all.filter((i) => tag(i, "nebula:pod-uid") === uid);
      expect(carriers.map((i) => i.InstanceId)).toEqual([host?.InstanceId]);
      expect(carriers[0]?.State?.Name).toBe("terminated");
      expect(second.events.filter((e) => e.kind === "hit")).toHaveLength(0);
      // Collected at the end: the entry removed.
      await second.provider.stop();
      const gone = start(node, -1, () => [], ledger);
      await until(gone.provider, "the pool collected", async () =>
        (await poolHosts(node)).every((i) =>
          ["shutting-down", "terminated"].includes(i.State?.Name ?? ""),
        ),
      );
      await gone.provider.stop();
    },
    600_000,
  );
});
