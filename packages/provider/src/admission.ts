import type { ProviderConfig } from "./config.js";
import { ProviderError } from "./errors.js";
import type { InstanceTypeInfo } from "./instance-catalogue.js";
import {
  type CapacityType,
  capacityTypesFor,
  instanceTypeCandidates,
  type PodFacts,
} from "./pod.js";

/** Reason of a DaemonSet Pod the provider does not launch. */
const DAEMONSET_NOT_LAUNCHED_REASON = "DaemonSetPodNotLaunched";

/** The reason a Pod is held for when no allowed type that fits it is offered in the node's zones. */
export const CAPACITY_HOLD_REASON = "InsufficientCapacity";

/** What the provider does with a Pod, decided before any cloud call. */
export type Admission =
  /**
   * Launch it on `instanceType`, the first of `instanceTypes` (the rest: its fallbacks), bought
   * as `capacityTypes` says, in order.
   */
  | {
      readonly kind: "launch";
      readonly instanceType: string;
      readonly instanceTypes: readonly string[];
      readonly capacityTypes: readonly CapacityType[];
    }
  /** Leave it `Pending`, not launched, with this reason (a DaemonSet Pod by default). */
  | { readonly kind: "hold"; readonly reason: string; readonly message: string }
  /** Refuse it: `Failed` at once with this reason; the message names the field. */
  | { readonly kind: "refuse"; readonly reason: string; readonly message: string };

/**
 * Decides whether a Pod is launched, held or refused. Pure and total: a DaemonSet Pod is held
 * (unless `daemonSetPods` is `launch`); a Pod whose instance type cannot be resolved or is
 * outside the allow-list, or whose capacity-type annotation its namespace may not use, is refused
 * with the error's code as reason (`InstanceTypeNotAllowed`, `InvalidPodSpec`). A Pod no allowed
 * type offered in the node's zones fits, while one not offered there would, is held (`Pending`,
 * reason `InsufficientCapacity`, platform blocked): the platform's configuration must change, not
 * the Pod.
 *
 * @param catalogue - EC2's instance types (`instanceTypes.catalogue`; see {@link instanceTypeCandidates}).
 */
export function admitPod(
  facts: PodFacts,
  config: ProviderConfig,
  catalogue: readonly InstanceTypeInfo[] = [],
): Admission {
  if (facts.ownerKind === "DaemonSet" && config.daemonSetPods === "skip") {
    return {
      kind: "hold",
      reason: DAEMONSET_NOT_LAUNCHED_REASON,
      message: `pod ${facts.key} belongs to a DaemonSet (metadata.ownerReferences): Nebula does not start one instance per DaemonSet Pod (set daemonSetPods: launch to allow it)`,
    };
  }
  try {
    const instanceTypes = instanceTypeCandidates(facts, config, catalogue);
    const capacityTypes = capacityTypesFor(facts, config);
    return {
      kind: "launch",
      instanceType: instanceTypes[0] as string,
      instanceTypes,
      capacityTypes,
    };
  } catch (error) {
    // The node's own configuration cannot place it (no fitting type offered in its zones): the
    // Pod waits, Pending, for the platform to change; it is not the Pod's failure, and the roll-up
    // must not tell the customer to fix it: for them there is no capacity that fits (platform
    // blocked), and the message tells the operator what to change.
    if (error instanceof ProviderError && error.code === "InvalidConfiguration") {
      return { kind: "hold", reason: CAPACITY_HOLD_REASON, message: error.message };
    }
    if (error instanceof ProviderError) {
      return { kind: "refuse", reason: error.code, message: error.message };
    }
    return { kind: "refuse", reason: "InvalidPodSpec", message: String(error) };
  }
}
