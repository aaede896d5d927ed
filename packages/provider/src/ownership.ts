import type { ObservedInstance } from "./poll.js";
import { CLUSTER_TAG, NODE_TAG, POD_UID_TAG } from "./tags.js";

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
  const profile = instance.instanceProfileArn;
  const wanted = rules.instanceProfile;
  const profileMatches =
    profile !== undefined &&
    (wanted.startsWith("arn:")
      ? profile === wanted
      : profile.endsWith(`:instance-profile/${wanted}`) || profile.endsWith(`/${wanted}`));
  if (!profileMatches) return `its instance profile is ${profile ?? "none"}, not ${wanted}`;
  if (rules.clientToken) {
    const token = instance.clientToken;
    if (token === undefined || !(token === tagged || token.startsWith(`${tagged}.`))) {
      return `its ClientToken (${token ?? "none"}) was not the Pod UID's`;
    }
  }
  return undefined;
}
