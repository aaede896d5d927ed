import {
  ACCOUNT_POOL,
  afterCapacityError,
  choosePlacement,
  NO_BACKOFF,
  type Placement,
  placementsFor,
  poolOf,
  SPOT_ACCOUNT_POOL,
} from "./capacity.js";
import { ProviderError, toProviderError } from "./errors.js";
import { buildRunInstancesInput } from "./launch.js";
import { OnDemandPriceCache } from "./on-demand-price-cache.js";
import type { ParameterDelivery } from "./parameter-delivery.js";
import type { Reclaimer } from "./reclaimer.js";
import { disprove, launchBase, observe, type PodRecord, type ProviderContext } from "./record.js";
import { settlesWithin } from "./settles.js";
import type { WarmPool } from "./warm-pool.js";

/** The longest a Pod waits for another launch's answer in an unproven pool before it goes itself. */
const PROBE_WAIT_MS = 10_000;

/**
 * The longest a launch waits for its price (Spot, or On-Demand from the Price List) before it
 * goes on without one: the launch holds its Pod's teardown meanwhile.
 */
const PRICE_WAIT_MS = 5_000;

/**
 * Launches a Pod's instance, once: the intent recorded in the ledger before `RunInstances` (the
 * Pod UID's client token), the Pod's parameters written before the instance that reads them, the
 * instance ID recorded as soon as EC2 answers. An instance a lost answer or a crash left is
 * adopted, not launched again. Capacity and quota errors cool the pool down and move to the other
 * subnets and instance types with back-off; an answer that is not definite repeats the same
 * request.
 */
export class Launcher {
  readonly #ctx: ProviderContext;
  readonly #parameters: ParameterDelivery;
  readonly #reclaimer: Reclaimer;
  /** Capacity pools cooling down after a capacity or quota error: pool → until (ms). */
  readonly #pools = new Map<string, number>();
  /** The error that cooled each pool down, for the Pods that wait on it. */
  readonly #poolErrors = new Map<string, ProviderError>();
  /** When a launch last succeeded in each pool: a proven pool takes launches side by side. */
  readonly #proven = new Map<string, number>();
  /**
   * The launch in flight in each pool no launch has proven yet: the other Pods for that pool wait
   * for its answer (one `RunInstances`), so a burst of Pods tries a dead offering once, not once
   * per Pod.
   */
  readonly #probes = new Map<string, Promise<void>>();
  /** On-Demand prices by type (`config.pricing.onDemand`), read through the gateway. */
  readonly #onDemandPrices: OnDemandPriceCache;
  /** The warm pool (`config.warmPool`): a new Pod that fits takes a prepared host first. */
  pool: WarmPool | undefined;

