/**
 * The warm pool's pure core: what each of its hosts is (from what EC2 shows), and what to do so
 * that every entry keeps its size of prepared, stopped hosts: launch, terminate, in one plan per
 * pass. No I/O; total over its inputs.
 */

import { createHash } from "node:crypto";
import type { WarmPoolEntry } from "./config.js";

/** Hours in a month, as AWS bills EBS (GiB-month → per hour). */
const HOURS_PER_MONTH = 730;

/** How a pool host stands, from its entry's point of view. */
export type PoolHostState =
  /** Launched, booting, pulling or stopping after it prepared: ready soon. */
  | "preparing"
  /** Prepared and stopped by itself (`Client.InstanceInitiatedShutdown`): a Pod may take it. */
  | "ready"
  /** Its entry is gone or has changed shape since its launch: replaced (rolled). */
  | "stale"
  /**
   * Cannot become ready: stopped by someone else before it prepared, or preparing for longer than
   * its entry's `prepareSeconds`. Terminated.
   */
  | "broken";

/** One pool host as the pool sees it (from the poll's listing). */
export interface PoolHost {
  /** EC2 instance ID. */
  readonly instanceId: string;
  /** Its entry's name (`nebula:pool`). */
  readonly entry: string;
  /** Its shape digest at launch (`nebula:pool-spec`), if tagged. */
  readonly spec: string | undefined;
  /** EC2 state name. */
  readonly state: string;
  /** EC2's `StateReason.Code`, when it gave one. */
  readonly stateReasonCode: string | undefined;
  /** Launch time (ms), when EC2 gave one. */
  readonly launchTime: number | undefined;
}

/** A host the plan terminates, and why (a log line, an Event, a metric's reason). */
export interface PoolTermination {
  readonly instanceId: string;
  readonly entry: string;
  readonly reason: "removed" | "replaced" | "broken" | "shrunk";
  /** One sentence. */
  readonly message: string;
}

/** One pass's plan: per entry, how many hosts to launch; which hosts to terminate. */
export interface PoolPlan {
  readonly launch: readonly { readonly entry: string; readonly count: number }[];
  readonly terminate: readonly PoolTermination[];
}

/** What {@link planWarmPool} counts per entry, for metrics. */
export interface PoolEntryCounts {
  readonly entry: string;
  /** The size the pool keeps: `size`, lowered by `maxHourlyCostUsd`. */
  readonly target: number;
  readonly preparing: number;
  readonly ready: number;
  readonly stale: number;
  readonly broken: number;
  /** What the entry's stopped hosts cost now, USD per hour (their volumes). */
  readonly hourlyCostUsd: number;
}

/** A stopped host's cost, USD per hour: its volume (EC2 does not bill a stopped instance). */
export function stoppedHostHourlyCost(entry: WarmPoolEntry): number {
  return (entry.volumeGiB * entry.volumeUsdPerGiBMonth) / HOURS_PER_MONTH;
}

/** How many stopped hosts the entry keeps: its `size`, fewer when they would cost more than its cap. */
export function poolTarget(entry: WarmPoolEntry): number {
  const cap = entry.maxHourlyCostUsd;
  const each = stoppedHostHourlyCost(entry);
  if (cap === undefined || each <= 0) return entry.size;
  return Math.max(0, Math.min(entry.size, Math.floor(cap / each + 1e-9)));
}

/**
 * The entry's shape digest (16 hex digits): its instance type, subnet, image, images, and the
 * pool user-data's SHA-256. A host launched under another digest no longer fits the entry.
 */
export function poolSpecDigest(
  entry: Pick<WarmPoolEntry, "instanceType" | "images">,
  resolved: {
    readonly subnetId: string;
    readonly imageId: string;
    readonly userDataSha256: string;
  },
): string {
  const text = JSON.stringify([
    entry.instanceType,
    resolved.subnetId,
    resolved.imageId,
    [...entry.images],
    resolved.userDataSha256,
  ]);
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}

/** EC2's state reason of an instance that powered itself off (the pool host's "prepared"). */
export const PREPARED_REASON = "Client.InstanceInitiatedShutdown";

/**
 * What a host is: `stale` when its entry is gone or its digest is not the entry's current one;
 * else `ready` when stopped by itself, `broken` when stopped otherwise or preparing past the
 * entry's `prepareSeconds` (from its launch), `preparing` otherwise. Total.
 */
export function classifyPoolHost(
  host: PoolHost,
  entry: WarmPoolEntry | undefined,
  digest: string | undefined,
  now: number,
): PoolHostState {
  if (entry === undefined || digest === undefined || host.spec !== digest) return "stale";
  if (host.state === "stopped") {
    return host.stateReasonCode === PREPARED_REASON ? "ready" : "broken";
  }
  const launched = host.launchTime;
  if (launched !== undefined && now - launched > entry.prepareSeconds * 1000) return "broken";
  return "preparing";
}

