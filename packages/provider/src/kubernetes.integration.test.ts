/**
 * The provider with its production ledger (`@nebula/kube`'s ConfigMapPodLedger) against a real
 * kube-apiserver + etcd and moto behind test-peers' EC2 proxy: Pods created, force-deleted and
 * gracefully deleted through the API server, a controller restart in the middle of a teardown.
 */
import { randomBytes } from "node:crypto";
import { DescribeInstancesCommand, type EC2Client } from "@aws-sdk/client-ec2";
import {
  CoreV1Api,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
} from "@kubernetes/client-node";
import { ConfigMapPodLedger } from "@nebula/kube";
import { decodeRecord } from "@nebula/teardown";
import {
  type ControlPlane,
  type Ec2ProxyHandle,
  type Moto,
  startControlPlane,
  startEc2Proxy,
  startMoto,
} from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider, RECLAIM_FINALIZER, type ReclaimState } from "./provider.js";
import { type MotoNetwork, motoConfig, prepareMoto } from "./testing/moto-env.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";
const suffix = randomBytes(3).toString("hex");
const tenant = `tenant-${suffix}`;
const system = `nebula-system-${suffix}`;

let controlPlane: ControlPlane;
let kc: KubeConfig;
let core: CoreV1Api;
let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;
let proxy: Ec2ProxyHandle;

beforeAll(async () => {
  [controlPlane, moto] = await Promise.all([startControlPlane(), startMoto()]);
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
  proxy = await startEc2Proxy({ upstream: moto, clientToken: true, refuseStops: true });
  kc = controlPlane.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  for (const name of [tenant, system]) await core.createNamespace({ body: { metadata: { name } } });
});

afterAll(async () => {
  await proxy?.close();
  ec2?.destroy();
  await Promise.all([controlPlane?.stop(), moto?.stop()]);
});

function provider(node: string): Ec2PodProvider {
  return new Ec2PodProvider({
    config: { ...motoConfig(moto, network, node), endpoint: proxy.endpoint },
    renderUserData: () => USER_DATA,
    livePodUids: async () =>
      (await core.listNamespacedPod({ namespace: tenant })).items.map((p) => p.metadata?.uid ?? ""),
    ledger: new ConfigMapPodLedger(kc, { namespace: system }),
  });
}

async function createPod(name: string, node: string, annotations: Record<string, string> = {}) {
  return core.createNamespacedPod({
    namespace: tenant,
    body: {
      metadata: { name, finalizers: [RECLAIM_FINALIZER], annotations },
      spec: {
        nodeName: node,
        restartPolicy: "Never",
        terminationGracePeriodSeconds: 600,
        containers: [{ name: "app", image: "busybox" }],
      },
    },
  });
}

async function readPod(name: string): Promise<V1Pod | undefined> {
  try {
    return await core.readNamespacedPod({ name, namespace: tenant });
  } catch {
    return undefined;
  }
}

async function instanceState(instanceId: string): Promise<string | undefined> {
  const page = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
  return page.Reservations?.[0]?.Instances?.[0]?.State?.Name;
}

/** What the Pod controller does for a Pod being deleted, until the reclaim completes. */
async function reclaim(p: Ec2PodProvider, name: string): Promise<ReclaimState> {
  let state: ReclaimState = { podUid: "", phase: "none", complete: false, message: "" };
  for (let i = 0; i < 80 && !state.complete; i++) {
    const pod = await readPod(name);
    if (!pod) throw new Error(`pod ${name} vanished before its reclaim completed`);
    state = await p.deletePod(pod);
    if (!state.complete) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      await p.pollOnce();
    }
  }
  return state;
}

async function removeFinalizer(name: string): Promise<void> {
  await core.patchNamespacedPod(
    { name, namespace: tenant, body: [{ op: "remove", path: "/metadata/finalizers" }] },
    setHeaderOptions("Content-Type", PatchStrategy.JsonPatch),
  );
}

describe("with the ConfigMap ledger and a real API server", () => {
  it("a force-deleted Pod (grace 0) stays until its instance is terminated, then the finalizer goes and so does the Pod", async () => {
    const p = provider("force");
    const pod = await createPod("forced", "force");
    const uid = pod.metadata?.uid ?? "";
    await p.createPod(pod);
    const ledger = new ConfigMapPodLedger(kc, { namespace: system });
    const instanceId = (await ledger.get(uid))?.launch.instanceId ?? "";
    expect(instanceId).toMatch(/^i-/);

    await core.deleteNamespacedPod({ name: "forced", namespace: tenant, gracePeriodSeconds: 0 });
    const held = await readPod("forced");
    expect(held?.metadata?.deletionTimestamp).toBeDefined();
    expect(held?.metadata?.finalizers).toEqual([RECLAIM_FINALIZER]);

    const state = await reclaim(p, "forced");
    expect(state).toMatchObject({ complete: true, instanceId });
    expect(await instanceState(instanceId)).toBe("terminated");
    await removeFinalizer("forced");
    expect(await readPod("forced")).toBeUndefined();
    await p.forgetPod(uid);
    expect(await ledger.get(uid)).toBeUndefined();
    await p.stop();
  });

  it("a controller restart mid-teardown resumes from the ConfigMap; the deletion's grace is recorded; a forged Pod annotation is never read", async () => {
    const first = provider("restart");
    const pod = await createPod("graceful", "restart", {
      "teardown.nebula.dev/record": '{"v":1,"def":"nebula.dev/pod","phase":"complete"}',
    });
    const uid = pod.metadata?.uid ?? "";
    await first.createPod(pod);
    await core.deleteNamespacedPod({ name: "graceful", namespace: tenant, gracePeriodSeconds: 5 });
    const deleting = await readPod("graceful");
    expect(deleting?.metadata?.deletionGracePeriodSeconds).toBe(5);
    const started = await first.deletePod(deleting as V1Pod);
    expect(started.complete).toBe(false);
    await first.stop(); // crash

    const ledger = new ConfigMapPodLedger(kc, { namespace: system });
    const stored = decodeRecord((await ledger.get(uid))?.record);
    expect(stored.ok && stored.record.params.gracePeriodSeconds).toBe(5);

    const second = provider("restart");
    expect(await second.resume()).toBe(1);
    const state = await reclaim(second, "graceful");
    expect(state.complete).toBe(true);
    expect(await instanceState(state.instanceId ?? "")).toBe("terminated");
    // The caller's end of graceful deletion: delete with grace 0 (UID precondition), then the finalizer.
    await core.deleteNamespacedPod({
      name: "graceful",
      namespace: tenant,
      gracePeriodSeconds: 0,
      body: { gracePeriodSeconds: 0, preconditions: { uid } },
    });
    await removeFinalizer("graceful");
    expect(await readPod("graceful")).toBeUndefined();
    await second.forgetPod(uid);
    await second.stop();
  });
});
