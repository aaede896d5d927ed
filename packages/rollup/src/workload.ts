/**
 * Workload roll-up: its WorkloadDeployments (one per placement) → per-placement status, summed
 * counts, reason counts and the same four conditions.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { DEFAULT_REASON_CATALOG, ReasonCatalog, type ResolvedReason } from "./catalog.js";
import type { Condition, ConditionStatus, ConditionUpdate } from "./condition.js";
import { setConditions } from "./condition.js";
import { deploymentConditions, type RollupOptions } from "./deployment.js";
import { parseInput, type RollupResult } from "./errors.js";
import {
  CONDITION_TYPES,
  capReady,
  compareGroups,
  describeGroups,
  type Group,
  isAvailable,
  keepSmallest,
  makeGroup,
  ReasonCount,
  ROLLUP_REASONS,
  readyClause,
  shortGroups,
  signalConditions,
  type Tally,
  topReason,
  toReasonCount,
} from "./tally.js";
import { compareStrings, toCount, toName, toText } from "./text.js";

/**
 * One placement of a Workload: its name and desired replicas (from the Workload's spec) and, once
 * its WorkloadDeployment has a status, that status's counts and reasons.
 */
export const PlacementInput = z.object({
  /** The placement's name. */
  name: z.string(),
  /** Desired replicas of this placement. */
  desiredReplicas: z.number().int().min(0),
  /** `status.replicas` of its WorkloadDeployment (default 0). */
  replicas: z.number().int().min(0).optional(),
  /** `status.readyReplicas` of its WorkloadDeployment (default 0). */
  readyReplicas: z.number().int().min(0).optional(),
  /**
   * `status.reasons` of its WorkloadDeployment. Desired replicas that are neither ready nor
   * counted here count as `Provisioning` (a deployment with no status yet).
   */
  reasons: z.array(ReasonCount).optional(),
});

/** One placement: name, desired replicas and its WorkloadDeployment's counts and reasons. */
export type PlacementInput = z.infer<typeof PlacementInput>;

/** Everything the Workload roll-up reads. */
export const WorkloadInput = z.object({
  /** `metadata.generation` of the Workload. */
  generation: z.number().int().min(0),
  /** Its placements, in any order. */
  placements: z.array(PlacementInput),
});

/** Everything the Workload roll-up reads: generation and placements. */
export type WorkloadInput = z.infer<typeof WorkloadInput>;

/** The status of one placement inside a Workload's status. */
interface PlacementStatus {
  /** The placement's name. */
  name: string;
  /** Desired replicas. */
  desiredReplicas: number;
  /** Instances that exist. */
  replicas: number;
  /** Instances that are ready. */
  readyReplicas: number;
  /** The placement's `Available` status, computed as for its WorkloadDeployment. */
  available: ConditionStatus;
  /** The placement's `Available` reason. */
  reason: string;
  /** The placement's `Available` message. */
  message: string;
}

/** A Workload status as the roll-up computes it. */
export interface WorkloadStatus {
  /** The generation this status was computed from. */
  observedGeneration: number;
  /** Desired replicas over all placements. */
  desiredReplicas: number;
  /** Existing instances over all placements. */
  replicas: number;
  /** Ready instances over all placements. */
  readyReplicas: number;
  /** Per placement, sorted by name. */
  placements: PlacementStatus[];
  /** Not-ready instances by reason over all placements, highest rank first. */
  reasons: ReasonCount[];
  /** `Available`, `ReplicasReady`, `Degraded`, `Progressing` (plus any other stored ones). */
  conditions: Condition[];
}

/**
 * Validates a Workload roll-up input read from outside. Returns the input or an
 * `InvalidWorkloadInput` error; never throws.
 */
export function parseWorkloadInput(value: unknown): RollupResult<WorkloadInput> {
  return parseInput(WorkloadInput, value, "InvalidWorkloadInput", "Workload roll-up input");
}

