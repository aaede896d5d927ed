import { toProviderError } from "./errors.js";
import type { PodRecord, ProviderContext } from "./record.js";
import { isTerminalStatus } from "./status.js";

/**
 * What asking the API server to evict a Pod got: `evicted` (it is being deleted, with its grace
 * period), `blocked` (a PodDisruptionBudget allows no disruption now), or `gone` (no such Pod, or
 * its name belongs to another incarnation now). `@nebula/virtual-node`'s
 * `KubernetesPodApi.evict` answers exactly this.
 */
export type PodEvictionOutcome = "evicted" | "blocked" | "gone";

/** Asks the API server to evict one incarnation of a Pod ({@link PodEvictionOutcome}). */
export type EvictPod = (pod: {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
}) => Promise<PodEvictionOutcome>;

/** How long a refused (or failed) eviction waits before it is asked again. */
export const REBALANCE_EVICTION_RETRY_MS = 30_000;

interface Eviction {
  /** When it was last asked (ms since the epoch); undefined before the first ask. */
  askedAt: number | undefined;
  inFlight: boolean;
  /** A PodDisruptionBudget refused it and the Pod was told so (one Warning, not one per ask). */
  blockedSaid: boolean;
}

/**
 * Acting early on EC2's rebalance recommendations (`capacity.onRebalance: evict`): the Pod of a
 * Spot instance EC2 recommends moving off is evicted through the API server, so its controller
 * replaces it before an interruption, within its PodDisruptionBudgets. Every outcome is an Event
 * on the Pod; a refused eviction is asked again every {@link REBALANCE_EVICTION_RETRY_MS} until
 * it is taken, the Pod is gone or terminal, or EC2 interrupts it.
 *
 * State is this process's: a restarted vnode sees the host's report of the recommendation again
 * and asks again (an eviction is idempotent: a Pod already being deleted is evicted again as a
 * no-op).
 */
export class RebalanceEvictions {
  readonly #ctx: ProviderContext;
  readonly #evict: EvictPod | undefined;
  readonly #told: (record: PodRecord) => void;
  readonly #pending = new Map<string, Eviction>();

  /**
   * @param evict - The API server's eviction (`undefined`: none; `evict` then only says so).
   * @param told - Called after an Event was added to the Pod's record, to publish it.
   */
  constructor(
    ctx: ProviderContext,
    evict: EvictPod | undefined,
    told: (record: PodRecord) => void,
  ) {
    this.#ctx = ctx;
    this.#evict = evict;
    this.#told = told;
  }

  /**
   * Decides, on the Pod's first rebalance recommendation in this process, whether it is evicted;
   * returns what the Pod's `RebalanceRecommendation` Event says of it.
   */
  begin(record: PodRecord): string {
    if (this.#ctx.config.capacity.onRebalance !== "evict") {
      return "Nebula does not act on it (capacity.onRebalance: report), the Pod keeps running";
    }
    if (this.#evict === undefined) {
      return "capacity.onRebalance is evict, but this provider was given no way to evict (evictPod): the Pod keeps running";
    }
    if (record.facts.ownerKind === undefined || record.facts.ownerKind === "DaemonSet") {
      return "not evicted: no controller would replace the Pod (capacity.onRebalance: evict evicts only Pods a ReplicaSet, StatefulSet, Job or other controller owns), it keeps running";
    }
    this.#pending.set(record.facts.uid, {
      askedAt: undefined,
      inFlight: false,
      blockedSaid: false,
    });
    return `evicting the Pod so that its ${record.facts.ownerKind} replaces it before an interruption (capacity.onRebalance: evict; its PodDisruptionBudgets apply)`;
  }

  /**
   * Asks for the Pod's eviction if one is pending and due (the first time at once, then every
   * {@link REBALANCE_EVICTION_RETRY_MS}); a Pod deleted, terminal or gone is dropped. Never
   * throws: a failed ask is logged and asked again when due.
   */
  async drive(record: PodRecord): Promise<void> {
    const uid = record.facts.uid;
    const eviction = this.#pending.get(uid);
    if (eviction === undefined || eviction.inFlight || this.#evict === undefined) return;
    if (
      record.deleted ||
      this.#ctx.records.get(uid) !== record ||
      isTerminalStatus(record.status)
    ) {
      this.#pending.delete(uid);
      return;
    }
    const now = this.#ctx.now();
    if (eviction.askedAt !== undefined && now - eviction.askedAt < REBALANCE_EVICTION_RETRY_MS) {
      return;
    }
    eviction.inFlight = true;
    eviction.askedAt = now;
    const { namespace, name } = record.facts;
    try {
      const outcome = await this.#evict({ namespace, name, uid });
      if (outcome === "blocked") {
        if (!eviction.blockedSaid) {
          eviction.blockedSaid = true;
          record.events.push({
            type: "Warning",
            reason: "RebalanceEvictionBlocked",
            message: `the Pod's eviction for EC2's rebalance recommendation is refused: a PodDisruptionBudget allows no disruption now; asked again every ${REBALANCE_EVICTION_RETRY_MS / 1000} s while the instance runs`,
          });
          this.#told(record);
        }
        return;
      }
      this.#pending.delete(uid);
      if (outcome === "evicted") {
        record.events.push({
          type: "Normal",
          reason: "RebalanceEviction",
          message: `evicted for EC2's rebalance recommendation on Spot instance ${record.instanceId ?? ""}: the Pod stops with its grace period and its controller replaces it`,
        });
        this.#told(record);
      }
    } catch (error) {
      this.#ctx.log(
        "warn",
        `pod ${record.facts.key}: eviction for EC2's rebalance recommendation failed, asked again in ${REBALANCE_EVICTION_RETRY_MS / 1000} s: ${toProviderError(error, "evict").message}`,
      );
    } finally {
      eviction.inFlight = false;
    }
  }

  /** UIDs of the Pods whose eviction is pending (tests, diagnostics). */
  pendingUids(): string[] {
    return [...this.#pending.keys()];
  }
}