  constructor(ctx: ProviderContext, parameters: ParameterDelivery, reclaimer: Reclaimer) {
    this.#ctx = ctx;
    this.#parameters = parameters;
    this.#reclaimer = reclaimer;
    this.#onDemandPrices = new OnDemandPriceCache({
      read: async (instanceType) => ctx.gateway.onDemandPrice?.(instanceType),
      now: ctx.now,
      log: ctx.log,
      waitMs: PRICE_WAIT_MS,
    });
    parameters.onNotWritten = (record) => this.noInstanceCanExist(record);
  }

  /**
   * Adopts the Pod's instance when the ledger recorded a launch, or a poll or a lookup by the
   * Pod UID tag finds a proven one (after a restart, or a launch whose outcome was unknown).
   */
  async adopt(record: PodRecord): Promise<boolean> {
    const uid = record.facts.uid;
    // A warm-pool host the ledger assigned: found by its ID (its Pod tag may not be written yet).
    if (this.pool?.recover(record)) {
      const host = this.#ctx.listing?.find((i) => i.instanceId === record.instanceId);
      if (host !== undefined && record.warm?.started) observe(this.#ctx, record, host);
      return true;
    }
    const listed = this.#ctx.listing?.find(
      (i) => i.podUid === uid && disprove(this.#ctx, i, uid) === undefined,
    );
    if (listed) {
      observe(this.#ctx, record, listed);
      if (record.ledgerDirty || !record.launchRequested) await this.recordInstance(record);
      return true;
    }
    if (record.instanceId !== undefined) return true;
    if (!record.launchRequested) return false;
    try {
      const found = await this.#reclaimer.provenInstance(uid, undefined);
      if (found) {
        observe(this.#ctx, record, found);
        await this.recordInstance(record);
        return true;
      }
    } catch (error) {
      this.#ctx.log("warn", `looking up the instance of pod ${record.facts.key}: ${String(error)}`);
    }
    return false;
  }

  /**
   * A new Pod's instance: the one a recorded launch, the latest listing or its Pod UID tag proves
   * (its parameters then tagged), else a launch. Throws what {@link launch} throws.
   */
  async start(record: PodRecord): Promise<void> {
    const adopted = await this.adopt(record);
    if (adopted && record.warm?.started === false) await this.pool?.resume(record);
    else if (adopted) await this.#parameters.tag(record);
    else if (!record.instanceId) await this.launch(record);
  }

  /**
   * Launches the Pod's instance: one attempt, and at once the next placement after a capacity or
   * quota refusal that leaves one untried (a Pod does not wait for the next poll to move off a
   * dead offering). Throws only for an error no retry can fix (configuration, permissions);
   * everything else is left on the record (`launchError`) for the next poll.
   */
  async launch(record: PodRecord): Promise<void> {
    // A prepared host of the warm pool first, when the Pod fits one and no launch is recorded.
    if (this.pool !== undefined && (await this.pool.take(record))) return;
    const bound = (record.instanceTypes?.length ?? 1) * this.#ctx.config.subnetIds.length * 2 + 1;
    for (let i = 0; i < bound; i++) {
      if (!(await this.#attempt(record))) return;
    }
  }

  /** One launch attempt; `true` when a refusal left another placement to try now. */
  async #attempt(record: PodRecord): Promise<boolean> {
    const ctx = this.#ctx;
    const { facts } = record;
    const instanceType = record.instanceType;
    const userData = record.userData;
    if (instanceType === undefined || userData === undefined) return false;
    const placements = placementsFor(
      facts,
      record.instanceTypes ?? [instanceType],
      ctx.config,
      ctx.instanceTypes?.latest(),
      record.capacityTypes,
    );
    // After an unknown outcome, repeat the same request (same token: EC2 returns that instance).
    const repeat = record.placement ?? placements.find((p) => p.clientToken === record.clientToken);
    const repeating = record.unknownOutcome && repeat !== undefined;
    record.launching = true;
    let probe: (() => void) | undefined;
    try {
      let choice = repeating
        ? ({ kind: "launch", placement: repeat } as const)
        : choosePlacement(placements, record.backoff, this.#pools, ctx.now());
      // An unproven pool with a launch in flight: wait for its answer, then choose again (a
      // capacity error has cooled the pool down by then). Bounded: each wait ends one launch.
      for (let i = 0; !repeating && choice.kind === "launch" && i <= placements.length; i++) {
        const pending = this.#unproven(poolOf(choice.placement));
        if (pending === undefined) break;
        // Bounded: a launch that hangs does not hold the others longer than PROBE_WAIT_MS.
        if (!(await settlesWithin(pending, PROBE_WAIT_MS))) break;
        choice = choosePlacement(placements, record.backoff, this.#pools, ctx.now());
      }
      if (choice.kind === "wait") {
        if (ctx.now() >= record.backoff.notBefore) this.#waitOnPools(record, placements);
        return false;
      }
      const placement = choice.placement;
      const pool = poolOf(placement);
      if (!this.#isProven(pool) && !this.#probes.has(pool)) {
        let answered = (): void => {};
        const mine = new Promise<void>((resolve) => {
          answered = resolve;
        });
        this.#probes.set(pool, mine);
        probe = () => {
          if (this.#probes.get(pool) === mine) this.#probes.delete(pool);
          answered();
        };
      }
      const requestedAt = ctx.now();
      try {
        // The intent, durably, before the call: a crash from here on leaves a launch to look for.
        await record.ledgerClearing;
        record.ledgerClearing = undefined;
        await ctx.ledger.recordLaunch(launchBase(facts), {
          requestedAt,
          clientToken: placement.clientToken,
        });
      } catch (error) {
        record.launchError = new ProviderError(
          "Unavailable",
          `pod ${facts.key}: the launch could not be recorded in the ledger (${String(error)}); not launched`,
          { cause: error },
        );
        return false;
      }
      record.launchRequested = true;
      record.requestedAt ??= requestedAt;
      record.placement = placement;
      record.clientToken = placement.clientToken;
      // The Pod's parameters before the instance that reads them can exist: a crash from here on
      // leaves parameters that the teardown (or the leak collector) deletes.
      if (!(await this.#parameters.write(record))) return false;
      // Deleted while the intent and parameters were written: nothing is launched for it.
      if (record.deleted) {
        this.noInstanceCanExist(record);
        return false;
      }
      const input = buildRunInstancesInput({
        pod: facts,
        config: ctx.config,
        instanceType: placement.instanceType,
        userData,
        subnetId: placement.subnetId,
        clientToken: placement.clientToken,
        capacityType: placement.capacityType,
      });
      let instanceId: string | undefined;
      let zone: string | undefined;
      try {
        const output = await ctx.gateway.runInstances(input);
        instanceId = output.instanceId;
        zone = output.availabilityZone;
        if (output.ownerId) record.accountId = output.ownerId;
        if (instanceId !== undefined) this.#proven.set(pool, ctx.now());
        // The pool's answer is in: the Pods waiting on it need not wait for the rest.
        probe?.();
      } catch (error) {
        const next = this.#failed(
          record,
          placement,
          placements.length,
          toProviderError(error, `RunInstances for pod ${facts.key}`),
        );
        // The pool is cooled down (a capacity error) before the Pods waiting on it choose again.
        probe?.();
        return next;
      }
      if (instanceId === undefined) {
        record.unknownOutcome = true;
        record.launchError = new ProviderError(
          "Unavailable",
          `RunInstances for pod ${facts.key} returned no instance`,
        );
        return false;
      }
      if (ctx.records.get(facts.uid) !== record) {
        // The Pod was forgotten (its teardown completed) while RunInstances was under way: no one
        // else knows this instance, so it goes at once rather than to the leak collector.
        ctx.log(
          "warn",
          `pod ${facts.key} is gone: terminating ${instanceId}, launched after it went`,
        );
        await ctx.gateway
          .terminateInstance(instanceId)
          .catch((error: unknown) =>
            ctx.log("warn", `terminating ${instanceId}: ${String(error)}`),
          );
        return false;
      }
      record.instanceId = instanceId;
      record.launchedAt = new Date(ctx.now());
      record.launchError = undefined;
      record.unknownOutcome = false;
      record.backoff = NO_BACKOFF;
      // RunInstances' answer is an observation: the instance exists and is pending.
      record.seen = true;
      record.missing = false;
      // Recorded as soon as RunInstances returned; the parameters are tagged with the instance's
      // ARN at the same time (a failure is retried by the next poll), and the instance's price
      // at launch (Spot, or On-Demand) is read beside them.
      const spot = placement.capacityType === "spot";
      const [, , price] = await Promise.all([
        this.recordInstance(record),
        this.#parameters.tag(record),
        spot
          ? zone === undefined
            ? undefined
            : this.#spotPrice(placement.instanceType, zone)
          : this.#onDemandPrice(placement.instanceType),
      ]);
      if (price !== undefined) {
        record.price = price;
        if (spot) record.spotPrice = price;
      }
      const priced = price === undefined ? "" : ` at $${price}/h`;
      record.events.push({
        type: "Normal",
        reason: "Launched",
        message: `launched instance ${instanceId} (${placement.instanceType}${spot ? `, Spot${priced}` : price === undefined ? "" : `, On-Demand${priced}`}) in ${placement.subnetId}${zone === undefined ? "" : ` (${zone})`}`,
      });
      return false;
    } finally {
      probe?.();
      record.launching = false;
    }
  }

  /**
   * The On-Demand price of a type (USD per hour), from the cache of Price List reads: `undefined`
   * when `pricing.onDemand` is off, the gateway reads none, or it is not known within
   * PRICE_WAIT_MS of its read's start (the cache logs why).
   */
  async #onDemandPrice(instanceType: string): Promise<string | undefined> {
    if (!this.#ctx.config.pricing.onDemand || this.#ctx.gateway.onDemandPrice === undefined) {
      return undefined;
    }
    return this.#onDemandPrices.price(instanceType);
  }

  /**
   * The Spot price of a type in a zone now (USD per hour); `undefined`, logged, when it cannot be
   * read within PRICE_WAIT_MS (the launch it belongs to holds the Pod's teardown meanwhile).
   */
  async #spotPrice(instanceType: string, zone: string): Promise<string | undefined> {
    const read = this.#ctx.gateway.spotPrice(instanceType, zone);
    try {
      let price: string | undefined;
      const inTime = await settlesWithin(
        read.then((p) => {
          price = p;
        }),
        PRICE_WAIT_MS,
      );
      if (!inTime) throw new Error(`no answer within ${PRICE_WAIT_MS} ms`);
      return price;
    } catch (error) {
      this.#ctx.log(
        "warn",
        `the Spot price of ${instanceType} in ${zone} could not be read (${String(error)}); the Pod shows none`,
      );
      return undefined;
    }
  }

  /** A pool a launch succeeded in within the cool-down window (as long as a capacity error cools it). */
  #isProven(pool: string): boolean {
    const at = this.#proven.get(pool);
    return (
      at !== undefined && this.#ctx.now() - at < this.#ctx.config.capacityBackoff.poolSeconds * 1000
    );
  }

  /** The launch in flight in an unproven pool, when there is one to wait for. */
  #unproven(pool: string): Promise<void> | undefined {
    return this.#isProven(pool) ? undefined : this.#probes.get(pool);
  }

  /**
   * A launch attempt that provably started no instance (a definite refusal, or no `RunInstances`
   * sent) clears the launch intent, unless an earlier attempt's outcome is unknown or an instance
   * is known: a later teardown need not look for one.
   */
  noInstanceCanExist(record: PodRecord): void {
    if (record.unknownOutcome || record.instanceId !== undefined) return;
    record.launchRequested = false;
    // No launch to wait for: a lookup need not wait out EC2's consistency window either.
    record.requestedAt = undefined;
    // Kept: the next intent of this Pod is written only after it (both are compare-and-swap
    // writes of one entry; the clear landing second would erase the new intent).
    record.ledgerClearing = this.#ctx.ledger
      .recordLaunch(launchBase(record.facts), { requestedAt: undefined, clientToken: undefined })
      .then(
        () => undefined,
        () => undefined,
      );
  }

  /** Writes the instance ID to the ledger (retried by the poll when it fails). */
  async recordInstance(record: PodRecord): Promise<void> {
    const instanceId = record.instanceId;
    if (instanceId === undefined) return;
    try {
      await this.#ctx.ledger.recordLaunch(launchBase(record.facts), {
        instanceId,
        launchedAt: record.launchedAt?.getTime() ?? this.#ctx.now(),
        ...(record.requestedAt === undefined ? { requestedAt: this.#ctx.now() } : {}),
      });
      record.launchRequested = true;
      record.ledgerDirty = false;
    } catch (error) {
      record.ledgerDirty = true;
      this.#ctx.log(
        "warn",
        `instance ${instanceId} of pod ${record.facts.key} not yet in the ledger: ${String(error)}`,
      );
    }
  }

  /** A Pod that makes no call because every pool it could use is cooling down: say why. */
  #waitOnPools(record: PodRecord, placements: readonly Placement[]): void {
    const spot = placements.some((p) => p.capacityType === "spot");
    const cause =
      this.#poolErrors.get(ACCOUNT_POOL) ??
      (spot ? this.#poolErrors.get(SPOT_ACCOUNT_POOL) : undefined) ??
      placements.map((p) => this.#poolErrors.get(poolOf(p))).find((e) => e !== undefined);
    if (
      cause === undefined ||
      (cause.code !== "InsufficientCapacity" && cause.code !== "QuotaExceeded")
    ) {
      return;
    }
    const previous = record.launchError?.code;
    const what =
      cause.code === "QuotaExceeded"
        ? `an account quota stops launches (${cause.awsCode ?? cause.code})`
        : `EC2 has no capacity in any configured subnet and instance type (${cause.awsCode ?? cause.code})`;
    record.launchError = new ProviderError(
      cause.code,
      `pod ${record.facts.key}: ${what}; waiting to retry`,
      { cause, ...(cause.awsCode ? { awsCode: cause.awsCode } : {}) },
    );
    if (previous !== cause.code) {
      record.events.push({
        type: "Warning",
        reason: cause.code,
        message: record.launchError.message,
      });
    }
  }

  /** Records a failed launch; `true` when a capacity or quota refusal leaves a placement to try now. */
  #failed(
    record: PodRecord,
    placement: Placement,
    placements: number,
    error: ProviderError,
  ): boolean {
    const ctx = this.#ctx;
    const { facts } = record;
    const previous = record.launchError?.code;
    if (error.code === "InsufficientCapacity" || error.code === "QuotaExceeded") {
      // A definite answer: no instance was started by this request.
      const next = afterCapacityError(
        record.backoff,
        placement,
        error.code,
        placements,
        ctx.now(),
        ctx.config.capacityBackoff,
      );
      record.backoff = next.backoff;
      this.#pools.set(next.pool, Math.max(this.#pools.get(next.pool) ?? 0, next.poolUntil));
      this.#poolErrors.set(next.pool, error);
      const what =
        error.code === "QuotaExceeded"
          ? `an account ${placement.capacityType === "spot" ? "Spot " : ""}quota stops the launch (${error.awsCode ?? error.code})`
          : `EC2 has no ${placement.capacityType === "spot" ? "Spot " : ""}${placement.instanceType} capacity in ${placement.subnetId} (${error.awsCode ?? error.code})`;
      record.launchError = new ProviderError(
        error.code,
        `pod ${facts.key}: ${what}; retrying with back-off${placements > 1 ? " in the other configured subnets and instance types" : ""}`,
        { cause: error, ...(error.awsCode ? { awsCode: error.awsCode } : {}) },
      );
      // A definite "no": nothing can exist, a later teardown need not look for an instance. A
      // repeat of a request whose outcome was unknown proves it too (same client token: EC2 would
      // have answered with the instance), so the next attempt backs off like any other.
      record.unknownOutcome = false;
      this.noInstanceCanExist(record);
      if (previous !== error.code) {
        record.events.push({
          type: "Warning",
          reason: error.code,
          message: record.launchError.message,
        });
      }
      ctx.log("warn", record.launchError.message);
      // Another placement is open now (not every one tried): try it at once.
      return !record.deleted && record.backoff.notBefore <= ctx.now();
    }
    record.launchError = error;
    if (error.retryable || error.code === "Unknown") {
      // No definite answer: an instance may exist; the next attempt repeats the same request.
      record.unknownOutcome = true;
      ctx.log("warn", `${error.message} (will retry on the next poll)`);
      return false;
    }
    if (previous !== error.code) {
      record.events.push({ type: "Warning", reason: "LaunchFailed", message: error.message });
    }
    // A definite refusal (configuration, permissions) started no instance either.
    if (!record.unknownOutcome) this.noInstanceCanExist(record);
    throw error;
  }
}
