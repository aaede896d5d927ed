/**
 * WorkloadDeployment roll-up: instances (and spec-level blockers) → replica counts, reason
 * counts and the `Available`, `ReplicasReady`, `Degraded` and `Progressing` conditions.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import {
  DEFAULT_REASON_CATALOG,
  ReasonCatalog,
  type ResolvedReason,
  reasonClassRank,
} from "./catalog.js";
import { type Condition, type ConditionUpdate, setConditions } from "./condition.js";
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
  type ReasonCount,
  ROLLUP_REASONS,
  readyClause,
  shortGroups,
  signalConditions,
  type Tally,
  topReason,
  toReasonCount,
} from "./tally.js";
import { compareStrings, toCount, toName, toText } from "./text.js";

/** One instance of a WorkloadDeployment, as the reverse mapping (`@nebula/state-mapping`) sees it. */
export const InstanceInput = z.object({
  /** The instance's name (a Pod or Instance object name). */
  name: z.string(),
  /** Whether it is ready. A ready instance counts as ready whatever its reason says. */
  ready: z.boolean(),
  /** Its reason, e.g. `InstanceCrashing`; missing or malformed reasons count as `Unknown`. */
  reason: z.string().optional(),
  /** One sentence about this instance, e.g. `container "app" has exited and restarted ...`. */
  message: z.string().optional(),
});

/** One instance: name, ready, reason, message. */
export type InstanceInput = z.infer<typeof InstanceInput>;

/**
 * A spec-level reason that stops replicas from being created at all (no instance exists to
 * report it): `InvalidSpec`, `NoMatchingLocation`, `QuotaExceeded` ...
 */
export const SpecBlocker = z.object({
  /** The reason (a catalog name). */
  reason: z.string(),
  /** One sentence for people: `No location that is Ready and offers compute matches ...`. */
  message: z.string().optional(),
  /**
   * How many of the missing replicas it holds back. Omitted: all of them. The roll-up never
   * counts more blocked replicas than are missing (desired minus existing instances).
   */
  replicas: z.number().int().min(0).optional(),
});

/** A spec-level blocker: reason, message and how many missing replicas it holds back. */
export type SpecBlocker = z.infer<typeof SpecBlocker>;

/** Everything the WorkloadDeployment roll-up reads. */
export const WorkloadDeploymentInput = z.object({
  /** `spec.replicas`: the denominator of every message. */
  desiredReplicas: z.number().int().min(0),
  /** `metadata.generation`, stamped as `observedGeneration` on the status and each condition. */
  generation: z.number().int().min(0),
  /** Spec-level blockers; spec rejections among them outrank every instance reason. */
  blockers: z.array(SpecBlocker).optional(),
  /** The instances the deployment's selector matches, in any order. */
  instances: z.array(InstanceInput),
});

/** Everything the WorkloadDeployment roll-up reads: desired replicas, generation, blockers, instances. */
export type WorkloadDeploymentInput = z.infer<typeof WorkloadDeploymentInput>;

/** A WorkloadDeployment status as the roll-up computes it. */
export interface WorkloadDeploymentStatus {
  /** The generation this status was computed from. */
  observedGeneration: number;
  /** Desired replicas (copied from the input so that the status reads on its own). */
  desiredReplicas: number;
  /** Instances that exist. */
  replicas: number;
  /**
   * Instances that are ready. During a scale-down it may exceed `desiredReplicas`; ratios in
   * messages and the conditions count at most `desiredReplicas` of them.
   */
  readyReplicas: number;
  /** Not-ready instances and blocked replicas by reason, highest rank first. */
  reasons: ReasonCount[];
  /** `Available`, `ReplicasReady`, `Degraded`, `Progressing` (plus any other stored ones). */
  conditions: Condition[];
}

/** Options of {@link rollupWorkloadDeployment} and `rollupWorkload`. */
export interface RollupOptions {
  /** The time to record as `lastTransitionTime` on conditions whose status flips. */
  now: Date;
  /**
   * The conditions stored on the object now. Their `lastTransitionTime` is kept where the status
   * does not change, and conditions of other types are kept as they are. Default: none.
   */
  previous?: readonly Condition[] | undefined;
  /** The reason catalog. Default: {@link DEFAULT_REASON_CATALOG}. */
  catalog?: ReasonCatalog | undefined;
}

/**
 * Validates a WorkloadDeployment roll-up input read from outside (configuration, JSON, an
 * object's spec). Returns the input or an `InvalidDeploymentInput` error; never throws.
 */
export function parseWorkloadDeploymentInput(
  value: unknown,
): RollupResult<WorkloadDeploymentInput> {
  return parseInput(
    WorkloadDeploymentInput,
    value,
    "InvalidDeploymentInput",
    "WorkloadDeployment roll-up input",
  );
}

