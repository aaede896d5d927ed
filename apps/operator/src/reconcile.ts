/**
 * The operator's reconcilers as pure functions: a scope loaded from the informer caches in,
 * the desired status out. No I/O and no clock: `now` is passed in.
 *
 * @packageDocumentation
 */
import {
  type Instance,
  isEmptySelector,
  matchesSelector,
  type Workload,
  type WorkloadDeployment,
} from "@nebula/api";
import {
  type Condition,
  type ConditionUpdate,
  DEFAULT_REASON_CATALOG,
  findCondition,
  type InstanceInput,
  type PlacementInput,
  progressConditions,
  type ReasonCatalog,
  type ReasonCount,
  rollupWorkload,
  rollupWorkloadDeployment,
  type SpecBlocker,
  setConditions,
} from "@nebula/rollup";
import { toInstanceReason } from "@nebula/state-mapping";

/** Options of the reconcilers that judge instances. */
export interface JudgeOptions {
  /**
   * The stability window in seconds: an instance whose container restarted less than this long
   * ago is crashing, not ready (`@nebula/state-mapping`'s default, 600 s, when omitted).
   */
  readonly stabilityWindowSeconds?: number | undefined;
}

/**
 * A desired status and when to reconcile again although nothing else changes: the end of the
 * stability window of an instance that it holds (`undefined`: only a change can alter it).
 */
export interface Plan<T> {
  /** The desired status (or conditions). */
  readonly status: T;
  /** Reconcile again after this many ms, at least 1; `undefined`: no time-driven change. */
  readonly requeueAfterMs: number | undefined;
}

/** Milliseconds from `now` until the earliest of `times`, at least 1, or undefined. */
function untilEarliest(times: readonly (Date | undefined)[], now: Date): number | undefined {
  let earliest: number | undefined;
  for (const t of times) {
    const ms = t?.getTime();
    if (ms !== undefined && Number.isFinite(ms) && (earliest === undefined || ms < earliest)) {
      earliest = ms;
    }
  }
  return earliest === undefined ? undefined : Math.max(1, Math.ceil(earliest - now.getTime()));
}

/** The condition that reports references the API server cannot check at admission. */
export const REFERENCES_RESOLVED = "ReferencesResolved";

/** The reasons of `ReferencesResolved`. */
const REFERENCE_REASONS = {
  /** True: every reference resolves. */
  Resolved: "Resolved",
  /** A WorkloadDeployment's `workloadRef` names no Workload. */
  WorkloadNotFound: "WorkloadNotFound",
  /** A WorkloadDeployment's `placement` is not one of its Workload's placements. */
  PlacementNotFound: "PlacementNotFound",
  /** A WorkloadDeployment's selector matches no Pod and no Instance while replicas are desired. */
  NoMatchingInstances: "NoMatchingInstances",
  /** A WorkloadDeployment's selector is empty: it would select every object in the namespace. */
  EmptySelector: "EmptySelector",
  /** A Workload has no placements. */
  NoPlacements: "NoPlacements",
} as const;

/**
 * The built-in catalog plus the operator's reference reasons: a broken reference is a spec
 * rejection (nothing can be placed until a person fixes it); a selector that matches nothing
 * yet is unclassified (reported above "being provisioned", but not as stalled).
 */
const OPERATOR_CATALOG: ReasonCatalog = (() => {
  const extended = DEFAULT_REASON_CATALOG.extend({
    WorkloadNotFound: {
      class: "SpecRejected",
      singular: "belongs to a Workload that does not exist",
      plural: "belong to a Workload that does not exist",
      transient: false,
    },
    PlacementNotFound: {
      class: "SpecRejected",
      singular: "serves a placement its Workload does not have",
      plural: "serve a placement their Workload does not have",
      transient: false,
    },
    EmptySelector: {
      class: "SpecRejected",
      singular: "has an empty selector",
      plural: "have an empty selector",
      transient: false,
    },
    NoPlacements: {
      class: "SpecRejected",
      singular: "has no placements",
      plural: "have no placements",
      transient: false,
    },
    NoMatchingInstances: {
      class: "Unclassified",
      singular: "is not matched by any Pod or Instance",
      plural: "are not matched by any Pod or Instance",
      transient: true,
    },
  });
  return extended.ok ? extended.value : DEFAULT_REASON_CATALOG;
})();

