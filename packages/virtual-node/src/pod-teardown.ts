/**
 * The Pod teardown on the virtual node: `@nebula/teardown`'s durable Pod teardown (stop, wait
 * for the grace period plus headroom, terminate, wait, release, remove) driven against a
 * {@link InstanceReclaimer}, acting on the Pod's instance by its ID, never on "the last poll did
 * not list it".
 *
 * @packageDocumentation
 */
import type { V1Pod } from "@kubernetes/client-node";
import {
  type InstanceObservation,
  type PodTeardownEffect,
  type PodTeardownObservation,
  type PodTeardownParams,
  podTeardown,
  type TeardownEvent,
  TeardownExecutor,
  type TeardownStore,
  type TickResult,
} from "@nebula/teardown";
import type { FoundInstance, InstanceReclaimer } from "./lifecycle.js";
import type { PodRef } from "./pod-api.js";
import { type EventSink, recordPodEvent } from "./pod-events.js";
import type { PodEventSpec } from "./pod-status.js";

/** Annotation prefix of a pre-terminate hold on a Pod: each such annotation delays `terminating` (10 minutes at most). */
export const PRE_TERMINATE_HOLD_PREFIX = "pre-terminate.teardown.nebula.dev/";

/** Options of {@link PodTeardown}. */
export interface PodTeardownOptions {
  /**
   * Where teardown records live: the provider's Pod ledger (keyed by Pod UID, out of the tenants'
   * reach), or `@nebula/kube`'s `KubernetesAnnotationStore` (keyed `namespace/name`).
   */
  readonly store: TeardownStore;
  /** The store key of a Pod (default: its UID). */
  readonly keyOf?: (pod: PodRef) => string;
  /** Makes the Pod's subject exist in the store before a teardown is requested (a ledger's `ensure`). */
  readonly prepare?: (pod: PodRef) => Promise<void>;
  /** Finds, stops and terminates the Pod's instance. */
  readonly reclaimer: InstanceReclaimer;
  /**
   * Removes the Pod object as the kubelet does: delete with grace 0 and the UID precondition, then
   * drop the finalizer. Idempotent; a Pod already gone (or replaced) counts as removed.
   */
  readonly removePod: (pod: PodRef) => Promise<void>;
  /** Whether the Pod object with this UID still exists. */
  readonly podPresent: (pod: PodRef) => Promise<boolean> | boolean;
  /** Allowance for API calls and observation added to the grace period (default 30 s). */
  readonly headroomSeconds?: number;
  /**
   * The longest grace a teardown gives the containers, in seconds (default 3600): a longer one
   * (a Pod's `terminationGracePeriodSeconds` of a year) is cut to it. The provider's
   * `maxGracePeriodSeconds`.
   */
  readonly maxGraceSeconds?: number;
  /**
   * Records the Events a user wants about the Pod (stopping, terminated, failures): the same sink
   * as the Pod controller's (`@nebula/kube`'s `EventRecorder` fits).
   */
  readonly events?: EventSink;
  /** Receives every raw teardown event (logs, metrics). Must not throw. */
  readonly onTeardownEvent?: (event: TeardownEvent) => void;
  /**
   * Called once `TerminateInstances` was sent for the instance of the Pod with this UID (its
   * latency is a metric: `PodController.terminateSent`). Must not throw.
   */
  readonly onTerminateSent?: (podUid: string) => void;
  /** The clock in epoch ms (default `Date.now`). */
  readonly now?: () => number;
}

/** What one {@link PodTeardown.reconcile} call left. */
export type PodTeardownResult =
  /** The instance is confirmed terminated (or never existed) and, for a deleted Pod, the Pod is removed. */
  | { readonly status: "complete"; readonly instanceId?: string | undefined }
  /** In progress: reconcile again after `requeueAfterMs`. */
  | { readonly status: "waiting"; readonly waitingFor: string; readonly requeueAfterMs: number }
  /** Something failed (reported as an Event); reconcile again after `requeueAfterMs`. */
  | { readonly status: "error"; readonly message: string; readonly requeueAfterMs: number };

