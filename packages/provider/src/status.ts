import type { V1Pod, V1PodCondition, V1PodStatus } from "@kubernetes/client-node";
import { type InstanceState, toPodStatus } from "@nebula/state-mapping";
import type { ProviderError } from "./errors.js";

/** Everything the provider knows about one Pod when it computes its status. */
export interface PodStatusInput {
  /** The Pod, carrying its last written status (conditions keep their transition times). */
  readonly pod: V1Pod;
  /** The instance state from `@nebula/state-mapping`'s `toInstanceState`. */
  readonly state: InstanceState;
  /** The time of this computation. */
  readonly now: Date;
  /** The last launch attempt failed with this retryable error (the Pod stays Pending). */
  readonly launchError?: ProviderError | undefined;
  /** Set while EC2 is unreachable: the sentence the Node also carries. */
  readonly ec2Unavailable?: string | undefined;
}

/**
 * Pod condition type the provider sets to `False` while a Pod is not launched (capacity, quota,
 * a DaemonSet Pod held back, a refused Pod), with the reason (`InsufficientCapacity`,
 * `QuotaExceeded`, `DaemonSetPodNotLaunched`, ...) and a message.
 */
export const LAUNCHED_CONDITION = "nebula.dev/InstanceLaunched";

/** Condition reason the provider sets on `Ready`/`ContainersReady` during an EC2 outage. */
export const EC2_UNAVAILABLE_REASON = "EC2Unavailable";

/**
 * The Pod's status: `@nebula/state-mapping`'s `toPodStatus`, plus what only the provider knows —
 * a launch being retried (`reason` = the error code, e.g. `InsufficientCapacity`, with its
 * message, and the {@link LAUNCHED_CONDITION} condition `False` with that reason; the Pod stays
 * `Pending`), and an EC2 outage (a non-terminal Pod's `Ready` and
 * `ContainersReady` become `False` with reason `EC2Unavailable`: its state is unknown, not hidden).
 */
export function podStatus(input: PodStatusInput): V1PodStatus {
  const status = toPodStatus(input.pod, input.state, { now: input.now });
  if (input.launchError !== undefined && input.state.kind === "Pending") {
    const reason = input.launchError.code;
    status.reason = reason;
    status.message = `launch is being retried: ${input.launchError.message}`;
    const before = input.pod.status?.conditions?.find((c) => c.type === LAUNCHED_CONDITION);
    status.conditions = [
      ...(status.conditions ?? []).filter((c) => c.type !== LAUNCHED_CONDITION),
      {
        type: LAUNCHED_CONDITION,
        status: "False",
        reason,
        message: input.launchError.message,
        lastTransitionTime:
          before?.status === "False" && before.lastTransitionTime
            ? before.lastTransitionTime
            : input.now,
      },
    ];
  }
  if (input.ec2Unavailable !== undefined && !isTerminalStatus(status)) {
    status.conditions = (status.conditions ?? []).map((condition): V1PodCondition => {
      if (condition.type !== "Ready" && condition.type !== "ContainersReady") return condition;
      return {
        ...condition,
        status: "False",
        reason: EC2_UNAVAILABLE_REASON,
        message: input.ec2Unavailable ?? "",
        ...(condition.status === "False" ? {} : { lastTransitionTime: input.now }),
      };
    });
  }
  return status;
}

/** True for a status whose phase is `Succeeded` or `Failed`. */
export function isTerminalStatus(status: V1PodStatus | undefined): boolean {
  return status?.phase === "Succeeded" || status?.phase === "Failed";
}

/**
 * The kubelet's reason for a container that cannot be created because a ConfigMap or Secret (or
 * one of its keys) it needs is missing: the Pod stays `Pending` and is retried.
 */
export const CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError";

/**
 * The status of a Pod held back because a mandatory ConfigMap or Secret is missing (the kubelet's
 * `CreateContainerConfigError`): `Pending`, every container and init container waiting with
 * `CreateContainerConfigError` and the message (`secret "db" not found`), `Ready` and
 * `ContainersReady` `False`, and the {@link LAUNCHED_CONDITION} condition `False` with the same
 * reason. Transition times are kept from `pod.status`, so an unchanged world gives the same status.
 * Pure.
 */
export function configErrorStatus(pod: V1Pod, message: string, now: Date): V1PodStatus {
  const status = toPodStatus(pod, { kind: "Pending", observedAt: now }, { now });
  const waiting = { reason: CREATE_CONTAINER_CONFIG_ERROR, message };
  for (const list of [status.initContainerStatuses, status.containerStatuses]) {
    for (const container of list ?? []) container.state = { waiting: { ...waiting } };
  }
  const before = pod.status?.conditions?.find((c) => c.type === LAUNCHED_CONDITION);
  status.conditions = [
    ...(status.conditions ?? []).filter((c) => c.type !== LAUNCHED_CONDITION),
    {
      type: LAUNCHED_CONDITION,
      status: "False",
      reason: CREATE_CONTAINER_CONFIG_ERROR,
      message,
      lastTransitionTime:
        before?.status === "False" &&
        before.reason === CREATE_CONTAINER_CONFIG_ERROR &&
        before.lastTransitionTime
          ? before.lastTransitionTime
          : now,
    },
  ];
  return status;
}