/**
 * Rolls a Workload's placements up into its status, the same way
 * {@link rollupWorkloadDeployment} rolls up instances:
 *
 * - `Available` is True while any placement has a ready instance (or nothing is desired); when
 *   none has, it is False with the highest-ranked reason over all placements, its count and one
 *   representative instance message. With a single placement the message is exactly its
 *   WorkloadDeployment's.
 * - `ReplicasReady` is True only when every placement has ready ≥ desired.
 * - `Degraded` and `Progressing` as for a WorkloadDeployment, over all placements.
 * - `placements` holds each placement's own availability, reason and message.
 *
 * Pure and total; the result does not depend on the order of placements.
 *
 * @example
 * ```ts
 * const wd = rollupWorkloadDeployment(deploymentInput, { now });
 * const status = rollupWorkload(
 *   { generation: 7, placements: [{ ...wd, name: "eu" }] },
 *   { now, previous: workload.status?.conditions },
 * );
 * ```
 */
export function rollupWorkload(input: WorkloadInput, options: RollupOptions): WorkloadStatus {
  const catalog =
    options?.catalog instanceof ReasonCatalog ? options.catalog : DEFAULT_REASON_CATALOG;
  const generation = toCount(input?.generation);
  const rawPlacements: readonly unknown[] = Array.isArray(input?.placements)
    ? input.placements
    : [];
  // An index loop, not `map`: a sparse array's holes are placements too (nameless, empty).
  const placements: PlacementTally[] = [];
  for (let i = 0; i < rawPlacements.length; i++) {
    placements.push(tallyPlacement(rawPlacements[i], catalog));
  }
  placements.sort((a, b) => compareStrings(a.name, b.name) || compareStrings(a.sortKey, b.sortKey));

  const tally = mergeTallies(placements, catalog);
  const unsatisfied = placements.filter((p) => p.tally.ready < p.tally.desired);
  const updates = workloadConditions(
    tally,
    placements.length,
    placements.filter((p) => p.tally.ready > 0).length,
    placements.length - unsatisfied.length,
    mergeTallies(unsatisfied, catalog).groups,
    generation,
  );
  return {
    observedGeneration: generation,
    desiredReplicas: tally.desired,
    replicas: placements.reduce((sum, p) => sum + p.replicas, 0),
    readyReplicas: tally.ready + tally.surplus,
    placements: placements.map((p) => p.status),
    reasons: tally.groups.map(toReasonCount),
    conditions: setConditions(options?.previous, updates, options?.now ?? new Date(Number.NaN)),
  };
}

interface PlacementTally {
  name: string;
  replicas: number;
  tally: Tally;
  status: PlacementStatus;
  /** Tie-break for placements of the same name. */
  sortKey: string;
}

function tallyPlacement(item: unknown, catalog: ReasonCatalog): PlacementTally {
  const placement = (typeof item === "object" && item !== null ? item : {}) as Partial<
    Record<keyof PlacementInput, unknown>
  >;
  const name = toName(placement.name);
  const desired = toCount(placement.desiredReplicas);
  const readyReplicas = toCount(placement.readyReplicas);
  const { ready, surplus } = capReady(readyReplicas, desired);
  const replicas = toCount(placement.replicas);

  const merged = new Map<string, MergeAccumulator>();
  const counts: readonly unknown[] = Array.isArray(placement.reasons) ? placement.reasons : [];
  for (const raw of counts) {
    const entry = (typeof raw === "object" && raw !== null ? raw : {}) as Partial<
      Record<keyof ReasonCount, unknown>
    >;
    const names = Array.isArray(entry.instances)
      ? entry.instances.filter((n): n is string => typeof n === "string").map(toName)
      : [];
    addToMerge(merged, catalog.resolve(entry.reason), toCount(entry.count), {
      message: toText(entry.message),
      names,
      placement: name,
    });
  }
  const counted = [...merged.values()].reduce((sum, acc) => sum + acc.count, 0);
  const unaccounted = Math.max(0, desired - ready - counted);
  if (unaccounted > 0) {
    addToMerge(merged, catalog.resolve("Provisioning"), unaccounted, {
      message: "",
      names: [],
      placement: name,
    });
  }
  const tally: Tally = { desired, ready, surplus, groups: finishMerge(merged) };
  const available = deploymentConditions(tally, 0)[0];
  const status: PlacementStatus = {
    name,
    desiredReplicas: desired,
    replicas,
    readyReplicas,
    available: available?.status ?? "Unknown",
    reason: available?.reason ?? "Unknown",
    message: available?.message ?? "",
  };
  return { name, replicas, tally, status, sortKey: JSON.stringify([status, tally.groups]) };
}

interface MergeAccumulator {
  resolved: ResolvedReason;
  count: number;
  names: string[];
  best: { message: string; count: number; placement: string } | undefined;
}

