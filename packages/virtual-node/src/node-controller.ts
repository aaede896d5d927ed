/**
 * The Node controller: registers the virtual Node, keeps its status (conditions from the
 * provider's health) and renews its heartbeat Lease in `kube-node-lease`.
 *
 * @packageDocumentation
 */
import {
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Lease,
  V1MicroTime,
  type V1Node,
} from "@kubernetes/client-node";
import { abortableSleep } from "@nebula/kube/controller";
import type { VirtualNodeConfig } from "./config.js";
import { VirtualNodeError } from "./errors.js";
import type { NodeHealth, NodeHealthSource } from "./lifecycle.js";
import {
  buildLease,
  buildNode,
  NODE_LEASE_NAMESPACE,
  nodeStatus,
  nodeStatusChanged,
} from "./node.js";

/** Options of {@link NodeController}. */
export interface NodeControllerOptions {
  /** Where and as whom to connect. */
  readonly kubeConfig: KubeConfig;
  /** The parsed configuration. */
  readonly config: VirtualNodeConfig;
  /** The provider's health, for the Node's conditions. */
  readonly health: NodeHealthSource;
  /** The clock in epoch ms (default `Date.now`). */
  readonly now?: () => number;
  /** One-line diagnostics. */
  readonly log?: (level: "info" | "warn" | "error", message: string) => void;
}

/** What the Node controller has done, for metrics and tests. */
export interface NodeControllerStats {
  /** Node status writes. */
  readonly statusWrites: number;
  /** Lease renewals that succeeded. */
  readonly leaseRenewals: number;
  /** Lease renewals that failed. */
  readonly leaseFailures: number;
}

function statusCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "number" ? code : undefined;
}

/**
 * Registers the Node (creating it, or bringing its labels and taint up to date), writes its status
 * when the provider's health changes and at least every `statusUpdateIntervalSeconds`, and renews
 * its Lease every `leaseRenewIntervalSeconds` (duration `leaseDurationSeconds`). Needs `get`,
 * `create`, `patch` on `nodes`, `patch` on `nodes/status`, and `get`, `create`, `update` on
 * `leases` in `kube-node-lease`.
 *
 * @example
 * ```ts
 * const nodes = new NodeController({ kubeConfig, config, health: provider });
 * await nodes.run(signal); // until the signal aborts
 * ```
 */
export class NodeController {
  readonly #options: NodeControllerOptions;
  readonly #core: CoreV1Api;
  readonly #coordination: CoordinationV1Api;
  readonly #now: () => number;
  #node: V1Node | undefined;
  #lease: V1Lease | undefined;
  #lastStatusAt = 0;
  #healthChanged = true;
  #wake: (() => void) | undefined;
  #stats = { statusWrites: 0, leaseRenewals: 0, leaseFailures: 0 };

  constructor(options: NodeControllerOptions) {
    this.#options = options;
    this.#core = options.kubeConfig.makeApiClient(CoreV1Api);
    this.#coordination = options.kubeConfig.makeApiClient(CoordinationV1Api);
    this.#now = options.now ?? Date.now;
  }

  /** True once the Node is registered. */
  registered(): boolean {
    return this.#node !== undefined;
  }

  /** Counters of writes and renewals. */
  stats(): NodeControllerStats {
    return { ...this.#stats };
  }

  /**
   * Registers the Node, then keeps its status and Lease until `signal` aborts. A failed request is
   * retried on the next tick; only a Node that cannot be registered at all delays the loop.
   */
  async run(signal: AbortSignal): Promise<void> {
    const unsubscribe = this.#options.health.onNodeHealth(() => {
      this.#healthChanged = true;
      this.#wake?.();
    });
    try {
      const { config } = this.#options;
      let nextLeaseAt = 0;
      while (!signal.aborted) {
        try {
          if (this.#node === undefined) await this.registerNode();
          const now = this.#now();
          if (now >= nextLeaseAt) {
            await this.renewLease();
            nextLeaseAt = now + config.leaseRenewIntervalSeconds * 1000;
          }
          const due = now - this.#lastStatusAt >= config.statusUpdateIntervalSeconds * 1000;
          if (due || this.#healthChanged) await this.updateStatus(due);
        } catch (error) {
          this.#log("warn", `node ${config.nodeName}: ${(error as Error).message}`);
        }
        const wait = Math.max(
          100,
          Math.min(nextLeaseAt - this.#now(), config.leaseRenewIntervalSeconds * 1000),
        );
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
          void abortableSleep(wait, signal).then(resolve);
        });
        this.#wake = undefined;
      }
    } finally {
      unsubscribe();
    }
  }

