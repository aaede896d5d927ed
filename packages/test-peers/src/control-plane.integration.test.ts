import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import { createConnection } from "node:net";
import { dirname } from "node:path";
import {
  ApiException,
  CoreV1Api,
  RbacAuthorizationV1Api,
  type V1Pod,
  VersionApi,
} from "@kubernetes/client-node";
import { beforeAll, describe, expect, it } from "vitest";
import { startControlPlane } from "./control-plane.js";
import { DEFAULT_K8S_VERSION } from "./paths.js";
import { machineAddresses } from "./ports.js";
import { useTestPeers } from "./vitest.js";

const { controlPlane } = useTestPeers();

function statusOf(error: unknown): number | undefined {
  return error instanceof ApiException ? error.code : undefined;
}

function portOpen(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = createConnection({ host: hostname, port: Number(port) });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("shared control plane (from the global setup)", () => {
  let core: CoreV1Api;
  const namespace = "test-peers-pods";

  beforeAll(async () => {
    core = controlPlane.kubeConfig().makeApiClient(CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: namespace } } });
  });

  it("is the version it was built as, and reports healthy", async () => {
    const version = await controlPlane.kubeConfig().makeApiClient(VersionApi).getCode();
    expect(version.gitVersion).toBe(process.env.NEBULA_K8S_VERSION || DEFAULT_K8S_VERSION);
    expect(controlPlane.version).toBe(version.gitVersion);
    const namespaces = await core.listNamespace();
    expect(namespaces.items.map((n) => n.metadata?.name)).toContain("default");
  });

  it("serves at this machine's own address too, under a certificate that names it (where a simulated host's containers reach it)", async () => {
    const [address] = machineAddresses();
    expect(address).toBeDefined();
    const kc = controlPlane.kubeConfig();
    const cluster = kc.getCurrentCluster();
    const { port } = new URL(cluster?.server ?? "");
    const ca = Buffer.from(cluster?.caData ?? "", "base64").toString("utf8");
    // Verified TLS (the serving CA, the IP in the URL matched against the certificate's SANs).
    const code = await new Promise<number | undefined>((resolve, reject) => {
      const req = httpsRequest(
        { host: address, port: Number(port), path: "/version", ca, method: "GET" },
        (res) => {
          res.resume();
          resolve(res.statusCode);
        },
      );
      req.once("error", reject);
      req.end();
    });
    // Anonymous: /version is open to everyone, as in every cluster.
    expect(code).toBe(200);
  });

  it("deletes a Pod bound to a node gracefully, and finally when the grace period is 0", async () => {
    await core.createNode({
      body: { metadata: { name: "virtual-node-1", labels: { type: "virtual-kubelet" } } },
    });
    const pod: V1Pod = {
      metadata: { name: "graceful", namespace },
      spec: {
        nodeName: "virtual-node-1",
        terminationGracePeriodSeconds: 45,
        containers: [{ name: "main", image: "busybox" }],
      },
    };
    await core.createNamespacedPod({ namespace, body: pod });

    const deleted = await core.deleteNamespacedPod({ name: "graceful", namespace });
    expect(deleted.metadata?.deletionTimestamp).toBeDefined();
    const terminating = await core.readNamespacedPod({ name: "graceful", namespace });
    expect(terminating.metadata?.deletionGracePeriodSeconds).toBe(45);
    expect(terminating.spec?.nodeName).toBe("virtual-node-1");

    // What a kubelet does once the containers are gone: delete with grace period 0.
    await core.deleteNamespacedPod({ name: "graceful", namespace, gracePeriodSeconds: 0 });
    const gone = await core
      .readNamespacedPod({ name: "graceful", namespace })
      .then(() => 200, statusOf);
    expect(gone).toBe(404);
  });

  it("deletes an unbound Pod at once (the apiserver forces grace 0 without nodeName)", async () => {
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: "unbound" },
        spec: {
          terminationGracePeriodSeconds: 45,
          containers: [{ name: "main", image: "busybox" }],
        },
      },
    });
    await core.deleteNamespacedPod({ name: "unbound", namespace });
    const gone = await core
      .readNamespacedPod({ name: "unbound", namespace })
      .then(() => 200, statusOf);
    expect(gone).toBe(404);
  });

  it("applies RBAC to a minted user: forbidden until a RoleBinding grants it", async () => {
    const alice = controlPlane.clientFor("alice", ["nebula:testers"]).makeApiClient(CoreV1Api);
    const denied = await alice.listNamespacedPod({ namespace }).then(() => 200, statusOf);
    expect(denied).toBe(403);

    const rbac = controlPlane.kubeConfig().makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace,
      body: {
        metadata: { name: "pod-reader" },
        rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: "testers-read-pods" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-reader" },
        subjects: [
          { kind: "Group", name: "nebula:testers", apiGroup: "rbac.authorization.k8s.io" },
        ],
      },
    });
    const allowed = await alice.listNamespacedPod({ namespace });
    expect(allowed.items).toBeInstanceOf(Array);
    const cannotWrite = await alice
      .createNamespacedPod({
        namespace,
        body: { metadata: { name: "x" }, spec: { containers: [{ name: "c", image: "busybox" }] } },
      })
      .then(() => 201, statusOf);
    expect(cannotWrite).toBe(403);
  });

  it("treats a client without a certificate as system:anonymous, whom RBAC refuses", async () => {
    const { request } = await import("node:https");
    const { caCert } = controlPlane.info();
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(`${controlPlane.server}/api/v1/namespaces`, { ca: caCert }, (res) => {
        let body = "";
        res.on("data", (chunk: Buffer) => {
          body += chunk.toString("utf8");
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on("error", reject);
      req.end();
    });
    expect(answer.status).toBe(403);
    expect(answer.body).toContain("system:anonymous");
  });
});

