/**
 * Nebula's own teardown of a Pod on the virtual node (docs/contracts.md#pod-teardown): stop the instance, wait for it
 * to stop (grace period plus API headroom, from the stop request), terminate it, wait until it is
 * gone, release the Pod's auxiliary objects, then remove the Pod (grace 0, UID precondition) or
 * just clear the record. The effects are descriptions; `@nebula/provider` runs them.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { defineTeardown, type Teardown } from "./machine.js";

/** The Kubernetes default for `terminationGracePeriodSeconds`. */
const DEFAULT_GRACE_PERIOD_SECONDS = 30;

/** Default allowance for API calls and observation on top of a grace period (OpenShell uses 30 s). */
const DEFAULT_HEADROOM_SECONDS = 30;

const name = z.string().min(1).max(253);

/** An object the Pod owned, deleted in the `releasing` phase (by exact name, with its UID when known). */
export const AuxiliaryObject = z.strictObject({
  /** API version, e.g. `v1`. */
  apiVersion: z.string().min(1).max(253),
  /** Kind, e.g. `Secret`. */
  kind: z.string().min(1).max(63),
  /** Namespace (omit for cluster-scoped objects). */
  namespace: name.optional(),
  /** Name. */
  name,
  /** UID precondition for the delete, when known. */
  uid: z.string().min(1).max(128).optional(),
});

/** An auxiliary object of a Pod. */
export type AuxiliaryObject = z.infer<typeof AuxiliaryObject>;

/**
 * Durable parameters of a Pod teardown, fixed when it starts and stored in the record.
 */
export const PodTeardownParams = z.strictObject({
  /** The Pod's namespace. */
  namespace: name,
  /** The Pod's name. */
  name,
  /** The Pod's UID: every delete of the Pod carries it as a precondition. */
  podUid: z.string().min(1).max(128),
  /**
   * The EC2 instance running the Pod, as recorded when `RunInstances` returned. Omit when it is not
   * known: stop and terminate are then skipped only if no launch was ever requested
   * (`launchRequested`); otherwise the effects carry the Pod UID and the caller finds the instance.
   */
  instanceId: z
    .string()
    .regex(/^i-[0-9a-f]{8,17}$/)
    .optional(),
  /**
   * True when a launch was requested for the Pod (even if its outcome is unknown: a crash or a
   * timeout during `RunInstances`). Default: true when `instanceId` is set.
   */
  launchRequested: z.boolean().optional(),
  /** The Pod's `terminationGracePeriodSeconds` (default 30). */
  gracePeriodSeconds: z.number().int().min(0).max(31_536_000).default(DEFAULT_GRACE_PERIOD_SECONDS),
  /** Allowance for API calls and observation, added to the grace period (default 30). */
  headroomSeconds: z.number().int().min(0).max(86_400).default(DEFAULT_HEADROOM_SECONDS),
  /** Objects the Pod owned, deleted separately after the instance is reclaimed. */
  auxiliaries: z.array(AuxiliaryObject).max(64).default([]),
  /**
   * How it ends: `delete-pod` removes the Pod object (grace 0, UID precondition), the usual end
   * once the Pod is being deleted; `clear` only clears the record (e.g. a Pod that completed but
   * stays in the API for its status).
   */
  finish: z.enum(["delete-pod", "clear"]).default("delete-pod"),
});

/** Parsed Pod teardown parameters. */
export type PodTeardownParams = z.infer<typeof PodTeardownParams>;
/** Pod teardown parameters as accepted by `start` (defaults not yet applied). */
export type PodTeardownParamsInput = z.input<typeof PodTeardownParams>;

/** The effects of the Pod teardown, executed by the caller's handlers. */
export type PodTeardownEffect =
  /**
   * `StopInstances` on the Pod's instance (the host supervisor stops the containers with the Pod's
   * grace). `instanceId` is absent when the launch's outcome is unknown: find it by the Pod UID.
   */
  | { readonly kind: "StopInstance"; readonly podUid: string; readonly instanceId?: string }
  /** `TerminateInstances` on the Pod's instance (found by the Pod UID when `instanceId` is absent). */
  | { readonly kind: "TerminateInstance"; readonly podUid: string; readonly instanceId?: string }
  /** Delete one auxiliary object, treating 404 as success. */
  | { readonly kind: "DeleteAuxiliary"; readonly object: AuxiliaryObject }
  /** Delete the Pod object with `gracePeriodSeconds: 0` and a UID precondition; 404 is success. */
  | {
      readonly kind: "DeletePod";
      readonly namespace: string;
      readonly name: string;
      readonly uid: string;
      readonly gracePeriodSeconds: 0;
    };

/** The EC2 state of the Pod's instance, as the caller observed it. */
export type InstanceObservation =
  | "pending"
  | "running"
  | "stopping"
  | "stopped"
  | "shutting-down"
  | "terminated"
  /** Not returned by `DescribeInstances` any more (or never launched). */
  | "absent"
  /** Could not be determined this time (an API error): never counts as done. */
  | "unknown";

