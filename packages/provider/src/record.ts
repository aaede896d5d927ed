/**
 * What the provider keeps per Pod (one {@link PodRecord} per Pod UID), the context its
 * collaborators share, and the small pure helpers over both.
 */

import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { type InstanceState, toInstanceState } from "@nebula/state-mapping";
import { COMPLETE_PHASE, decodeRecord, type LaunchEntry, type PodLedger } from "@nebula/teardown";
import type { PodParameter } from "@nebula/userdata";
import type { PodEventNote, PodInstanceInfo } from "@nebula/virtual-node";
import type { LaunchBackoff, Placement } from "./capacity.js";
import type { ProviderConfig } from "./config.js";
import type { ProviderError } from "./errors.js";
import type { Gateway } from "./gateway.js";
import type { HealthTracker } from "./health.js";
import type { InstanceTypeCatalogue } from "./instance-types.js";
import { jsonEqual } from "./json-equal.js";
import type { LaunchInput } from "./launch.js";
import { disproveOwnership, type OwnershipRules } from "./ownership.js";
import type { CapacityType, PodFacts } from "./pod.js";
import type { ObservedInstance } from "./poll.js";

/** What the provider does with a Pod. */
type Mode =
  /** Launch (or launched). */
  | "launch"
  /** Not launched, Pending with a reason (DaemonSet). */
  | "hold"
  /**
   * Not launched yet: a mandatory ConfigMap or Secret is missing (`CreateContainerConfigError`);
   * its sources are read and the Pod rendered again on every poll until it renders.
   */
  | "config"
  /** Refused: Failed at once. */
  | "refused"
  /** Terminal in the API when first seen: never launched again. */
  | "terminal";

/** One Pod as the provider knows it. */

/** The Pod's tokens as last issued: the token parameter to write, and when to renew them. */
export interface IssuedTokens {
  /** `<prefix>t` with every token of the Pod (`@nebula/userdata`'s `podTokenParameterValue`). */
  readonly parameter: PodParameter;
  /** When they were requested (ms). */
  readonly issuedAt: number;
  /** When to request them again (ms): see `renewalTime` in pod-tokens.ts. */
  readonly renewAt: number;
  /** When the first of them expires (ms). */
  readonly expiresAt: number;
}

export interface PodRecord {
  pod: V1Pod;
  facts: PodFacts;
  mode: Mode;
  instanceType?: string;
  /** The instance types it may launch on, most preferred first (`instanceType` is the first). */
  instanceTypes?: readonly string[];
  /** How its instance is bought, in order of preference (default: On-Demand). */
  capacityTypes?: readonly CapacityType[];
  userData?: LaunchInput["userData"];
  instanceId?: string;
  /** A `RunInstances` was (or may have been) sent: the ledger has its request time. */
  launchRequested: boolean;
  /** The `ClientToken` of the latest launch request, as the ledger recorded it. */
  clientToken?: string;
  requestedAt?: number | undefined;
  /** A launch attempt ended without a definite answer (timeout, 5xx): an instance may exist. */
  unknownOutcome: boolean;
  placement?: Placement;
  backoff: LaunchBackoff;
  launchError?: ProviderError | undefined;
  launching: boolean;
  /** The Pod's parameters (`podDelivery: "parameters"`), to write before `RunInstances`. */
  parameters?: readonly PodParameter[] | undefined;
  /** The supervisor's parameters the Pod's user-data reads (shared, written once per process). */
  sharedParameters?: readonly PodParameter[] | undefined;
  /** When this process last wrote them (ms); written again when half the leak grace old. */
  parametersWrittenAt?: number | undefined;
  /**
   * The Pod as rendered for its host: with its ServiceAccount's AWS role added
   * (`withWebIdentity`), or the Pod itself. Undefined until this process renders or renews it.
   */
  hostPod?: V1Pod | undefined;
  /** The Pod's service-account tokens as this process last issued them (its token parameter). */
  tokens?: IssuedTokens | undefined;
  /** A renewal of its tokens is queued or in flight. */
  renewingTokens?: boolean | undefined;
  /** The last renewal failed: not before this time again (ms). */
  tokensRetryAt?: number | undefined;
  /** Renewals are failing (one Warning per failure streak). */
  tokensFailing?: boolean | undefined;
  /** The Pod's parameters may still lack the `nebula:instance-arn` tag of its instance. */
  parametersUntagged: boolean;
  /** Tagging in progress. */
  tagging?: boolean | undefined;
  /** The instance's account (`OwnerId` of `RunInstances`), for its ARN. */
  accountId?: string | undefined;
  /** The `CreateContainerConfigError` message the Pod is held with (one Event per message). */
  configError?: string | undefined;
  /** Reading the sources and rendering again is in progress. */
  readmitting?: boolean | undefined;
  /** Why a Pod in mode `hold` is held (the admission's reason, e.g. `InsufficientCapacity`). */
  holdReason?: string | undefined;
  /** Render notices already published as Events. */
  notices?: Set<string> | undefined;
  /** When RunInstances answered (the grace for an instance not yet listed starts here). */
  launchedAt?: Date;
  /** The instance ID still has to be written to the ledger (the write failed). */
  ledgerDirty: boolean;
  observed?: ObservedInstance | undefined;
  /**
   * When the read that produced {@link PodRecord.observed} started (ms): a read that started
   * earlier (a poll's listing finishing after an event's read) is older and is not observed.
   */
  observedReadAt?: number | undefined;
  /**
   * This process has observed the instance: a poll listed it, a describe by ID found it (or proved
   * it absent), or this process launched it. Until then it has no state, and the Pod keeps the
   * status stored in the API (no state from no observation: docs/contracts.md, C9).
   */
  seen: boolean;
  /** True after a lookup proved the (known, seen) instance absent. */
  missing: boolean;
  state?: InstanceState | undefined;
  stoppedSince?: number | undefined;
  consoleReadAt?: number;
  consoleOutput?: string;
  status?: V1PodStatus;
  /** What was last delivered (see {@link deliveryOf}); nothing is delivered again while it stands. */
  delivered?: Delivery;
  /** The publication in progress (one at a time per Pod, so no Event is delivered twice). */
  publishing?: Promise<void> | undefined;
  events: PodEventNote[];
  deleted: boolean;
  /** The Pod's first Ready was seen (and its start-up broken down, when it was one). */
  startupNoted?: boolean | undefined;
  /** The ledger write clearing a launch intent EC2 refused, while in flight (the next intent waits for it). */
  ledgerClearing?: Promise<void> | undefined;
  /** The Spot price (USD per hour, as EC2 wrote it) when this process launched the Pod's instance. */
  spotPrice?: string | undefined;
  /**
   * The instance's price (USD per hour) when this process launched it, either capacity type: the
   * Spot price, or the On-Demand price as the AWS Price List writes it.
   */
  price?: string | undefined;
  /** This process has said (Event, listeners) that the Pod's Spot instance is being reclaimed. */
  interruptionNoted?: boolean | undefined;
  /** This process has said that EC2 recommends rebalancing the Pod's Spot instance. */
  rebalanceNoted?: boolean | undefined;
  /** The Pod took a warm-pool host (see `WarmPool`): its entry, and whether it was started. */
  warm?: WarmStart | undefined;
}

