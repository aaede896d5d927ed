import type { V1PodStatus } from "@kubernetes/client-node";
import { isSpotInterruptionMarked, needsConsoleOutput } from "@nebula/state-mapping";
import type { PodStatusChange, PodStatusListener } from "@nebula/virtual-node";
import { toProviderError } from "./errors.js";
import { notifyAll } from "./listeners.js";
import { type EvictPod, RebalanceEvictions } from "./rebalance.js";
import {
  deliveryOf,
  type PodRecord,
  type ProviderContext,
  refreshState,
  sameDelivery,
  withStatus,
} from "./record.js";
import { type StartupBreakdown, startupBreakdown, startupLine } from "./startup.js";
import { isTerminalStatus, podStatus } from "./status.js";

const CONSOLE_RETRY_MS = 5 * 60 * 1000;

/** A Pod's first Ready, broken down by phase ({@link StatusPublisher.onStartup}). */
export interface PodStartup {
  /** The Pod's UID. */
  readonly podUid: string;
  /** `namespace/name`. */
  readonly pod: string;
  /** Seconds per phase, and in all (`warm`: it started on a warm-pool host). */
  readonly breakdown: StartupBreakdown;
}

/**
 * A Spot signal about a Pod's instance ({@link StatusPublisher.onSpotSignal}): EC2's interruption
 * notice (the Pod is marked `DisruptionTarget`), or its rebalance recommendation.
 */
export interface SpotSignal {
  /** The Pod's UID. */
  readonly podUid: string;
  /** `namespace/name`. */
  readonly pod: string;
  /** The Pod's namespace. */
  readonly namespace: string;
  /** `interruption`: EC2 is reclaiming the instance; `rebalance`: EC2 recommends moving off it. */
  readonly kind: "interruption" | "rebalance";
  /**
   * For an interruption whose host reported the notice: seconds from the supervisor seeing the
   * notice to the Pod's marked status being published (whole seconds on the host side).
   */
  readonly noticeToMarkSeconds?: number;
}

const ready = (status: V1PodStatus | undefined) =>
  status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") === true;

/**
 * Turns what was observed of a Pod's instance into its status and delivers it: one publication
 * per Pod at a time, each change (status, instance facts, Events) delivered once, and again until
 * every listener resolved. A stopped instance without a readable exit report holds its status
 * until the console has been read after the settle window: no Pod is failed on a guess.
 */
export class StatusPublisher {
  readonly #ctx: ProviderContext;
  readonly #listeners = new Set<PodStatusListener>();
  readonly #startupListeners = new Set<(startup: PodStartup) => void>();
  readonly #spotListeners = new Set<(signal: SpotSignal) => void>();
  readonly #evictions: RebalanceEvictions;

