import { Buffer } from "node:buffer";
import { randomUUID } from "node:crypto";
import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import { REPORT_TAG_KEY } from "@nebula/state-mapping";
import { type PoolRenderResult, renderPoolUserData } from "@nebula/userdata/pool";
import { placementsFor } from "./capacity.js";
import type { WarmPoolEntry } from "./config.js";
import { ProviderError, toProviderError } from "./errors.js";
import { hostLaunchSettings, MAX_USER_DATA_BYTES } from "./launch.js";
import { notifyAll } from "./listeners.js";
import { disprovePoolHost, isPoolToken, POOL_TOKEN_PREFIX } from "./ownership.js";
import type { ParameterDelivery } from "./parameter-delivery.js";
import { accountOfArn } from "./parameters.js";
import type { ObservedInstance } from "./poll.js";
import {
  type PoolEntryCounts,
  type PoolHost,
  type PoolTermination,
  PREPARED_REASON,
  planWarmPool,
  poolSpecDigest,
} from "./pool-plan.js";
import { launchBase, type PodRecord, type ProviderContext } from "./record.js";
import { CLUSTER_TAG, NODE_TAG, POD_TAG, POD_UID_TAG, POOL_SPEC_TAG, POOL_TAG } from "./tags.js";

/** Something the warm pool did, for metrics and logs ({@link WarmPool.onEvent}). */
export type WarmPoolEvent =
  /** A Pod took a prepared host of `entry` (assigned in the ledger; started next). */
  | {
      readonly kind: "hit";
      readonly entry: string;
      readonly podUid: string;
      readonly pod: string;
      readonly instanceId: string;
    }
  /**
   * A Pod that fits an entry found none of its hosts ready (`empty`), or the assignment could not
   * be recorded (`unrecorded`): it launches cold.
   */
  | {
      readonly kind: "miss";
      readonly entry: string;
      readonly podUid: string;
      readonly pod: string;
      readonly reason: "empty" | "unrecorded";
    }
  /** A host of `entry` the pool launched became ready, `seconds` after its launch. */
  | {
      readonly kind: "ready";
      readonly entry: string;
      readonly instanceId: string;
      readonly seconds: number;
    }
  /** The pool launched a host of `entry`. */
  | { readonly kind: "launched"; readonly entry: string; readonly instanceId: string }
  /** The pool terminated a host (its entry removed or changed, broken, or the entry shrank). */
  | ({ readonly kind: "terminated" } & PoolTermination);

/** The pool as its last pass saw it, per entry (for metrics). */
export interface WarmPoolStatus {
  /** Per configured entry: target, hosts by state, hourly cost. */
  readonly entries: readonly PoolEntryCounts[];
  /** Hosts Pods took that are still waiting for their start (assignment in progress). */
  readonly assigning: number;
}

/**
 * The warm pool (`config.warmPool`), one collaborator: after every poll it keeps each entry's
 * prepared, stopped hosts at their target (launches with the generic pool user-data, terminates
 * what is broken, shrunk, removed or of an older shape, rolled one at a time); a new Pod that fits
 * an entry takes one of its ready hosts instead of a cold launch. A take is durable before the host
 * is started: the ledger records the host as the Pod's instance (the pool's `ClientToken`), then
 * the Pod's parameters are written, the host tagged with the Pod's identity, its user-data set to
 * the Pod's, and only then `StartInstances`. Each step is idempotent and resumed after a crash
 * ({@link WarmPool.recover}), so a host is either the pool's or one Pod's, never two Pods', and a
 * used host never goes back to the pool (the leak collector terminates it after its Pod).
 */
