/**
 * `KubernetesPodApi.evict` against a real kube-apiserver, as the vnode's ServiceAccount under the
 * shipped RBAC with the optional eviction rule (deploy/vnode/rbac-rebalance-eviction.yaml): the
 * API server's own PodDisruptionBudget check decides, not ours.
 */
import { CoreV1Api, PolicyV1Api, type V1Pod } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { beforeAll, describe, expect, it } from "vitest";
import { KubernetesPodApi, type PodRef } from "./pod-api.js";
import { applyManifest, SERVICE_ACCOUNT_GROUPS, VNODE_SERVICE_ACCOUNT } from "./testing/rbac.js";

const { controlPlane } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const policy = admin.makeApiClient(PolicyV1Api);
const NS = "pod-eviction-it";

/** A Running Pod bound to a node no kubelet runs: it stays until deleted, Terminating once evicted. */
async function createPod(name: string, labels: Record<string, string>): Promise<PodRef> {
  const pod: V1Pod = {
    metadata: { name, namespace: NS, labels },
    spec: { nodeName: "nowhere", containers: [{ name: "app", image: "busybox" }] },
  };
  const created = await core.createNamespacedPod({ namespace: NS, body: pod });
  // Running, as its node would report it: the API server lets any Pending Pod be evicted, budget
  // or not.
  await core.replaceNamespacedPodStatus({
    name,
    namespace: NS,
    body: { ...created, status: { phase: "Running" } },
  });
  return { namespace: NS, name, uid: created.metadata?.uid ?? "" };
}

const deleting = async (ref: PodRef) =>
  (await core.readNamespacedPod({ name: ref.name, namespace: ref.namespace })).metadata
    ?.deletionTimestamp !== undefined;

/** Waits (bounded) until the disruption controller has counted the budget's Pods. */
async function budgetObserved(name: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const pdb = await policy.readNamespacedPodDisruptionBudget({ name, namespace: NS });
    if ((pdb.status?.observedGeneration ?? 0) >= (pdb.metadata?.generation ?? 1)) return;
    if (Date.now() > deadline) throw new Error(`PodDisruptionBudget ${name} never observed`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

beforeAll(async () => {
  await applyManifest(admin, "namespace.yaml");
  await applyManifest(admin, "rbac.yaml");
  await core.createNamespace({ body: { metadata: { name: NS } } });
});

const api = () =>
  new KubernetesPodApi(controlPlane.clientFor(VNODE_SERVICE_ACCOUNT, SERVICE_ACCOUNT_GROUPS));

describe("KubernetesPodApi.evict under deploy/vnode/rbac.yaml alone", () => {
  it("is refused: the vnode may not evict without the optional rule (RBAC, HTTP 403)", async () => {
    const ref = await createPod("unruled", { app: "unruled" });
    await expect(api().evict(ref)).rejects.toMatchObject({
      code: "RequestFailed",
      message: expect.stringContaining("HTTP 403"),
    });
    expect(await deleting(ref)).toBe(false);
  });
});

describe("KubernetesPodApi.evict with rbac-rebalance-eviction.yaml", () => {
  beforeAll(async () => {
    await applyManifest(admin, "rbac-rebalance-eviction.yaml");
  });

  it("evicts a Pod no budget protects: the API server deletes it (Terminating)", async () => {
    const ref = await createPod("free", { app: "free" });
    expect(await api().evict(ref)).toBe("evicted");
    expect(await deleting(ref)).toBe(true);
  });

  it("answers blocked while a PodDisruptionBudget allows no disruption, and leaves the Pod", async () => {
    const ref = await createPod("guarded", { app: "guarded" });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: NS,
      body: {
        metadata: { name: "guarded" },
        spec: { maxUnavailable: 0, selector: { matchLabels: { app: "guarded" } } },
      },
    });
    await budgetObserved("guarded");
    expect(await api().evict(ref)).toBe("blocked");
    expect(await deleting(ref)).toBe(false);
  });

  it("answers gone for a Pod that is not there, or whose name another incarnation took", async () => {
    expect(await api().evict({ namespace: NS, name: "absent", uid: "u-absent" })).toBe("gone");
    const ref = await createPod("renamed", { app: "renamed" });
    expect(await api().evict({ ...ref, uid: "an-older-incarnation" })).toBe("gone");
    expect(await deleting(ref)).toBe(false);
  });
});
