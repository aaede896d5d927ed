/**
 * What the demo observes of the world, reduced to plain data: the table, the scenarios and the
 * summary are pure functions of it.
 */
import type { V1Pod } from "@kubernetes/client-node";

/** One container exit as the Pod's status reports it. */
interface ExitView {
  readonly code: number;
  readonly reason: string | undefined;
  /** RFC 3339 time of the exit, as stored (whole seconds). */
  readonly finishedAt: string | undefined;
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
}

/** One EC2 instance of the demo's cluster. */
export interface InstanceView {
  readonly id: string;
  /** EC2 state name: pending, running, stopping, stopped, shutting-down, terminated. */
  readonly state: string;
  /** Its `nebula:pod-uid` tag. */
  readonly podUid: string | undefined;
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
}

/** An empty snapshot. */
export const EMPTY_SNAPSHOT: Snapshot = {
  elapsedMs: 0,
  at: 0,
  pods: [],
  instances: [],
  workloads: [],
  ec2Calls: {},
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

/** Reduces a Pod to what the demo shows and judges. Total: any object gives a view. */
export function podView(pod: V1Pod): PodView {
  const container = pod.status?.containerStatuses?.[0];
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
  };
}
