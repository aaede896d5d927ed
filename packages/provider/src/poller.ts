import type { Admitter } from "./admitter.js";
import { type ProviderError, toProviderError } from "./errors.js";
import type { Launcher } from "./launcher.js";
import { notifyAll } from "./listeners.js";
import type { ParameterDelivery } from "./parameter-delivery.js";
import type { PodTokens } from "./pod-tokens.js";
import type { ObservedInstance } from "./poll.js";
import { describedOutcome, planListing, unlistedPods } from "./poll-plan.js";
import type { StatusPublisher } from "./publisher.js";
import {
  disprove,
  launchTimeOf,
  observe,
  type PodRecord,
  type ProviderContext,
  refreshState,
  withinConsistencyWindow,
} from "./record.js";
import { isTerminalStatus } from "./status.js";

/** What one poll cycle did. */
export interface PollResult {
  /** True when the poll reached EC2. */
  readonly ok: boolean;
  /** Instances of this node seen. */
  readonly instances: number;
  /** `DescribeInstances` pages requested. */
  readonly describeCalls: number;
  /** `GetConsoleOutput` calls made (fallback for stopped instances without report tags). */
  readonly consoleCalls: number;
  /** The error, when the poll failed. */
  readonly error?: ProviderError;
}

/**
 * One poll cycle, and the loop that repeats it at the pace EC2's health allows: one paginated,
 * tag-filtered `DescribeInstances` sequence; the listing planned (`planListing`); recorded
 * instances it does not show described by ID; every Pod's state and status recomputed and
 * published; pending launches retried; the console read only where a stopped instance has no
 * readable report. Never throws: a failed poll is reported in the result and in the health.
 */
export class Poller {
  readonly #ctx: ProviderContext;
  readonly #admitter: Admitter;
  readonly #launcher: Launcher;
  readonly #parameters: ParameterDelivery;
  readonly #publisher: StatusPublisher;
  readonly #tokens: PodTokens | undefined;
  readonly #listeners = new Set<(result: PollResult, seconds: number) => void>();
  #polling: Promise<PollResult> | undefined;

  constructor(
    ctx: ProviderContext,
    parts: {
      admitter: Admitter;
      launcher: Launcher;
      parameters: ParameterDelivery;
      publisher: StatusPublisher;
      /** Renews the running Pods' service-account tokens; undefined: none are served. */
      tokens?: PodTokens | undefined;
    },
  ) {
    this.#ctx = ctx;
    this.#admitter = parts.admitter;
    this.#launcher = parts.launcher;
    this.#parameters = parts.parameters;
    this.#publisher = parts.publisher;
    this.#tokens = parts.tokens;
  }

