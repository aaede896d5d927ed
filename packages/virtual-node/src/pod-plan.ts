/**
 * The Pod controller's decision, pure: from the Pod as stored, what the next step is. The
 * controller runs one step per reconcile and reconciles again until the Pod is settled.
 *
 * @packageDocumentation
 */
import type { V1Pod } from "@kubernetes/client-node";
import { isTerminalPhase } from "./pod-status.js";

/**
 * Milliseconds left of the Pod's `spec.activeDeadlineSeconds`, counted as the kubelet counts it:
 * from `status.startTime` (which the virtual node writes with the Pod's first status). Zero or
 * less once the deadline has passed. `undefined` when there is nothing to count: no deadline (or
 * not a positive number), no start time yet (or not a time), or a Pod already finished. Pure,
 * never throws.
 *
 * @example
 * ```ts
 * activeDeadlineLeftMs(pod, Date.now()); // 12_000: the deadline passes in 12 s
 * ```
 */
export function activeDeadlineLeftMs(pod: V1Pod, now: number): number | undefined {
  const seconds = pod.spec?.activeDeadlineSeconds;
  if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds <= 0) return undefined;
  if (isTerminalPhase(pod.status?.phase)) return undefined;
  const start = pod.status?.startTime as Date | string | undefined;
  const at =
    start instanceof Date ? start.getTime() : typeof start === "string" ? Date.parse(start) : NaN;
  if (!Number.isFinite(at)) return undefined;
  return at + seconds * 1000 - now;
}

/** The default `terminationGracePeriodSeconds` of Kubernetes. */
export const DEFAULT_GRACE_SECONDS = 30;

/** The next step for one Pod. */
export type PodStep =
  /** Add the finalizer (before anything is launched). */
  | { readonly kind: "AddFinalizer" }
  /** Launch (idempotent) and write the observed status. */
  | { readonly kind: "Run" }
  /** Reclaim the instance (start or continue the teardown); `deleting` says how it ends. */
  | { readonly kind: "Teardown"; readonly deleting: boolean; readonly graceSeconds: number }
  /** The Pod never got our finalizer (so nothing was launched): delete it with grace 0 once no instance is found. */
  | { readonly kind: "DeleteUnlaunched" }
  /** Nothing left to do (a finished Pod whose instance is reclaimed and finalizer removed). */
  | { readonly kind: "Done" };

/** What {@link planPod} reads besides the Pod. */
export interface PlanContext {
  /** The finalizer the controller holds. */
  readonly finalizer: string;
}

/**
 * The grace period of a Pod's teardown: the deletion's (`metadata.deletionGracePeriodSeconds`,
 * what `kubectl delete --grace-period` sets) wins over `spec.terminationGracePeriodSeconds`;
 * 30 s when neither is set. Never negative.
 */
export function graceSeconds(pod: V1Pod): number {
  const deletion = pod.metadata?.deletionGracePeriodSeconds;
  const spec = pod.spec?.terminationGracePeriodSeconds;
  const value =
    typeof deletion === "number"
      ? deletion
      : typeof spec === "number"
        ? spec
        : DEFAULT_GRACE_SECONDS;
  return Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

/**
 * The next step for a Pod:
 *
 * - being deleted, or terminal (`Succeeded`/`Failed` as stored): `Teardown` while our finalizer is
 *   on it; a Pod being deleted without it (never launched) is `DeleteUnlaunched`; a terminal Pod
 *   without it is `Done`;
 * - otherwise `AddFinalizer` until the finalizer is there, then `Run`.
 *
 * A terminal Pod is never run again, so a restart never relaunches finished work.
 *
 * @example
 * ```ts
 * planPod(pod, { finalizer: "nebula.dev/instance-teardown" }); // { kind: "AddFinalizer" }
 * ```
 */
export function planPod(pod: V1Pod, context: PlanContext): PodStep {
  const finalizers = pod.metadata?.finalizers ?? [];
  const held = finalizers.includes(context.finalizer);
  const deleting = pod.metadata?.deletionTimestamp != null;
  const terminal = isTerminalPhase(pod.status?.phase);
  if (deleting || terminal) {
    if (held) return { kind: "Teardown", deleting, graceSeconds: graceSeconds(pod) };
    return deleting ? { kind: "DeleteUnlaunched" } : { kind: "Done" };
  }
  if (!held) return { kind: "AddFinalizer" };
  return { kind: "Run" };
}