/**
 * Rolls a WorkloadDeployment's instances up into its status.
 *
 * - Not-ready instances are counted by reason and ranked by class (spec rejected > customer must
 *   fix > platform blocked > platform working); missing replicas are claimed by the blockers in
 *   rank order and the rest count as `Provisioning`.
 * - `Available` is True while any replica is ready; partial failure shows in its message
 *   (`2/3 instances are ready; 1 is repeatedly exiting and restarting`). When none is ready it is
 *   False with the highest-ranked reason, the count and one representative instance message.
 * - `ReplicasReady` is True only when ready ≥ desired. Every number in every message comes from
 *   the same tally as the statuses; denominators are desired replicas.
 * - Conditions are set with {@link setConditions}: `lastTransitionTime` moves only on a flip.
 *
 * Pure and total: any input gets a status (bad numbers count as 0, bad reasons as `Unknown`),
 * and the result does not depend on the order of instances or blockers.
 *
 * @example
 * ```ts
 * const status = rollupWorkloadDeployment(
 *   {
 *     desiredReplicas: 1,
 *     generation: 4,
 *     instances: [{ name: "web-0", ready: false, reason: "ImageUnavailable" }],
 *   },
 *   { now: new Date("2026-11-30T05:00:00Z") },
 * );
 * // status.conditions[0]: Available=False ImageUnavailable
 * //   "1 of 1 instances could not pull its image."
 * ```
 */
export function rollupWorkloadDeployment(
  input: WorkloadDeploymentInput,
  options: RollupOptions,
): WorkloadDeploymentStatus {
  const catalog =
    options?.catalog instanceof ReasonCatalog ? options.catalog : DEFAULT_REASON_CATALOG;
  const generation = toCount(input?.generation);
  const { tally, replicas } = tallyDeployment(input, catalog);
  const updates = deploymentConditions(tally, generation);
  return {
    observedGeneration: generation,
    desiredReplicas: tally.desired,
    replicas,
    readyReplicas: tally.ready + tally.surplus,
    reasons: tally.groups.map(toReasonCount),
    conditions: setConditions(options?.previous, updates, options?.now ?? new Date(Number.NaN)),
  };
}

interface GroupAccumulator {
  resolved: ResolvedReason;
  count: number;
  names: string[];
  /** message → how many instances carry it and the smallest name among them. */
  messages: Map<string, { count: number; firstName: string }>;
  blockerMessage: string | undefined;
}

function accumulator(resolved: ResolvedReason): GroupAccumulator {
  return { resolved, count: 0, names: [], messages: new Map(), blockerMessage: undefined };
}

/** The deployment's tally and its number of existing instances. */
function tallyDeployment(
  input: WorkloadDeploymentInput,
  catalog: ReasonCatalog,
): { tally: Tally; replicas: number } {
  const desired = toCount(input?.desiredReplicas);
  const instances: readonly unknown[] = Array.isArray(input?.instances) ? input.instances : [];
  const byReason = new Map<string, GroupAccumulator>();
  const groupFor = (resolved: ResolvedReason): GroupAccumulator => {
    let acc = byReason.get(resolved.reason);
    if (acc === undefined) {
      acc = accumulator(resolved);
      byReason.set(resolved.reason, acc);
    }
    return acc;
  };

  // Instances share a handful of reasons: resolve each distinct value once, straight to its group.
  const byValue = new Map<unknown, GroupAccumulator>();

  // The hot loop reads raw values only (no text is built or cleaned per instance): names and
  // messages are sanitised once per distinct value, when the groups are made.
  let ready = 0;
  for (const item of instances) {
    const instance = (typeof item === "object" && item !== null ? item : {}) as Partial<
      Record<keyof InstanceInput, unknown>
    >;
    if (instance.ready === true) {
      ready++;
      continue;
    }
    const reason = instance.reason;
    let acc = byValue.get(reason);
    if (acc === undefined) {
      acc = groupFor(catalog.resolve(reason));
      byValue.set(reason, acc);
    }
    const rawName = instance.name;
    const name = typeof rawName === "string" ? rawName : "";
    acc.count++;
    keepSmallest(acc.names, name);
    const message = instance.message;
    if (typeof message === "string" && message !== "") {
      const seen = acc.messages.get(message);
      if (seen === undefined) acc.messages.set(message, { count: 1, firstName: name });
      else {
        seen.count++;
        if (compareStrings(name, seen.firstName) < 0) seen.firstName = name;
      }
    }
  }

  let missing = Math.max(0, desired - instances.length);
  for (const blocker of rankedBlockers(input?.blockers, catalog)) {
    const acc = groupFor(blocker.resolved);
    const claim = Math.min(missing, blocker.replicas ?? missing);
    missing -= claim;
    acc.count += claim;
    if (blocker.message !== "" && acc.blockerMessage === undefined) {
      acc.blockerMessage = blocker.message;
    }
  }
  if (missing > 0) groupFor(catalog.resolve("Provisioning")).count += missing;

  const groups: Group[] = [];
  for (const acc of byReason.values()) {
    if (acc.count === 0 && acc.resolved.definition.class !== "SpecRejected") continue;
    groups.push(
      makeGroup(
        acc.resolved.reason,
        acc.resolved.definition,
        acc.count,
        acc.blockerMessage ?? representativeMessage(acc.messages),
        cleanNames(acc.names),
      ),
    );
  }
  groups.sort(compareGroups);
  return { tally: { desired, ...capReady(ready, desired), groups }, replicas: instances.length };
}

