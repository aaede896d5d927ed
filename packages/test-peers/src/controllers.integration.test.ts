import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import {
  ApiException,
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  type V1Deployment,
  V1MicroTime,
  type V1Node,
  type V1Pod,
} from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ControlPlane, kubectlPath, startControlPlane } from "./control-plane.js";
import { waitUntil } from "./process.js";

const NAMESPACE = "whole-set";
const PROVIDER_TAINT = {
  key: "virtual-kubelet.io/provider",
  value: "nebula",
  effect: "NoSchedule",
};

let cp: ControlPlane;
let core: CoreV1Api;
let apps: AppsV1Api;
let coordination: CoordinationV1Api;

beforeAll(async () => {
  cp = await startControlPlane({
    controllers: true,
    scheduler: true,
    nodeMonitorGracePeriodSeconds: 5,
  });
  const kc = cp.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  apps = kc.makeApiClient(AppsV1Api);
  coordination = kc.makeApiClient(CoordinationV1Api);
  await core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
});

afterAll(async () => {
  await cp?.stop();
});

/**
 * Registers a virtual Node the way the vnode does: the provider taint, capacity, `Ready=True`,
 * and a Lease in `kube-node-lease`. Returns a function that renews the Lease (a heartbeat).
 */
async function registerNode(name: string): Promise<() => Promise<void>> {
  const node: V1Node = {
    metadata: { name, labels: { type: "virtual-kubelet", "kubernetes.io/hostname": name } },
    spec: { taints: [PROVIDER_TAINT] },
  };
  const created = await core.createNode({ body: node });
  const now = new Date();
  const status = {
    capacity: { cpu: "100", memory: "1000Gi", pods: "1000" },
    allocatable: { cpu: "100", memory: "1000Gi", pods: "1000" },
    conditions: [
      {
        type: "Ready",
        status: "True",
        reason: "KubeletReady",
        message: "test node",
        lastHeartbeatTime: now,
        lastTransitionTime: now,
      },
    ],
  };
  // The node-lifecycle controller may taint the fresh Node meanwhile: read again on a conflict.
  for (let attempt = 1; ; attempt++) {
    const current = await core.readNode({ name });
    try {
      await core.replaceNodeStatus({ name, body: { ...current, status } });
      break;
    } catch (error) {
      if (!(error instanceof ApiException) || error.code !== 409 || attempt >= 10) throw error;
    }
  }
  const uid = created.metadata?.uid ?? "";
  await coordination.createNamespacedLease({
    namespace: "kube-node-lease",
    body: {
      metadata: {
        name,
        ownerReferences: [{ apiVersion: "v1", kind: "Node", name, uid }],
      },
      spec: {
        holderIdentity: name,
        leaseDurationSeconds: 40,
        renewTime: new V1MicroTime(),
      },
    },
  });
  return async () => {
    const lease = await coordination.readNamespacedLease({ name, namespace: "kube-node-lease" });
    lease.spec = { ...lease.spec, renewTime: new V1MicroTime() };
    await coordination.replaceNamespacedLease({ name, namespace: "kube-node-lease", body: lease });
  };
}

function deployment(name: string, replicas: number, tolerate: boolean): V1Deployment {
  return {
    metadata: { name },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          containers: [{ name: "main", image: "busybox" }],
          ...(tolerate ? { tolerations: [{ ...PROVIDER_TAINT, operator: "Equal" }] } : {}),
        },
      },
    },
  };
}

async function podsOf(app: string): Promise<V1Pod[]> {
  return (await core.listNamespacedPod({ namespace: NAMESPACE, labelSelector: `app=${app}` }))
    .items;
}

function readyStatus(node: V1Node): string | undefined {
  return node.status?.conditions?.find((c) => c.type === "Ready")?.status;
}

