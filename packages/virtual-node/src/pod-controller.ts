/**
 * The Pod controller: for every Pod bound to the virtual node, one reconcile at a time. It holds
 * a finalizer from before launch until the instance is confirmed terminated, launches through the
 * provider, writes truthful status (the stored status plus the provider's observation) only when
 * it changes, and deletes the way the kubelet does: teardown, then delete with grace 0 and a UID
 * precondition, then the finalizer goes.
 *
 * @packageDocumentation
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import type { PodLedger } from "@nebula/teardown";
import { INSTANCE_ANNOTATIONS, type VirtualNodeConfig } from "./config.js";
import type {
  LeakCollected,
  LeakEventSource,
  PodInstanceInfo,
  PodLifecycle,
  PodStatusChange,
  Runnable,
} from "./lifecycle.js";
import type { PodApi, PodRef } from "./pod-api.js";
import { type EventSink, recordPodEvent } from "./pod-events.js";
import { activeDeadlineLeftMs, DEFAULT_GRACE_SECONDS, planPod } from "./pod-plan.js";
import {
  composePodStatus,
  DEADLINE_EXCEEDED,
  deadlineExceededStatus,
  isTerminalPhase,
  type PodEventSpec,
  podStatusChanged,
  podStatusEvents,
  withEphemeralStatuses,
} from "./pod-status.js";
import type { PodTeardown } from "./pod-teardown.js";

/** The read side of the Pod informer (`spec.nodeName=<node>`), keyed `namespace/name`. */
interface PodStore {
  /** The cached Pod, or `undefined`. */
  get(key: string): V1Pod | undefined;
  /** Every cached Pod. */
  list(): readonly V1Pod[];
}

/** The outcome of a status write (`@nebula/kube`'s `StatusWriter` returns it). */
type StatusWriteOutcome = "written" | "unchanged" | "conflict" | "gone";

/** Writes a Pod's `/status` only when it changes (`@nebula/kube`'s `StatusWriter` fits). */
interface PodStatusSink {
  /** Writes `desired` if it changes the stored status of this incarnation. */
  write(
    address: { readonly namespace: string; readonly name: string },
    desired: V1PodStatus,
    options: { readonly current?: V1Pod; readonly uid?: string },
  ): Promise<{ readonly outcome: StatusWriteOutcome }>;
}

/** Figures the Pod controller reports (the app binds them to Prometheus metrics). */
export interface PodControllerMetrics {
  /** A status write and its outcome. */
  statusWrite?(outcome: StatusWriteOutcome): void;
  /** Seconds from a container's exit (`finishedAt`) to the status that says so being written. */
  exitToStatus?(seconds: number): void;
  /** Seconds from a Pod turning terminal (its last `finishedAt`) to its instance confirmed terminated. */
  terminalToTerminated?(seconds: number): void;
  /**
   * Seconds from a Pod's terminal status written to `TerminateInstances` sent for its instance
   * (reported through {@link PodController.terminateSent}).
   */
  terminalToTerminate?(seconds: number): void;
}

/**
 * A launch the ledger recorded (`@nebula/teardown`'s `PodLedger` entry, read through
 * {@link LaunchLedger}): the Pod it was for and whether its teardown completed.
 */
export interface RecordedLaunch {
  /** The Pod's UID. */
  readonly podUid: string;
  /** The Pod's namespace. */
  readonly namespace: string;
  /** The Pod's name. */
  readonly name: string;
  /**
   * An instance launched for the Pod by this virtual node still runs (proven by the provider's
   * latest listing): it has to be reclaimed if the Pod is gone. Entries of other virtual nodes
   * sharing the ledger are never reclaimable here.
   */
  readonly reclaimable: boolean;
}

/** Where the Pod controller finds launches whose Pods may be gone (the provider's ledger). */
export interface LaunchLedger {
  /** Every recorded launch. */
  launches(): Promise<readonly RecordedLaunch[]>;
}

/**
 * The {@link LaunchLedger} of a Pod ledger (`@nebula/teardown`'s `PodLedger`, e.g. `@nebula/kube`'s
 * `ConfigMapPodLedger`): every recorded launch, reclaimable when `ownsInstance(podUid)` says an
 * instance of this virtual node runs for it (the provider's latest listing; other virtual nodes
 * share the ledger).
 *
 * @example
 * ```ts
 * const ledger = ledgerLaunches(podLedger, (uid) => provider.listedInstance(uid) !== undefined);
 * ```
 */
