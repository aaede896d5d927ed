/**
 * The kubelet's read endpoints end to end (issue #28, docs/contracts.md "The kubelet API"): the real `kubectl` asks the real
 * kube-apiserver's node proxy (`/api/v1/nodes/<node>/proxy/...`), which calls the virtual node's
 * kubelet API with its kubelet client certificate. `/pods` is the kubelet's `v1.PodList` of every
 * Pod bound to the Node (a terminal one included); `/runningpods/` lists only what runs now,
 * and no longer a Pod the moment its deletion has completed in the API; `/stats/summary`,
 * `/metrics/resource`, `/healthz` and `kubectl logs` answer through the same proxy.
 */
import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1Pod } from "@kubernetes/client-node";
import type { InstanceHosts } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  kubectlWith,
  nodeInstances,
  podWhen as podWhenIn,
  readPod,
  startKubeletApiWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
} from "./testing/e2e.js";

const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-kubelet-api";
const NS = "vnode-kubelet-api";
const GROUP = "/nebula/vnode-kubelet-api/containers";
/** A finalizer of someone else's, holding a Pod in the API after the virtual node is done with it. */
const HOLD = "example.com/hold";

let hosts: InstanceHosts;
let vnode: VnodeProcess;

/** The real kubectl as the cluster admin; resolves with stdout, rejects with stderr. */
const kubectl = kubectlWith(controlPlane.kubeconfigPath ?? "");

/** `kubectl get --raw` through the API server's node proxy. */
function proxy(path: string): Promise<string> {
  return kubectl("get", "--raw", `/api/v1/nodes/${NODE}/proxy${path}`);
}

interface PodListBody {
  kind: string;
  apiVersion: string;
  metadata: Record<string, unknown>;
  items: V1Pod[] | null;
}

beforeAll(async () => {
  ({ hosts, vnode } = await startKubeletApiWorld({
    admin,
    ec2,
    moto,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    node: NODE,
    namespace: NS,
    group: GROUP,
  }));
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  ec2.destroy();
  expect(code).toBe(0);
});

const podWhen = (name: string, test: (pod: V1Pod) => boolean, ms?: number) =>
  podWhenIn(core, NS, name, test, ms);

describe("the kubelet's read endpoints through kubectl and the API server's node proxy", () => {
  it("/pods, /runningpods/, /stats/summary, /metrics/resource, /healthz and kubectl logs; a deleted Pod leaves /runningpods/ when it leaves the API", async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("sleeper", NODE, { command: ["sh", "-c", "echo started; exec sleep 3600"] }),
    });
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("finished", NODE, { command: ["sh", "-c", "echo done"] }),
    });
    const sleeper = await podWhen(
      "sleeper",
      (p) => p.status?.containerStatuses?.[0]?.state?.running !== undefined,
    );
    const finished = await podWhen("finished", (p) => p.status?.phase === "Succeeded");
    const sleeperUid = sleeper.metadata?.uid ?? "";
    const finishedUid = finished.metadata?.uid ?? "";

    // /pods: the kubelet's v1.PodList of every Pod bound to the Node, the terminal one included,
    // whole (spec and status).
    const pods = JSON.parse(await proxy("/pods")) as PodListBody;
    expect(pods).toMatchObject({ kind: "PodList", apiVersion: "v1", metadata: {} });
    const byUid = new Map((pods.items ?? []).map((p) => [p.metadata?.uid, p]));
    expect(byUid.get(sleeperUid)).toMatchObject({
      metadata: { name: "sleeper", namespace: NS },
      spec: { nodeName: NODE, containers: [{ name: "app", image: "busybox" }] },
      status: { phase: "Running" },
    });
    expect(byUid.get(finishedUid)).toMatchObject({
      metadata: { name: "finished", namespace: NS },
      status: { phase: "Succeeded" },
    });

    // /runningpods/: only what runs, with the runtime's few fields.
    const runningPods = JSON.parse(await proxy("/runningpods/")) as PodListBody;
    expect(runningPods).toMatchObject({ kind: "PodList", apiVersion: "v1" });
    expect(runningPods.items).toEqual([
      {
        metadata: { name: "sleeper", namespace: NS, uid: sleeperUid },
        spec: { containers: [{ name: "app", image: "busybox", resources: {} }] },
        status: {},
      },
    ]);

    expect(await proxy("/healthz")).toBe("ok");
    const summary = JSON.parse(await proxy("/stats/summary")) as {
      node: { nodeName: string };
      pods: Array<{ podRef: { uid: string } }>;
    };
    expect(summary.node.nodeName).toBe(NODE);
    expect(summary.pods.map((p) => p.podRef.uid)).toEqual([sleeperUid]);
    expect(await proxy("/metrics/resource")).toMatch(/^resource_scrape_error [01]$/m);
    await until(
      "the sleeper's log",
      async () => ((await kubectl("logs", "-n", NS, "sleeper")) === "started\n" ? true : undefined),
      60_000,
    );

    // Deleted: the moment the API no longer has it, /runningpods/ does not list it either.
    await core.deleteNamespacedPod({ name: "sleeper", namespace: NS });
    await until(
      "the sleeper gone from the API",
      async () => ((await readPod(core, NS, "sleeper")) === undefined ? true : undefined),
      180_000,
      50,
    );
    const after = JSON.parse(await proxy("/runningpods/")) as PodListBody;
    expect(after).toEqual({ kind: "PodList", apiVersion: "v1", metadata: {}, items: null });
    // /pods still lists the terminal Pod, and no longer the deleted one once the cache has heard.
    await until(
      "/pods without the sleeper",
      async () => {
        const now = JSON.parse(await proxy("/pods")) as PodListBody;
        const uids = (now.items ?? []).map((p) => p.metadata?.uid);
        return !uids.includes(sleeperUid) && uids.includes(finishedUid) ? true : undefined;
      },
      10_000,
    );
    await core.deleteNamespacedPod({ name: "finished", namespace: NS });
  }, 400_000);

  it("/runningpods/ leaves out a Pod being deleted whose teardown completed, while another finalizer keeps it in the API", async () => {
    const held = barePod("held", NODE, { command: ["sh", "-c", "exec sleep 3600"] });
    held.metadata = { ...held.metadata, finalizers: [HOLD] };
    await core.createNamespacedPod({ namespace: NS, body: held });
    const pod = await podWhen(
      "held",
      (p) => p.status?.containerStatuses?.[0]?.state?.running !== undefined,
    );
    const uid = pod.metadata?.uid ?? "";
    const listed = async () =>
      ((JSON.parse(await proxy("/runningpods/")) as PodListBody).items ?? []).map(
        (p) => p.metadata?.uid,
      );
    expect(await listed()).toContain(uid);

    await core.deleteNamespacedPod({ name: "held", namespace: NS, gracePeriodSeconds: 0 });
    // The teardown is complete when the virtual node lets go of the Pod (its own finalizer
    // removed, after the instance is terminated); only the foreign finalizer keeps it.
    const released = await podWhen("held", (p) => (p.metadata?.finalizers ?? []).join() === HOLD);
    expect(released.metadata?.deletionTimestamp).toBeDefined();
    const instances = await nodeInstances(ec2, NODE);
    const its = instances.filter((i) =>
      i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid),
    );
    expect(its.map((i) => i.State?.Name)).toEqual(["terminated"]);
    expect(await listed()).not.toContain(uid);

    await core.patchNamespacedPod(
      { name: "held", namespace: NS, body: { metadata: { finalizers: null } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await until("held gone", async () =>
      (await readPod(core, NS, "held")) === undefined ? true : undefined,
    );
  }, 300_000);
});