/** A Pod as the reconciler reads it (a `V1Pod`; only metadata is typed here). */
export interface PodLike {
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string> } | undefined;
  [key: string]: unknown;
}

/** Everything a WorkloadDeployment's status depends on, loaded from the caches. */
export interface WorkloadDeploymentScope {
  /** The WorkloadDeployment. */
  deployment: WorkloadDeployment;
  /** Its Workload, or undefined when none of that name exists in the namespace. */
  workload: Workload | undefined;
  /** The Pods of its namespace (the function applies the selector). */
  pods: readonly PodLike[];
  /** The Instance objects of its namespace (the function applies the selector). */
  instances: readonly Instance[];
}

/** One instance as the roll-up reads it, from a Pod or an Instance object, judged at `now`. */
function toRollupInstance(
  object: PodLike | Instance,
  now: Date,
  options: JudgeOptions,
): { instance: InstanceInput; recheckAt: Date | undefined } {
  const { reason, ready, message, recheckAt } = toInstanceReason(object, {
    now,
    stabilityWindowSeconds: options.stabilityWindowSeconds,
  });
  return { instance: { name: object?.metadata?.name ?? "", ready, reason, message }, recheckAt };
}

function referenceCondition(
  generation: number,
  problem: { reason: string; message: string } | undefined,
): ConditionUpdate {
  return problem === undefined
    ? {
        type: REFERENCES_RESOLVED,
        status: "True",
        reason: REFERENCE_REASONS.Resolved,
        message: "Every reference resolves.",
        observedGeneration: generation,
      }
    : { type: REFERENCES_RESOLVED, status: "False", observedGeneration: generation, ...problem };
}

/** kstatus' two conditions: a broken reference stalls; otherwise `ReplicasReady` decides. */
function progress(
  generation: number,
  conditions: readonly Condition[],
  stalledBy: { reason: string; message: string } | undefined,
): ConditionUpdate[] {
  if (stalledBy !== undefined) {
    return progressConditions(
      { generation, done: false, ...stalledBy },
      { catalog: OPERATOR_CATALOG },
    );
  }
  const ready = findCondition(conditions, "ReplicasReady");
  return progressConditions(
    { generation, done: ready?.status === "True", reason: ready?.reason, message: ready?.message },
    { catalog: OPERATOR_CATALOG },
  );
}

/** A WorkloadDeployment's status as the operator stores it. */
export interface StoredWorkloadDeploymentStatus {
  observedGeneration: number;
  desiredReplicas: number;
  replicas: number;
  readyReplicas: number;
  reasons: ReasonCount[];
  conditions: Condition[];
}

/**
 * A WorkloadDeployment's desired status: its instances (Pods and Instance objects its selector
 * matches) rolled up with `@nebula/rollup`, plus `ReferencesResolved` and kstatus'
 * `Reconciling` / `Stalled`. Broken references become blockers and conditions, never errors.
 * An instance whose container restarted within the stability window counts as crashing.
 */
export function desiredWorkloadDeploymentStatus(
  scope: WorkloadDeploymentScope,
  now: Date,
  options: JudgeOptions = {},
): StoredWorkloadDeploymentStatus {
  return planWorkloadDeployment(scope, now, options).status;
}

/**
 * {@link desiredWorkloadDeploymentStatus} and when to reconcile again with no other event: at
 * the end of the earliest stability window that holds one of its instances, so that `Available`
 * turns True again the moment a restarted container has stayed up long enough.
 */
