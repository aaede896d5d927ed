import type { ObservedInstance } from "./poll.js";
import { isGone, pickKeeper } from "./record.js";

/** What a poll's listing says, per Pod. */
export interface ListingPlan {
  /** The instance each Pod UID keeps: proven to be the Pod's, the recorded one first. */
  readonly byUid: ReadonlyMap<string, ObservedInstance>;
  /** Proven instances of a Pod besides the one it keeps (never two running for one Pod). */
  readonly duplicates: readonly string[];
}

/** A Pod the planner decides for, as far as the plan needs to know it. */
export interface PlannedPod {
  readonly uid: string;
  /** Launched (`launch`) or not (anything else). */
  readonly mode: string;
  /** The recorded instance, if any. */
  readonly instanceId: string | undefined;
  /** A lookup proved the instance absent. */
  readonly missing: boolean;
  /** The last observed EC2 state, if any. */
  readonly observedState: string | undefined;
}

/**
 * Groups a poll's listing by Pod UID: only instances that prove they were launched for the Pod
 * count (tags can be forged); of several, the recorded one (else the earliest) is kept and the
 * others are duplicates (EC2 honours `ClientToken`, so that only happens when a token expired or
 * an endpoint ignores it). Pure.
 */
export function planListing(
  listing: readonly ObservedInstance[],
  recordedIdOf: (podUid: string) => string | undefined,
  disprove: (instance: ObservedInstance, podUid: string) => string | undefined,
): ListingPlan {
  const groups = new Map<string, ObservedInstance[]>();
  for (const instance of listing) {
    if (instance.podUid === undefined) continue;
    const group = groups.get(instance.podUid) ?? [];
    group.push(instance);
    groups.set(instance.podUid, group);
  }
  const byUid = new Map<string, ObservedInstance>();
  const duplicates: string[] = [];
  for (const [uid, group] of groups) {
    const proven = group.filter((i) => disprove(i, uid) === undefined);
    if (proven.length === 0) continue;
    const keep = pickKeeper(proven, recordedIdOf(uid));
    byUid.set(uid, keep);
    for (const other of proven) {
      if (other !== keep && other.state !== "shutting-down") duplicates.push(other.instanceId);
    }
  }
  return { byUid, duplicates };
}

/**
 * The launched Pods whose recorded instance the listing does not show (it lists live states
 * only), and that are not already known to be gone: each is described by ID, terminated ones
 * included, before anything is concluded ("not listed" is not "lost"). Pure.
 */
export function unlistedPods(
  pods: readonly PlannedPod[],
  byUid: ReadonlyMap<string, ObservedInstance>,
): string[] {
  return pods
    .filter(
      (p) =>
        p.mode === "launch" &&
        p.instanceId !== undefined &&
        !p.missing &&
        p.observedState !== "terminated" &&
        byUid.get(p.uid)?.instanceId !== p.instanceId,
    )
    .map((p) => p.uid);
}

/**
 * What a described instance tells about a Pod: `observe` it (it proves it is the Pod's, or is
 * gone and carries the Pod's UID), `absent` (not found, outside the launch's consistency window),
 * or `unknown` (nothing can be concluded yet). Pure.
 */
export function describedOutcome(input: {
  readonly podUid: string;
  readonly found: ObservedInstance | undefined;
  readonly disproved: string | undefined;
  readonly withinConsistencyWindow: boolean;
}): "observe" | "absent" | "unknown" {
  const { found } = input;
  if (found !== undefined) {
    return input.disproved === undefined || isGone(found, input.podUid) ? "observe" : "unknown";
  }
  return input.withinConsistencyWindow ? "unknown" : "absent";
}