export class WarmPool {
  readonly #ctx: ProviderContext;
  readonly #parameters: ParameterDelivery;
  readonly #listeners = new Set<(event: WarmPoolEvent) => void>();
  /** Hosts assigned to Pods (the ledger's, refreshed now and then, and this process's takes). */
  #assigned = new Set<string>();
  /** Hosts this pool is terminating: never taken. */
  readonly #going = new Set<string>();
  /** Hosts being taken in this process (chosen, assignment not yet recorded). */
  readonly #taking = new Set<string>();
  /** When {@link #assigned} was last read from the ledger (ms); undefined: never. */
  #assignedReadAt: number | undefined;
  /** Launches sent and not yet listed: instance ID → entry. */
  readonly #launched = new Map<string, { entry: string; at: number }>();
  /** Launches in flight (no answer yet), per entry. */
  readonly #launching = new Map<string, number>();
  /** Hosts seen preparing, with their launch time, to time their way to ready. */
  readonly #preparing = new Map<string, number>();
  #status: WarmPoolStatus = { entries: [], assigning: 0 };
  /** Pool user-data per entry shape (images, prepare time), rendered once. */
  readonly #rendered = new Map<string, PoolRenderResult>();
  #reconciling: Promise<void> | undefined;

  readonly #sandboxImage: string | undefined;

  /**
   * @param sandboxImage - the Pod sandbox image the Pods' user-data names (`userData.sandbox.image`),
   * pulled by every pool host with its entry's images; default: `@nebula/userdata`'s.
   */
  constructor(ctx: ProviderContext, parameters: ParameterDelivery, sandboxImage?: string) {
    this.#ctx = ctx;
    this.#parameters = parameters;
    this.#sandboxImage = sandboxImage;
  }

  /** True when an entry is configured (size 0 included: its hosts are collected). */
  get configured(): boolean {
    return this.#ctx.config.warmPool.length > 0;
  }