  /** @param evictPod - The API server's eviction, for `capacity.onRebalance: evict`. */
  constructor(ctx: ProviderContext, evictPod?: EvictPod) {
    this.#ctx = ctx;
    this.#evictions = new RebalanceEvictions(ctx, evictPod, (record) => {
      void this.publish(record);
    });
  }

  /** Subscribes to status changes; returns the unsubscribe. */
  subscribe(listener: PodStatusListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Subscribes to Spot signals: a Pod first marked for EC2's interruption of its instance, EC2's
   * first rebalance recommendation for it (once per Pod and process); returns the unsubscribe.
   */
  onSpotSignal(listener: (signal: SpotSignal) => void): () => void {
    this.#spotListeners.add(listener);
    return () => this.#spotListeners.delete(listener);
  }

  /** Subscribes to Pods' first Ready, broken down by phase; returns the unsubscribe. */
  onStartup(listener: (startup: PodStartup) => void): () => void {
    this.#startupListeners.add(listener);
    return () => this.#startupListeners.delete(listener);
  }

  /** True when the stopped instance's console should be read now (no readable report tags). */
  needsConsole(record: PodRecord): boolean {
    if (record.observed?.state !== "stopped" || record.stoppedSince === undefined) return false;
    if (record.state === undefined || !needsConsoleOutput(record.state)) return false;
    const now = this.#ctx.now();
    if (now - record.stoppedSince < this.#ctx.config.consoleSettleSeconds * 1000) return false;
    return record.consoleReadAt === undefined || now - record.consoleReadAt >= CONSOLE_RETRY_MS;
  }

  /** Reads the console of the Pod's instance (`GetConsoleOutput`); a failure is logged. */
  async readConsole(record: PodRecord): Promise<void> {
    const instanceId = record.instanceId;
    if (instanceId === undefined) return;
    record.consoleReadAt = this.#ctx.now();
    try {
      record.consoleOutput = await this.#ctx.gateway.consoleOutput(instanceId);
    } catch (error) {
      this.#ctx.log("warn", toProviderError(error, `GetConsoleOutput ${instanceId}`).message);
    }
  }

  /**
   * Recomputes `record.status` of a launched Pod from its instance state; `false` when there is
   * nothing to compute from yet (not observed), or the status is held (stopped without a readable
   * report, until the console has been read after the settle window).
   */
  computeStatus(record: PodRecord): boolean {
    if (record.state === undefined) refreshState(this.#ctx, record);
    const state = record.state;
    if (state === undefined) return false;
    if (record.observed?.state === "stopped" && !record.missing && needsConsoleOutput(state)) {
      return false;
    }
    const health = this.#ctx.health.current;
    record.status = podStatus({
      pod: record.status === undefined ? record.pod : { ...record.pod, status: record.status },
      state,
      now: new Date(this.#ctx.now()),
      launchError: record.launchError,
      ec2Unavailable: health.ready ? undefined : health.message,
    });
    return true;
  }

  /** Publishes the Pod's status and Events to the listeners, one publication per Pod at a time. */
  publish(record: PodRecord): Promise<void> {
    const next = (record.publishing ?? Promise.resolve()).then(() => this.#publishNow(record));
    const settled = next.catch(() => undefined);
    record.publishing = settled;
    void settled.then(() => {
      if (record.publishing === settled) record.publishing = undefined;
    });
    return next;
  }

  async #publishNow(record: PodRecord): Promise<void> {
    if (record.mode === "launch" && !this.computeStatus(record)) return;
    const status = record.status;
    if (status === undefined) return;
    this.#noteStartup(record, status);
    this.#noteSpot(record, status);
    // A pending eviction for a rebalance recommendation is asked for (when due) beside this one.
    void this.#evictions.drive(record);
    const delivery = deliveryOf(record, status);
    if (sameDelivery(record.delivered, delivery) && record.events.length === 0) return;
    // A copy: an Event added while the listeners write (an eviction's outcome) is the next one's.
    const events = [...record.events];
    const [, instance] = delivery;
    const copy = structuredClone(status);
    const change: PodStatusChange = {
      pod: withStatus(record),
      status: copy,
      terminal: isTerminalStatus(status),
      events,
      ...(instance ? { instance } : {}),
    };
    const results = await Promise.allSettled([...this.#listeners].map(async (l) => l(change)));
    const failed = results.find((r) => r.status === "rejected");
    if (failed) {
      this.#ctx.log(
        "warn",
        `status of pod ${record.facts.key} not written: ${String(failed.reason)}`,
      );
      return;
    }
    record.delivered = [structuredClone(copy), instance, delivery[2]];
    record.events = record.events.slice(events.length);
  }

  /**
   * The Spot signals in a status about to be published: the Pod first marked `DisruptionTarget`
   * for a Spot interruption (a Warning Event `SpotInterruption`, unless the status it had already
   * carried the mark), and the first rebalance recommendation its host reported (a Normal Event
   * `RebalanceRecommendation`). Nebula does not act on a recommendation: EC2 may never interrupt.
   */
  #noteSpot(record: PodRecord, status: V1PodStatus): void {
    const base = {
      podUid: record.facts.uid,
      pod: record.facts.key,
      namespace: record.facts.namespace,
    };
    if (!record.interruptionNoted && isSpotInterruptionMarked(status)) {
      record.interruptionNoted = true;
      if (!isSpotInterruptionMarked(record.delivered?.[0] ?? record.pod.status)) {
        const mark = status.conditions?.find((c) => c.type === "DisruptionTarget");
        record.events.push({
          type: "Warning",
          reason: "SpotInterruption",
          message: mark?.message ?? "EC2 is reclaiming the Spot instance",
        });
        const seen = Date.parse(record.state?.report?.stopRequestedAt ?? "");
        const signal: SpotSignal =
          record.state?.report?.interruption !== undefined && Number.isFinite(seen)
            ? {
                ...base,
                kind: "interruption",
                noticeToMarkSeconds: Math.max(0, (this.#ctx.now() - seen) / 1000),
              }
            : { ...base, kind: "interruption" };
        notifyAll(this.#spotListeners, (listener) => listener(signal));
      }
    }
    const rebalance = record.state?.report?.rebalance;
    if (!record.rebalanceNoted && rebalance !== undefined) {
      record.rebalanceNoted = true;
      record.events.push({
        type: "Normal",
        reason: "RebalanceRecommendation",
        message: `EC2 recommends moving off Spot instance ${record.instanceId ?? ""} (notice at ${rebalance.time}): it is at elevated risk of interruption; ${this.#evictions.begin(record)}`,
      });
      notifyAll(this.#spotListeners, (listener) => listener({ ...base, kind: "rebalance" }));
    }
  }

  /**
   * The first time this process sees the Pod's status turn Ready, from a status (delivered, or
   * stored in the API) that was not, with no container restarted: its start-up, broken down in an
   * Event (`StartupTimes`) and to the start-up listeners. A Pod already Ready when this process
   * first saw it (a vnode restart) or Ready again after a restart is no start-up.
   */
  #noteStartup(record: PodRecord, status: V1PodStatus): void {
    if (record.startupNoted || !ready(status)) return;
    record.startupNoted = true;
    if (ready(record.delivered?.[0] ?? record.pod.status)) return;
    if (status.containerStatuses?.some((c) => (c.restartCount ?? 0) > 0)) return;
    const breakdown = startupBreakdown({
      createdAt: record.pod.metadata?.creationTimestamp,
      scheduledAt: record.pod.status?.conditions?.find(
        (c) => c.type === "PodScheduled" && c.status === "True",
      )?.lastTransitionTime,
      requestedAt: record.requestedAt,
      launchedAt: record.launchedAt?.getTime(),
      report: record.state?.report,
      readyAt: this.#ctx.now(),
      warm: record.warm !== undefined,
    });
    record.events.push({ type: "Normal", reason: "StartupTimes", message: startupLine(breakdown) });
    const startup = { podUid: record.facts.uid, pod: record.facts.key, breakdown };
    notifyAll(this.#startupListeners, (listener) => listener(startup));
  }
}
