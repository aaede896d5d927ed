/**
 * kstatus conventions: the abnormal-true `Reconciling` and `Stalled` conditions that Flux, kpt
 * and cli-utils read to decide whether an applied object is done, derived from the roll-up's
 * own conditions so that a crash-looping or quota-blocked object is never reported "Current".
 *
 * @packageDocumentation
 */
import { DEFAULT_REASON_CATALOG, type ReasonCatalog, type ReasonClass } from "./catalog.js";
import { type Condition, type ConditionUpdate, findCondition } from "./condition.js";
import { CONDITION_TYPES } from "./tally.js";
import { toCount, toText } from "./text.js";

/** The two condition types of the kstatus conventions (both abnormal-true). */
export const KSTATUS_CONDITION_TYPES = {
  /** True while the platform is still working towards the desired state. */
  Reconciling: "Reconciling",
  /** True while a reason that only a person can remove stops progress. */
  Stalled: "Stalled",
} as const;

/** The reasons of `Reconciling` and `Stalled` when they are False. */
const KSTATUS_REASONS = {
  /** `Reconciling=False`: nothing is being provisioned or started. */
  NothingPending: "NothingPending",
  /** `Stalled=False`: nothing stops progress. */
  NotStalled: "NotStalled",
} as const;

/** The reason classes that stop progress: a person must act (or the platform must give more). */
const STALLING: ReadonlySet<ReasonClass> = new Set([
  "SpecRejected",
  "CustomerMustFix",
  "PlatformBlocked",
]);

/** The reason classes that mean "wait": the platform is still working (or cannot tell yet). */
const WORKING: ReadonlySet<ReasonClass> = new Set(["PlatformWorking", "Unclassified"]);

/** Where an object stands, as the kstatus conditions see it. */
export interface ProgressInput {
  /** `metadata.generation`, stamped as the conditions' `observedGeneration`. */
  generation: number;
  /** Whether the object has reached its desired state (every desired replica is ready). */
  done: boolean;
  /** When not done: the reason that stands between the object and done (highest ranked). */
  reason?: string | undefined;
  /** When not done: the message to carry. */
  message?: string | undefined;
}

/** Options of {@link progressConditions} and {@link kstatusConditions}. */
export interface KstatusOptions {
  /** The reason catalog that classifies `reason`. Default: the built-in catalog. */
  catalog?: ReasonCatalog | undefined;
}

/**
 * The `Reconciling` and `Stalled` condition updates for an object, by the class of the reason
 * that stands between it and done:
 *
 * | where it stands | `Reconciling` | `Stalled` | kstatus reads |
 * | --- | --- | --- | --- |
 * | done | False | False | `Current` |
 * | `PlatformWorking` or `Unclassified` reason (provisioning, starting, unknown) | True | False | `InProgress` |
 * | `SpecRejected`, `CustomerMustFix`, `PlatformBlocked` reason (crash loop, OOM, image, quota, ...) | False | True | `Failed` |
 * | `NotAFailure` reason (instances completed) | False | False | `Current` |
 *
 * The two are never True together. Total: bad input reads as "not done, reason Unknown".
 */
export function progressConditions(
  input: ProgressInput,
  options: KstatusOptions = {},
): ConditionUpdate[] {
  const catalog = options?.catalog ?? DEFAULT_REASON_CATALOG;
  const observedGeneration = toCount(input?.generation);
  const idle: ConditionUpdate = {
    type: KSTATUS_CONDITION_TYPES.Reconciling,
    status: "False",
    reason: KSTATUS_REASONS.NothingPending,
    message: "Nothing is being provisioned or started.",
    observedGeneration,
  };
  const notStalled: ConditionUpdate = {
    type: KSTATUS_CONDITION_TYPES.Stalled,
    status: "False",
    reason: KSTATUS_REASONS.NotStalled,
    message: "Nothing stops progress.",
    observedGeneration,
  };
  if (input?.done === true) return [idle, notStalled];
  const resolved = catalog.resolve(input?.reason);
  const message = toText(input?.message) || `An instance ${resolved.definition.singular}.`;
  const klass = resolved.definition.class;
  if (STALLING.has(klass)) {
    return [idle, { ...notStalled, status: "True", reason: resolved.reason, message }];
  }
  if (WORKING.has(klass)) {
    return [{ ...idle, status: "True", reason: resolved.reason, message }, notStalled];
  }
  return [idle, notStalled];
}

/**
 * The `Reconciling` and `Stalled` updates for a WorkloadDeployment or Workload status the
 * roll-up computed: done when `ReplicasReady` is True, else by `ReplicasReady`'s reason and
 * message (the highest-ranked reason among the replicas that are not ready). Apply them with
 * `setConditions` beside the roll-up's own.
 *
 * @example
 * ```ts
 * const status = rollupWorkloadDeployment(input, { now, previous });
 * status.conditions = setConditions(status.conditions, kstatusConditions(status), now);
 * ```
 */
export function kstatusConditions(
  status: { observedGeneration: number; conditions: readonly Condition[] },
  options: KstatusOptions = {},
): ConditionUpdate[] {
  const ready = findCondition(status?.conditions, CONDITION_TYPES.ReplicasReady);
  return progressConditions(
    {
      generation: toCount(status?.observedGeneration),
      done: ready?.status === "True",
      reason: ready?.reason,
      message: ready?.message,
    },
    options,
  );
}
