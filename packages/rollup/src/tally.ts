/**
 * The tally both roll-ups share: not-ready instances grouped by reason, ranked, and the messages
 * and conditions computed from it (internal; the public types are re-exported from the index).
 *
 * Every number in every message is read from one {@link Tally}, the same one the statuses are
 * computed from, so a status and a message can never disagree.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { type ReasonDefinition, reasonClassRank } from "./catalog.js";
import type { ConditionUpdate } from "./condition.js";
import {
  asSentence,
  compareStrings,
  listNames,
  MAX_GROUPS,
  MAX_NAMES,
  MAX_REPRESENTATIVE_MESSAGE_LENGTH,
  truncate,
} from "./text.js";

/**
 * The condition types the roll-ups write.
 *
 * - `Available`: True while any replica is ready (or none is desired).
 * - `ReplicasReady`: True only when ready replicas ≥ desired replicas.
 * - `Degraded` (abnormal-true): True while any instance reports a failure (any class above
 *   `PlatformWorking`), even when `Available` is True.
 * - `Progressing`: True while the platform is still provisioning or starting instances.
 */
export const CONDITION_TYPES = {
  Available: "Available",
  ReplicasReady: "ReplicasReady",
  Degraded: "Degraded",
  Progressing: "Progressing",
} as const;

/**
 * The roll-up's own condition reasons, used when no instance reason applies. When something is
 * wrong the reason is always the instance (or blocker) reason itself: `InstanceCrashing`, ...
 */
export const ROLLUP_REASONS = {
  /** WorkloadDeployment `Available=True`: at least one instance is ready. */
  ReadyInstanceFound: "ReadyInstanceFound",
  /** Workload `Available=True`: at least one placement is available. */
  AvailablePlacementFound: "AvailablePlacementFound",
  /** `Available` / `ReplicasReady` True because zero replicas are desired. */
  NoReplicasDesired: "NoReplicasDesired",
  /** `ReplicasReady=True`: ready replicas ≥ desired replicas. */
  AllReplicasReady: "AllReplicasReady",
  /** `Degraded=False`: no instance reports a failure. */
  NoFailures: "NoFailures",
  /** `Progressing=False`: no instance is being provisioned or started. */
  NoInstancePending: "NoInstancePending",
} as const;

/**
 * How many instances report one reason, as stored in a status: the reason, the count, one
 * representative instance message and the first few instance names (sorted).
 */
export const ReasonCount = z.object({
  /** The reason (CamelCase), e.g. `InstanceCrashing`. */
  reason: z.string(),
  /** How many instances (or blocked replicas) report it. */
  count: z.number().int().min(0),
  /** One representative instance message, chosen deterministically; may be empty. */
  message: z.string(),
  /** Up to three instance names, sorted; blocked replicas that do not exist have no name. */
  instances: z.array(z.string()),
});

/** How many instances report one reason, with a representative message and a few names. */
export type ReasonCount = z.infer<typeof ReasonCount>;

/** One reason group of a tally. */
export interface Group {
  readonly reason: string;
  readonly definition: ReasonDefinition;
  readonly rank: number;
  readonly count: number;
  /** Representative message, already cut to {@link MAX_REPRESENTATIVE_MESSAGE_LENGTH}. */
  readonly message: string;
  /** The smallest {@link MAX_NAMES} names, sorted. */
  readonly names: readonly string[];
}

/**
 * Ready and desired replicas and the not-ready groups, ranked. `ready` is capped at `desired`
 * (every ratio and every condition reads it, so none can exceed 100 %); ready instances beyond
 * the desired count (a scale-down in progress) are `surplus`.
 */
export interface Tally {
  readonly desired: number;
  /** Ready replicas, at most {@link Tally.desired}. */
  readonly ready: number;
  /** Ready instances beyond the desired count. */
  readonly surplus: number;
  /** Sorted by {@link compareGroups}. */
  readonly groups: readonly Group[];
}

/** Builds a group, cutting the message to the budget. */
export function makeGroup(
  reason: string,
  definition: ReasonDefinition,
  count: number,
  message: string,
  names: readonly string[],
): Group {
  return {
    reason,
    definition,
    rank: reasonClassRank(definition.class),
    count,
    message: truncate(message, MAX_REPRESENTATIVE_MESSAGE_LENGTH),
    names,
  };
}

/**
 * Rank first (highest class), then more instances first, then a group with a representative
 * message before one without, then reason name.
 */
export function compareGroups(a: Group, b: Group): number {
  return (
    a.rank - b.rank ||
    b.count - a.count ||
    Number(a.message === "") - Number(b.message === "") ||
    compareStrings(a.reason, b.reason)
  );
}

/** Inserts `name` into `names` (sorted, at most {@link MAX_NAMES}) if it is among the smallest. */
export function keepSmallest(names: string[], name: string): void {
  if (names.length >= MAX_NAMES) {
    const last = names[names.length - 1];
    if (last !== undefined && compareStrings(name, last) >= 0) return;
  }
  let i = names.length;
  while (i > 0) {
    const before = names[i - 1];
    if (before === undefined || compareStrings(before, name) <= 0) break;
    i--;
  }
  names.splice(i, 0, name);
  if (names.length > MAX_NAMES) names.pop();
}

/** The status form of a group. */
export function toReasonCount(group: Group): ReasonCount {
  return {
    reason: group.reason,
    count: group.count,
    message: group.message,
    instances: [...group.names],
  };
}

/** Whether the tally is available: a replica is ready, or none is desired and the spec stands. */
export function isAvailable(tally: Tally): boolean {
  return tally.ready > 0 || (tally.desired === 0 && !tally.groups.some(isSpecRejected));
}