/** A Pod's warm start ({@link PodRecord.warm}): the pool host it took, and whether it was started. */
interface WarmStart {
  /** The pool entry the host belongs to. */
  readonly entry: string;
  /** `StartInstances` was answered (or the host was found already started). */
  started: boolean;
}

/** What the collaborators share: configuration, the AWS gateway, the ledger and the records. */
export interface ProviderContext {
  readonly config: ProviderConfig;
  readonly gateway: Gateway;
  /** EC2's instance types, with `instanceTypes.catalogue`; else `undefined`. */
  readonly instanceTypes: InstanceTypeCatalogue | undefined;
  readonly ledger: PodLedger;
  /** Every Pod the provider knows, by UID. */
  readonly records: Map<string, PodRecord>;
  /** EC2's health as the poll sees it. */
  readonly health: HealthTracker;
  /** The clock, ms since the epoch. */
  readonly now: () => number;
  readonly log: (level: "info" | "warn" | "error", message: string) => void;
  /** What proves an instance is Nebula's. */
  readonly ownership: OwnershipRules;
  /** The latest poll's listing of this node's live instances; `undefined` before the first. */
  listing: readonly ObservedInstance[] | undefined;
  /** When the read of {@link ProviderContext.listing} started (ms); `undefined` before the first. */
  listingReadAt: number | undefined;
}

/** Why `instance` does not prove it was launched for `podUid` (any Pod: `undefined`), or `undefined`. */
export function disprove(
  ctx: ProviderContext,
  instance: ObservedInstance,
  podUid: string | undefined,
): string | undefined {
  return disproveOwnership(instance, podUid, ctx.ownership);
}

/**
 * An instance of the Pod `podUid` that is terminated or shutting down: nothing is ever sent to it
 * again, so it needs no proof of ownership to be observed (EC2 may stop reporting its instance
 * profile once it is shutting down, which fails the proof).
 */
export function isGone(instance: ObservedInstance, podUid: string): boolean {
  return (
    (instance.state === "terminated" || instance.state === "shutting-down") &&
    instance.podUid === podUid
  );
}

/** True while `since` (a launch, ms) is within EC2's eventual-consistency window. */
export function withinConsistencyWindow(ctx: ProviderContext, since: number | undefined): boolean {
  return since !== undefined && ctx.now() - since < ctx.config.eventualConsistencySeconds * 1000;
}

/** The time of the record's launch (its answer, else its request), ms. */
export function launchTimeOf(record: PodRecord | undefined): number | undefined {
  return record?.launchedAt?.getTime() ?? record?.requestedAt;
}

/**
 * Records an observation of the Pod's instance. With `readAt` (when the read that saw it started,
 * ms), an observation older than the one recorded is dropped: returns false then.
 */
