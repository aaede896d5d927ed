/**
 * Deletes with identity preconditions: the delete applies only to the incarnation of the object
 * that was meant (its UID), never to a newer object that reuses the name.
 *
 * @packageDocumentation
 */
import type { KubernetesObjectApi } from "@kubernetes/client-node";
import { KubeError, statusOf } from "./errors.js";

/** What to delete. */
export interface DeleteTarget {
  /** API version, e.g. `v1`. */
  readonly apiVersion: string;
  /** Kind, e.g. `Pod`. */
  readonly kind: string;
  /** Namespace (omit for cluster-scoped objects). */
  readonly namespace?: string | undefined;
  /** Name. */
  readonly name: string;
  /** UID precondition: the object is deleted only if it still has this UID. */
  readonly uid: string;
  /** Grace period in seconds; omit for the object's own default. Nebula removes Pods with 0. */
  readonly gracePeriodSeconds?: number | undefined;
}

/** What a precondition delete did. */
export type DeleteOutcome =
  /** The delete was accepted (the object is gone, or terminating gracefully). */
  | "deleted"
  /** Nothing by that name exists: already gone. */
  | "absent"
  /** An object by that name exists with another UID (recreated): it was left alone. */
  | "replaced";

/**
 * Deletes one object with a UID precondition. Idempotent: a missing object is `absent`, a
 * recreated one (409 on the precondition) is `replaced`; both mean "nothing of ours left to delete".
 * Use it in `DeletePod` / `DeleteAuxiliary` handlers of a teardown.
 *
 * @throws KubeError with code `RequestFailed` for any other failure.
 * @example
 * ```ts
 * const api = KubernetesObjectApi.makeApiClient(kc);
 * await deleteWithPreconditions(api, { apiVersion: "v1", kind: "Pod", namespace: "default",
 *   name: "web-0", uid, gracePeriodSeconds: 0 });
 * ```
 */
export async function deleteWithPreconditions(
  api: KubernetesObjectApi,
  target: DeleteTarget,
): Promise<DeleteOutcome> {
  const spec = {
    apiVersion: target.apiVersion,
    kind: target.kind,
    metadata: {
      name: target.name,
      ...(target.namespace !== undefined ? { namespace: target.namespace } : {}),
    },
  };
  try {
    await api.delete(spec, undefined, undefined, target.gracePeriodSeconds, undefined, undefined, {
      preconditions: { uid: target.uid },
      ...(target.gracePeriodSeconds !== undefined
        ? { gracePeriodSeconds: target.gracePeriodSeconds }
        : {}),
    });
    return "deleted";
  } catch (error) {
    const status = statusOf(error);
    if (status === 404) return "absent";
    if (status === 409) return "replaced";
    throw new KubeError(
      "RequestFailed",
      `DELETE ${target.kind} ${target.namespace ? `${target.namespace}/` : ""}${target.name} failed${status ? ` (HTTP ${status})` : ""}`,
      { cause: error },
    );
  }
}