export function ledgerLaunches(
  ledger: Pick<PodLedger, "list">,
  ownsInstance: (podUid: string) => boolean,
): LaunchLedger {
  return {
    launches: async () =>
      (await ledger.list()).map((entry) => ({
        podUid: entry.launch.podUid,
        namespace: entry.launch.namespace,
        name: entry.launch.name,
        reclaimable: ownsInstance(entry.launch.podUid),
      })),
  };
}

/** Options of {@link PodController}. */
export interface PodControllerOptions {
  /** The parsed configuration (finalizer, resync). */
  readonly config: VirtualNodeConfig;
  /** The Pod informer's store. */
  readonly pods: PodStore;
  /** The provider. */
  readonly provider: PodLifecycle & Partial<LeakEventSource>;
  /** The teardown. */
  readonly teardown: PodTeardown;
  /** Finalizer, annotation and delete writes. */
  readonly api: PodApi;
  /** The status writer. */
  readonly status: PodStatusSink;
  /** The Event recorder (optional). */
  readonly events?: EventSink;
  /** Puts a key on the controller's queue (the provider's notifications arrive this way). */
  readonly enqueue: (key: string) => void;
  /** Figures. */
  readonly metrics?: PodControllerMetrics;
  /** The clock in epoch ms (default `Date.now`). */
  readonly now?: () => number;
  /** One-line diagnostics. */
  readonly log?: (level: "debug" | "info" | "warn" | "error", message: string) => void;
  /** How long a provider notification waits for its status to be written (default 60 s). */
  readonly notifyTimeoutMs?: number;
  /**
   * The launches the ledger recorded: {@link PodController.sweepLedger} drives the teardown of
   * those whose Pod is gone (removed while no virtual node ran, its finalizer taken off by hand).
   */
  readonly ledger?: LaunchLedger;
}

interface Waiter {
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
  readonly timer: ReturnType<typeof setTimeout>;
}

interface Known {
  readonly ref: PodRef;
  graceSeconds: number;
  launched: boolean;
  resourceVersion?: string | undefined;
  terminalAt?: number | undefined;
  /** When this controller wrote the Pod's terminal status (until its terminate is sent). */
  terminalWrittenAt?: number | undefined;
}

/**
 * Queue keys of ledger entries whose Pod is gone: `ledger:<uid>` (a colon is never in a namespace
 * name, so no Pod's `namespace/name` key looks like one).
 */
const LEDGER_KEY_PREFIX = "ledger:";

function refOf(pod: V1Pod): PodRef {
  return {
    namespace: pod.metadata?.namespace ?? "default",
    name: pod.metadata?.name ?? "",
    uid: pod.metadata?.uid ?? "",
  };
}

function keyOf(ref: { namespace: string; name: string }): string {
  return `${ref.namespace}/${ref.name}`;
}

/** The latest container `finishedAt` of a status, in epoch ms. */
function lastFinish(status: V1PodStatus | undefined): number | undefined {
  let latest: number | undefined;
  for (const c of [
    ...(status?.initContainerStatuses ?? []),
    ...(status?.containerStatuses ?? []),
  ]) {
    const at = c.state?.terminated?.finishedAt;
    if (at === undefined) continue;
    const ms = Date.parse(String(at instanceof Date ? at.toISOString() : at));
    if (!Number.isNaN(ms) && (latest === undefined || ms > latest)) latest = ms;
  }
  return latest;
}

function newExits(before: V1PodStatus | undefined, after: V1PodStatus | undefined): number[] {
  const exits: number[] = [];
  const was = new Map(
    [...(before?.initContainerStatuses ?? []), ...(before?.containerStatuses ?? [])].map((c) => [
      c.name,
      c,
    ]),
  );
  for (const c of [...(after?.initContainerStatuses ?? []), ...(after?.containerStatuses ?? [])]) {
    const t = c.state?.terminated ?? c.lastState?.terminated;
    const finished = t?.finishedAt;
    if (finished === undefined) continue;
    const prior = was.get(c.name);
    const priorT = prior?.state?.terminated ?? prior?.lastState?.terminated;
    if (priorT !== undefined && String(priorT.finishedAt) === String(finished)) continue;
    const ms = Date.parse(finished instanceof Date ? finished.toISOString() : String(finished));
    if (!Number.isNaN(ms)) exits.push(ms);
  }
  return exits;
}

