/**
 * What the demo observes of the world, reduced to plain data: the table, the scenarios and the
 * summary are pure functions of it.
 */
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";

/** One container exit as the Pod's status reports it. */
interface ExitView {
  readonly code: number;
  readonly reason: string | undefined;
  /** RFC 3339 time of the exit, as stored (whole seconds). */
  readonly finishedAt: string | undefined;
}

/** One container's status, as the watch reads it (`status.containerStatuses[]` and init containers). */
export interface ContainerView {
  readonly name: string;
  /** An init container (a native sidecar included). */
  readonly init: boolean;
  /** The kubelet's `ready`. */
  readonly ready: boolean;
  readonly restarts: number;
  /** `state.running.startedAt` (RFC 3339) while it runs. */
  readonly runningSince: string | undefined;
  /**
   * When its current run started (RFC 3339, whole seconds): `state.running.startedAt`, or
   * `state.terminated.startedAt` once it ended.
   */
  readonly startedAt: string | undefined;
  /** `state.waiting.reason`. */
  readonly waiting: string | undefined;
  /** `state.terminated.reason`. */
  readonly terminated: string | undefined;
  /** `lastState.terminated`: its previous run's end. */
  readonly lastExit: ExitView | undefined;
}

/** One Pod of the demo namespace. */
export interface PodView {
  readonly name: string;
  readonly uid: string;
  readonly labels: Readonly<Record<string, string>>;
  /** `status.phase`, `Pending` when unset. */
  readonly phase: string;
  /** The first container's waiting or terminated reason, else the Pod's own reason. */
  readonly reason: string | undefined;
  readonly restarts: number;
  /** The current termination of the first container, if it is terminated. */
  readonly exit: ExitView | undefined;
  /** Its previous termination (`lastState.terminated`). */
  readonly lastExit: ExitView | undefined;
  /** `metadata.deletionTimestamp` is set. */
  readonly deleting: boolean;
  /** `metadata.deletionTimestamp` (RFC 3339): the deletion's request time plus its grace. */
  readonly deletionTimestamp: string | undefined;
  /** `metadata.deletionGracePeriodSeconds`. */
  readonly deletionGracePeriodSeconds: number | undefined;
  /** Every container's status, the app containers first. */
  readonly containers: readonly ContainerView[];
  /** `metadata.creationTimestamp` (RFC 3339, whole seconds). */
  readonly createdAt: string | undefined;
  /** The `lastTransitionTime` of its `Ready=True` condition, while it says so. */
  readonly readySince: string | undefined;
}

/** One EC2 instance of the demo's cluster. */
export interface InstanceView {
  readonly id: string;
  /** EC2 state name: pending, running, stopping, stopped, shutting-down, terminated. */
  readonly state: string;
  /** Its `nebula:pod-uid` tag. */
  readonly podUid: string | undefined;
  /** EC2's `StateReason.Code` (`Client.InstanceInitiatedShutdown`: it powered itself off). */
  readonly stateReason: string | undefined;
  /** Its tags (the host's exit report among them: `nebula:report`, `nebula:report:<n>`). */
  readonly tags: Readonly<Record<string, string>>;
}

/** A label selector as a WorkloadDeployment's `spec.selector` holds it. */
export interface SelectorView {
  readonly matchLabels: Readonly<Record<string, string>>;
  readonly matchExpressions: readonly {
    readonly key: string;
    readonly operator: string;
    readonly values: readonly string[];
  }[];
}

/** A Workload or WorkloadDeployment and its `Available` condition. */
export interface WorkloadView {
  readonly kind: "Workload" | "WorkloadDeployment";
  readonly name: string;
  /** `True`, `False`, `Unknown`, or `-` before the operator wrote a status. */
  readonly available: string;
  readonly reason: string;
  readonly message: string;
  readonly readyReplicas: number;
  readonly desiredReplicas: number;
  /** `status.reasons[].reason`. */
  readonly reasons: readonly string[];
  /** A WorkloadDeployment's `spec.selector` (its instances); `undefined` for a Workload. */
  readonly selector: SelectorView | undefined;
  /** A WorkloadDeployment's `spec.workloadRef.name`; `undefined` for a Workload. */
  readonly workloadRef: string | undefined;
}

/** A Pod's `StartupTimes` Event (nebula-vnode's start-up breakdown, one line). */
export interface StartupEventView {
  /** `involvedObject.uid`. */
  readonly podUid: string;
  /** `involvedObject.name`. */
  readonly podName: string;
  readonly message: string;
}

/** Everything observed at one moment. */
export interface Snapshot {
  /** Milliseconds since the demo started. */
  readonly elapsedMs: number;
  /** Wall-clock time of the observation (epoch ms). */
  readonly at: number;
  readonly pods: readonly PodView[];
  readonly instances: readonly InstanceView[];
  readonly workloads: readonly WorkloadView[];
  /** EC2 calls made by nebula-vnode so far, by action. */
  readonly ec2Calls: Readonly<Record<string, number>>;
  /** Poll cycles nebula-vnode finished so far (`nebula_vnode_poll_duration_seconds_count`). */
  readonly vnodePolls: number;
  /** The `StartupTimes` Events of the demo's Pods. */
  readonly startupEvents: readonly StartupEventView[];
}

/** An empty snapshot. */
export const EMPTY_SNAPSHOT: Snapshot = {
  elapsedMs: 0,
  at: 0,
  pods: [],
  instances: [],
  workloads: [],
  ec2Calls: {},
  vnodePolls: 0,
  startupEvents: [],
};