export function observe(
  ctx: ProviderContext,
  record: PodRecord,
  instance: ObservedInstance,
  readAt?: number,
): boolean {
  if (readAt !== undefined) {
    if (record.observedReadAt !== undefined && readAt < record.observedReadAt) return false;
    record.observedReadAt = readAt;
  }
  record.instanceId ??= instance.instanceId;
  record.observed = instance;
  record.seen = true;
  record.missing = false;
  if (instance.state === "stopped") record.stoppedSince ??= ctx.now();
  else record.stoppedSince = undefined;
  return true;
}

/** Recomputes the instance state from the latest observation, feeding the previous state back. */
export function refreshState(ctx: ProviderContext, record: PodRecord): void {
  const now = new Date(ctx.now());
  // A warm-pool host taken and not yet started is stopped, and has nothing to say of the Pod:
  // the Pod is as a Pod whose launch is under way.
  if (
    (record.instanceId === undefined && record.observed === undefined) ||
    record.warm?.started === false
  ) {
    record.state = toInstanceState(undefined, { now, launchedAt: now });
    return;
  }
  // An instance adopted from the ledger and not observed since this process started has no
  // state yet: "not observed" is not "lost", and the Pod keeps its stored status meanwhile.
  if (!record.seen) {
    record.state = undefined;
    return;
  }
  record.state = toInstanceState(record.missing ? undefined : record.observed?.raw, {
    now,
    previous: record.state,
    consoleOutput: record.consoleOutput,
    launchedAt: record.launchedAt,
  });
}

/** What the Pod runs on, once its instance is known. */
function instanceInfo(record: PodRecord): PodInstanceInfo | undefined {
  const id = record.instanceId;
  if (id === undefined) return undefined;
  const seen = record.observed;
  return {
    instanceId: id,
    instanceType: seen?.instanceType ?? record.placement?.instanceType,
    availabilityZone: seen?.availabilityZone,
    subnetId: seen?.subnetId ?? record.placement?.subnetId,
    capacityType: seen?.capacityType ?? record.placement?.capacityType ?? "on-demand",
    ...(record.spotPrice === undefined ? {} : { spotPriceUsdPerHour: record.spotPrice }),
    ...(record.price === undefined ? {} : { priceUsdPerHour: record.price }),
  };
}

/** A copy of the Pod carrying its latest status. */
export function withStatus(record: PodRecord): V1Pod {
  const pod = structuredClone(record.pod);
  if (record.status) pod.status = structuredClone(record.status);
  return pod;
}

/** The ledger's launch key of a Pod. */
export function launchBase(facts: PodFacts): LaunchEntry {
  return { podUid: facts.uid, namespace: facts.namespace, name: facts.name };
}

/** True when a ledger record text is a teardown record at `complete`. */
export function isCompleteRecord(text: string | undefined): boolean {
  if (text === undefined) return false;
  const decoded = decodeRecord(text);
  return decoded.ok && decoded.record.phase === COMPLETE_PHASE;
}

/**
 * Of several instances carrying one Pod UID, the one to keep: the one the provider recorded at
 * launch, else the earliest launched (then the smallest ID), preferring any not shutting down.
 */
export function pickKeeper(
  group: readonly ObservedInstance[],
  recorded: string | undefined,
): ObservedInstance {
  const mine = group.find((i) => i.instanceId === recorded);
  if (mine) return mine;
  const sorted = [...group].sort(
    (a, b) =>
      Number(a.state === "shutting-down") - Number(b.state === "shutting-down") ||
      (a.launchTime ?? Number.POSITIVE_INFINITY) - (b.launchTime ?? Number.POSITIVE_INFINITY) ||
      a.instanceId.localeCompare(b.instanceId),
  );
  return sorted[0] as ObservedInstance;
}

/**
 * What a delivery carries: the status, the instance facts and its EC2 state (a teardown waiting for
 * the instance to stop or go hears of it from the publication). A fact first observed after the
 * launch (its Availability Zone) is delivered when it is observed, not by the next process to
 * start (which would then write a Pod a quiet world should leave alone).
 */
export type Delivery = readonly [
  status: V1PodStatus | undefined,
  instance: PodInstanceInfo | undefined,
  ec2State: string | undefined,
];

/** The delivery of `status` for this record now (the status is not copied: pass a copy to keep). */
export function deliveryOf(record: PodRecord, status: V1PodStatus | undefined): Delivery {
  // The instance's EC2 state too: a teardown waiting for it to stop (or go) hears of it at once
  // through the publication, instead of at its next look.
  return [status, instanceInfo(record), record.observed?.state];
}

/**
 * True when `next` delivers nothing `last` did not: equal as JSON (keys in any order, undefined
 * properties absent), compared without serializing either (the poll asks this of every Pod).
 */
export function sameDelivery(last: Delivery | undefined, next: Delivery): boolean {
  return last !== undefined && jsonEqual(last, next);
}