/**
 * Reconciles one Pod per call (the caller's work queue guarantees one reconcile per Pod at a
 * time). Wire {@link PodController.reconcile} into a controller loop fed by the Pod informer, and
 * {@link PodController.start} to subscribe to the provider.
 *
 * @example
 * ```ts
 * const pods = new PodController({ config, pods: informer, provider, teardown, api, status, enqueue: (k) => queue.add(k) });
 * const stop = pods.start();
 * const controller = new Controller({ name: "pods", reconcile: (key) => pods.reconcile(key) }).watch(informer);
 * ```
 */
export class PodController {
  readonly #o: PodControllerOptions;
  readonly #now: () => number;
  readonly #waiters = new Map<string, Waiter[]>();
  readonly #known = new Map<string, Known>();
  readonly #placements = new Map<string, PodInstanceInfo>();

  constructor(options: PodControllerOptions) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
  }

  /** Subscribes to the provider's status changes and events; returns the unsubscribe function. */
  start(): () => void {
    const offStatus = this.#o.provider.notifyPods((change) => this.onStatusChange(change));
    const offEvents = this.#o.provider.onLeakCollected?.((leak) => this.#onLeak(leak));
    return () => {
      offStatus();
      offEvents?.();
      for (const [key, waiters] of this.#waiters) {
        for (const w of waiters) {
          clearTimeout(w.timer);
          w.reject(new Error(`pod ${key}: the controller stopped before the status was written`));
        }
      }
      this.#waiters.clear();
    };
  }

  /**
   * The provider's status changed: the Pod is reconciled (its status written only there, so one
   * Pod has one writer at a time); resolves once that reconcile has written (or found unchanged)
   * the status, rejects if it failed or timed out (the provider delivers again).
   */
  onStatusChange(change: PodStatusChange): Promise<void> {
    const ref = refOf(change.pod);
    const key = keyOf(ref);
    for (const event of change.events ?? []) {
      this.#event(ref, { type: event.type, reason: event.reason, note: event.message });
    }
    if (change.instance !== undefined) this.#placements.set(ref.uid, change.instance);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        const list = this.#waiters.get(key) ?? [];
        this.#waiters.set(
          key,
          list.filter((w) => w.timer !== timer),
        );
        reject(new Error(`pod ${key}: status not written within the deadline`));
      }, this.#o.notifyTimeoutMs ?? 60_000);
      timer.unref?.();
      const list = this.#waiters.get(key) ?? [];
      list.push({ resolve, reject, timer });
      this.#waiters.set(key, list);
      this.#o.enqueue(key);
    });
  }

  /**
   * The teardown sent `TerminateInstances` for the instance of the Pod with this UID
   * (`PodTeardown`'s `onTerminateSent`): measures the time since this controller wrote the Pod's
   * terminal status (`metrics.terminalToTerminate`), once per Pod. A Pod deleted while running is
   * not measured.
   */
  terminateSent(podUid: string): void {
    for (const known of this.#known.values()) {
      if (known.ref.uid !== podUid || known.terminalWrittenAt === undefined) continue;
      this.#o.metrics?.terminalToTerminate?.(
        Math.max(0, (this.#now() - known.terminalWrittenAt) / 1000),
      );
      known.terminalWrittenAt = undefined;
    }
  }

  /** The UIDs of the Pods bound to this node (the leak collector's notion of "live"). */
  livePodUids(): string[] {
    return this.#o.pods.list().flatMap((p) => (p.metadata?.uid ? [p.metadata.uid] : []));
  }

  /**
   * One step for the Pod named by `key`. Returns when to look again; throws to be retried with
   * back-off.
   */
  async reconcile(key: string): Promise<{ requeueAfter?: number }> {
    const waiters = this.#waiters.get(key) ?? [];
    this.#waiters.delete(key);
    try {
      const result = await this.#reconcile(key);
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.resolve();
      }
      return result;
    } catch (error) {
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.reject(error instanceof Error ? error : new Error(String(error)));
      }
      throw error;
    }
  }

  /**
   * Finds the ledger's launches whose Pod is gone without a completed teardown (the Pod was
   * removed while no virtual node ran, or its finalizer was taken off by hand) and queues each:
   * its instance is stopped gracefully, terminated and its auxiliaries released as for a deleted
   * Pod, then its entry is dropped. A Pod's absence is proven by a read from the API server, not
   * by the informer's cache. Returns how many were queued. Call it while leading, now and then.
   */
  async sweepLedger(): Promise<number> {
    const ledger = this.#o.ledger;
    if (ledger === undefined) return 0;
    const cached = new Set(this.livePodUids());
    const known = new Set([...this.#known.values()].map((k) => k.ref.uid));
    let queued = 0;
    for (const launch of await ledger.launches()) {
      if (!launch.reclaimable) continue;
      if (cached.has(launch.podUid) || known.has(launch.podUid)) continue;
      const ref: PodRef = { namespace: launch.namespace, name: launch.name, uid: launch.podUid };
      if (await this.#o.api.exists(ref)) continue;
      const key = `${LEDGER_KEY_PREFIX}${launch.podUid}`;
      this.#known.set(key, { ref, graceSeconds: DEFAULT_GRACE_SECONDS, launched: true });
      this.#log(
        "info",
        `pod ${keyOf(ref)} (UID ${ref.uid}) is gone but its instance was not reclaimed: tearing it down`,
      );
      this.#o.enqueue(key);
      queued++;
    }
    return queued;
  }

  /**
   * Runs {@link PodController.sweepLedger} after `firstAfterMs` (give the provider's first poll
   * time to prove which instances are this node's), then every `everyMs`, until `signal` aborts. A
   * failed sweep is logged and tried again at the next interval. Run it while leading.
   */
  async sweepLedgerEvery(
    signal: AbortSignal,
    timing: { readonly firstAfterMs: number; readonly everyMs: number },
  ): Promise<void> {
    let wait = timing.firstAfterMs;
    while (!signal.aborted) {
      try {
        await sleep(wait, undefined, { signal });
      } catch {
        return;
      }
      wait = timing.everyMs;
      try {
        const queued = await this.sweepLedger();
        if (queued > 0)
          this.#log("info", `ledger sweep: ${queued} teardown(s) of gone Pods queued`);
      } catch (error) {
        this.#log("warn", `ledger sweep failed; trying again later: ${String(error)}`);
      }
    }
  }

  /**
   * What runs while leading: subscribes to the provider ({@link PodController.start}), runs
   * `provider` (its poll) and {@link PodController.sweepLedgerEvery} until `signal` aborts, then
   * unsubscribes.
   */
  async run(
    signal: AbortSignal,
    provider: Runnable,
    sweep: { readonly firstAfterMs: number; readonly everyMs: number },
  ): Promise<void> {
    const stop = this.start();
    try {
      await Promise.all([provider.run(signal), this.sweepLedgerEvery(signal, sweep)]);
    } finally {
      stop();
    }
  }

  async #reconcile(key: string): Promise<{ requeueAfter?: number }> {
    const { config, provider, api } = this.#o;
    if (key.startsWith(LEDGER_KEY_PREFIX)) return this.#orphan(key);
    const pod = this.#o.pods.get(key);
    if (pod === undefined) return this.#orphan(key);
    const ref = refOf(pod);
    let known = this.#known.get(key);
    if (known === undefined || known.ref.uid !== ref.uid) {
      known = { ref, graceSeconds: 30, launched: false };
      this.#known.set(key, known);
    }
    const step = planPod(pod, { finalizer: config.podFinalizer });
    switch (step.kind) {
      case "AddFinalizer":
        await api.addFinalizer(ref, config.podFinalizer);
        return { requeueAfter: 0 };
      case "Run": {
        // Past its activeDeadlineSeconds, the Pod fails as on a kubelet node; the status written
        // makes it terminal, and its next step is the teardown (its containers stopped with the
        // Pod's grace, then the instance terminated).
        const deadlineLeft = activeDeadlineLeftMs(pod, this.#now());
        if (deadlineLeft !== undefined && deadlineLeft <= 0) {
          await this.#failPastDeadline(pod, ref);
          return { requeueAfter: 0 };
        }
        if (!known.launched) {
          try {
            await provider.createPod(pod);
          } catch (error) {
            this.#event(ref, {
              type: "Warning",
              reason: "LaunchFailed",
              note: (error as Error).message,
            });
            throw error;
          }
          known.launched = true;
        } else if (known.resourceVersion !== pod.metadata?.resourceVersion) {
          await provider.updatePod(pod);
        }
        known.resourceVersion = pod.metadata?.resourceVersion;
        // Status first: its write is preconditioned on the cached resourceVersion, which the
        // placement annotations (an unconditioned metadata patch) would make stale.
        await this.#syncStatus(pod, ref);
        await this.#syncPlacement(pod, ref);
        const resync = config.podResyncSeconds * 1000;
        return {
          requeueAfter:
            deadlineLeft === undefined ? resync : Math.max(0, Math.min(resync, deadlineLeft)),
        };
      }
      case "Teardown":
      case "DeleteUnlaunched": {
        const deleting = step.kind === "DeleteUnlaunched" || step.deleting;
        const graceSeconds = step.kind === "Teardown" ? step.graceSeconds : 0;
        known.graceSeconds = graceSeconds;
        // The provider learns first that the Pod is going: it launches nothing more for it (a
        // launch waiting on capacity is cancelled), before the teardown looks for its instance.
        await provider.updatePod(pod);
        // The final report is recorded while the instance stops.
        await this.#syncStatus(pod, ref);
        const stored = this.#o.pods.get(key) ?? pod;
        const result = await this.#o.teardown.reconcile(stored, { deleting, graceSeconds });
        if (result.status !== "complete") {
          if (result.status === "error")
            this.#log("warn", `teardown of pod ${key}: ${result.message}`);
          else this.#log("debug", `teardown of pod ${key}: waiting for ${result.waitingFor}`);
          return { requeueAfter: result.requeueAfterMs };
        }
        if (!deleting) await api.removeFinalizer(ref, config.podFinalizer);
        this.#completed(key, known, pod.status, true);
        return {};
      }
      case "Done":
        this.#completed(key, known, pod.status, false);
        return {};
    }
  }

  /** A Pod that left the cache: if its teardown had not completed, finish it (its instance must go). */
  async #orphan(key: string): Promise<{ requeueAfter?: number }> {
    const known = this.#known.get(key);
    if (known === undefined) return {};
    const pod: V1Pod = {
      metadata: { namespace: known.ref.namespace, name: known.ref.name, uid: known.ref.uid },
    };
    const result = await this.#o.teardown.reconcile(pod, {
      deleting: true,
      graceSeconds: known.graceSeconds,
    });
    if (result.status !== "complete") {
      this.#log(
        result.status === "error" ? "warn" : "debug",
        `teardown of gone pod ${key}: ${result.status === "error" ? result.message : `waiting for ${result.waitingFor}`}`,
      );
      return { requeueAfter: result.requeueAfterMs };
    }
    this.#completed(key, known, undefined, true);
    return {};
  }

  #completed(key: string, known: Known, status: V1PodStatus | undefined, measure: boolean): void {
    const finishedAt = known.terminalAt ?? lastFinish(status);
    if (measure && finishedAt !== undefined) {
      this.#o.metrics?.terminalToTerminated?.(Math.max(0, (this.#now() - finishedAt) / 1000));
    }
    this.#known.delete(key);
    this.#placements.delete(known.ref.uid);
    void Promise.resolve(this.#o.provider.forgetPod(known.ref.uid)).catch((error: unknown) =>
      this.#log("warn", `forgetting pod ${key}: ${String(error)}`),
    );
  }

  /**
   * The status to write for the Pod now: its stored status composed with the provider's
   * observation (readiness gates applied, ephemeral containers accounted for); `undefined` when
   * there is neither.
   */
  #desiredStatus(pod: V1Pod, ref: PodRef, now: Date): V1PodStatus | undefined {
    const composed = composePodStatus(
      pod.status,
      this.#o.provider.getPodStatus(ref.uid),
      now,
      pod.spec?.readinessGates,
    );
    return composed === undefined
      ? undefined
      : withEphemeralStatuses(pod.spec?.ephemeralContainers, composed);
  }

  /**
   * Writes `desired` as the Pod's status (preconditioned on the cached Pod); true when written.
   * Throws on a conflict (the reconcile is retried).
   */
  async #writeStatus(pod: V1Pod, ref: PodRef, desired: V1PodStatus): Promise<boolean> {
    const { outcome } = await this.#o.status.write(
      { namespace: ref.namespace, name: ref.name },
      desired,
      { current: pod, uid: ref.uid },
    );
    this.#o.metrics?.statusWrite?.(outcome);
    if (outcome === "conflict") {
      throw new Error(`pod ${keyOf(ref)}: status write conflicted (will retry)`);
    }
    return outcome === "written";
  }

  async #syncStatus(pod: V1Pod, ref: PodRef): Promise<void> {
    const desired = this.#desiredStatus(pod, ref, new Date(this.#now()));
    if (desired === undefined || !podStatusChanged(pod.status, desired)) return;
    if (!(await this.#writeStatus(pod, ref, desired))) return;
    const now = this.#now();
    for (const at of newExits(pod.status, desired)) {
      this.#o.metrics?.exitToStatus?.(Math.max(0, (now - at) / 1000));
    }
    const known = this.#known.get(keyOf(ref));
    if (known && isTerminalPhase(desired.phase) && !isTerminalPhase(pod.status?.phase)) {
      known.terminalAt = lastFinish(desired) ?? now;
      known.terminalWrittenAt = now;
    }
    for (const event of podStatusEvents(pod, pod.status, desired)) this.#event(ref, event);
  }

  /**
   * Writes the kubelet's `DeadlineExceeded` failure for a Pod past its `activeDeadlineSeconds`
   * (over the latest observation, so its containers' states are the latest known), with the
   * kubelet's Event. Throws on a conflict (retried).
   */
  async #failPastDeadline(pod: V1Pod, ref: PodRef): Promise<void> {
    const now = new Date(this.#now());
    const failed = deadlineExceededStatus(this.#desiredStatus(pod, ref, now), now);
    if (!(await this.#writeStatus(pod, ref, failed))) return;
    const known = this.#known.get(keyOf(ref));
    if (known) {
      known.terminalAt = now.getTime();
      known.terminalWrittenAt = this.#now();
    }
    this.#log("info", `pod ${keyOf(ref)}: ${DEADLINE_EXCEEDED.message}; stopping it`);
    this.#event(ref, {
      type: "Normal",
      reason: DEADLINE_EXCEEDED.reason,
      note: DEADLINE_EXCEEDED.message,
    });
  }

  async #syncPlacement(pod: V1Pod, ref: PodRef): Promise<void> {
    const info = this.#placements.get(ref.uid);
    if (info === undefined) return;
    const wanted: Record<string, string> = { [INSTANCE_ANNOTATIONS.instanceId]: info.instanceId };
    if (info.instanceType) wanted[INSTANCE_ANNOTATIONS.instanceType] = info.instanceType;
    if (info.availabilityZone)
      wanted[INSTANCE_ANNOTATIONS.availabilityZone] = info.availabilityZone;
    if (info.capacityType) wanted[INSTANCE_ANNOTATIONS.capacityType] = info.capacityType;
    if (info.spotPriceUsdPerHour) wanted[INSTANCE_ANNOTATIONS.spotPrice] = info.spotPriceUsdPerHour;
    if (info.priceUsdPerHour) wanted[INSTANCE_ANNOTATIONS.price] = info.priceUsdPerHour;
    const current = pod.metadata?.annotations ?? {};
    if (Object.entries(wanted).every(([k, v]) => current[k] === v)) return;
    await this.#o.api.annotate(ref, wanted);
  }

  #onLeak(leak: LeakCollected): void {
    void this.#o.events
      ?.record({
        regarding: { apiVersion: "v1", kind: "Node", name: this.#o.config.nodeName },
        type: "Warning",
        reason: "LeakCollected",
        action: "Terminate",
        note: leak.message,
      })
      .catch(() => undefined);
  }

  #event(ref: PodRef, event: PodEventSpec): void {
    recordPodEvent(this.#o.events, ref, event);
  }

  #log(level: "debug" | "info" | "warn" | "error", message: string): void {
    this.#o.log?.(level, message);
  }
}
