/**
 * The Kubernetes Events the virtual node records about a Pod (the Pod controller's and the
 * teardown's), each with the action its reason names.
 *
 * @packageDocumentation
 */

import type { PodRef } from "./pod-api.js";
import type { PodEventSpec } from "./pod-status.js";

/** Records Kubernetes Events (`@nebula/kube`'s `EventRecorder` fits). */
export interface EventSink {
  /** Records one occurrence; never rejects for an Event that could not be written. */
  record(occurrence: {
    readonly regarding: {
      readonly apiVersion: string;
      readonly kind: string;
      readonly namespace?: string;
      readonly name: string;
      readonly uid?: string;
    };
    readonly type: "Normal" | "Warning";
    readonly reason: string;
    readonly action: string;
    readonly note?: string;
  }): Promise<unknown>;
}

/** Records an Event regarding the Pod, never rejecting (an Event that could not be written is dropped). */
export function recordPodEvent(
  sink: EventSink | undefined,
  ref: PodRef,
  event: PodEventSpec,
): void {
  void sink
    ?.record({
      regarding: {
        apiVersion: "v1",
        kind: "Pod",
        namespace: ref.namespace,
        name: ref.name,
        uid: ref.uid,
      },
      type: event.type,
      reason: event.reason,
      action: actionOf(event.reason),
      note: event.note,
    })
    .catch(() => undefined);
}

function actionOf(reason: string): string {
  switch (reason) {
    case "Launched":
    case "LaunchFailed":
    case "InsufficientCapacity":
    case "QuotaExceeded":
      return "Launch";
    case "Stopping":
    case "StopDeadlineExceeded":
      return "Stop";
    case "Terminating":
    case "InstanceTerminated":
    case "LeakCollected":
      return "Terminate";
    case "TeardownFailed":
      return "Teardown";
    default:
      return "Observe";
  }
}
