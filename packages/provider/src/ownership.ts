import type { ObservedInstance } from "./poll.js";
import { CLUSTER_TAG, NODE_TAG, POD_UID_TAG, POOL_TAG } from "./tags.js";

/**
 * The `ClientToken` prefix of a warm-pool host's launch (`pool-<random UUID>`): no Pod UID starts
 * with it, and EC2 fixes it at launch.
 */
export const POOL_TOKEN_PREFIX = "pool-";

/** True when `token` is a warm-pool host's launch token. Total. */
export function isPoolToken(token: unknown): boolean {
  return typeof token === "string" && token.startsWith(POOL_TOKEN_PREFIX);
}

/** What an instance must show to prove that this provider launched it. */
export interface OwnershipRules {
  /** `nebula:cluster` must be this. */
  readonly clusterName: string;
  /** `nebula:node` must be this. */
  readonly nodeName: string;
  /** The configured instance profile (a name or an ARN): the instance's profile must be it. */
  readonly instanceProfile: string;
  /** Require EC2's `ClientToken` to be the Pod UID (or `<uid>.<n>` for a fallback placement). */
  readonly clientToken: boolean;
  /**
   * The instance the ledger assigned to Pod `podUid`, if any: what proves a warm-pool host (whose
   * `ClientToken` is the pool's, not the Pod's) is that Pod's. Default: none.
   */
  readonly assignedInstance?: ((podUid: string) => string | undefined) | undefined;
}

/**
 * The `ClientToken` of a Pod's launch at a placement: the Pod UID for the first placement, then
 * `<uid>.<n>` (EC2 refuses one token with other parameters, and a fallback placement changes them).
 */
export function clientTokenFor(podUid: string, placement: number): string {
  return placement === 0 ? podUid : `${podUid}.${placement}`;
}

/**
 * Why an instance does not prove that Nebula launched it for `podUid` (or for any Pod, when
 * `podUid` is undefined), or `undefined` when it does. Tags can be written by anyone with
 * `ec2:CreateTags` in the account; the instance profile needs `iam:PassRole` on the host role; the
 * `ClientToken` is fixed by the launch. Pure and total.
 *
 * @example
 * ```ts
 * const why = disproveOwnership(instance, podUid, rules);
 * if (why !== undefined) log("warn", `not acting on ${instance.instanceId}: ${why}`);
 * ```
 */
export function disproveOwnership(
  instance: ObservedInstance,
  podUid: string | undefined,
  rules: OwnershipRules,
): string | undefined {
  const tagged = instance.tags.get(POD_UID_TAG);
  if (tagged === undefined) return `it has no ${POD_UID_TAG} tag`;
  if (podUid !== undefined && tagged !== podUid)
    return `its ${POD_UID_TAG} is ${tagged}, not ${podUid}`;
  if (instance.tags.get(CLUSTER_TAG) !== rules.clusterName)
    return `its ${CLUSTER_TAG} tag is not ${rules.clusterName}`;
  if (instance.tags.get(NODE_TAG) !== rules.nodeName)
    return `its ${NODE_TAG} tag is not ${rules.nodeName}`;
  const profile = profileMismatch(instance.instanceProfileArn, rules.instanceProfile);
  if (profile !== undefined) return profile;
  if (rules.clientToken) {
    const token = instance.clientToken;
    if (isPoolToken(token) && instance.tags.has(POOL_TAG)) {
      // A warm-pool host a Pod took: any Pod's (the leak collector's question) by its launch,
      // this Pod's only by the ledger's assignment (its Pod UID tag is written after it).
      if (podUid !== undefined && rules.assignedInstance?.(podUid) !== instance.instanceId) {
        return `it is a warm-pool host the ledger did not assign to ${podUid}`;
      }
    } else if (token === undefined || !(token === tagged || token.startsWith(`${tagged}.`))) {
      return `its ClientToken (${token ?? "none"}) was not the Pod UID's`;
    }
  }
  return undefined;
}

/**
 * Why an instance does not prove it is one of this node's warm-pool hosts (launched by the pool,
 * any state, taken by a Pod or not), or `undefined` when it does: the cluster and node tags, the
 * `nebula:pool` tag, the instance profile and (when required) a pool `ClientToken`. Pure and total.
 */
export function disprovePoolHost(
  instance: ObservedInstance,
  rules: OwnershipRules,
): string | undefined {
  if (!instance.tags.has(POOL_TAG)) return `it has no ${POOL_TAG} tag`;
  if (instance.tags.get(CLUSTER_TAG) !== rules.clusterName)
    return `its ${CLUSTER_TAG} tag is not ${rules.clusterName}`;
  if (instance.tags.get(NODE_TAG) !== rules.nodeName)
    return `its ${NODE_TAG} tag is not ${rules.nodeName}`;
  const why = profileMismatch(instance.instanceProfileArn, rules.instanceProfile);
  if (why !== undefined) return why;
  if (rules.clientToken && !isPoolToken(instance.clientToken)) {
    return `its ClientToken (${instance.clientToken ?? "none"}) is not a pool launch's`;
  }
  return undefined;
}

/** Why the instance profile `profile` is not `wanted` (a name or an ARN), or `undefined`. */
function profileMismatch(profile: string | undefined, wanted: string): string | undefined {
  const matches =
    profile !== undefined &&
    (wanted.startsWith("arn:")
      ? profile === wanted
      : profile.endsWith(`:instance-profile/${wanted}`) || profile.endsWith(`/${wanted}`));
  return matches ? undefined : `its instance profile is ${profile ?? "none"}, not ${wanted}`;
}