  /** Subscribes to what the pool does; returns the unsubscribe. */
  onEvent(listener: (event: WarmPoolEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The pool as its last pass saw it. */
  status(): WarmPoolStatus {
    return this.#status;
  }

  /**
   * One pass over the latest poll's listing: plan (`planWarmPool`) and act. A pass while one
   * runs joins it. Never throws: failures are logged, and the next pass plans again.
   */
  reconcile(): Promise<void> {
    this.#reconciling ??= this.#pass()
      .catch((error: unknown) => this.#ctx.log("warn", `warm pool: ${String(error)}`))
      .finally(() => {
        this.#reconciling = undefined;
      });
    return this.#reconciling;
  }

  async #pass(): Promise<void> {
    const ctx = this.#ctx;
    const listing = ctx.listing;
    if (listing === undefined) return;
    // Nothing to do (no entry, no pool host left): no ledger read either.
    if (!this.configured && !listing.some((i) => i.tags.has(POOL_TAG))) return;
    // Hosts found in the ledger (or tagged with a Pod) are Pods', never the pool's.
    await this.#refreshAssigned();
    const now = ctx.now();
    const hosts: PoolHost[] = [];
    for (const instance of listing) {
      if (!this.#isFree(instance)) continue;
      this.#launched.delete(instance.instanceId);
      // Going already (this pool's termination, or anyone's): neither ready nor to be counted.
      if (instance.state === "shutting-down" || instance.state === "terminated") continue;
      hosts.push({
        instanceId: instance.instanceId,
        entry: instance.tags.get(POOL_TAG) ?? "",
        spec: instance.tags.get(POOL_SPEC_TAG),
        state: instance.state,
        stateReasonCode: instance.stateReasonCode,
        launchTime: instance.launchTime,
      });
    }
    // Terminated hosts leave the listing: so do they the pool's memory.
    const listed = new Set(listing.map((i) => i.instanceId));
    for (const id of this.#going) if (!listed.has(id)) this.#going.delete(id);
    // Launched but not yet listed (EC2's eventual consistency): still counted, for a while.
    const inFlight = new Map<string, number>(this.#launching);
    const graceMs = ctx.config.eventualConsistencySeconds * 1000;
    for (const [id, launch] of this.#launched) {
      if (now - launch.at > graceMs) this.#launched.delete(id);
      else inFlight.set(launch.entry, (inFlight.get(launch.entry) ?? 0) + 1);
    }
    const digests = new Map(ctx.config.warmPool.map((e) => [e.name, this.#digest(e)]));
    const { plan, counts } = planWarmPool({
      entries: ctx.config.warmPool,
      digests,
      hosts,
      inFlight,
      now,
    });
    this.#noteReady(hosts, digests, now);
    const assigning = [...ctx.records.values()].filter((r) => r.warm && !r.warm.started).length;
    this.#status = { entries: counts, assigning };
    // No Pod takes a host this pass terminates (marked before anything is awaited).
    for (const { instanceId } of plan.terminate) this.#going.add(instanceId);
    const terminations = plan.terminate.map(async (termination) => {
      this.#preparing.delete(termination.instanceId);
      ctx.log("info", `warm pool: terminating ${termination.instanceId}: ${termination.message}`);
      try {
        await ctx.gateway.terminateInstance(termination.instanceId);
        this.#emit({ kind: "terminated", ...termination });
      } catch (error) {
        // Takeable again only when it is listed stopped and ready once more.
        this.#going.delete(termination.instanceId);
        ctx.log("warn", `warm pool: terminating ${termination.instanceId}: ${String(error)}`);
      }
    });
    await Promise.all(terminations);
    await Promise.all(
      plan.launch.flatMap(({ entry, count }) => {
        const found = ctx.config.warmPool.find((e) => e.name === entry);
        return found === undefined
          ? []
          : Array.from({ length: count }, () => this.#launch(found, digests.get(entry) ?? ""));
      }),
    );
  }

  /**
   * Takes a ready host for a new Pod that fits an entry, and starts it for the Pod; `false` when
   * none fits or is ready (the Pod launches cold). Only for a Pod with no launch recorded.
   */
  async take(record: PodRecord): Promise<boolean> {
    const ctx = this.#ctx;
    if (!this.configured || record.deleted || record.mode !== "launch") return false;
    if (record.launchRequested || record.instanceId !== undefined) return false;
    if (record.userData === undefined || record.facts.requests.gpus > 0) return false;
    const entries = this.#fitting(record);
    if (entries.length === 0) return false;
    const host = this.#readyHost(entries);
    const { facts } = record;
    if (host === undefined) {
      this.#emit({
        kind: "miss",
        entry: entries[0]?.name ?? "",
        podUid: facts.uid,
        pod: facts.key,
        reason: "empty",
      });
      return false;
    }
    const entry = host.tags.get(POOL_TAG) ?? "";
    // Its launch token (what proves it the Pod's, with the ledger); where EC2 does not report
    // tokens (`ownership.clientToken: false`), the pool's prefix and the host's ID mark it.
    const clientToken = isPoolToken(host.clientToken)
      ? (host.clientToken as string)
      : `${POOL_TOKEN_PREFIX}${host.instanceId}`;
    // Taken in this process at once (no other Pod can choose it), then durably: the ledger names
    // the host as the Pod's instance before anything is written on it.
    this.#assigned.add(host.instanceId);
    this.#taking.add(host.instanceId);
    const requestedAt = ctx.now();
    try {
      await record.ledgerClearing;
      record.ledgerClearing = undefined;
      await ctx.ledger.recordLaunch(launchBase(facts), {
        requestedAt,
        clientToken,
        instanceId: host.instanceId,
        launchedAt: requestedAt,
      });
    } catch (error) {
      this.#assigned.delete(host.instanceId);
      this.#taking.delete(host.instanceId);
      ctx.log(
        "warn",
        `warm pool: pod ${facts.key} could not be assigned ${host.instanceId} in the ledger (${String(error)}); launching cold`,
      );
      this.#emit({ kind: "miss", entry, podUid: facts.uid, pod: facts.key, reason: "unrecorded" });
      return false;
    }
    record.launchRequested = true;
    record.requestedAt ??= requestedAt;
    record.clientToken = clientToken;
    record.instanceId = host.instanceId;
    record.accountId ??= accountOfArn(host.instanceProfileArn);
    record.warm = { entry, started: false };
    this.#taking.delete(host.instanceId);
    if (ctx.records.get(facts.uid) !== record || record.deleted) {
      // Gone while the assignment was recorded: the host is untouched (no tag, no user-data),
      // the pool counts it again once the ledger entry is removed.
      return true;
    }
    this.#emit({
      kind: "hit",
      entry,
      podUid: facts.uid,
      pod: facts.key,
      instanceId: host.instanceId,
    });
    await this.resume(record);
    return true;
  }

  /**
   * A Pod whose ledger names a pool host (its `ClientToken` is the pool's): marks its warm start
   * as pending when the host is still stopped and has never reported (a crash came between the
   * assignment and `StartInstances`), or as started. `false` when the latest listing does not
   * show the host (the poll's lookup by ID decides then). Idempotent.
   */
  recover(record: PodRecord): boolean {
    if (record.warm !== undefined) return true;
    if (!isPoolToken(record.clientToken) || record.instanceId === undefined) return false;
    const host = this.#ctx.listing?.find((i) => i.instanceId === record.instanceId);
    if (host === undefined) return false;
    this.#assigned.add(host.instanceId);
    const pending =
      host.state === "stopped" &&
      !host.tags.has(REPORT_TAG_KEY) &&
      disprovePoolHost(host, this.#ctx.ownership) === undefined &&
      (host.podUid === undefined || host.podUid === record.facts.uid);
    record.warm = { entry: host.tags.get(POOL_TAG) ?? "", started: !pending };
    if (pending) record.accountId ??= accountOfArn(host.instanceProfileArn);
    return true;
  }

  /**
   * Carries a pending warm start on from wherever it stopped: the Pod's parameters, the host's
   * Pod tags, the parameters' instance tag, the Pod's user-data on the host, `StartInstances`.
   * Every step is idempotent; a failure leaves the rest for the next poll (`launchError`).
   */
  async resume(record: PodRecord): Promise<void> {
    const ctx = this.#ctx;
    const warm = record.warm;
    const instanceId = record.instanceId;
    if (warm === undefined || warm.started || instanceId === undefined || record.launching) return;
    if (record.deleted) return;
    const { facts } = record;
    record.launching = true;
    try {
      if (!(await this.#parameters.write(record))) return;
      await ctx.gateway.tagInstance(instanceId, {
        [POD_UID_TAG]: facts.uid,
        [POD_TAG]: facts.key.slice(0, 256),
        Name: `${ctx.config.nodeName}/${facts.key}`.slice(0, 256),
      });
      // Before the start: the host reads its parameters at once, without waiting for the tag.
      await this.#parameters.tag(record);
      if (record.deleted) return;
      const userData = base64Of(record.userData);
      if (userData === undefined) return;
      const listed = ctx.listing?.find((i) => i.instanceId === instanceId);
      // A host already started (a crash after StartInstances) is not stopped: nothing to set.
      if (listed === undefined || listed.state === "stopped") {
        try {
          await ctx.gateway.setUserData(instanceId, userData);
        } catch (error) {
          const wrapped = toProviderError(error, `ModifyInstanceAttribute ${instanceId}`);
          if (!/IncorrectInstanceState/.test(wrapped.message + String(wrapped.awsCode))) {
            throw wrapped;
          }
        }
      }
      await ctx.gateway.startInstance(instanceId);
      warm.started = true;
      record.launchedAt = new Date(ctx.now());
      record.launchError = undefined;
      // A listing read before the start (the host still stopped) is older than what comes now.
      record.observedReadAt = ctx.now();
      record.seen = true;
      record.missing = false;
      record.events.push({
        type: "Normal",
        reason: "Launched",
        message: `started warm-pool host ${instanceId} (${listed?.instanceType ?? "pool entry"} of pool entry ${warm.entry}${listed?.subnetId === undefined ? "" : ` in ${listed.subnetId}`})`,
      });
    } catch (error) {
      const wrapped = toProviderError(error, `starting warm-pool host ${instanceId}`);
      record.launchError = new ProviderError(
        wrapped.code === "Unknown" ? "Unavailable" : wrapped.code,
        `pod ${facts.key}: its warm-pool host ${instanceId} could not be started yet (${wrapped.message}); retrying`,
        { cause: wrapped },
      );
      ctx.log("warn", record.launchError.message);
    } finally {
      record.launching = false;
    }
  }

  /** The entries a Pod fits, in configuration order (type, subnet, image, On-Demand). */
  #fitting(record: PodRecord): WarmPoolEntry[] {
    const { config } = this.#ctx;
    const capacity = record.capacityTypes;
    if (capacity !== undefined && !capacity.includes("on-demand")) return [];
    const placements = placementsFor(
      record.facts,
      record.instanceTypes ?? (record.instanceType === undefined ? [] : [record.instanceType]),
      config,
      this.#ctx.instanceTypes?.latest(),
      record.capacityTypes,
    );
    return config.warmPool.filter(
      (entry) =>
        entry.size > 0 &&
        (entry.imageId ?? config.imageId) === config.imageId &&
        placements.some(
          (p) =>
            p.capacityType === "on-demand" &&
            p.instanceType === entry.instanceType &&
            p.subnetId === subnetOf(entry, config.subnetIds),
        ),
    );
  }

  /** The oldest ready, free, current host of the first entry that has one. */
  #readyHost(entries: readonly WarmPoolEntry[]): ObservedInstance | undefined {
    const listing = this.#ctx.listing ?? [];
    for (const entry of entries) {
      const digest = this.#digest(entry);
      const ready = listing
        .filter(
          (i) =>
            this.#isFree(i) &&
            i.tags.get(POOL_TAG) === entry.name &&
            i.tags.get(POOL_SPEC_TAG) === digest &&
            i.state === "stopped" &&
            i.stateReasonCode === PREPARED_REASON &&
            // Its launch token is what the ledger records (and what proves it the Pod's).
            (!this.#ctx.ownership.clientToken || isPoolToken(i.clientToken)),
        )
        .sort((a, b) => (a.launchTime ?? 0) - (b.launchTime ?? 0));
      if (ready[0] !== undefined) return ready[0];
    }
    return undefined;
  }

  /** A host of this node's pool that no Pod has (no Pod UID tag, not assigned in the ledger). */
  #isFree(instance: ObservedInstance): boolean {
    return (
      instance.podUid === undefined &&
      !this.#assigned.has(instance.instanceId) &&
      !this.#going.has(instance.instanceId) &&
      disprovePoolHost(instance, this.#ctx.ownership) === undefined
    );
  }

  /**
   * Reads the hosts the ledger assigns (a crash may have come between an assignment and the
   * host's Pod tag) at first, then once per leak-collection interval: an assignment whose Pod is
   * gone before its host was tagged frees the host again.
   */
  async #refreshAssigned(): Promise<void> {
    const ctx = this.#ctx;
    const now = ctx.now();
    const every = ctx.config.leakCollection.intervalSeconds * 1000;
    if (this.#assignedReadAt !== undefined && now - this.#assignedReadAt < every) return;
    const entries = await ctx.ledger.list();
    const assigned = new Set<string>();
    for (const { launch } of entries) {
      if (isPoolToken(launch.clientToken) && launch.instanceId !== undefined) {
        assigned.add(launch.instanceId);
      }
    }
    // Takes under way in this process stand whatever the ledger read said.
    for (const id of this.#taking) assigned.add(id);
    for (const record of ctx.records.values()) {
      if (record.warm !== undefined && record.instanceId !== undefined) {
        assigned.add(record.instanceId);
      }
    }
    this.#assigned = assigned;
    this.#assignedReadAt = now;
  }

  async #launch(entry: WarmPoolEntry, digest: string): Promise<void> {
    const ctx = this.#ctx;
    const token = `${POOL_TOKEN_PREFIX}${randomUUID()}`;
    this.#launching.set(entry.name, (this.#launching.get(entry.name) ?? 0) + 1);
    try {
      const answer = await ctx.gateway.runInstances(this.#runInput(entry, digest, token));
      if (answer.instanceId !== undefined) {
        this.#launched.set(answer.instanceId, { entry: entry.name, at: ctx.now() });
        this.#preparing.set(answer.instanceId, ctx.now());
        this.#emit({ kind: "launched", entry: entry.name, instanceId: answer.instanceId });
      }
    } catch (error) {
      ctx.log(
        "warn",
        `warm pool: launching a host of ${entry.name}: ${String(error)} (the next pass tries again)`,
      );
    } finally {
      this.#launching.set(entry.name, (this.#launching.get(entry.name) ?? 1) - 1);
    }
  }

  /** The `RunInstances` of a pool host: the pool user-data, the pool's tags, stop on power-off. */
  #runInput(entry: WarmPoolEntry, digest: string, token: string): RunInstancesCommandInput {
    const { config } = this.#ctx;
    const user = this.#userDataFor(entry);
    if (user.bytes > MAX_USER_DATA_BYTES) {
      throw new ProviderError(
        "InvalidConfiguration",
        `warmPool ${entry.name}: the pool user-data is ${user.bytes} bytes, over EC2's limit`,
      );
    }
    const tags = Object.entries({
      ...config.tags,
      Name: `${config.nodeName}/pool/${entry.name}`.slice(0, 256),
      [CLUSTER_TAG]: config.clusterName,
      [NODE_TAG]: config.nodeName,
      [POOL_TAG]: entry.name,
      [POOL_SPEC_TAG]: digest,
    }).map(([Key, Value]) => ({ Key, Value }));
    return {
      ClientToken: token,
      ImageId: entry.imageId ?? config.imageId,
      InstanceType: entry.instanceType as RunInstancesCommandInput["InstanceType"],
      MinCount: 1,
      MaxCount: 1,
      SubnetId: subnetOf(entry, config.subnetIds),
      UserData: user.userData,
      InstanceInitiatedShutdownBehavior: "stop",
      ...hostLaunchSettings(config, tags),
    };
  }

  /** The entry's current shape digest. */
  #digest(entry: WarmPoolEntry): string {
    const { config } = this.#ctx;
    return poolSpecDigest(entry, {
      subnetId: subnetOf(entry, config.subnetIds),
      imageId: entry.imageId ?? config.imageId,
      userDataSha256: this.#userDataFor(entry).sha256,
    });
  }

  /** The pool user-data of an entry (the sandbox image and its images), rendered once. */
  #userDataFor(entry: WarmPoolEntry): PoolRenderResult {
    const key = JSON.stringify([entry.images, entry.prepareSeconds]);
    let found = this.#rendered.get(key);
    if (found === undefined) {
      found = renderPoolUserData({
        images: entry.images,
        prepareSeconds: entry.prepareSeconds,
        ...(this.#sandboxImage === undefined ? {} : { sandboxImage: this.#sandboxImage }),
      });
      this.#rendered.set(key, found);
    }
    return found;
  }

  /** Emits `ready` for hosts first seen ready after this process saw them preparing. */
  #noteReady(hosts: readonly PoolHost[], digests: ReadonlyMap<string, string>, now: number): void {
    for (const host of hosts) {
      if (host.spec !== digests.get(host.entry)) continue;
      if (host.state !== "stopped") {
        if (!this.#preparing.has(host.instanceId)) {
          this.#preparing.set(host.instanceId, host.launchTime ?? now);
        }
        continue;
      }
      const since = this.#preparing.get(host.instanceId);
      if (since === undefined || host.stateReasonCode !== PREPARED_REASON) {
        continue;
      }
      this.#preparing.delete(host.instanceId);
      this.#emit({
        kind: "ready",
        entry: host.entry,
        instanceId: host.instanceId,
        seconds: Math.max(0, (now - since) / 1000),
      });
    }
  }

  #emit(event: WarmPoolEvent): void {
    notifyAll(this.#listeners, (listener) => listener(event));
  }
}

/** The entry's subnet: its own, else the first configured. */
function subnetOf(entry: WarmPoolEntry, subnetIds: readonly string[]): string {
  return entry.subnetId ?? subnetIds[0] ?? "";
}

/** A record's user-data as base64, whichever form the render gave it in. */
function base64Of(raw: PodRecord["userData"]): string | undefined {
  if (raw === undefined) return undefined;
  if (typeof raw === "string") return Buffer.from(raw, "utf8").toString("base64");
  if (raw instanceof Uint8Array) return Buffer.from(raw).toString("base64");
  return raw.userData;
}