function isSpecRejected(group: Group): boolean {
  return group.definition.class === "SpecRejected";
}

function isFailure(group: Group): boolean {
  const c = group.definition.class;
  return (
    c === "SpecRejected" ||
    c === "CustomerMustFix" ||
    c === "PlatformBlocked" ||
    c === "Unclassified"
  );
}

function isInProgress(group: Group): boolean {
  return group.definition.class === "PlatformWorking";
}

/**
 * Ready and desired counts, capped: `ready` at most `desired`, the rest `surplus`. Every tally is
 * built through this, so no ratio in any message can exceed 100 %.
 */
export function capReady(ready: number, desired: number): { ready: number; surplus: number } {
  return ready > desired ? { ready: desired, surplus: ready - desired } : { ready, surplus: 0 };
}

/**
 * `2/3 instances are ready`, or `No instances are desired` for none desired; ready instances
 * beyond the desired count add `(1 more is ready but not desired)`.
 */
export function readyClause(tally: Tally): string {
  const surplus =
    tally.surplus === 0
      ? ""
      : ` (${tally.surplus} ${tally.desired === 0 ? "" : "more "}${tally.surplus === 1 ? "is" : "are"} ready but not desired)`;
  return tally.desired === 0
    ? `No instances are desired${surplus}`
    : `${tally.ready}/${tally.desired} instances are ready${surplus}`;
}

function phrase(group: Group): string {
  return group.count === 1 ? group.definition.singular : group.definition.plural;
}

function withoutFinalPeriod(text: string): string {
  return text.replace(/\.$/, "");
}

/**
 * The short form of the groups, for a message that already said how many are ready:
 * `; 1 is repeatedly exiting and restarting; 2 are being provisioned`. At most
 * {@link MAX_GROUPS} groups, then `; N more are not ready for other reasons`.
 */
export function shortGroups(groups: readonly Group[]): string {
  const parts = groups.slice(0, MAX_GROUPS).map((g) => {
    if (g.count > 0) return `${g.count} ${phrase(g)}`;
    return g.message === ""
      ? g.reason
      : `${g.reason}: ${withoutFinalPeriod(asSentence(g.message))}`;
  });
  const overflow = overflowText(groups.slice(MAX_GROUPS), false);
  if (overflow !== "") parts.push(overflow);
  return parts.map((p) => `; ${p}`).join("");
}

/**
 * The long form of the groups, as sentences: the first group with its representative message,
 * the next ones with their counts, then a summary of the rest.
 *
 * `1 of 1 instances is repeatedly exiting and restarting: container "app" has exited ...`
 *
 * @param withNames - add up to {@link MAX_NAMES} instance names after each phrase.
 */
export function describeGroups(
  groups: readonly Group[],
  desired: number,
  withNames: boolean,
): string {
  const sentences = groups.slice(0, MAX_GROUPS).map((g, i) => {
    if (g.count === 0) return g.message === "" ? `${g.reason} is reported.` : asSentence(g.message);
    const counted =
      g.count <= desired
        ? `${g.count} of ${desired} instances`
        : `${g.count} ${g.count === 1 ? "instance" : "instances"} (${desired} desired)`;
    const names = withNames && g.names.length > 0 ? ` (${listNames(g.names, g.count)})` : "";
    const head = `${counted} ${phrase(g)}${names}`;
    return i === 0 && g.message !== "" ? `${head}: ${asSentence(g.message)}` : `${head}.`;
  });
  const overflow = overflowText(groups.slice(MAX_GROUPS), true);
  if (overflow !== "") sentences.push(`${overflow}.`);
  return sentences.join(" ");
}

function overflowText(hidden: readonly Group[], capital: boolean): string {
  if (hidden.length === 0) return "";
  const instances = hidden.reduce((sum, g) => sum + g.count, 0);
  const text =
    instances > 0
      ? `${instances} more ${instances === 1 ? "is" : "are"} not ready for other reasons`
      : `${hidden.length} more ${hidden.length === 1 ? "reason is" : "reasons are"} reported`;
  return capital ? `${text.charAt(0).toUpperCase()}${text.slice(1)}` : text;
}

/**
 * `Degraded` and `Progressing` from a tally: the failure groups and the in-progress groups, each
 * described with names and a representative message.
 */
export function signalConditions(tally: Tally, observedGeneration: number): ConditionUpdate[] {
  const failing = tally.groups.filter(isFailure);
  const pending = tally.groups.filter(isInProgress);
  const topFailing = failing[0];
  const topPending = pending[0];
  return [
    topFailing === undefined
      ? {
          type: CONDITION_TYPES.Degraded,
          status: "False",
          reason: ROLLUP_REASONS.NoFailures,
          message: "No instance reports a failure.",
          observedGeneration,
        }
      : {
          type: CONDITION_TYPES.Degraded,
          status: "True",
          reason: topFailing.reason,
          message: describeGroups(failing, tally.desired, true),
          observedGeneration,
        },
    topPending === undefined
      ? {
          type: CONDITION_TYPES.Progressing,
          status: "False",
          reason: ROLLUP_REASONS.NoInstancePending,
          message: "No instance is being provisioned or started.",
          observedGeneration,
        }
      : {
          type: CONDITION_TYPES.Progressing,
          status: "True",
          reason: topPending.reason,
          message: describeGroups(pending, tally.desired, true),
          observedGeneration,
        },
  ];
}

/** The reason of the highest-ranked group, or `fallback` when there is none. */
export function topReason(groups: readonly Group[], fallback: string): string {
  return groups[0]?.reason ?? fallback;
}