const toIso = (value: unknown): string | undefined =>
  value instanceof Date ? value.toISOString() : typeof value === "string" ? value : undefined;

function exitOf(
  terminated: { exitCode?: number; reason?: string; finishedAt?: unknown } | undefined | null,
): ExitView | undefined {
  if (terminated == null) return undefined;
  return {
    code: terminated.exitCode ?? -1,
    reason: terminated.reason,
    finishedAt: toIso(terminated.finishedAt),
  };
}

function containerView(status: V1ContainerStatus, init: boolean): ContainerView {
  return {
    name: status.name ?? "",
    init,
    ready: status.ready === true,
    restarts: typeof status.restartCount === "number" ? status.restartCount : 0,
    runningSince: toIso(status.state?.running?.startedAt),
    startedAt: toIso(status.state?.running?.startedAt ?? status.state?.terminated?.startedAt),
    waiting: status.state?.waiting?.reason ?? undefined,
    terminated: status.state?.terminated?.reason ?? undefined,
    lastExit: exitOf(status.lastState?.terminated),
  };
}

/** Reduces a Pod to what the demo shows and judges. Total: any object gives a view. */
export function podView(pod: V1Pod): PodView {
  const container = pod.status?.containerStatuses?.[0];
  const grace = pod.metadata?.deletionGracePeriodSeconds;
  const waiting = container?.state?.waiting?.reason;
  const terminated = container?.state?.terminated;
  return {
    name: pod.metadata?.name ?? "",
    uid: pod.metadata?.uid ?? "",
    labels: pod.metadata?.labels ?? {},
    phase: pod.status?.phase ?? "Pending",
    reason: waiting ?? terminated?.reason ?? pod.status?.reason ?? undefined,
    restarts: container?.restartCount ?? 0,
    exit: exitOf(terminated),
    lastExit: exitOf(container?.lastState?.terminated),
    deleting: pod.metadata?.deletionTimestamp != null,
    deletionTimestamp: toIso(pod.metadata?.deletionTimestamp),
    deletionGracePeriodSeconds: typeof grace === "number" ? grace : undefined,
    containers: [
      ...(pod.status?.containerStatuses ?? []).map((c) => containerView(c, false)),
      ...(pod.status?.initContainerStatuses ?? []).map((c) => containerView(c, true)),
    ],
    createdAt: toIso(pod.metadata?.creationTimestamp),
    readySince: toIso(
      pod.status?.conditions?.find((c) => c.type === "Ready" && c.status === "True")
        ?.lastTransitionTime,
    ),
  };
}

interface RawCondition {
  readonly type?: unknown;
  readonly status?: unknown;
  readonly reason?: unknown;
  readonly message?: unknown;
}

interface RawWorkload {
  readonly metadata?: { readonly name?: unknown };
  readonly spec?: {
    readonly selector?: {
      readonly matchLabels?: unknown;
      readonly matchExpressions?: unknown;
    };
    readonly workloadRef?: { readonly name?: unknown };
  };
  readonly status?: {
    readonly conditions?: readonly RawCondition[];
    readonly readyReplicas?: unknown;
    readonly desiredReplicas?: unknown;
    readonly reasons?: readonly { readonly reason?: unknown }[];
  };
}

const str = (value: unknown, fallback: string): string =>
  typeof value === "string" ? value : fallback;
const num = (value: unknown): number => (typeof value === "number" ? value : 0);

/** Reduces a Workload or WorkloadDeployment (as listed, unvalidated) to its view. Total. */
export function workloadView(kind: WorkloadView["kind"], object: unknown): WorkloadView {
  const raw = (typeof object === "object" && object !== null ? object : {}) as RawWorkload;
  const conditions = Array.isArray(raw.status?.conditions) ? raw.status.conditions : [];
  const available = conditions.find((c) => c?.type === "Available");
  const reasons = Array.isArray(raw.status?.reasons) ? raw.status.reasons : [];
  return {
    kind,
    name: str(raw.metadata?.name, ""),
    available: str(available?.status, "-"),
    reason: str(available?.reason, ""),
    message: str(available?.message, ""),
    readyReplicas: num(raw.status?.readyReplicas),
    desiredReplicas: num(raw.status?.desiredReplicas),
    reasons: reasons.flatMap((r) => (typeof r?.reason === "string" ? [r.reason] : [])),
    selector: kind === "WorkloadDeployment" ? selectorView(raw.spec?.selector) : undefined,
    workloadRef:
      kind === "WorkloadDeployment" && typeof raw.spec?.workloadRef?.name === "string"
        ? raw.spec.workloadRef.name
        : undefined,
  };
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** A selector as stored (unvalidated); parts that are not strings are left out. Total. */
function selectorView(raw: unknown): SelectorView {
  const selector = isRecord(raw) ? raw : {};
  const matchLabels: Record<string, string> = {};
  if (isRecord(selector.matchLabels)) {
    for (const [key, value] of Object.entries(selector.matchLabels))
      if (typeof value === "string") matchLabels[key] = value;
  }
  const expressions = Array.isArray(selector.matchExpressions) ? selector.matchExpressions : [];
  return {
    matchLabels,
    matchExpressions: expressions.filter(isRecord).map((e) => ({
      key: str(e.key, ""),
      operator: str(e.operator, ""),
      values: Array.isArray(e.values)
        ? e.values.filter((v): v is string => typeof v === "string")
        : [],
    })),
  };
}