export function planWorkloadDeployment(
  scope: WorkloadDeploymentScope,
  now: Date,
  options: JudgeOptions = {},
): Plan<StoredWorkloadDeploymentStatus> {
  const { deployment } = scope;
  const generation = deployment.metadata.generation ?? 0;
  const namespace = deployment.metadata.namespace;
  const desired = deployment.spec.replicas;
  const selector = deployment.spec.selector;
  const empty = isEmptySelector(selector);
  const inNamespace = (o: PodLike | Instance) =>
    namespace === undefined ||
    o?.metadata?.namespace === undefined ||
    o.metadata.namespace === namespace;
  const matched = empty
    ? []
    : [
        ...scope.pods.filter(
          (p) => inNamespace(p) && matchesSelector(selector, p.metadata?.labels),
        ),
        ...scope.instances.filter(
          (i) => inNamespace(i) && matchesSelector(selector, i.metadata.labels),
        ),
      ];
  const judged = matched.map((o) => toRollupInstance(o, now, options));
  const instances = judged.map((j) => j.instance);

  let problem: { reason: string; message: string } | undefined;
  const workloadName = deployment.spec.workloadRef.name;
  if (scope.workload === undefined) {
    problem = {
      reason: REFERENCE_REASONS.WorkloadNotFound,
      message: `Workload "${workloadName}" does not exist in namespace "${namespace ?? ""}".`,
    };
  } else if (!scope.workload.spec.placements.some((p) => p.name === deployment.spec.placement)) {
    problem = {
      reason: REFERENCE_REASONS.PlacementNotFound,
      message: `Workload "${workloadName}" has no placement "${deployment.spec.placement}".`,
    };
  } else if (empty) {
    problem = {
      reason: REFERENCE_REASONS.EmptySelector,
      message: "The selector is empty; it must name the labels of this deployment's instances.",
    };
  }
  const noMatch =
    problem === undefined && matched.length === 0 && desired > 0
      ? {
          reason: REFERENCE_REASONS.NoMatchingInstances,
          message: "The selector matches no Pod and no Instance in the namespace.",
        }
      : undefined;

  const blockers: SpecBlocker[] = [];
  if (problem !== undefined) blockers.push({ ...problem });
  if (noMatch !== undefined) blockers.push({ ...noMatch, replicas: desired });

  const previous = deployment.status?.conditions ?? [];
  const rolled = rollupWorkloadDeployment(
    { desiredReplicas: desired, generation, blockers, instances },
    { now, previous, catalog: OPERATOR_CATALOG },
  );
  const conditions = setConditions(
    rolled.conditions,
    [
      referenceCondition(generation, problem ?? noMatch),
      ...progress(generation, rolled.conditions, problem),
    ],
    now,
  );
  return {
    status: {
      observedGeneration: rolled.observedGeneration,
      desiredReplicas: rolled.desiredReplicas,
      replicas: rolled.replicas,
      readyReplicas: rolled.readyReplicas,
      reasons: rolled.reasons,
      conditions,
    },
    requeueAfterMs: untilEarliest(
      judged.map((j) => j.recheckAt),
      now,
    ),
  };
}

/** Everything a Workload's status depends on, loaded from the caches. */
export interface WorkloadScope {
  /** The Workload. */
  workload: Workload;
  /** The WorkloadDeployments of its namespace whose `workloadRef` names it. */
  deployments: readonly WorkloadDeployment[];
}

/** A Workload's status as the operator stores it. */
export interface StoredWorkloadStatus {
  observedGeneration: number;
  desiredReplicas: number;
  replicas: number;
  readyReplicas: number;
  placements: ReturnType<typeof rollupWorkload>["placements"];
  reasons: ReasonCount[];
  conditions: Condition[];
}

function mergeReasons(lists: readonly (readonly ReasonCount[])[]): ReasonCount[] {
  const byReason = new Map<string, ReasonCount>();
  for (const list of lists) {
    for (const r of list) {
      const have = byReason.get(r.reason);
      if (have === undefined) byReason.set(r.reason, { ...r, instances: [...r.instances] });
      else {
        have.count += r.count;
        have.instances = [...have.instances, ...r.instances].sort().slice(0, 3);
        if (have.message === "") have.message = r.message;
      }
    }
  }
  return [...byReason.values()];
}