/** Kept names, sanitised for a message, sorted again (cleaning may change the order). */
function cleanNames(names: readonly string[]): string[] {
  return names.map(toName).sort(compareStrings);
}

/**
 * The representative message of a group: the one most instances carry; on a tie, the one whose
 * first instance name sorts first; then the message itself. Messages are compared as they will
 * be shown (sanitised and trimmed: two raw texts that read the same count as one). Independent
 * of input order.
 */
function representativeMessage(
  messages: Map<string, { count: number; firstName: string }>,
): string {
  const shown = new Map<string, { count: number; firstName: string }>();
  for (const [raw, { count, firstName }] of messages) {
    const text = toText(raw);
    if (text === "") continue;
    const seen = shown.get(text);
    if (seen === undefined) shown.set(text, { count, firstName });
    else {
      seen.count += count;
      if (compareStrings(firstName, seen.firstName) < 0) seen.firstName = firstName;
    }
  }
  let best: { message: string; count: number; firstName: string } | undefined;
  for (const [message, { count, firstName }] of shown) {
    if (
      best === undefined ||
      count > best.count ||
      (count === best.count &&
        (compareStrings(firstName, best.firstName) < 0 ||
          (firstName === best.firstName && compareStrings(message, best.message) < 0)))
    ) {
      best = { message, count, firstName };
    }
  }
  return best?.message ?? "";
}

interface RankedBlocker {
  resolved: ResolvedReason;
  message: string;
  replicas: number | undefined;
}

/** Blockers merged by reason (requested replicas summed; any "all" wins), in rank order. */
function rankedBlockers(blockers: unknown, catalog: ReasonCatalog): RankedBlocker[] {
  const list: readonly unknown[] = Array.isArray(blockers) ? blockers : [];
  const merged = new Map<string, RankedBlocker>();
  for (const item of list) {
    const blocker = (typeof item === "object" && item !== null ? item : {}) as Partial<
      Record<keyof SpecBlocker, unknown>
    >;
    const resolved = catalog.resolve(blocker.reason);
    const message = toText(blocker.message);
    const replicas =
      blocker.replicas === undefined || blocker.replicas === null
        ? undefined
        : toCount(blocker.replicas);
    const seen = merged.get(resolved.reason);
    if (seen === undefined) {
      merged.set(resolved.reason, { resolved, message, replicas });
      continue;
    }
    seen.replicas =
      seen.replicas === undefined || replicas === undefined ? undefined : seen.replicas + replicas;
    if (message !== "" && (seen.message === "" || compareStrings(message, seen.message) < 0)) {
      seen.message = message;
    }
  }
  return [...merged.values()].sort(
    (a, b) =>
      reasonClassRank(a.resolved.definition.class) - reasonClassRank(b.resolved.definition.class) ||
      compareStrings(a.resolved.reason, b.resolved.reason),
  );
}

/** The four conditions of a WorkloadDeployment from its tally. */
export function deploymentConditions(tally: Tally, observedGeneration: number): ConditionUpdate[] {
  const partial = `${readyClause(tally)}${shortGroups(tally.groups)}`;
  const available: ConditionUpdate = isAvailable(tally)
    ? {
        type: CONDITION_TYPES.Available,
        status: "True",
        reason:
          tally.ready > 0 ? ROLLUP_REASONS.ReadyInstanceFound : ROLLUP_REASONS.NoReplicasDesired,
        message: partial,
        observedGeneration,
      }
    : {
        type: CONDITION_TYPES.Available,
        status: "False",
        reason: topReason(tally.groups, "Unknown"),
        message: describeGroups(tally.groups, tally.desired, false),
        observedGeneration,
      };
  const replicasReady: ConditionUpdate =
    tally.ready >= tally.desired
      ? {
          type: CONDITION_TYPES.ReplicasReady,
          status: "True",
          reason:
            tally.desired === 0
              ? ROLLUP_REASONS.NoReplicasDesired
              : ROLLUP_REASONS.AllReplicasReady,
          message: partial,
          observedGeneration,
        }
      : {
          type: CONDITION_TYPES.ReplicasReady,
          status: "False",
          reason: topReason(tally.groups, "Unknown"),
          message: partial,
          observedGeneration,
        };
  return [available, replicasReady, ...signalConditions(tally, observedGeneration)];
}
