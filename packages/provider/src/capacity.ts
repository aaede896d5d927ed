import type { ProviderConfig } from "./config.js";
import { findInstanceType, type InstanceTypeInfo } from "./instance-catalogue.js";
import { pickSubnet } from "./launch.js";
import { clientTokenFor } from "./ownership.js";
import type { PodFacts } from "./pod.js";

/** Where one launch attempt goes. */
export interface Placement {
  /** Position in the Pod's placement list (0: the preferred one). */
  readonly index: number;
  /** The subnet (and so the Availability Zone). */
  readonly subnetId: string;
  /** The instance type. */
  readonly instanceType: string;
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

/** The pool (capacity unit shared by Pods) of a placement: its subnet and type. */
export function poolOf(placement: Pick<Placement, "subnetId" | "instanceType">): string {
  return `${placement.subnetId}/${placement.instanceType}`;
}

/**
 * Every placement a Pod may launch at, most preferred first: each of its instance types
 * ({@link instanceTypeCandidates}: the one it asked for, else the chosen type and its allowed
 * fallbacks or the catalogue's next candidates) in each configured subnet, starting with the
 * subnet its UID hashes to, less the subnets whose Availability Zone the catalogue says does not
 * offer the type. Indexes (and so client tokens) are those of the full list, so a change of
 * offerings never gives a token to another placement; were every placement left out, none is.
 * Pure.
 *
 * @param catalogue - EC2's instance types with their subnets (`instanceTypes.catalogue`).
 */
export function placementsFor(
  facts: PodFacts,
  types: readonly string[],
  config: ProviderConfig,
  catalogue: readonly InstanceTypeInfo[] = [],
): Placement[] {
  const first = config.subnetIds.indexOf(pickSubnet(facts.uid, config.subnetIds));
  const subnets = config.subnetIds.map(
    (_, i) => config.subnetIds[(first + i) % config.subnetIds.length] as string,
  );
  const all: Placement[] = [];
  const kept: Placement[] = [];
  for (const instanceType of new Set(types)) {
    const offeredIn = findInstanceType(catalogue, instanceType)?.subnets;
    for (const subnetId of subnets) {
      const index = all.length;
      const placement = {
        index,
        subnetId,
        instanceType,
        clientToken: clientTokenFor(facts.uid, index),
      };
      all.push(placement);
      if (offeredIn === undefined || offeredIn.includes(subnetId)) kept.push(placement);
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
  const open = placements.filter((p) => (pools.get(poolOf(p)) ?? 0) <= now);
  if (open.length === 0) {
    const until = Math.min(...placements.map((p) => pools.get(poolOf(p)) ?? now));
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
 * once) and the pool to cool down (that placement's pool, or the whole account for a quota). Pure.
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
  const exhausted = code === "QuotaExceeded" || tried.length >= placements;
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
    pool: code === "QuotaExceeded" ? ACCOUNT_POOL : poolOf(placement),
    poolUntil: now + settings.poolSeconds * 1000,
  };
}