/**
 * A Workload's desired status: each placement from the WorkloadDeployments that serve it (only
 * statuses computed from their current generation count; several deployments of one placement
 * are summed), rolled up with `@nebula/rollup`, plus `ReferencesResolved` and kstatus'
 * conditions.
 */
export function desiredWorkloadStatus(scope: WorkloadScope, now: Date): StoredWorkloadStatus {
  const { workload } = scope;
  const generation = workload.metadata.generation ?? 0;
  const placements: PlacementInput[] = workload.spec.placements.map((placement) => {
    const serving = scope.deployments
      .filter(
        (d) =>
          d.spec.workloadRef.name === workload.metadata.name &&
          d.spec.placement === placement.name &&
          d.status?.observedGeneration !== undefined &&
          d.status.observedGeneration === (d.metadata.generation ?? 0),
      )
      .sort((a, b) => ((a.metadata.name ?? "") < (b.metadata.name ?? "") ? -1 : 1));
    if (serving.length === 0) return { name: placement.name, desiredReplicas: placement.replicas };
    return {
      name: placement.name,
      desiredReplicas: placement.replicas,
      replicas: serving.reduce((n, d) => n + (d.status?.replicas ?? 0), 0),
      readyReplicas: serving.reduce((n, d) => n + (d.status?.readyReplicas ?? 0), 0),
      reasons: mergeReasons(serving.map((d) => d.status?.reasons ?? [])),
    };
  });
  const problem =
    placements.length === 0
      ? { reason: REFERENCE_REASONS.NoPlacements, message: "The Workload has no placements." }
      : undefined;
  const previous = workload.status?.conditions ?? [];
  const rolled = rollupWorkload(
    { generation, placements },
    { now, previous, catalog: OPERATOR_CATALOG },
  );
  const conditions = setConditions(
    rolled.conditions,
    [referenceCondition(generation, problem), ...progress(generation, rolled.conditions, problem)],
    now,
  );
  return { ...rolled, conditions };
}

/**
 * The conditions the operator owns on an Instance object: kstatus' `Reconciling` / `Stalled`
 * from the instance's own reason (`toInstanceReason`, judged at `now` with the stability
 * window). Every other condition is its provider's and is kept as stored.
 */
export function desiredInstanceConditions(
  instance: Instance,
  now: Date,
  options: JudgeOptions = {},
): Condition[] {
  return planInstance(instance, now, options).status;
}

/** {@link desiredInstanceConditions} and when to reconcile again: the end of its stability window. */
export function planInstance(
  instance: Instance,
  now: Date,
  options: JudgeOptions = {},
): Plan<Condition[]> {
  const generation = instance.metadata.generation ?? 0;
  const { reason, ready, message, recheckAt } = toInstanceReason(instance, {
    now,
    stabilityWindowSeconds: options.stabilityWindowSeconds,
  });
  const updates = progressConditions(
    { generation, done: ready || reason === "Completed", reason, message },
    { catalog: OPERATOR_CATALOG },
  );
  return {
    status: setConditions(instance.status?.conditions ?? [], updates, now),
    requeueAfterMs: untilEarliest([recheckAt], now),
  };
}

/** An Event to record when a Workload's `Available` flips. */
export interface AvailabilityEvent {
  /** `Normal` when it became available, `Warning` when it stopped being available. */
  type: "Normal" | "Warning";
  /** The new `Available` reason. */
  reason: string;
  /** `Available changed from True to False: <message>`. */
  note: string;
}

/**
 * The Event for a flip of `Available` between two condition lists, or undefined when its status
 * did not change. The first status ever written (no stored `Available`) records no Event.
 */
export function availabilityEvent(
  previous: readonly Condition[] | undefined,
  next: readonly Condition[],
): AvailabilityEvent | undefined {
  const before = findCondition(previous, "Available");
  const after = findCondition(next, "Available");
  if (before === undefined || after === undefined || before.status === after.status)
    return undefined;
  return {
    type: after.status === "True" ? "Normal" : "Warning",
    reason: after.reason,
    note: `Available changed from ${before.status} to ${after.status}: ${after.message}`.slice(
      0,
      1024,
    ),
  };
}
