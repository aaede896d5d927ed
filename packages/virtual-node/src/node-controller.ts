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
  DRAIN_CORDON_ANNOTATION,
  DRAINED_CONDITION,
  type DrainProgress,
  drainCondition,
  isDrained,
  NODE_LEASE_NAMESPACE,
  nodeSpecPatch,
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
  /**
   * With `config.drain`: what is left on the node (Pods bound, instances not terminated), for
   * the `Drained` condition. Without it nothing is ever observed, so the drain is never reported
   * done.
   */
  readonly drainProgress?: () => DrainProgress;
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
 * Registers the Node (creating it, or bringing its labels and taints up to date), writes its status
 * when the provider's health changes and at least every `statusUpdateIntervalSeconds`, and renews
 * its Lease every `leaseRenewIntervalSeconds` (duration `leaseDurationSeconds`). Needs `get`,
 * `create`, `patch` on `nodes`, `patch` on `nodes/status`, and `get`, `create`, `update` on
 * `leases` in `kube-node-lease`.
 *
 * With `config.drain` it cordons the Node (`spec.unschedulable`, again on the next tick if someone
 * uncordons it), keeps a `Drained` condition from `drainProgress` (checked every tick) and logs
 * once when nothing is left; it never deletes a Pod. With the drain off again it uncordons a
 * Node it cordoned and removes the condition.
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
  #drained = false;
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
          // A drain (or the end of one) is checked on every tick: the cordon is put back if
          // someone uncordoned the Node, and the Drained condition follows what is left.
          // While draining the Node is read afresh (one GET a tick), so that an uncordon by
          // someone else is seen at once, not at the next status write.
          if (config.drain && this.#node !== undefined)
            this.#node = await this.#core.readNode({ name: config.nodeName });
          const draining = config.drain || this.#marked();
          if (draining) await this.reconcileSpec();
          const due = now - this.#lastStatusAt >= config.statusUpdateIntervalSeconds * 1000;
          if (due || this.#healthChanged) await this.updateStatus(due);
          else if (draining || this.#hasDrainedCondition()) {
            // Only a change of the Drained condition is written between the periodic updates.
            if (this.#drainConditionChanged()) await this.updateStatus(true);
          }
          this.#reportDrained();
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
    const desired = buildNode(
      config,
      health.health(),
      new Date(this.#now()),
      undefined,
      this.#progress(),
    );
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
    this.#node = node;
    this.#healthChanged = true;
    try {
      await this.reconcileSpec();
    } catch (error) {
      // Not registered until its labels, taints and cordon are right: tried again next tick.
      this.#node = undefined;
      throw error;
    }
    return this.#node ?? node;
  }

  /**
   * Brings the registered Node's labels, taints and drain cordon up to date ({@link nodeSpecPatch})
   * with one merge patch; returns whether it wrote. A cordon or uncordon is logged.
   */
  async reconcileSpec(): Promise<boolean> {
    const { config, health } = this.#options;
    const stored = this.#node;
    if (stored === undefined) return false;
    const desired = buildNode(config, health.health(), new Date(this.#now()));
    const patch = nodeSpecPatch(desired, stored, config.drain);
    if (patch === undefined) return false;
    try {
      this.#node = await this.#core.patchNode(
        { name: config.nodeName, body: patch },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
    } catch (error) {
      if (statusCode(error) === 404) {
        this.#node = undefined;
        this.#lease = undefined;
      }
      throw this.#failure("PATCH node", error);
    }
    if (patch.spec?.unschedulable === true)
      this.#log("info", `node ${config.nodeName}: drain is on, cordoned (no new Pod is scheduled)`);
    if (patch.spec?.unschedulable === false)
      this.#log("info", `node ${config.nodeName}: drain is off, uncordoned`);
    return true;
  }

  /** True when the stored Node carries the drain's cordon mark. */
  #marked(): boolean {
    return this.#node?.metadata?.annotations?.[DRAIN_CORDON_ANNOTATION] !== undefined;
  }

  /** True when the stored Node still has a Drained condition although the drain is off. */
  #hasDrainedCondition(): boolean {
    return (
      !this.#options.config.drain &&
      (this.#node?.status?.conditions ?? []).some((c) => c.type === DRAINED_CONDITION)
    );
  }

  /** True when the stored Drained condition is not what the drain says now (or is left over). */
  #drainConditionChanged(): boolean {
    const stored = this.#node?.status?.conditions?.find((c) => c.type === DRAINED_CONDITION);
    if (!this.#options.config.drain) return stored !== undefined;
    const want = drainCondition(
      this.#progress() ?? { pods: undefined, instances: undefined },
      new Date(this.#now()),
      undefined,
    );
    return (
      stored?.status !== want.status ||
      stored.reason !== want.reason ||
      stored.message !== want.message
    );
  }

  #progress(): DrainProgress | undefined {
    return this.#options.config.drain ? this.#options.drainProgress?.() : undefined;
  }

  /** Logs once when the drain is done (and again if it was undone and done again). */
  #reportDrained(): void {
    if (!this.#options.config.drain) return;
    const progress = this.#progress();
    const drained = progress !== undefined && isDrained(progress);
    if (drained && !this.#drained)
      this.#log(
        "info",
        `node ${this.#options.config.nodeName} drained: no Pod is bound and no instance is left; it can be removed`,
      );
    this.#drained = drained;
  }

  /** True once a drain is done (see {@link isDrained}); false while not draining. */
  drained(): boolean {
    return this.#drained;
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
      this.#progress(),
    );
    // A drain turned off takes its condition with it (a strategic merge keeps conditions the
    // patch does not name, so it is deleted by name).
    const stale =
      !config.drain && node.status?.conditions?.some((c) => c.type === DRAINED_CONDITION) === true;
    if (!force && !stale && !nodeStatusChanged(node.status, desired)) return false;
    try {
      this.#node = await this.#core.patchNodeStatus(
        {
          name: config.nodeName,
          // The addresses replace the stored list rather than merging into it, so an address the
          // Node no longer advertises (the `Hostname` of earlier versions) goes away.
          body: {
            status: {
              ...desired,
              conditions: [
                ...(desired.conditions ?? []),
                ...(stale ? [{ type: DRAINED_CONDITION, $patch: "delete" }] : []),
              ],
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