describe("a control plane of its own", () => {
  it("runs the Node authorizer and NodeRestriction on request: a node writes only its own objects", async () => {
    const cp = await startControlPlane({
      apiserverArgs: [
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
      ],
    });
    try {
      const admin = cp.kubeConfig().makeApiClient(CoreV1Api);
      const node = cp.clientFor("system:node:vnode-1", ["system:nodes"]);
      const nodeCore = node.makeApiClient(CoreV1Api);
      await nodeCore.createNode({ body: { metadata: { name: "vnode-1" } } });
      const other = await nodeCore
        .createNode({ body: { metadata: { name: "vnode-2" } } })
        .then(() => 201, statusOf);
      expect(other).toBe(403);

      await admin.createNode({ body: { metadata: { name: "vnode-2" } } });
      for (const nodeName of ["vnode-1", "vnode-2"]) {
        await admin.createNamespacedPod({
          namespace: "default",
          body: {
            metadata: { name: `on-${nodeName}` },
            spec: { nodeName, containers: [{ name: "main", image: "busybox" }] },
          },
        });
      }
      // The Node authorizer's graph: a node reads and writes only the Pods bound to it.
      const setRunning = async (name: string): Promise<number | undefined> => {
        try {
          const pod = await nodeCore.readNamespacedPod({ name, namespace: "default" });
          pod.status = { ...pod.status, phase: "Running" };
          await nodeCore.replaceNamespacedPodStatus({ name, namespace: "default", body: pod });
          return 200;
        } catch (error) {
          return statusOf(error);
        }
      };
      expect(await setRunning("on-vnode-1")).toBe(200);
      expect(await setRunning("on-vnode-2")).toBe(403);
      const mine = await admin.readNamespacedPod({ name: "on-vnode-1", namespace: "default" });
      expect(mine.status?.phase).toBe("Running");
    } finally {
      await cp.stop();
    }
  });

  it("restarts kube-apiserver on the same port, etcd and certificates: data and clients survive", async () => {
    const cp = await startControlPlane();
    try {
      // A client made before the restart, used after it.
      const core = cp.kubeConfig().makeApiClient(CoreV1Api);
      await core.createNamespacedConfigMap({
        namespace: "default",
        body: { metadata: { name: "before-restart" }, data: { kept: "yes" } },
      });
      const apiserverPids = (): number[] =>
        execFileSync("pgrep", ["-f", `kube-apiserver.*--secure-port=${new URL(cp.server).port}`], {
          encoding: "utf8",
        })
          .trim()
          .split("\n")
          .map(Number);
      const [firstPid] = apiserverPids();

      await cp.stopApiServer();
      expect(await portOpen(cp.server)).toBe(false);
      const whileDown = await core
        .readNamespacedConfigMap({ name: "before-restart", namespace: "default" })
        .then(
          () => "answered",
          () => "refused",
        );
      expect(whileDown).toBe("refused");

      await cp.startApiServer();
      expect(await portOpen(cp.server)).toBe(true);
      const [secondPid] = apiserverPids();
      expect(secondPid).not.toBe(firstPid);
      const kept = await core.readNamespacedConfigMap({
        name: "before-restart",
        namespace: "default",
      });
      expect(kept.data).toEqual({ kept: "yes" });

      // restartApiServer does both, with the port closed for downMs in between.
      await cp.restartApiServer({ downMs: 500 });
      const [thirdPid] = apiserverPids();
      expect(thirdPid).not.toBe(secondPid);
      const list = await core.listNamespacedConfigMap({ namespace: "default" });
      expect(list.items.map((c) => c.metadata?.name)).toContain("before-restart");
    } finally {
      await cp.stop();
    }
    await expect(cp.startApiServer()).rejects.toMatchObject({ code: "Closed" });
  });

  it("stops cleanly: no process, port or temporary folder left", async () => {
    const cp = await startControlPlane();
    const { certDir, server } = cp.info();
    const pids = execFileSync("pgrep", ["-f", dirname(certDir)], { encoding: "utf8" })
      .trim()
      .split("\n")
      .map(Number);
    expect(pids.length).toBeGreaterThanOrEqual(1);
    expect(await portOpen(server)).toBe(true);

    await cp.stop();
    expect(pids.filter(alive)).toEqual([]);
    expect(await portOpen(server)).toBe(false);
    expect(existsSync(certDir)).toBe(false);
  });
});