describe("kube-controller-manager and kube-scheduler against the test apiserver", () => {
  it("runs them: a Deployment of 30 makes Pods, tolerating ones are bound to the virtual Node, the rest stay Pending, deletion cascades", async () => {
    expect(cp.controllers).toContain("deployment-controller");
    expect(cp.scheduler).toBe(true);
    const renew = await registerNode("vnode-whole");
    // The vnode renews every few seconds; here once a second, well inside the 5 s grace period.
    const heartbeat = setInterval(() => void renew().catch(() => undefined), 1_000);
    try {
      await apps.createNamespacedDeployment({
        namespace: NAMESPACE,
        body: deployment("tolerant", 30, true),
      });
      await apps.createNamespacedDeployment({
        namespace: NAMESPACE,
        body: deployment("intolerant", 1, false),
      });

      await waitUntil(
        async () => {
          const pods = await podsOf("tolerant");
          return pods.length === 30 && pods.every((p) => p.spec?.nodeName === "vnode-whole");
        },
        { what: "30 tolerant Pods bound to vnode-whole", timeoutMs: 60_000, intervalMs: 250 },
      );
      let pending: V1Pod[] = [];
      await waitUntil(
        async () => {
          pending = await podsOf("intolerant");
          return pending.some(
            (p) =>
              p.status?.conditions?.find((c) => c.type === "PodScheduled")?.reason ===
              "Unschedulable",
          );
        },
        { what: "the intolerant Pod marked Unschedulable", timeoutMs: 60_000, intervalMs: 250 },
      );
      expect(pending).toHaveLength(1);
      expect(pending[0]?.spec?.nodeName).toBeUndefined();
      expect(pending[0]?.status?.phase).toBe("Pending");

      // The built kubectl works against it with the kubeconfig file.
      const names = execFileSync(
        kubectlPath(),
        [
          "--kubeconfig",
          cp.kubeconfigPath ?? "",
          "get",
          "replicasets",
          "-n",
          NAMESPACE,
          "-o",
          "name",
        ],
        { encoding: "utf8" },
      );
      expect(names.trim().split("\n")).toHaveLength(2);

      // Deleting the Deployment: the garbage collector deletes its ReplicaSet, then its Pods.
      const tolerantPods = (await podsOf("tolerant")).map((p) => p.metadata?.name ?? "");
      await apps.deleteNamespacedDeployment({ name: "tolerant", namespace: NAMESPACE });
      await waitUntil(
        async () => {
          const sets = await apps.listNamespacedReplicaSet({
            namespace: NAMESPACE,
            labelSelector: "app=tolerant",
          });
          const pods = await podsOf("tolerant");
          return sets.items.length === 0 && pods.every((p) => p.metadata?.deletionTimestamp);
        },
        {
          what: "the ReplicaSet gone and every Pod deleting",
          timeoutMs: 60_000,
          intervalMs: 250,
        },
      );
      // Bound Pods wait for their kubelet (here: the test) to finish with grace 0.
      for (const name of tolerantPods) {
        await core
          .deleteNamespacedPod({ name, namespace: NAMESPACE, gracePeriodSeconds: 0 })
          .catch(() => undefined);
      }
      await waitUntil(async () => (await podsOf("tolerant")).length === 0, {
        what: "the tolerant Pods gone",
        timeoutMs: 30_000,
      });
      // An unbound Pod goes at once.
      await apps.deleteNamespacedDeployment({ name: "intolerant", namespace: NAMESPACE });
      await waitUntil(async () => (await podsOf("intolerant")).length === 0, {
        what: "the intolerant Pod garbage-collected",
        timeoutMs: 60_000,
        intervalMs: 250,
      });
    } finally {
      clearInterval(heartbeat);
    }
  });

  it("turns a Node whose Lease is no longer renewed Ready=Unknown and taints it unreachable", async () => {
    const renew = await registerNode("vnode-silent");
    // Renewed once a second for longer than the 5 s grace period: the Lease alone (the status
    // heartbeat is older by then) keeps it Ready.
    for (let i = 0; i < 8; i++) {
      await renew();
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    const ready = await core.readNode({ name: "vnode-silent" });
    expect(readyStatus(ready)).toBe("True");

    let node: V1Node = ready;
    await waitUntil(
      async () => {
        node = await core.readNode({ name: "vnode-silent" });
        return readyStatus(node) === "Unknown";
      },
      { what: "vnode-silent Ready=Unknown", timeoutMs: 60_000, intervalMs: 250 },
    );
    expect(node.status?.conditions?.find((c) => c.type === "Ready")?.reason).toBe(
      "NodeStatusUnknown",
    );
    await waitUntil(
      async () => {
        node = await core.readNode({ name: "vnode-silent" });
        return (node.spec?.taints ?? []).some((t) => t.key === "node.kubernetes.io/unreachable");
      },
      { what: "the unreachable taint on vnode-silent", timeoutMs: 30_000, intervalMs: 250 },
    );
  });

  it("creates the default ServiceAccount and the root CA ConfigMap in a new namespace", async () => {
    await core.createNamespace({ body: { metadata: { name: "whole-set-sa" } } });
    await waitUntil(
      async () => {
        const accounts = await core.listNamespacedServiceAccount({ namespace: "whole-set-sa" });
        const maps = await core.listNamespacedConfigMap({ namespace: "whole-set-sa" });
        return (
          accounts.items.some((a) => a.metadata?.name === "default") &&
          maps.items.some((m) => m.metadata?.name === "kube-root-ca.crt")
        );
      },
      { what: "default ServiceAccount and kube-root-ca.crt", timeoutMs: 30_000, intervalMs: 250 },
    );
    const rootCa = await core.readNamespacedConfigMap({
      name: "kube-root-ca.crt",
      namespace: "whole-set-sa",
    });
    expect(rootCa.data?.["ca.crt"]).toBe(cp.info().caCert);
  });
});

describe("stopping the whole set", () => {
  it("leaves no process, port or temporary folder", async () => {
    const { certDir, server } = cp.info();
    const dir = dirname(certDir);
    const pids = execFileSync("pgrep", ["-f", dir], { encoding: "utf8" })
      .trim()
      .split("\n")
      .map(Number);
    const commands = pids.map((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0]);
    for (const peer of ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]) {
      expect(commands.filter((c) => c?.endsWith(`/${peer}`))).toHaveLength(1);
    }
    await cp.stop();
    expect(pids.filter(alive)).toEqual([]);
    expect(existsSync(dir)).toBe(false);
    const refused = await fetch(server).then(
      () => "answered",
      () => "refused",
    );
    expect(refused).toBe("refused");
  });
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
