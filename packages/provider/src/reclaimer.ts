import type { FoundInstance } from "@nebula/virtual-node";
import { ProviderError, toProviderError } from "./errors.js";
import type { ObservedInstance } from "./poll.js";
import {
  disprove,
  isGone,
  launchTimeOf,
  observe,
  type PodRecord,
  type ProviderContext,
  pickKeeper,
  refreshState,
  withinConsistencyWindow,
} from "./record.js";
import { STOP_GRACE_TAG } from "./tags.js";

/** Options of a stop or terminate: what the teardown knows. */
export interface ReclaimOptions {
  /** The containers' grace after the stop (tagged for the host; capped by `maxGracePeriodSeconds`). */
  readonly graceSeconds?: number | undefined;
  /** The Pod whose teardown asks: only an instance that proves it is that Pod's is acted on. */
  readonly podUid?: string | undefined;
}

/**
 * Acts on instances for the virtual node's teardown (its `InstanceReclaimer`), and only on those
 * that prove Nebula launched them (tags, instance profile, client token): finds a Pod's instance
 * by its recorded ID, else by its Pod UID tag; stops it (after tagging the stop's grace for the
 * host) and terminates it. "Not found" within EC2's eventual-consistency window of a launch is
 * never an answer: it rejects with the retryable `NotVisibleYet`.
 */
export class Reclaimer {
  readonly #ctx: ProviderContext;
  /** Set by the provider: a found instance is an observation of its Pod (status, then publish). */
  onFound: (record: PodRecord) => void = () => undefined;

  constructor(ctx: ProviderContext) {
    this.#ctx = ctx;
  }

