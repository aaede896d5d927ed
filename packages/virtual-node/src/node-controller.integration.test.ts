import { CoordinationV1Api, CoreV1Api } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseVirtualNodeConfig } from "./config.js";
import type { NodeHealth, NodeHealthSource } from "./lifecycle.js";
import { NodeController } from "./node-controller.js";
import { applyManifest, SERVICE_ACCOUNT_GROUPS, VNODE_SERVICE_ACCOUNT } from "./testing/rbac.js";

const { controlPlane } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const leases = admin.makeApiClient(CoordinationV1Api);

/** A health source the test switches, as the provider's poll would. */
class Switch implements NodeHealthSource {
  #health: NodeHealth = { ready: true, reason: "EC2Reachable", message: "EC2 answers the poll" };
  readonly #listeners = new Set<(h: NodeHealth) => void>();
  health(): NodeHealth {
    return this.#health;
  }
  onNodeHealth(listener: (h: NodeHealth) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
  set(health: NodeHealth): void {
    this.#health = health;
    for (const l of this.#listeners) l(health);
  }
}

async function until<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  ms = 30_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe("NodeController against kube-apiserver, as the app's ServiceAccount", () => {
  const config = parseVirtualNodeConfig({
    nodeName: "vnode-it-node",
    capacity: { cpu: "100", memory: "512Gi", pods: "30" },
    leaseRenewIntervalSeconds: 1,
    statusUpdateIntervalSeconds: 60,
  });
  const health = new Switch();
  const stop = new AbortController();
  let controller: NodeController;
  let running: Promise<void>;

  beforeAll(async () => {
    await applyManifest(admin, "namespace.yaml");
    await applyManifest(admin, "rbac.yaml");
    const asApp = controlPlane.clientFor(VNODE_SERVICE_ACCOUNT, SERVICE_ACCOUNT_GROUPS);
    controller = new NodeController({ kubeConfig: asApp, config, health });
    running = controller.run(stop.signal);
  });
  afterAll(async () => {
    stop.abort();
    await running;
  });

  it("registers the Node with the virtual-kubelet labels, the taint, capacity, conditions and endpoints", async () => {
    const node = await until("the Node", () => core.readNode({ name: config.nodeName }));
    expect(node.metadata?.labels).toMatchObject({
      type: "virtual-kubelet",
      "kubernetes.io/role": "agent",
      "kubernetes.io/os": "linux",
      "nebula.dev/provider": "nebula",
    });
    // (the API server's admission adds node.kubernetes.io/not-ready until the node controller clears it)
    expect(node.spec?.taints).toContainEqual(
      expect.objectContaining({
        key: "virtual-kubelet.io/provider",
        value: "nebula",
        effect: "NoSchedule",
      }),
    );
    expect(node.status?.capacity).toMatchObject({ cpu: "100", memory: "512Gi", pods: "30" });
    expect(node.status?.daemonEndpoints?.kubeletEndpoint?.Port).toBe(10250);
    expect(node.status?.nodeInfo?.kubeletVersion).toBe("v1.35.4-nebula");
    const ready = node.status?.conditions?.find((c) => c.type === "Ready");
    expect(ready).toMatchObject({ status: "True", reason: "EC2Reachable" });
  });

  it("creates the Lease owned by the Node and renews it", async () => {
    const first = await until("the Lease", () =>
      leases.readNamespacedLease({ name: config.nodeName, namespace: "kube-node-lease" }),
    );
    expect(first.spec?.holderIdentity).toBe(config.nodeName);
    expect(first.spec?.leaseDurationSeconds).toBe(40);
    expect(first.metadata?.ownerReferences?.[0]).toMatchObject({
      kind: "Node",
      name: config.nodeName,
    });
    const renewed = await until("a renewal", async () => {
      const lease = await leases.readNamespacedLease({
        name: config.nodeName,
        namespace: "kube-node-lease",
      });
      return Date.parse(String(lease.spec?.renewTime)) > Date.parse(String(first.spec?.renewTime))
        ? lease
        : undefined;
    });
    expect(renewed.spec?.renewTime).toBeDefined();
    expect(controller.stats().leaseFailures).toBe(0);
  });

  it("turns the Node NotReady when the provider reports an outage, at once, and back", async () => {
    health.set({ ready: false, reason: "EC2Unavailable", message: "EC2 failed 3 polls in a row" });
    await until("NotReady", async () => {
      const node = await core.readNode({ name: config.nodeName });
      const ready = node.status?.conditions?.find((c) => c.type === "Ready");
      return ready?.status === "False" && ready.reason === "EC2Unavailable" ? node : undefined;
    });
    health.set({ ready: true, reason: "EC2Reachable", message: "EC2 answers the poll" });
    await until("Ready", async () => {
      const node = await core.readNode({ name: config.nodeName });
      return node.status?.conditions?.find((c) => c.type === "Ready")?.status === "True"
        ? node
        : undefined;
    });
  });

  it("keeps conditions others own, and writes nothing while nothing changes", async () => {
    await core.patchNodeStatus(
      {
        name: config.nodeName,
        body: {
          status: { conditions: [{ type: "ExternalCheck", status: "True", reason: "Fine" }] },
        },
      },
      (await import("@kubernetes/client-node")).setHeaderOptions(
        "Content-Type",
        "application/strategic-merge-patch+json",
      ),
    );
    const before = controller.stats().statusWrites;
    await new Promise((r) => setTimeout(r, 3_000));
    expect(controller.stats().statusWrites).toBe(before);
    await controller.updateStatus(true);
    const node = await core.readNode({ name: config.nodeName });
    expect(node.status?.conditions?.map((c) => c.type)).toContain("ExternalCheck");
  });

  it("advertises InternalIP only, and drops a Hostname address an earlier version wrote", async () => {
    await core.patchNodeStatus(
      {
        name: config.nodeName,
        body: { status: { addresses: [{ type: "Hostname", address: config.nodeName }] } },
      },
      (await import("@kubernetes/client-node")).setHeaderOptions(
        "Content-Type",
        "application/strategic-merge-patch+json",
      ),
    );
    const stale = await core.readNode({ name: config.nodeName });
    expect(stale.status?.addresses?.map((a) => a.type).sort()).toEqual(["Hostname", "InternalIP"]);
    await controller.updateStatus(true);
    const node = await core.readNode({ name: config.nodeName });
    expect(node.status?.addresses).toEqual([{ type: "InternalIP", address: "127.0.0.1" }]);
  });
});