  /** Subscribes to every finished cycle (its result and duration in seconds). */
  onPoll(listener: (result: PollResult, seconds: number) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** One cycle; a call while one runs joins it. */
  pollOnce(): Promise<PollResult> {
    this.#polling ??= this.#timed().finally(() => {
      this.#polling = undefined;
    });
    return this.#polling;
  }

  /** Resolves once the cycle in progress (if any) has finished. */
  async idle(): Promise<void> {
    await this.#polling;
  }

  async #timed(): Promise<PollResult> {
    const started = performance.now();
    const result = await this.#cycle();
    const seconds = (performance.now() - started) / 1000;
    notifyAll(this.#listeners, (listener) => listener(result, seconds));
    return result;
  }

  async #cycle(): Promise<PollResult> {
    const ctx = this.#ctx;
    let listing: Awaited<ReturnType<typeof ctx.gateway.listNodeInstances>>;
    const readAt = ctx.now();
    try {
      listing = await ctx.gateway.listNodeInstances();
    } catch (error) {
      const wrapped = toProviderError(error, "poll");
      await this.#health(wrapped);
      return { ok: false, instances: 0, describeCalls: 0, consoleCalls: 0, error: wrapped };
    }
    ctx.listing = listing.instances;
    ctx.listingReadAt = readAt;
    await this.#health(undefined);
    const { byUid, duplicates } = planListing(
      listing.instances,
      (uid) => ctx.records.get(uid)?.instanceId,
      (instance, uid) => disprove(ctx, instance, uid),
    );
    if (duplicates.length > 0) {
      ctx.log(
        "warn",
        `terminating ${duplicates.length} duplicate instance(s): ${duplicates.join(", ")}`,
      );
      for (const id of duplicates) {
        ctx.gateway.terminateInstance(id).catch((error) => ctx.log("warn", String(error)));
      }
    }
    const records = [...ctx.records.values()];
    // Pods held for a missing ConfigMap or Secret: adopt an instance a lost launch left, else read
    // their sources and render them again; those that render now launch below.
    await Promise.all(
      records
        .filter((r) => r.mode === "config" && !r.deleted)
        .map((r) => this.#admitter.readmit(r, byUid.get(r.facts.uid))),
    );
    // Pods held because no type that fits them is offered in the node's zones: admitted again
    // from the catalogue as it is now (EC2 may offer a type since); those admitted launch below.
    await Promise.all(
      records.filter((r) => r.mode === "hold").map((r) => this.#admitter.reconsiderHold(r)),
    );
    const unlisted = unlistedPods(
      records.map((r) => ({
        uid: r.facts.uid,
        mode: r.mode,
        instanceId: r.instanceId,
        missing: r.missing,
        observedState: r.observed?.state,
      })),
      byUid,
    );
    if (unlisted.length > 0) {
      await this.#describeUnlisted(unlisted.flatMap((uid) => ctx.records.get(uid) ?? []));
    }
    let consoleCalls = 0;
    const work: Promise<void>[] = [];
    for (const record of ctx.records.values()) {
      const step = this.#step(record, byUid.get(record.facts.uid), readAt, work);
      if (step === "console") consoleCalls++;
      work.push(step === "publish" ? this.#publisher.publish(record) : this.#run(record, step));
    }
    await Promise.all(work);
    return {
      ok: true,
      instances: listing.instances.length,
      describeCalls: listing.calls,
      consoleCalls,
    };
  }

  /**
   * Observes what the listing shows of the record, starts its ledger and parameter upkeep (added
   * to `work`), and says what it needs next.
   */
  #step(
    record: PodRecord,
    listed: ObservedInstance | undefined,
    readAt: number,
    work: Promise<void>[],
  ): "publish" | "launch" | "console" | "warm" {
    if (record.mode !== "launch") return "publish";
    // A Pod on a warm-pool host (its ledger names the host): a start a crash interrupted resumes.
    this.#launcher.pool?.recover(record);
    if (record.warm?.started === false) {
      refreshState(this.#ctx, record);
      return record.deleted || record.launching ? "publish" : "warm";
    }
    if (listed && disprove(this.#ctx, listed, record.facts.uid) === undefined) {
      // An instance a lost RunInstances answer left, found by the poll: recorded like any other.
      if (record.instanceId === undefined) record.ledgerDirty = true;
      observe(this.#ctx, record, listed, readAt);
    }
    // Otherwise: observed or proven absent by the lookup above, or nothing concluded yet (the
    // lookup failed, or a new instance is within EC2's consistency window): the last observation
    // stands.
    if (record.ledgerDirty) work.push(this.#launcher.recordInstance(record));
    if (record.instanceId === undefined && !record.deleted && !record.launching) return "launch";
    refreshState(this.#ctx, record);
    if (record.parametersUntagged && !record.deleted && !isTerminalStatus(record.status)) {
      work.push(this.#parameters.tag(record));
    }
    // In the background, a few at a time: a renewal never delays the poll.
    this.#tokens?.renewIfDue(record);
    return this.#publisher.needsConsole(record) ? "console" : "publish";
  }

  async #run(record: PodRecord, step: "launch" | "console" | "warm"): Promise<void> {
    if (step === "launch") await this.#launcher.launch(record).catch(() => undefined);
    else if (step === "warm") await this.#launcher.pool?.resume(record);
    else await this.#publisher.readConsole(record);
    refreshState(this.#ctx, record);
    await this.#publisher.publish(record);
  }

  /**
   * Describes the recorded instances of `records` (not in the latest listing), every state
   * included. A found instance that proves it is the Pod's (a terminated or shutting-down one by
   * its Pod UID tag alone) is observed; one not found is proven absent only outside the
   * eventual-consistency window of its launch. A failed call concludes nothing.
   */
  async #describeUnlisted(records: readonly PodRecord[]): Promise<void> {
    const ctx = this.#ctx;
    for (let i = 0; i < records.length; i += 200) {
      const chunk = records.slice(i, i + 200);
      let found: readonly ObservedInstance[];
      const readAt = ctx.now();
      try {
        found = await ctx.gateway.describeInstances(chunk.map((r) => r.instanceId ?? ""));
      } catch (error) {
        ctx.log("warn", `describing unlisted instances: ${String(error)}`);
        continue;
      }
      for (const record of chunk) {
        const uid = record.facts.uid;
        const instance = found.find((f) => f.instanceId === record.instanceId);
        const outcome = describedOutcome({
          podUid: uid,
          found: instance,
          disproved: instance === undefined ? undefined : disprove(ctx, instance, uid),
          withinConsistencyWindow: withinConsistencyWindow(ctx, launchTimeOf(record)),
        });
        if (outcome === "observe" && instance !== undefined) observe(ctx, record, instance, readAt);
        else if (outcome === "absent") {
          record.seen = true;
          record.missing = true;
          record.observed = undefined;
        }
      }
    }
  }

  async #health(error: ProviderError | undefined): Promise<void> {
    if (this.#ctx.health.record(error)) {
      // Outage begins or ends: every Pod's status says so.
      await Promise.all([...this.#ctx.records.values()].map((r) => this.#publisher.publish(r)));
    }
  }
}
