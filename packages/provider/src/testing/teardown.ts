/**
 * The one teardown driver, for the provider's tests: `@nebula/virtual-node`'s real `PodTeardown`
 * over the provider (its `InstanceReclaimer`) and the provider's ledger, as the virtual node wires
 * it (apps/vnode), with the Pod API replaced by an in-memory record of the removals (the provider's
 * tests have no API server; the kubernetes suite passes the real one). Tests only.
 */
import type { V1Pod } from "@kubernetes/client-node";
import { decodeRecord, type PodLedger, type TeardownEvent } from "@nebula/teardown";
import {
  type PodRef,
  PodTeardown,
  type PodTeardownResult,
  graceSeconds as podGraceSeconds,
} from "@nebula/virtual-node";
import type { Ec2PodProvider } from "../provider.js";

/** Options of {@link testTeardown}. */
interface TestTeardownOptions {
  /** Where the teardown records live (default: the provider's ledger). */
  readonly ledger?: PodLedger;
  /**
   * Removes the Pod object (default: recorded in {@link TestTeardown.removed}, after which
   * `podPresent` answers false).
   */
  readonly removePod?: (pod: PodRef) => Promise<void>;
  /** Whether the Pod object still exists (default: until `removePod` removed it). */
  readonly podPresent?: (pod: PodRef) => Promise<boolean> | boolean;
  /**
   * The Pods the default `removePod` removed so far: pass one process's
   * {@link TestTeardown.removed} to the next (processes share the API server). Default: a new list.
   */
  readonly removed?: PodRef[];
  /** Headroom added to the grace period (default: the provider's `apiHeadroomSeconds`, as the vnode wires it). */
  readonly headroomSeconds?: number;
  /** Receives every raw teardown event. */
  readonly onTeardownEvent?: (event: TeardownEvent) => void;
  /** The teardown's clock (default `Date.now`). */
  readonly now?: () => number;
}

/** How {@link TestTeardown.reclaim} drives a Pod's teardown. */
interface ReclaimOptions {
  /** The Pod is being deleted (it ends removed). Default: it has a `deletionTimestamp`. */
  readonly deleting?: boolean;
  /** The grace the containers get. Default: the Pod controller's (`graceSeconds(pod)` of `@nebula/virtual-node`). */
  readonly graceSeconds?: number;
  /** Reconciles after the first one, at most (default 60). */
  readonly rounds?: number;
  /** Pause before each later round, when the teardown waits on the world (default 250 ms). */
  readonly ms?: number;
}

/** What {@link TestTeardown.reclaim} ended with. */
export interface Reclaimed {
  /** The last reconcile's result. */
  readonly result: PodTeardownResult;
  /** `result.status === "complete"`. */
  readonly complete: boolean;
  /** The instance the completed teardown acted on (or found gone), when known. */
  readonly instanceId: string | undefined;
  /** Every result before the last. */
  readonly seen: readonly PodTeardownResult[];
  /** The ledger record's phases after each reconcile, each change once (`stopping`, `terminating`, ..., `complete`). */
  readonly phases: readonly string[];
}

/** The driver: a `PodTeardown` and the loop the Pod controller runs around it. */
export interface TestTeardown {
  /** The real `PodTeardown`. */
  readonly teardown: PodTeardown;
  /** The Pods the default `removePod` removed, in order. */
  readonly removed: PodRef[];
  /**
   * One reconcile of the Pod's teardown, as one Pod-controller reconcile does it: a Pod being
   * deleted is handed to `provider.updatePod` first.
   */
  step(
    pod: V1Pod,
    how?: Pick<ReclaimOptions, "deleting" | "graceSeconds">,
  ): Promise<PodTeardownResult>;
  /**
   * Reconciles the Pod's teardown until it completes: a reconcile, then (at most `rounds` times) a
   * pause, one `provider.pollOnce()` and another reconcile.
   */
  reclaim(pod: V1Pod, options?: ReclaimOptions): Promise<Reclaimed>;
  /** The phase of the Pod's teardown record in the ledger (`undefined`: no valid record). */
  phase(podUid: string): Promise<string | undefined>;
}

/**
 * A `PodTeardown` over `provider` and its ledger, wired as apps/vnode wires it.
 *
 * @example
 * ```ts
 * const { reclaim } = testTeardown(provider);
 * expect(await reclaim(deleting(pod))).toMatchObject({ complete: true });
 * ```
 */
export function testTeardown(
  provider: Ec2PodProvider,
  options: TestTeardownOptions = {},
): TestTeardown {
  const ledger = options.ledger ?? provider.ledger;
  const removed = options.removed ?? [];
  const teardown = new PodTeardown({
    store: ledger,
    // A missing entry is made again before a teardown starts (as the vnode does).
    prepare: async (ref) => {
      await ledger.ensure({ podUid: ref.uid, namespace: ref.namespace, name: ref.name });
    },
    reclaimer: provider,
    removePod:
      options.removePod ??
      (async (ref) => {
        if (!removed.some((r) => r.uid === ref.uid)) removed.push(ref);
      }),
    podPresent: options.podPresent ?? ((ref) => !removed.some((r) => r.uid === ref.uid)),
    headroomSeconds: options.headroomSeconds ?? provider.config.apiHeadroomSeconds,
    // The cap the vnode passes: the provider's configured maxGracePeriodSeconds.
    maxGraceSeconds: provider.config.maxGracePeriodSeconds,
    ...(options.onTeardownEvent ? { onTeardownEvent: options.onTeardownEvent } : {}),
    ...(options.now ? { now: options.now } : {}),
  });

  const phase = async (podUid: string): Promise<string | undefined> => {
    const decoded = decodeRecord((await ledger.get(podUid))?.record);
    return decoded.ok ? decoded.record.phase : undefined;
  };

  const step = async (
    pod: V1Pod,
    how: Pick<ReclaimOptions, "deleting" | "graceSeconds"> = {},
  ): Promise<PodTeardownResult> => {
    // As the Pod controller: the provider hears of a deletion before the teardown looks for the
    // instance (it launches nothing more for the Pod).
    if (pod.metadata?.deletionTimestamp != null) await provider.updatePod(pod);
    return teardown.reconcile(pod, {
      deleting: how.deleting ?? pod.metadata?.deletionTimestamp != null,
      graceSeconds: how.graceSeconds ?? podGraceSeconds(pod),
    });
  };

  const reclaim = async (pod: V1Pod, how: ReclaimOptions = {}): Promise<Reclaimed> => {
    const uid = pod.metadata?.uid ?? "";
    const rounds = how.rounds ?? 60;
    const ms = how.ms ?? 250;
    const seen: PodTeardownResult[] = [];
    const phases: string[] = [];
    const note = async () => {
      const now = await phase(uid);
      if (now !== undefined && phases.at(-1) !== now) phases.push(now);
    };
    let result = await step(pod, how);
    await note();
    for (let i = 0; i < rounds && result.status !== "complete"; i++) {
      seen.push(result);
      // "The next step" comes at once; a wait on the world (EC2, a deadline) gets the pause.
      const next = result.status === "waiting" && result.requeueAfterMs === 0;
      await new Promise((resolve) => setTimeout(resolve, next ? 0 : ms));
      await provider.pollOnce();
      result = await step(pod, how);
      await note();
    }
    return {
      result,
      complete: result.status === "complete",
      instanceId: result.status === "complete" ? result.instanceId : undefined,
      seen,
      phases,
    };
  };

  return { teardown, removed, step, reclaim, phase };
}