/**
 * One pass of the pool: per entry, launch what keeps `target` hosts ready or preparing (launches
 * in flight count), with one host over while stale hosts are rolled out; terminate broken hosts,
 * every host of a removed entry, one stale host per pass once a fresh one is ready to take its
 * place, and ready hosts beyond the target when the entry shrank. Hosts taken by Pods are not
 * in `hosts`. Pure and total: duplicate or unknown entries are handled, counts never negative.
 */
export function planWarmPool(input: {
  readonly entries: readonly WarmPoolEntry[];
  /** Current digest per entry name. */
  readonly digests: ReadonlyMap<string, string>;
  readonly hosts: readonly PoolHost[];
  /** Launches sent and not yet listed, per entry. */
  readonly inFlight: ReadonlyMap<string, number>;
  readonly now: number;
}): { readonly plan: PoolPlan; readonly counts: readonly PoolEntryCounts[] } {
  const byName = new Map<string, WarmPoolEntry>();
  for (const entry of input.entries) if (!byName.has(entry.name)) byName.set(entry.name, entry);
  const launch: { entry: string; count: number }[] = [];
  const terminate: PoolTermination[] = [];
  const grouped = new Map<string, { host: PoolHost; state: PoolHostState }[]>();
  const seen = new Set<string>();
  for (const host of input.hosts) {
    if (seen.has(host.instanceId)) continue;
    seen.add(host.instanceId);
    const entry = byName.get(host.entry);
    const state = classifyPoolHost(host, entry, input.digests.get(host.entry), input.now);
    if (entry === undefined) {
      terminate.push({
        instanceId: host.instanceId,
        entry: host.entry,
        reason: "removed",
        message: `warm-pool entry ${host.entry} is no longer configured`,
      });
      continue;
    }
    const list = grouped.get(entry.name) ?? [];
    list.push({ host, state });
    grouped.set(entry.name, list);
  }
  const counts: PoolEntryCounts[] = [];
  for (const entry of byName.values()) {
    const hosts = grouped.get(entry.name) ?? [];
    const of = (state: PoolHostState) => hosts.filter((h) => h.state === state);
    const ready = of("ready");
    const preparing = of("preparing");
    const stale = of("stale");
    const broken = of("broken");
    const target = poolTarget(entry);
    for (const { host } of broken) {
      terminate.push({
        instanceId: host.instanceId,
        entry: entry.name,
        reason: "broken",
        message:
          host.state === "stopped"
            ? `warm-pool host of ${entry.name} stopped before it prepared (${host.stateReasonCode ?? "no reason"})`
            : `warm-pool host of ${entry.name} did not prepare within ${entry.prepareSeconds}s`,
      });
    }
    const inFlight = Math.max(0, input.inFlight.get(entry.name) ?? 0);
    let fresh = ready.length + preparing.length + inFlight;
    let staleLeft = stale.length;
    // One stale host goes once a fresh one is ready to stand in for it (rolled, not all at once).
    if (staleLeft > 0 && ready.length + staleLeft > target) {
      const oldest = [...stale].sort(byAge)[0];
      if (oldest !== undefined) {
        terminate.push({
          instanceId: oldest.host.instanceId,
          entry: entry.name,
          reason: "replaced",
          message: `warm-pool host of ${entry.name} was launched for an older shape of its entry`,
        });
        staleLeft--;
      }
    }
    // Shrunk: ready hosts beyond the target go (preparing ones become ready and go next pass).
    const excess = Math.min(ready.length, fresh - target);
    if (excess > 0) {
      for (const { host } of [...ready].sort(byAge).slice(0, excess)) {
        terminate.push({
          instanceId: host.instanceId,
          entry: entry.name,
          reason: "shrunk",
          message: `warm-pool entry ${entry.name} keeps ${target} host(s)`,
        });
      }
      fresh -= excess;
    }
    // Launch up to the target, at most one over it while stale hosts remain.
    const room = Math.min(target - fresh, target + 1 - fresh - staleLeft);
    if (room > 0) launch.push({ entry: entry.name, count: room });
    counts.push({
      entry: entry.name,
      target,
      preparing: preparing.length,
      ready: ready.length,
      stale: stale.length,
      broken: broken.length,
      hourlyCostUsd:
        (ready.length + stale.filter((s) => s.host.state === "stopped").length) *
        stoppedHostHourlyCost(entry),
    });
  }
  return { plan: { launch, terminate }, counts };
}

/** Oldest launch first (unknown launch times last), then by ID. */
function byAge(a: { host: PoolHost }, b: { host: PoolHost }): number {
  return (
    (a.host.launchTime ?? Number.POSITIVE_INFINITY) -
      (b.host.launchTime ?? Number.POSITIVE_INFINITY) ||
    a.host.instanceId.localeCompare(b.host.instanceId)
  );
}
