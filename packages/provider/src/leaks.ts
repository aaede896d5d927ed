import type { ObservedInstance } from "./poll.js";
import { ORPHANED_TAG } from "./tags.js";

/** What one leak-collection pass decided. Every list holds instance IDs. */
export interface LeakPlan {
  /** Orphans past the grace period, not yet marked: tag them `nebula:orphaned-at` now. */
  readonly mark: readonly string[];
  /** Orphans marked on an earlier pass (at least `confirmAfterMs` ago) and still orphaned: terminate. */
  readonly terminate: readonly string[];
  /** Marked instances whose Pod is live again (a stale read marked them): remove the mark. */
  readonly unmark: readonly string[];
  /** Instances left alone because they do not prove Nebula launched them, with why. */
  readonly unproven: ReadonlyArray<{ readonly instanceId: string; readonly why: string }>;
}

/** Inputs of {@link planLeakCollection}. */
export interface LeakInput {
  /** This node's instances, from a poll made **before** `livePodUids` was read. */
  readonly instances: readonly ObservedInstance[];
  /** UIDs of the Pods that exist (bound to this node), read after the instance listing. */
  readonly livePodUids: ReadonlySet<string>;
  /** Now, ms since the epoch. */
  readonly now: number;
  /** An orphan launched less than this long ago is left alone (it may be a launch in flight). */
  readonly graceMs: number;
  /** A mark must be at least this old before the instance is terminated. */
  readonly confirmAfterMs: number;
  /**
   * The collector's own marks (instance ID → when it marked it). Only these count: an
   * `nebula:orphaned-at` tag anyone could have written is never honoured.
   */
  readonly marks: ReadonlyMap<string, number>;
  /** Why an instance does not prove Nebula launched it (`undefined`: it does). */
  readonly disprove: (instance: ObservedInstance) => string | undefined;
}

/**
 * Two-phase leak collection, as a pure function: an instance of this node whose Pod UID is not
 * live, launched more than `graceMs` ago, is first **marked**; a later pass that still finds it
 * orphaned and marked (for at least `confirmAfterMs`) **terminates** it. One stale read therefore
 * never kills a live instance, and a mark whose Pod reappears is removed.
 *
 * Instances already `shutting-down` (or `terminated`) are skipped; so are instances with no launch
 * time (EC2 always reports one; without it age cannot be judged), and instances that do not prove
 * Nebula launched them (`disprove`: tags, instance profile, client token), which are reported in
 * `unproven` instead. Only the collector's own `marks` count; a mark tag is informational.
 *
 * @example
 * ```ts
 * const plan = planLeakCollection({ instances, livePodUids, now: Date.now(), graceMs: 300_000,
 *   confirmAfterMs: 60_000, marks, disprove: (i) => disproveOwnership(i, undefined, rules) });
 * ```
 */
export function planLeakCollection(input: LeakInput): LeakPlan {
  const mark: string[] = [];
  const terminate: string[] = [];
  const unmark: string[] = [];
  const unproven: Array<{ instanceId: string; why: string }> = [];
  for (const instance of input.instances) {
    if (instance.state === "shutting-down" || instance.state === "terminated") continue;
    const live = instance.podUid !== undefined && input.livePodUids.has(instance.podUid);
    const marked = input.marks.get(instance.instanceId);
    if (live) {
      if (marked !== undefined || instance.tags.has(ORPHANED_TAG)) unmark.push(instance.instanceId);
      continue;
    }
    const why = input.disprove(instance);
    if (why !== undefined) {
      unproven.push({ instanceId: instance.instanceId, why });
      continue;
    }
    if (instance.launchTime === undefined) continue;
    if (input.now - instance.launchTime < input.graceMs) continue;
    if (marked === undefined) {
      mark.push(instance.instanceId);
      continue;
    }
    if (input.now - marked >= input.confirmAfterMs) terminate.push(instance.instanceId);
  }
  return { mark, terminate, unmark, unproven };
}

/** One Pod parameter, as {@link planParameterLeaks} needs it. */
interface ParameterLeakCandidate {
  /** Full name. */
  readonly name: string;
  /** The Pod UID in its name. */
  readonly podUid: string;
  /** `LastModifiedDate`, ms since the epoch (undefined: age unknown, left alone). */
  readonly lastModified: number | undefined;
}

/** Inputs of {@link planParameterLeaks}. */
export interface ParameterLeakInput {
  /** This cluster's Pod parameters, listed **before** `livePodUids` and `unfinished` were read. */
  readonly parameters: readonly ParameterLeakCandidate[];
  /** UIDs of the Pods that exist on this node (and the provider's own records). */
  readonly livePodUids: ReadonlySet<string>;
  /** UIDs with a ledger entry whose teardown is not complete (that teardown deletes them). */
  readonly unfinished: ReadonlySet<string>;
  /** Now, ms since the epoch. */
  readonly now: number;
  /** A parameter modified less than this long ago is left alone (a launch may be writing it). */
  readonly graceMs: number;
}

/** What one pass decided about Pod parameters. */
export interface ParameterLeakPlan {
  /** Parameter names to delete: no live Pod, no unfinished teardown, older than the grace. */
  readonly delete: readonly string[];
  /** The Pod UIDs those parameters belong to (sorted, each once). */
  readonly podUids: readonly string[];
}

/**
 * Leak collection of Pod parameters, as a pure function: a parameter whose Pod UID is neither live
 * nor held by an unfinished ledger record, and that was last modified more than `graceMs` ago, is
 * a leak (a crash between writing the parameters and launching, a teardown that never ran, a Pod
 * deleted while the process was down). A Pod whose parameters include one inside the grace is left
 * alone entirely, so a launch in progress is never raced. Parameters carry no instance to stop,
 * so there is no second pass: deleting them is always safe to repeat, and a launch that keeps
 * waiting (capacity, throttling) writes them again before they are half the grace old.
 *
 * @example
 * ```ts
 * const plan = planParameterLeaks({ parameters, livePodUids, unfinished, now: Date.now(), graceMs: 600_000 });
 * ```
 */
export function planParameterLeaks(input: ParameterLeakInput): ParameterLeakPlan {
  const byPod = new Map<string, ParameterLeakCandidate[]>();
  for (const p of input.parameters) {
    if (input.livePodUids.has(p.podUid) || input.unfinished.has(p.podUid)) continue;
    byPod.set(p.podUid, [...(byPod.get(p.podUid) ?? []), p]);
  }
  const names: string[] = [];
  const podUids: string[] = [];
  for (const [uid, parameters] of [...byPod].sort(([a], [b]) => a.localeCompare(b))) {
    const old = parameters.every(
      (p) => p.lastModified !== undefined && input.now - p.lastModified >= input.graceMs,
    );
    if (!old) continue;
    podUids.push(uid);
    names.push(...parameters.map((p) => p.name).sort());
  }
  return { delete: names, podUids };
}
