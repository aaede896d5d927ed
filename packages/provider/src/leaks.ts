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
