import {
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Node,
} from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseVirtualNodeConfig } from "./config.js";
import type { NodeHealth, NodeHealthSource } from "./lifecycle.js";
import type { DrainProgress } from "./node.js";
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

describe("NodeController with drain (node.drain), as the app's ServiceAccount", () => {
  const nodeName = "vnode-it-drain";
  const draining = parseVirtualNodeConfig({ nodeName, leaseRenewIntervalSeconds: 1, drain: true });
  const health = new Switch();
  /** What the test says is left, as the app's Pod cache and poll would. */
  const progress: { pods: number | undefined; instances: number | undefined } = {
    pods: undefined,
    instances: undefined,
  };
  const drained = (node: V1Node) => node.status?.conditions?.find((c) => c.type === "Drained");
  let asApp: KubeConfig;

  beforeAll(async () => {
    await applyManifest(admin, "namespace.yaml");
    await applyManifest(admin, "rbac.yaml");
    asApp = controlPlane.clientFor(VNODE_SERVICE_ACCOUNT, SERVICE_ACCOUNT_GROUPS);
  });
  afterAll(async () => {
    await core.deleteNode({ name: nodeName }).catch(() => undefined);
  });

  /** Runs a controller until `body` is done. */
  async function running(
    config: ReturnType<typeof parseVirtualNodeConfig>,
    body: (controller: NodeController) => Promise<void>,
  ): Promise<void> {
    const stop = new AbortController();
    const controller = new NodeController({
      kubeConfig: asApp,
      config,
      health,
      drainProgress: (): DrainProgress => ({ ...progress }),
    });
    const run = controller.run(stop.signal);
    try {
      await body(controller);
    } finally {
      stop.abort();
      await run;
    }
  }

  it("registers cordoned, says nothing is known until observed, follows what is left, undoes an uncordon, turns Drained at zero; off again, uncordons and drops the condition", async () => {
    // An uncordoned Node from before the drain, with someone else's condition.
    await running(parseVirtualNodeConfig({ nodeName, leaseRenewIntervalSeconds: 1 }), async () => {
      await until("registered", () => core.readNode({ name: nodeName }));
    });
    await running(draining, async (controller) => {
      const unknown = await until("cordoned, not known yet", async () => {
        const node = await core.readNode({ name: nodeName });
        return node.spec?.unschedulable === true &&
          drained(node)?.message?.includes("not known yet")
          ? node
          : undefined;
      });
      expect(drained(unknown)).toMatchObject({ status: "False", reason: "Draining" });
      expect(unknown.metadata?.annotations?.["nebula.dev/drain-cordoned"]).toBe("true");
      Object.assign(progress, { pods: 2, instances: 2 });
      await until("2 Pods and 2 instances left", async () => {
        const node = await core.readNode({ name: nodeName });
        return drained(node)?.message?.includes("2 Pods bound and 2 instances") ? node : undefined;
      });
      // Someone uncordons it: the cordon is back within a tick.
      await core.patchNode(
        { name: nodeName, body: { spec: { unschedulable: false } } },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
      await until("cordoned again", async () =>
        (await core.readNode({ name: nodeName })).spec?.unschedulable === true ? true : undefined,
      );
      // The Pods finished but an instance is not terminated yet: not drained.
      Object.assign(progress, { pods: 0, instances: 1 });
      await until("0 Pods and 1 instance left", async () => {
        const node = await core.readNode({ name: nodeName });
        return drained(node)?.message?.includes("0 Pods bound and 1 instance") ? node : undefined;
      });
      expect(controller.drained()).toBe(false);
      Object.assign(progress, { pods: 0, instances: 0 });
      const done = await until("Drained", async () => {
        const node = await core.readNode({ name: nodeName });
        return drained(node)?.status === "True" ? node : undefined;
      });
      expect(drained(done)?.reason).toBe("Drained");
      expect(controller.drained()).toBe(true);
      // Nothing changes: nothing is written, though the drain is checked every tick.
      const writes = controller.stats().statusWrites;
      await new Promise((r) => setTimeout(r, 3_000));
      expect(controller.stats().statusWrites).toBe(writes);
    });
    await running(parseVirtualNodeConfig({ nodeName, leaseRenewIntervalSeconds: 1 }), async () => {
      const back = await until("uncordoned, no Drained condition", async () => {
        const node = await core.readNode({ name: nodeName });
        return node.spec?.unschedulable !== true && drained(node) === undefined ? node : undefined;
      });
      expect(back.metadata?.annotations?.["nebula.dev/drain-cordoned"]).toBeUndefined();
      expect(back.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
    });
  });

  it("leaves a Node cordoned by hand cordoned when the drain goes off", async () => {
    await core.patchNode(
      { name: nodeName, body: { spec: { unschedulable: true } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await running(draining, async () => {
      await until("Draining", async () =>
        drained(await core.readNode({ name: nodeName })) ? true : undefined,
      );
    });
    await running(parseVirtualNodeConfig({ nodeName, leaseRenewIntervalSeconds: 1 }), async () => {
      await until("the condition gone", async () =>
        drained(await core.readNode({ name: nodeName })) === undefined ? true : undefined,
      );
      // Not ours to undo: no mark was set, since the Node was cordoned already.
      const node = await core.readNode({ name: nodeName });
      expect(node.spec?.unschedulable).toBe(true);
      expect(node.metadata?.annotations?.["nebula.dev/drain-cordoned"]).toBeUndefined();
    });
  });
});

describe("NodeController with quantities the API server respells", () => {
  const nodeName = "vnode-it-quantities";
  // Stored as "1k", "4Ti" and "1k": the same values, spelled otherwise.
  const config = parseVirtualNodeConfig({
    nodeName,
    capacity: { cpu: "1000", memory: "4096Gi", pods: "1000" },
    leaseRenewIntervalSeconds: 1,
    statusUpdateIntervalSeconds: 60,
  });

  afterAll(async () => {
    await core.deleteNode({ name: nodeName }).catch(() => undefined);
  });

  it("sees no change in its own capacity as stored, so a quiet Node is not written", async () => {
    await applyManifest(admin, "namespace.yaml");
    await applyManifest(admin, "rbac.yaml");
    const asApp = controlPlane.clientFor(VNODE_SERVICE_ACCOUNT, SERVICE_ACCOUNT_GROUPS);
    const stop = new AbortController();
    const controller = new NodeController({ kubeConfig: asApp, config, health: new Switch() });
    const run = controller.run(stop.signal);
    try {
      const node = await until("the Node registered with its status", async () => {
        const n = await core.readNode({ name: nodeName });
        return n.status?.capacity?.pods === undefined ? undefined : n;
      });
      expect(node.status?.capacity).toMatchObject({ cpu: "1k", memory: "4Ti", pods: "1k" });
      await controller.updateStatus(true);
      const writes = controller.stats().statusWrites;
      expect(await controller.updateStatus(false)).toBe(false);
      expect(controller.stats().statusWrites).toBe(writes);
    } finally {
      stop.abort();
      await run;
    }
  });
});