  /** Creates the Node, or brings the labels and taint of an existing one up to date. */
  async registerNode(): Promise<V1Node> {
    const { config, health } = this.#options;
    const desired = buildNode(config, health.health(), new Date(this.#now()));
    let node: V1Node;
    try {
      node = await this.#core.readNode({ name: config.nodeName });
    } catch (error) {
      if (statusCode(error) !== 404) throw this.#failure("GET node", error);
      try {
        node = await this.#core.createNode({ body: desired });
        this.#stats.statusWrites++;
        this.#lastStatusAt = this.#now();
        this.#healthChanged = false;
        this.#log("info", `registered node ${config.nodeName}`);
        this.#node = node;
        return node;
      } catch (createError) {
        if (statusCode(createError) !== 409) throw this.#failure("create node", createError);
        node = await this.#core.readNode({ name: config.nodeName });
      }
    }
    const labels = desired.metadata?.labels ?? {};
    const stale =
      Object.entries(labels).some(([k, v]) => node.metadata?.labels?.[k] !== v) ||
      JSON.stringify(node.spec?.taints ?? []) !== JSON.stringify(desired.spec?.taints);
    if (stale) {
      const others = (node.spec?.taints ?? []).filter(
        (t) => !desired.spec?.taints?.some((d) => d.key === t.key && d.effect === t.effect),
      );
      node = await this.#core.patchNode(
        {
          name: config.nodeName,
          body: {
            metadata: { labels },
            spec: { taints: [...(desired.spec?.taints ?? []), ...others] },
          },
        },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
    }
    this.#node = node;
    this.#healthChanged = true;
    return node;
  }

  /**
   * Writes the Node status (strategic merge: conditions others own are kept) when it changed, or
   * when `force` (the periodic update, which also refreshes the heartbeat times).
   */
  async updateStatus(force: boolean): Promise<boolean> {
    const { config, health } = this.#options;
    const node = this.#node;
    if (node === undefined) return false;
    this.#healthChanged = false;
    const desired = nodeStatus(
      config,
      health.health(),
      new Date(this.#now()),
      node.status?.conditions,
    );
    if (!force && !nodeStatusChanged(node.status, desired)) return false;
    try {
      this.#node = await this.#core.patchNodeStatus(
        {
          name: config.nodeName,
          // The addresses replace the stored list rather than merging into it, so an address the
          // Node no longer advertises (the `Hostname` of earlier versions) goes away.
          body: {
            status: {
              ...desired,
              addresses: [{ $patch: "replace" }, ...(desired.addresses ?? [])],
            },
          },
        },
        setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch),
      );
    } catch (error) {
      if (statusCode(error) === 404) {
        // The Node was deleted: register it again on the next tick.
        this.#node = undefined;
        this.#lease = undefined;
      }
      this.#healthChanged = true;
      throw this.#failure("PATCH node status", error);
    }
    this.#stats.statusWrites++;
    this.#lastStatusAt = this.#now();
    return true;
  }

  /** Renews the Lease (creating it, owned by the Node, when absent). */
  async renewLease(): Promise<void> {
    const { config } = this.#options;
    const uid = this.#node?.metadata?.uid;
    if (uid === undefined) return;
    const now = new Date(this.#now());
    try {
      if (this.#lease === undefined) {
        try {
          this.#lease = await this.#coordination.readNamespacedLease({
            name: config.nodeName,
            namespace: NODE_LEASE_NAMESPACE,
          });
        } catch (error) {
          if (statusCode(error) !== 404) throw error;
          this.#lease = await this.#coordination.createNamespacedLease({
            namespace: NODE_LEASE_NAMESPACE,
            body: buildLease(config, uid, now),
          });
          this.#stats.leaseRenewals++;
          return;
        }
      }
      const fresh = buildLease(config, uid, now);
      const body: V1Lease = {
        ...this.#lease,
        spec: {
          ...this.#lease.spec,
          holderIdentity: config.nodeName,
          leaseDurationSeconds: config.leaseDurationSeconds,
          renewTime: new V1MicroTime(now.getTime()),
        },
        metadata: {
          ...this.#lease.metadata,
          ownerReferences: fresh.metadata?.ownerReferences ?? [],
        },
      };
      if (body.spec?.acquireTime !== undefined) {
        body.spec.acquireTime = new V1MicroTime(Date.parse(String(body.spec.acquireTime)));
      }
      this.#lease = await this.#coordination.replaceNamespacedLease({
        name: config.nodeName,
        namespace: NODE_LEASE_NAMESPACE,
        body,
      });
      this.#stats.leaseRenewals++;
    } catch (error) {
      this.#stats.leaseFailures++;
      // Re-read on the next renewal (409: someone else wrote it; 404: it was deleted).
      this.#lease = undefined;
      throw this.#failure("renew lease", error);
    }
  }

  #failure(what: string, error: unknown): VirtualNodeError {
    const code = statusCode(error);
    return new VirtualNodeError(
      "RequestFailed",
      `${what} failed${code === undefined ? "" : ` (HTTP ${code})`}`,
      { cause: error },
    );
  }

  #log(level: "info" | "warn" | "error", message: string): void {
    this.#options.log?.(level, message);
  }
}

/** A {@link NodeHealthSource} that is always healthy (for a virtual node without a cloud). */
export function staticHealth(health: NodeHealth): NodeHealthSource {
  return { health: () => health, onNodeHealth: () => () => undefined };
}