function addToMerge(
  merged: Map<string, MergeAccumulator>,
  resolved: ResolvedReason,
  count: number,
  source: { message: string; names: readonly string[]; placement: string },
): void {
  let acc = merged.get(resolved.reason);
  if (acc === undefined) {
    acc = { resolved, count: 0, names: [], best: undefined };
    merged.set(resolved.reason, acc);
  }
  acc.count += count;
  for (const name of source.names) keepSmallest(acc.names, name);
  if (source.message === "") return;
  const candidate = { message: source.message, count, placement: source.placement };
  const best = acc.best;
  if (
    best === undefined ||
    candidate.count > best.count ||
    (candidate.count === best.count &&
      (compareStrings(candidate.placement, best.placement) < 0 ||
        (candidate.placement === best.placement &&
          compareStrings(candidate.message, best.message) < 0)))
  ) {
    acc.best = candidate;
  }
}

function finishMerge(merged: Map<string, MergeAccumulator>): Group[] {
  const groups: Group[] = [];
  for (const acc of merged.values()) {
    if (acc.count === 0 && acc.resolved.definition.class !== "SpecRejected") continue;
    groups.push(
      makeGroup(
        acc.resolved.reason,
        acc.resolved.definition,
        acc.count,
        acc.best?.message ?? "",
        acc.names,
      ),
    );
  }
  return groups.sort(compareGroups);
}

/** One tally over several placements: counts summed, groups merged by reason. */
function mergeTallies(placements: readonly PlacementTally[], catalog: ReasonCatalog): Tally {
  const merged = new Map<string, MergeAccumulator>();
  let desired = 0;
  let ready = 0;
  let surplus = 0;
  for (const p of placements) {
    desired += p.tally.desired;
    ready += p.tally.ready;
    surplus += p.tally.surplus;
    for (const g of p.tally.groups) {
      addToMerge(merged, catalog.resolve(g.reason), g.count, {
        message: g.message,
        names: g.names,
        placement: p.name,
      });
    }
  }
  return { desired, ready, surplus, groups: finishMerge(merged) };
}

function lowerFirst(text: string): string {
  return `${text.charAt(0).toLowerCase()}${text.slice(1)}`;
}

function workloadConditions(
  tally: Tally,
  placements: number,
  withReady: number,
  satisfied: number,
  unsatisfiedGroups: readonly Group[],
  observedGeneration: number,
): ConditionUpdate[] {
  const detail = `${lowerFirst(readyClause(tally))}${shortGroups(tally.groups)}`;
  let available: ConditionUpdate;
  if (placements === 0) {
    available = {
      type: CONDITION_TYPES.Available,
      status: "True",
      reason: ROLLUP_REASONS.NoReplicasDesired,
      message: "No placements are defined",
      observedGeneration,
    };
  } else if (isAvailable(tally)) {
    available = {
      type: CONDITION_TYPES.Available,
      status: "True",
      reason:
        tally.ready > 0 ? ROLLUP_REASONS.AvailablePlacementFound : ROLLUP_REASONS.NoReplicasDesired,
      // One placement: exactly its WorkloadDeployment's message.
      message:
        placements === 1
          ? `${readyClause(tally)}${shortGroups(tally.groups)}`
          : `${withReady}/${placements} placements have ready instances; ${detail}`,
      observedGeneration,
    };
  } else {
    const described = describeGroups(tally.groups, tally.desired, false);
    available = {
      type: CONDITION_TYPES.Available,
      status: "False",
      reason: topReason(tally.groups, "Unknown"),
      message:
        placements === 1
          ? described
          : `None of the ${placements} placements has a ready instance. ${described}`,
      observedGeneration,
    };
  }
  const allSatisfied = satisfied === placements;
  const replicasReady: ConditionUpdate = {
    type: CONDITION_TYPES.ReplicasReady,
    status: allSatisfied ? "True" : "False",
    reason: allSatisfied
      ? tally.desired === 0
        ? ROLLUP_REASONS.NoReplicasDesired
        : ROLLUP_REASONS.AllReplicasReady
      : topReason(unsatisfiedGroups, "Unknown"),
    message:
      placements === 0
        ? "No placements are defined"
        : `${satisfied}/${placements} placements have all desired instances ready; ${detail}`,
    observedGeneration,
  };
  return [available, replicasReady, ...signalConditions(tally, observedGeneration)];
}