/** What the caller observes for a Pod teardown. */
export interface PodTeardownObservation {
  /** The instance's state. */
  readonly instance: InstanceObservation;
  /**
   * How many of the auxiliary objects still exist. Omit when not observed: `releasing` is then
   * done once every delete succeeded.
   */
  readonly auxiliariesRemaining?: number;
  /** Whether the Pod object (with the recorded UID) still exists. */
  readonly pod: "present" | "absent";
  /** Participants holding the `terminating` phase (e.g. from `pre-terminate.teardown.nebula.dev/*` annotations). */
  readonly holds?: readonly string[];
}

/** Whether the Pod ever had a launch requested (then its instance must be stopped and terminated). */
function launched(params: PodTeardownParams): boolean {
  return params.instanceId !== undefined || params.launchRequested === true;
}

function instanceRef(params: PodTeardownParams): { podUid: string; instanceId?: string } {
  return params.instanceId === undefined
    ? { podUid: params.podUid }
    : { podUid: params.podUid, instanceId: params.instanceId };
}

/** How long a `pre-terminate` hold may delay termination: 10 minutes. */
const POD_HOLD_TIMEOUT_MS = 10 * 60_000;

const stoppedOrGone = new Set<InstanceObservation>([
  "stopped",
  "shutting-down",
  "terminated",
  "absent",
]);

/**
 * Nebula's Pod teardown (docs/contracts.md#pod-teardown), as a ready-made {@link Teardown}. Phases, in order:
 *
 * 1. `stopping`: `StopInstance`; done when the instance is stopped (or further); deadline the
 *    Pod's grace period plus headroom from the stop request as durably recorded (the claim
 *    written before `StopInstances` is sent, not when it returned), then go on anyway.
 * 2. `terminating`: `TerminateInstance`; done when terminated or absent; the request is
 *    reissued every `headroomSeconds` until then. Holdable by `holds` (pre-terminate hooks).
 * 3. `releasing`: one `DeleteAuxiliary` per auxiliary object; done when none remains.
 * 4. `removing` (when `finish` is `delete-pod`): `DeletePod` with grace 0 and the Pod's UID;
 *    done when the Pod is absent.
 *
 * Without an `instanceId` and without `launchRequested`, `stopping` and `terminating` are
 * skipped; with `launchRequested` but no `instanceId` (a launch whose outcome is unknown) the
 * effects carry only the Pod UID and the caller finds the instance. A `stopping` action that never
 * succeeds (a stop EC2 refuses) goes on to `terminating` once its deadline has passed. The
 * completed record is kept (phase `complete`), so a later request never starts it again. The
 * deadline is never
 * derived from `deletionTimestamp` (which already includes the grace period).
 *
 * @example
 * ```ts
 * const started = podTeardown.start(
 *   { params: { namespace: "default", name: "web-0", podUid: pod.metadata.uid, instanceId: "i-0123456789abcdef0" },
 *     cause: "DeletionRequested" },
 *   Date.now(),
 * );
 * ```
 */
export const podTeardown: Teardown<PodTeardownObservation, PodTeardownEffect, PodTeardownParams> =
  defineTeardown<PodTeardownObservation, PodTeardownEffect, PodTeardownParams>({
    name: "nebula.dev/pod",
    params: PodTeardownParams,
    keepCompleted: true,
    phases: [
      {
        name: "stopping",
        waitsFor: "the instance to stop",
        skip: ({ params }) => !launched(params),
        action: ({ params }) => [{ kind: "StopInstance", ...instanceRef(params) }],
        isDone: (o) => stoppedOrGone.has(o.instance),
        deadline: {
          afterMs: ({ params }) => (params.gracePeriodSeconds + params.headroomSeconds) * 1000,
          onExpiry: "advance",
        },
      },
      {
        name: "terminating",
        waitsFor: "the instance to be terminated",
        skip: ({ params }) => !launched(params),
        action: ({ params }) => [{ kind: "TerminateInstance", ...instanceRef(params) }],
        isDone: (o) => o.instance === "terminated" || o.instance === "absent",
        deadline: {
          afterMs: ({ params }) => Math.max(params.headroomSeconds, 1) * 1000,
          onExpiry: "reissue",
        },
        hold: { holders: (o) => o.holds ?? [], timeoutMs: () => POD_HOLD_TIMEOUT_MS },
      },
      {
        name: "releasing",
        waitsFor: "the Pod's auxiliary objects to be deleted",
        skip: ({ params }) => params.auxiliaries.length === 0,
        action: ({ params }) =>
          params.auxiliaries.map((object) => ({ kind: "DeleteAuxiliary" as const, object })),
        isDone: (o) => (o.auxiliariesRemaining ?? 0) === 0,
        deadline: {
          afterMs: ({ params }) => Math.max(params.headroomSeconds, 1) * 1000,
          onExpiry: "reissue",
        },
      },
      {
        name: "removing",
        waitsFor: "the Pod object to be removed",
        skip: ({ params }) => params.finish === "clear",
        action: ({ params }) => [
          {
            kind: "DeletePod",
            namespace: params.namespace,
            name: params.name,
            uid: params.podUid,
            gracePeriodSeconds: 0,
          },
        ],
        isDone: (o) => o.pod === "absent",
        deadline: {
          afterMs: ({ params }) => Math.max(params.headroomSeconds, 1) * 1000,
          onExpiry: "reissue",
        },
      },
    ],
  });
