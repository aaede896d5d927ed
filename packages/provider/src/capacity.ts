import type { ProviderConfig } from "./config.js";
import { findInstanceType, type InstanceTypeInfo } from "./instance-catalogue.js";
import { pickSubnet } from "./launch.js";
import { clientTokenFor } from "./ownership.js";
import type { CapacityType, PodFacts } from "./pod.js";

/** Where one launch attempt goes. */
export interface Placement {
  /** Position in the Pod's placement list (0: the preferred one). */
  readonly index: number;
  /** The subnet (and so the Availability Zone). */
  readonly subnetId: string;
  /** The instance type. */
  readonly instanceType: string;
  /** How the instance is bought. */
  readonly capacityType: CapacityType;
  /** The launch's `ClientToken` ({@link clientTokenFor}). */
  readonly clientToken: string;
}

/** A Pod's launch back-off after capacity or quota errors. */
export interface LaunchBackoff {
  /** Capacity or quota failures in a row. */
  readonly failures: number;
  /** No attempt before this time (ms). */
  readonly notBefore: number;
  /** Placement indexes that failed since the last full round. */
  readonly tried: readonly number[];
}

/** The back-off of a Pod that has not failed. */
export const NO_BACKOFF: LaunchBackoff = { failures: 0, notBefore: 0, tried: [] };

/** Key of the account-wide pool (a quota error blocks every placement). */
export const ACCOUNT_POOL = "account";
/** Key of the account's Spot pool (a Spot quota error blocks every Spot placement, no other). */
export const SPOT_ACCOUNT_POOL = "account/spot";

/**
 * The pool (capacity unit shared by Pods) of a placement: its subnet and type, and `/spot` for a
 * Spot one (an On-Demand pool's key is what it was before Spot).
 */
export function poolOf(
  placement: Pick<Placement, "subnetId" | "instanceType"> & {
    readonly capacityType?: CapacityType;
  },
): string {
  const key = `${placement.subnetId}/${placement.instanceType}`;
  return placement.capacityType === "spot" ? `${key}/spot` : key;
}

/**
 * Every placement a Pod may launch at, most preferred first: for each of its capacity types in
 * order (On-Demand by default), each of its instance types ({@link instanceTypeCandidates}: the
 * one it asked for, else the chosen type and its allowed fallbacks or the catalogue's next
 * candidates) in each configured subnet, starting with the subnet its UID hashes to; less the
 * subnets whose Availability Zone the catalogue says does not offer the type, and Spot for a type
 * the catalogue says cannot run as Spot. Indexes (and so client tokens) are those of the full
 * list, so a change of offerings never gives a token to another placement, and an On-Demand-only
 * Pod's are what they were before Spot; were every placement left out, none is. Pure.
 *
 * @param catalogue - EC2's instance types with their subnets (`instanceTypes.catalogue`).
 * @param capacityTypes - how the instance may be bought, in order (default On-Demand).
 */
export function placementsFor(
  facts: PodFacts,
  types: readonly string[],
  config: ProviderConfig,
  catalogue: readonly InstanceTypeInfo[] = [],
  capacityTypes: readonly CapacityType[] = ["on-demand"],
): Placement[] {
  const first = config.subnetIds.indexOf(pickSubnet(facts.uid, config.subnetIds));
  const subnets = config.subnetIds.map(
    (_, i) => config.subnetIds[(first + i) % config.subnetIds.length] as string,
  );
  const all: Placement[] = [];
  const kept: Placement[] = [];
  for (const capacityType of new Set(capacityTypes)) {
    for (const instanceType of new Set(types)) {
      const info = findInstanceType(catalogue, instanceType);
      const buyable =
        capacityType !== "spot" || info === undefined || info.usageClasses.includes("spot");
      for (const subnetId of subnets) {
        const index = all.length;
        const placement = {
          index,
          subnetId,
          instanceType,
          capacityType,
          clientToken: clientTokenFor(facts.uid, index),
        };
        all.push(placement);
        if (buyable && (info?.subnets === undefined || info.subnets.includes(subnetId))) {
          kept.push(placement);
        }
      }
    }
  }
  return kept.length > 0 ? kept : all;
}

/** What {@link choosePlacement} decided. */
export type PlacementChoice =
  | { readonly kind: "launch"; readonly placement: Placement }
  /** Nothing to try before `until` (the Pod's back-off, or every pool is cooling down). */
  | { readonly kind: "wait"; readonly until: number };

/**
 * The placement to try now, or how long to wait: nothing before the Pod's back-off ends; never a
 * pool that is cooling down after another Pod's capacity error (so N Pods waiting for one pool
 * make one call per cool-down, not N per poll); untried placements first. Pure.
 */
export function choosePlacement(
  placements: readonly Placement[],
  backoff: LaunchBackoff,
  pools: ReadonlyMap<string, number>,
  now: number,
): PlacementChoice {
  if (now < backoff.notBefore) return { kind: "wait", until: backoff.notBefore };
  const account = pools.get(ACCOUNT_POOL) ?? 0;
  if (now < account) return { kind: "wait", until: account };
  const spotAccount = pools.get(SPOT_ACCOUNT_POOL) ?? 0;
  const untilOf = (p: Placement) =>
    Math.max(pools.get(poolOf(p)) ?? 0, p.capacityType === "spot" ? spotAccount : 0);
  const open = placements.filter((p) => untilOf(p) <= now);
  if (open.length === 0) {
    const until = Math.min(...placements.map((p) => Math.max(untilOf(p), now)));
    return { kind: "wait", until: Number.isFinite(until) ? until : now };
  }
  const placement = open.find((p) => !backoff.tried.includes(p.index)) ?? (open[0] as Placement);
  return { kind: "launch", placement };
}

/** Back-off settings (seconds), as in the configuration's `capacityBackoff`. */
export interface BackoffSettings {
  readonly initialSeconds: number;
  readonly maxSeconds: number;
  readonly poolSeconds: number;
}

/**
 * After a capacity (`InsufficientCapacity`) or quota (`QuotaExceeded`) error at `placement`: the
 * Pod's next back-off (doubling from `initialSeconds` to `maxSeconds`; none while untried
 * placements remain after a capacity error, so the next poll tries another subnet or type at
 * once) and the pool to cool down (that placement's pool; for a quota the whole account, or for a
 * Spot quota the account's Spot placements only, the Pod's On-Demand ones then going next). Pure.
 */
export function afterCapacityError(
  backoff: LaunchBackoff,
  placement: Placement,
  code: "InsufficientCapacity" | "QuotaExceeded",
  placements: number,
  now: number,
  settings: BackoffSettings,
): { backoff: LaunchBackoff; pool: string; poolUntil: number } {
  const failures = backoff.failures + 1;
  const tried = [...new Set([...backoff.tried, placement.index])];
  // A Spot quota stops Spot only: the Pod's On-Demand placements, if any, go next.
  const spotQuota = code === "QuotaExceeded" && placement.capacityType === "spot";
  const exhausted = (code === "QuotaExceeded" && !spotQuota) || tried.length >= placements;
  const wait = Math.min(
    settings.initialSeconds * 2 ** Math.min(failures - 1, 20),
    settings.maxSeconds,
  );
  return {
    backoff: {
      failures,
      notBefore: exhausted ? now + wait * 1000 : now,
      tried: exhausted ? [] : tried,
    },
    pool: spotQuota
      ? SPOT_ACCOUNT_POOL
      : code === "QuotaExceeded"
        ? ACCOUNT_POOL
        : poolOf(placement),
    poolUntil: now + settings.poolSeconds * 1000,
  };
}