  /**
   * The Pod's instance: by its recorded ID, else by the `nebula:pod-uid` tag (proven ownership).
   * Rejects with `NotVisibleYet` while a launch is under way or younger than the consistency
   * window.
   */
  async findInstance(podUid: string): Promise<FoundInstance | undefined> {
    const record = this.#ctx.records.get(podUid);
    if (record?.launching) {
      // A RunInstances may be under way: its answer, not this lookup, says whether one exists.
      throw new ProviderError(
        "NotVisibleYet",
        `a launch for pod ${podUid} is under way: ask again once it has answered`,
      );
    }
    const entry = record?.instanceId === undefined ? await this.#ctx.ledger.get(podUid) : undefined;
    const recorded = record?.instanceId ?? entry?.launch.instanceId;
    const proven = await this.#proven(podUid, recorded);
    if (proven !== undefined) {
      const found = proven.instance;
      if (
        record?.mode === "launch" &&
        (record.instanceId ?? found.instanceId) === found.instanceId
      ) {
        // What the teardown sees is an observation too: the final report a stopping host wrote is
        // in the Pod's status before the teardown goes on to terminate (the next status write
        // carries it), not left to a poll that may come after the instance is gone.
        // As old as the read it comes from: a listing older than an event's read changes nothing.
        observe(this.#ctx, record, found, proven.readAt);
        refreshState(this.#ctx, record);
        this.onFound(record);
      }
      return { instanceId: found.instanceId, state: found.state };
    }
    const since = record
      ? launchTimeOf(record)
      : (entry?.launch.launchedAt ?? entry?.launch.requestedAt);
    this.#throwIfRecent(since, `the instance of pod ${podUid}`);
    return undefined;
  }

  /**
   * `StopInstances` (batched); a stop EC2 refuses for good becomes `TerminateInstances`. Only an
   * instance that proves Nebula launched it, for `options.podUid` when given (`NotOwned`
   * otherwise: a tampered ledger cannot aim a teardown at another Pod's instance); NotFound is
   * done, except for an instance launched within the eventual-consistency window (`NotVisibleYet`).
   */
  async stopInstance(instanceId: string, options: ReclaimOptions = {}): Promise<void> {
    const instance = await this.#actionable(instanceId, options.podUid);
    if (instance === undefined) return;
    if (options.graceSeconds !== undefined && instance.state !== "stopped") {
      await this.#tagStopGrace(instance, options.graceSeconds);
    }
    await this.#act(instance, "stop");
  }

  /** `TerminateInstances` (batched), on the same terms as {@link stopInstance}. */
  async terminateInstance(instanceId: string, options: ReclaimOptions = {}): Promise<void> {
    const instance = await this.#actionable(instanceId, options.podUid);
    if (instance === undefined) return;
    await this.#act(instance, "terminate");
  }

  /**
   * The Pod's instance, proven to belong to it: the recorded one when it proves it (from the latest
   * poll, or this node's own later read of it, else described by ID, terminated included), else one
   * found by its `nebula:pod-uid` tag.
   */
  async provenInstance(
    podUid: string,
    recorded: string | undefined,
  ): Promise<ObservedInstance | undefined> {
    return (await this.#proven(podUid, recorded))?.instance;
  }

  /** {@link Reclaimer.provenInstance}, with when the read it comes from started (ms). */
  async #proven(
    podUid: string,
    recorded: string | undefined,
  ): Promise<{ readonly instance: ObservedInstance; readonly readAt: number } | undefined> {
    const ctx = this.#ctx;
    if (recorded !== undefined) {
      const listed = ctx.health.current.ready
        ? ctx.listing?.find((i) => i.instanceId === recorded)
        : undefined;
      // A listing is up to a poll interval old (a minute with the event channel): an event's read
      // of the instance since then (its stop, say) is newer, and is what the instance is now.
      const record = ctx.records.get(podUid);
      const own =
        listed !== undefined &&
        record?.observed?.instanceId === recorded &&
        record.observedReadAt !== undefined &&
        record.observedReadAt > (ctx.listingReadAt ?? 0)
          ? { instance: record.observed, readAt: record.observedReadAt }
          : undefined;
      const readAt = ctx.now();
      const fresh =
        own ??
        (listed === undefined ? undefined : { instance: listed, readAt: ctx.listingReadAt ?? 0 });
      const instance = fresh?.instance ?? (await ctx.gateway.describeInstance(recorded));
      if (instance !== undefined) {
        const at = fresh?.readAt ?? readAt;
        // Nothing is ever done to a terminated or shutting-down instance, so it needs no proof to
        // be observed (EC2 may drop its instance profile once it is shutting down).
        if (isGone(instance, podUid)) return { instance, readAt: at };
        const why = disprove(ctx, instance, podUid);
        if (why === undefined) return { instance, readAt: at };
        ctx.log("warn", `not acting on ${recorded} for pod ${podUid}: ${why}`);
      }
    }
    const readAt = ctx.now();
    const found = await ctx.gateway.instancesOfPod(podUid);
    const proven = found.filter((i) => disprove(ctx, i, podUid) === undefined || isGone(i, podUid));
    if (proven.length === 0) return undefined;
    const live = proven.filter((i) => !isGone(i, podUid));
    return { instance: pickKeeper(live.length > 0 ? live : proven, recorded), readAt };
  }

  /**
   * The instance to act on, proven Nebula's (and Pod `podUid`'s, when given); `undefined` when it
   * is gone (or terminated).
   */
  async #actionable(
    instanceId: string,
    podUid: string | undefined,
  ): Promise<ObservedInstance | undefined> {
    const instance = await this.#ctx.gateway.describeInstance(instanceId);
    if (instance === undefined) {
      this.#throwIfRecent(this.#recentLaunchOf(instanceId), `instance ${instanceId}`);
      return undefined;
    }
    // A terminated (or terminating) instance is done: nothing more is sent to it, so it needs no
    // proof (EC2 may drop its instance profile once it is terminated, which would fail the proof).
    if (instance.state === "terminated" || instance.state === "shutting-down") return undefined;
    const why = disprove(this.#ctx, instance, podUid);
    if (why !== undefined) {
      throw new ProviderError(
        "NotOwned",
        `instance ${instance.instanceId} does not prove that Nebula launched it${podUid === undefined ? "" : ` for pod UID ${podUid}`}: ${why}`,
      );
    }
    return instance;
  }

  /**
   * Tells the host the stop's grace ({@link STOP_GRACE_TAG}) before the stop reaches it. A failure
   * is logged, not thrown: the host then stops with the Pod's own grace, later but still whole.
   */
  async #tagStopGrace(instance: ObservedInstance, graceSeconds: number): Promise<void> {
    // Capped here too (the teardown caps it where its parameters are made): the host waits no
    // longer than `maxGracePeriodSeconds`, whatever it is asked.
    const capped = Math.min(graceSeconds, this.#ctx.config.maxGracePeriodSeconds);
    const value = String(Number.isFinite(capped) ? Math.max(0, Math.floor(capped)) : 0);
    if (instance.tags.get(STOP_GRACE_TAG) === value) return;
    try {
      await this.#ctx.gateway.tagInstances([instance.instanceId], STOP_GRACE_TAG, value);
    } catch (error) {
      this.#ctx.log(
        "warn",
        `${toProviderError(error, `CreateTags ${STOP_GRACE_TAG} on ${instance.instanceId}`).message}; the host stops with the Pod's own grace`,
      );
    }
  }

  async #act(instance: ObservedInstance, action: "stop" | "terminate"): Promise<void> {
    const { gateway, log } = this.#ctx;
    const state = instance.state;
    if (state === "shutting-down" || state === "terminated") return;
    const since = this.#recentLaunchOf(instance.instanceId) ?? instance.launchTime;
    if (action === "stop") {
      if (state === "stopped" || state === "stopping") return;
      if (instance.capacityType === "spot") {
        // A one-time Spot instance cannot stop: its termination shuts the host down the same
        // orderly way (the grace tagged above), and its tags keep the final report.
        await this.#act(instance, "terminate");
        return;
      }
      try {
        const outcome = await gateway.stopInstance(instance.instanceId);
        // EC2 may still deny knowing a new instance: that is not "already gone".
        if (outcome === "notFound") this.#throwIfRecent(since, `instance ${instance.instanceId}`);
      } catch (error) {
        const wrapped = toProviderError(error, `StopInstances ${instance.instanceId}`);
        if (wrapped.awsCode === "UnsupportedOperation" || wrapped.code === "Unauthorized") {
          // Refused for good (Spot, instance-store root, permissions): terminate instead.
          log("warn", `${wrapped.message}; terminating instead`);
          await gateway.terminateInstance(instance.instanceId);
          return;
        }
        throw wrapped;
      }
      return;
    }
    const outcome = await gateway.terminateInstance(instance.instanceId);
    if (outcome === "notFound") this.#throwIfRecent(since, `instance ${instance.instanceId}`);
  }

  /** Within the eventual-consistency window of a launch, "not found" is not an answer: throw. */
  #throwIfRecent(since: number | undefined, what: string): void {
    if (!withinConsistencyWindow(this.#ctx, since)) return;
    throw new ProviderError(
      "NotVisibleYet",
      `${what} is not listed yet: EC2 is eventually consistent for ${this.#ctx.config.eventualConsistencySeconds} s after a launch; ask again`,
    );
  }

  #recentLaunchOf(instanceId: string): number | undefined {
    for (const record of this.#ctx.records.values()) {
      if (record.instanceId === instanceId) return launchTimeOf(record);
    }
    return undefined;
  }
}