const POLL_MS = 2_000;
/** The default of {@link PodTeardownOptions.headroomSeconds}. */
const DEFAULT_HEADROOM_SECONDS = 30;
/** The default of {@link PodTeardownOptions.maxGraceSeconds}. */
const DEFAULT_MAX_GRACE_SECONDS = 3_600;
/** The longest grace the teardown's parameters accept (a year). */
const GRACE_LIMIT_SECONDS = 31_536_000;
/** EC2 never takes an instance back from `shutting-down`: no terminate is sent to it again. */
const GONE = new Set(["shutting-down", "terminated"]);
const STOPPED_OR_GONE = new Set(["stopped", "shutting-down", "terminated"]);
const RETRY_MS = 5_000;

const EC2_STATES = new Set<string>([
  "pending",
  "running",
  "stopping",
  "stopped",
  "shutting-down",
  "terminated",
]);

function observationOf(
  found: FoundInstance | undefined | "unknown",
  recorded: string | undefined,
): InstanceObservation {
  if (found === "unknown") return "unknown";
  if (found === undefined) return "absent";
  // Not the instance the teardown acts on: no conclusion from it.
  if (recorded !== undefined && found.instanceId !== recorded) return "unknown";
  return EC2_STATES.has(found.state) ? (found.state as InstanceObservation) : "unknown";
}

/**
 * Runs a Pod's teardown one step per call. A Pod being deleted ends removed (grace 0, UID
 * precondition, then the finalizer); a finished Pod ends with its instance terminated and its
 * status kept. Before a teardown starts, the instance is looked up; when it is provably gone (or
 * terminated) no teardown is started, so a stale request never restarts a completed one.
 *
 * @example
 * ```ts
 * const teardown = new PodTeardown({ store: ledger, reclaimer: provider, removePod, podPresent, events });
 * const result = await teardown.reconcile(pod, { deleting: true, graceSeconds: 30 });
 * if (result.status !== "complete") return { requeueAfter: result.requeueAfterMs };
 * ```
 */
export class PodTeardown {
  readonly #options: PodTeardownOptions;
  readonly #executor: TeardownExecutor<
    PodTeardownObservation,
    PodTeardownEffect,
    PodTeardownParams
  >;
  /** The latest lookup per Pod UID, so one reconcile asks the reclaimer once. */
  readonly #found = new Map<string, FoundInstance | undefined | "unknown">();
  readonly #refs = new Map<string, PodRef>();

  readonly #maxGraceSeconds: number;

