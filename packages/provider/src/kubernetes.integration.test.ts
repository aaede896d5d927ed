/**
 * The provider with its production ledger (`@nebula/kube`'s ConfigMapPodLedger) against a real
 * kube-apiserver + etcd and moto behind test-peers' EC2 proxy: Pods created, force-deleted and
 * gracefully deleted through the API server, a controller restart in the middle of a teardown.
 * Teardowns are driven by the one driver, the virtual node's PodTeardown, which removes the Pod
 * through the real API (`KubernetesPodApi`: delete with grace 0 and the UID precondition, then
 * the finalizer), as the virtual node does.
 */
import { randomBytes } from "node:crypto";
import { DescribeInstancesCommand, type EC2Client } from "@aws-sdk/client-ec2";
import { CoreV1Api, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
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
import { DEFAULT_POD_FINALIZER, KubernetesPodApi, type PodRef } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider } from "./provider.js";
import { type MotoNetwork, motoConfig, prepareMoto } from "./testing/moto-env.js";
import { type TestTeardown, testTeardown } from "./testing/teardown.js";

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
      metadata: { name, finalizers: [DEFAULT_POD_FINALIZER], annotations },
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

/**
 * The one teardown driver over `p`, removing Pods through the real API as the virtual node does;
 * `removals` records the state of each removed Pod's instance when the Pod was removed.
 */
function driver(p: Ec2PodProvider): TestTeardown & { removals: Map<string, string | undefined> } {
  const api = new KubernetesPodApi(kc);
  const ledger = new ConfigMapPodLedger(kc, { namespace: system });
  const removals = new Map<string, string | undefined>();
  const teardown = testTeardown(p, {
    removePod: async (ref: PodRef) => {
      const instanceId = (await ledger.get(ref.uid))?.launch.instanceId;
      removals.set(ref.name, instanceId && (await instanceState(instanceId)));
      await api.deleteNow(ref);
      await api.removeFinalizer(ref, DEFAULT_POD_FINALIZER);
    },
    podPresent: (ref: PodRef) => api.exists(ref),
  });
  return { ...teardown, removals };
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
    expect(held?.metadata?.finalizers).toEqual([DEFAULT_POD_FINALIZER]);

    const teardown = driver(p);
    const state = await teardown.reclaim(held as V1Pod, { rounds: 80 });
    expect(state).toMatchObject({ complete: true, instanceId });
    expect(await instanceState(instanceId)).toBe("terminated");
    // The Pod was removed (grace 0, UID precondition, then the finalizer) only once its instance
    // was terminated; then it is gone from the API.
    expect(teardown.removals.get("forced")).toBe("terminated");
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
    // The first process's teardown driver: one reconcile of the deletion.
    const started = await driver(first).step(deleting as V1Pod);
    expect(started.status).not.toBe("complete");
    await first.stop(); // crash

    const ledger = new ConfigMapPodLedger(kc, { namespace: system });
    const stored = decodeRecord((await ledger.get(uid))?.record);
    expect(stored.ok && stored.record.params.gracePeriodSeconds).toBe(5);

    expect(stored.ok && stored.record.phase).not.toBe("complete");

    // A fresh provider and a fresh PodTeardown resume from the ConfigMap, not from the Pod's
    // forged annotation (which says "complete").
    const second = provider("restart");
    const teardown = driver(second);
    const state = await teardown.reclaim((await readPod("graceful")) as V1Pod, { rounds: 80 });
    expect(state.complete).toBe(true);
    expect(await instanceState(state.instanceId ?? "")).toBe("terminated");
    // The end of graceful deletion, by the teardown: delete with grace 0 (UID precondition), then
    // the finalizer, once the instance is terminated.
    expect(teardown.removals.get("graceful")).toBe("terminated");
    expect(await readPod("graceful")).toBeUndefined();
    await second.forgetPod(uid);
    await second.stop();
  });
});