  constructor(options: PodTeardownOptions) {
    this.#options = options;
    this.#maxGraceSeconds = boundedGrace(
      options.maxGraceSeconds ?? DEFAULT_MAX_GRACE_SECONDS,
      GRACE_LIMIT_SECONDS,
    );
    this.#executor = new TeardownExecutor({
      teardown: podTeardown,
      store: options.store,
      ...(options.now ? { now: options.now } : {}),
      observe: async ({ key, record, subject }) => {
        const params = record.params as { podUid?: unknown; instanceId?: unknown };
        const uid = typeof params.podUid === "string" ? params.podUid : "";
        const recorded = typeof params.instanceId === "string" ? params.instanceId : undefined;
        let found = this.#found.get(uid);
        if (!this.#found.has(uid)) found = await this.#lookup(uid);
        const ref = this.#refs.get(key);
        const present = ref === undefined ? true : await options.podPresent(ref);
        return {
          instance: observationOf(found, recorded),
          pod: present ? "present" : "absent",
          holds: holdsOf(subject),
        };
      },
      handlers: {
        // An instance already where the action would take it needs no call: nothing is done to a
        // terminated instance (EC2 may even drop what proves whose it was).
        StopInstance: async (effect, { record }) => {
          const id = effect.instanceId ?? (await this.#find(effect.podUid));
          if (id === undefined || this.#already(effect.podUid, id, STOPPED_OR_GONE)) return;
          // The grace the teardown runs with reaches the host with the stop.
          const grace = (record.params as { gracePeriodSeconds?: unknown }).gracePeriodSeconds;
          // The Pod's UID goes with it: the provider acts only on an instance proven to be its.
          await options.reclaimer.stopInstance(
            id,
            typeof grace === "number"
              ? { graceSeconds: grace, podUid: effect.podUid }
              : { podUid: effect.podUid },
          );
        },
        TerminateInstance: async (effect) => {
          const id = effect.instanceId ?? (await this.#find(effect.podUid));
          if (id === undefined || this.#already(effect.podUid, id, GONE)) return;
          await options.reclaimer.terminateInstance(id, { podUid: effect.podUid });
          options.onTerminateSent?.(effect.podUid);
        },
        // What the provider said the Pod holds besides its instance (its Parameter Store parameters).
        DeleteAuxiliary: async (effect) => {
          await options.reclaimer.releaseAuxiliary?.(effect.object);
        },
        DeletePod: (effect) =>
          options.removePod({ namespace: effect.namespace, name: effect.name, uid: effect.uid }),
      },
      onEvent: (event) => {
        options.onTeardownEvent?.(event);
        this.#report(event);
      },
    });
  }

  /**
   * One step of the Pod's teardown. `deleting`: the Pod is being deleted (it ends removed);
   * `graceSeconds`: the grace the containers get after the stop (the deletion's, else the spec's).
   */
  async reconcile(
    pod: V1Pod,
    how: { readonly deleting: boolean; readonly graceSeconds: number },
  ): Promise<PodTeardownResult> {
    const ref = refOf(pod);
    const key = (this.#options.keyOf ?? ((p: PodRef) => p.uid))(ref);
    this.#refs.set(key, ref);
    try {
      const found = await this.#lookup(ref.uid);
      this.#found.set(ref.uid, found);
      // A teardown under way advances even while its instance cannot be found: its deadlines
      // keep counting (a stop past its deadline goes on to terminate).
      const ticked = await this.#executor.tick(key);
      if (found === "unknown") {
        if (ticked.status !== "idle" && ticked.status !== "absent") {
          return this.#result(ticked, ref, how.deleting, undefined);
        }
        return {
          status: "waiting",
          waitingFor: "the instance to be found",
          requeueAfterMs: RETRY_MS,
        };
      }
      if (ticked.status === "idle" || ticked.status === "absent") {
        const gone = found === undefined || found.state === "terminated";
        if (gone) {
          // No teardown runs for an instance that is already gone (or never was), so nothing
          // else releases what the Pod holds besides it: do it here, before the Pod goes.
          // Idempotent; a failure rejects and the next reconcile repeats it.
          for (const object of this.#options.reclaimer.auxiliariesOf?.(ref.uid) ?? []) {
            await this.#options.reclaimer.releaseAuxiliary?.(object);
          }
          if (how.deleting) await this.#options.removePod(ref);
          return { status: "complete", instanceId: found?.instanceId };
        }
        // No record (never started, or the store's entry was deleted): it is made again from what
        // was observed (the instance found by the Pod's UID), never read as "done".
        if (ticked.status === "absent") await this.#options.prepare?.(ref);
        const params = {
          namespace: ref.namespace,
          name: ref.name,
          podUid: ref.uid,
          instanceId: found.instanceId,
          // The one place the grace is bounded: the stop, its deadline and the Event all read it.
          gracePeriodSeconds: boundedGrace(how.graceSeconds, this.#maxGraceSeconds),
          headroomSeconds: this.#options.headroomSeconds ?? DEFAULT_HEADROOM_SECONDS,
          finish: how.deleting ? "delete-pod" : "clear",
          auxiliaries: [...(this.#options.reclaimer.auxiliariesOf?.(ref.uid) ?? [])],
        } as const;
        const request = (bounds: { gracePeriodSeconds: number; headroomSeconds: number }) =>
          this.#executor.request(key, {
            params: { ...params, ...bounds },
            cause: how.deleting ? "DeletionRequested" : "TerminalStatusWritten",
            uid: ref.uid,
          });
        let started = await request(params);
        // Parameters the teardown refuses never mean "no reclaim": the instance is reclaimed at
        // once instead (grace 0, the default headroom).
        if (started.status === "invalid") {
          started = await request({
            gracePeriodSeconds: 0,
            headroomSeconds: DEFAULT_HEADROOM_SECONDS,
          });
        }
        return this.#result(started, ref, how.deleting, found.instanceId);
      }
      return this.#result(ticked, ref, how.deleting, found?.instanceId);
    } finally {
      this.#found.delete(ref.uid);
    }
  }

  async #result(
    result: TickResult,
    ref: PodRef,
    deleting: boolean,
    instanceId: string | undefined,
  ): Promise<PodTeardownResult> {
    switch (result.status) {
      case "complete": {
        // A teardown that ended by clearing (a finished Pod deleted later) leaves the removal to us;
        // one that ended by `removing` already removed the Pod.
        const finish = (result.record.params as { finish?: unknown }).finish;
        if (deleting && finish !== "delete-pod") await this.#options.removePod(ref);
        return { status: "complete", instanceId };
      }
      case "absent":
        // The store holds no record for the Pod even after `prepare`: nothing proves the instance
        // reclaimed, so this is not "complete".
        return {
          status: "error",
          message: `pod ${ref.namespace}/${ref.name}: the teardown record could not be kept (the store has no entry for it); retrying`,
          requeueAfterMs: RETRY_MS,
        };
      case "progressed":
      case "conflict":
        return { status: "waiting", waitingFor: "the next step", requeueAfterMs: 0 };
      case "waiting":
      case "held":
        return { status: "waiting", waitingFor: result.waitingFor, requeueAfterMs: POLL_MS };
      case "idle":
        return { status: "waiting", waitingFor: "the teardown to start", requeueAfterMs: 0 };
      case "error":
        return { status: "error", message: result.error.message, requeueAfterMs: RETRY_MS };
      case "invalid":
      case "foreign":
        return { status: "error", message: result.reason, requeueAfterMs: 60_000 };
    }
  }

  /** True when this reconcile's lookup found instance `id` of the Pod in one of `states`. */
  #already(podUid: string, id: string, states: ReadonlySet<string>): boolean {
    const found = this.#found.get(podUid);
    return typeof found === "object" && found.instanceId === id && states.has(found.state);
  }

  /** The instance of a Pod whose launch outcome was not recorded; rejects while that cannot be told. */
  async #find(podUid: string): Promise<string | undefined> {
    return (await this.#options.reclaimer.findInstance(podUid))?.instanceId;
  }

  async #lookup(uid: string): Promise<FoundInstance | undefined | "unknown"> {
    try {
      return await this.#options.reclaimer.findInstance(uid);
    } catch {
      return "unknown";
    }
  }

  #report(event: TeardownEvent): void {
    const ref = this.#refs.get(event.key);
    const events = this.#options.events;
    if (ref === undefined || events === undefined) return;
    const emit = (pod: PodRef, spec: PodEventSpec) => recordPodEvent(events, pod, spec);
    if (event.type === "transition") {
      const params = event.record.params as { instanceId?: unknown; gracePeriodSeconds?: unknown };
      const id = typeof params.instanceId === "string" ? params.instanceId : "(none)";
      const { from, to, reason } = event.transition;
      if (to === "stopping") {
        emit(ref, {
          type: "Normal",
          reason: "Stopping",
          note: `Stopping instance ${id}: the containers get ${String(params.gracePeriodSeconds)} s to exit`,
        });
      } else if (to === "terminating") {
        emit(
          ref,
          reason === "DeadlineExpired"
            ? {
                type: "Warning",
                reason: "StopDeadlineExceeded",
                note: `Instance ${id} did not stop within the grace period and headroom: terminating it`,
              }
            : { type: "Normal", reason: "Terminating", note: `Terminating instance ${id}` },
        );
      } else if (from === "terminating") {
        emit(ref, {
          type: "Normal",
          reason: "InstanceTerminated",
          note: `Instance ${id} is terminated`,
        });
      }
    } else if (event.type === "error") {
      emit(ref, {
        type: "Warning",
        reason: "TeardownFailed",
        note: `${event.error.message}${event.error.cause instanceof Error ? `: ${event.error.cause.message}` : ""}`,
      });
    }
  }
}

/** A grace in whole seconds within `[0, max]`: non-finite, NaN or negative is 0 (reclaim at once). */
function boundedGrace(seconds: number, max: number): number {
  if (!Number.isFinite(seconds) || seconds < 0) return 0;
  return Math.min(Math.floor(seconds), max);
}

function refOf(pod: V1Pod): PodRef {
  return {
    namespace: pod.metadata?.namespace ?? "default",
    name: pod.metadata?.name ?? "",
    uid: pod.metadata?.uid ?? "",
  };
}

function holdsOf(subject: unknown): string[] {
  const annotations =
    (subject as { metadata?: { annotations?: Record<string, string> } } | undefined)?.metadata
      ?.annotations ?? {};
  return Object.keys(annotations).filter((k) => k.startsWith(PRE_TERMINATE_HOLD_PREFIX));
}
