/**
 * The event channel's reader: long-polls the queue, gathers the instances its messages name over
 * a short window, reads them with one node-filtered `DescribeInstances`, and publishes what
 * changed, so an exit reaches its Pod's status in about a second. A message proves nothing: an
 * instance that is not a recorded Pod's, or not this node's (the read filters by its tags), costs
 * at most one read and changes nothing. The poll stays the safety net for whatever the channel
 * misses.
 */
import type { ExitReport } from "@nebula/state-mapping";
import type { DoorbellQueue, QueueMessage } from "./doorbell-queue.js";
import { type ProviderError, toProviderError } from "./errors.js";
import { notifyAll } from "./listeners.js";
import type { ObservedInstance } from "./poll.js";
import type { StatusPublisher } from "./publisher.js";
import {
  disprove,
  isGone,
  observe,
  type PodRecord,
  type ProviderContext,
  refreshState,
} from "./record.js";

/** What one batch of messages did, for metrics and logs. */
export interface DoorbellBatch {
  /** Messages received. */
  readonly messages: number;
  /** Instances read (after coalescing). */
  readonly instances: number;
  /** Messages folded into another of the same instance in this batch. */
  readonly coalesced: number;
  /** Messages naming no instance of this node's Pods (nothing read for them). */
  readonly ignored: number;
  /** Messages of no known shape (left for the queue's dead-letter queue). */
  readonly unreadable: number;
  /** Seconds from SQS's receipt of each message to its Pod's status published. */
  readonly lagSeconds: readonly number[];
  /** Where the batch's time went (the event channel's breakdown). */
  readonly timings: DoorbellTimings;
  /** The read's error, when it failed (the messages are then received again later). */
  readonly error?: ProviderError;
}

/** Where one batch's time went, in seconds: each stage of a doorbell's way to its Pod's status. */
export interface DoorbellTimings {
  /**
   * Per container exit carried for the first time by a doorbell of this batch: the exit
   * (`finishedAt`, the host's clock) to SQS's receipt of the doorbell, i.e. the host's part
   * (capturing the exit, writing the report's tags, ringing). Exits over 5 minutes old are left out.
   */
  readonly hostSeconds: readonly number[];
  /** Per message with both times: SQS's receipt (`SentTimestamp`) to this node's receive returning it. */
  readonly deliverySeconds: readonly number[];
  /** The batch's first receive to its read starting (the window, and any read still in flight). */
  readonly waitSeconds: number | undefined;
  /** The batch's `DescribeInstances` (`undefined` when nothing was read). */
  readonly readSeconds: number | undefined;
  /** Per instance published: the read's end to its status delivered to every listener. */
  readonly publishSeconds: readonly number[];
}

/** Options of {@link Doorbells}. */
export interface DoorbellsOptions {
  /**
   * The least time from a read's end to the next read's start (ms): a doorbell after a quiet
   * spell is read at once; what arrives during a read or within the window after it is gathered
   * into the next.
   */
  readonly windowMs: number;
  /** `ReceiveMessage`'s long-poll wait (s). */
  readonly waitSeconds: number;
  /** Reads again, after this long (ms), an instance whose tags do not show the rung report yet. */
  readonly rereadMs?: number;
  /** At most this many such reads again per doorbell (EC2's tags are eventually consistent). */
  readonly rereads?: number;
}

/** An exit older than this when its doorbell arrives is not timed (it was carried by a later report). */
const HOST_TIMING_LIMIT_MS = 5 * 60 * 1000;

/** The exits (`finishedAt`) a report carries: each container's current and last termination. */
function exitTimes(report: ExitReport): string[] {
  return report.containers.flatMap((c) =>
    [c.finishedAt, c.last?.finishedAt].filter((t): t is string => t !== undefined),
  );
}

/** Messages read per batch at most (a burst is read in several). */
const MAX_BATCH = 1000;
/** A message of no known shape received this often is deleted (a queue without a dead-letter queue). */
const UNREADABLE_RECEIVES = 10;

/** The event channel's reader (see the module's TSDoc). */
export class Doorbells {
  readonly #ctx: ProviderContext;
  readonly #publisher: StatusPublisher;
  readonly #queue: DoorbellQueue;
  readonly #options: Required<DoorbellsOptions>;
  readonly #listeners = new Set<(batch: DoorbellBatch) => void>();
  #healthy = false;
  #signal: AbortSignal | undefined;
  /** Received, not yet taken into a read. */
  readonly #pending: QueueMessage[] = [];
  /** The read loop, while one runs. */
  #reading: Promise<void> | undefined;
  /**
   * The exits already timed on their way through the host, per Pod UID (not per record: a Pod's
   * record is made anew when it is loaded again, e.g. at its deletion, and an exit its last
   * report still carries would be timed again from that report's doorbell).
   */
  readonly #hostTimed = new Map<string, Set<string>>();
  /** Batches read whose statuses are still being written. */
  readonly #handling = new Set<Promise<DoorbellBatch>>();
  /** When the latest read ended (`Date.now()`): the next starts at least the window after. */
  #lastReadEnd = Number.NEGATIVE_INFINITY;

  constructor(
    ctx: ProviderContext,
    publisher: StatusPublisher,
    queue: DoorbellQueue,
    options: DoorbellsOptions,
  ) {
    this.#ctx = ctx;
    this.#publisher = publisher;
    this.#queue = queue;
    this.#options = { rereadMs: 1000, rereads: 3, ...options };
  }

  /** True while the latest receive succeeded: the poll may then run at its safety-net pace. */
  get healthy(): boolean {
    return this.#healthy;
  }

  /** Subscribes to every batch handled; returns the unsubscribe. */
  onBatch(listener: (batch: DoorbellBatch) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Receives and handles messages until `signal` aborts. Receiving never waits for a read: what
   * arrives while one is gathered or in flight goes into the next, so a burst is read in few calls
   * and a lone doorbell is read at once. A failed receive marks the channel unhealthy (the
   * poll speeds back up) and is retried with back-off; never throws. Resolves once every batch
   * taken is handled (its statuses written or failed).
   */
  async run(signal: AbortSignal): Promise<void> {
    this.#signal = signal;
    let backoffMs = 1000;
    while (!signal.aborted) {
      let batch: readonly QueueMessage[];
      try {
        batch = await this.#queue.receive(this.#options.waitSeconds, signal);
        this.#healthy = true;
        backoffMs = 1000;
      } catch (error) {
        if (signal.aborted) break;
        if (this.#healthy) this.#ctx.log("warn", `event queue: ${String(error)}; polling faster`);
        this.#healthy = false;
        await sleep(backoffMs, signal);
        backoffMs = Math.min(backoffMs * 2, 30_000);
        continue;
      }
      if (batch.length === 0) continue;
      this.#pending.push(...batch);
      this.#reading ??= this.#readPending(signal).finally(() => {
        this.#reading = undefined;
      });
    }
    await this.#reading;
    await Promise.all(this.#handling);
  }

  /**
   * Reads what is pending, one batch at a time, until none is left. A read starts at least the
   * window after the previous one ended: a doorbell after a quiet spell is read at once, and what
   * arrives during a read or within the window after it is gathered into the next one. A batch's
   * read waits for the previous batch's read, not for its statuses to be written: those go on
   * meanwhile (one publication per Pod at a time, newest observation wins).
   */
  async #readPending(signal: AbortSignal): Promise<void> {
    const handling = this.#handling;
    while (this.#pending.length > 0 && !signal.aborted) {
      await sleep(this.#lastReadEnd + this.#options.windowMs - Date.now(), signal);
      if (signal.aborted) break;
      let readDone = () => {};
      const read = new Promise<void>((resolve) => {
        readDone = resolve;
      });
      const handled = this.#handle(this.#pending.splice(0, MAX_BATCH), readDone);
      handling.add(handled);
      void handled.finally(() => handling.delete(handled));
      await Promise.race([read, handled]);
      this.#lastReadEnd = Date.now();
    }
  }

  /**
   * Handles received messages: reads the recorded instances they name, publishes, deletes the
   * messages handled. Never throws.
   */
  handle(messages: readonly QueueMessage[]): Promise<DoorbellBatch> {
    return this.#handle(messages, () => {});
  }

  /** {@link Doorbells.handle}, calling `readDone` once its read has returned (or failed). */
  async #handle(messages: readonly QueueMessage[], readDone: () => void): Promise<DoorbellBatch> {
    const ctx = this.#ctx;
    const byInstance = new Map<string, PodRecord>();
    for (const record of ctx.records.values()) {
      if (record.instanceId !== undefined) byInstance.set(record.instanceId, record);
    }
    const ids = new Set<string>();
    const done: string[] = [];
    let unreadable = 0;
    let ignored = 0;
    let coalesced = 0;
    for (const m of messages) {
      const d = m.doorbell;
      if (d.kind === "unreadable") {
        unreadable++;
        ctx.log("warn", `event queue: message ${m.id} is unreadable (${d.problem})`);
        if (m.receiveCount >= UNREADABLE_RECEIVES) done.push(m.receipt);
        continue;
      }
      if (d.kind === "interruption" || d.kind === "rebalance") {
        ctx.log(
          "info",
          `event queue: ${d.kind} of ${d.instanceId}${d.kind === "interruption" ? ` (${d.action})` : ""}`,
        );
      }
      if (!byInstance.has(d.instanceId)) ignored++;
      else if (ids.has(d.instanceId)) coalesced++;
      else ids.add(d.instanceId);
    }
    // The exits this process already knew of each instance before the read: a doorbell carries
    // an exit first only if its instance's previous report did not (after a restart of this
    // process, a Pod's next report still carries its last exit from before it).
    const knownExits = new Map<string, Set<string>>();
    for (const id of ids) {
      const report = byInstance.get(id)?.state?.report;
      knownExits.set(id, new Set(report === undefined ? [] : exitTimes(report)));
    }
    const readAt = ctx.now();
    let found: readonly ObservedInstance[] = [];
    let error: ProviderError | undefined;
    try {
      found = ids.size === 0 ? [] : await ctx.gateway.describeInstances([...ids]);
    } catch (e) {
      error = toProviderError(e, "reading the instances of the event queue's messages");
      ctx.log("warn", error.message);
    }
    const readEnd = ctx.now();
    readDone();
    const published = new Map<string, number>();
    if (error === undefined) {
      await Promise.all(
        found.map(async (instance) => {
          const record = byInstance.get(instance.instanceId);
          if (record === undefined) return;
          const uid = record.facts.uid;
          if (!isGone(instance, uid) && disprove(ctx, instance, uid) !== undefined) return;
          if (!observe(ctx, record, instance, readAt)) return;
          refreshState(ctx, record);
          await this.#publisher.publish(record);
          published.set(instance.instanceId, ctx.now());
        }),
      );
      for (const m of messages) if (m.doorbell.kind !== "unreadable") done.push(m.receipt);
      this.#rereadLagging(messages, byInstance);
    }
    if (done.length > 0) {
      await this.#queue
        .delete(done)
        .catch((e: unknown) => ctx.log("warn", `event queue: deleting messages: ${String(e)}`));
    }
    const lagSeconds = messages.flatMap((m) => {
      const id = m.doorbell.kind === "unreadable" ? undefined : m.doorbell.instanceId;
      const at = id === undefined ? undefined : published.get(id);
      return at === undefined || m.sentAt === undefined ? [] : [Math.max(0, at - m.sentAt) / 1000];
    });
    const received = messages.flatMap((m) => (m.receivedAt === undefined ? [] : [m.receivedAt]));
    const hostSeconds =
      error === undefined ? this.#hostTimes(messages, byInstance, knownExits) : [];
    const timings: DoorbellTimings = {
      hostSeconds,
      deliverySeconds: messages.flatMap((m) =>
        m.receivedAt === undefined || m.sentAt === undefined
          ? []
          : [Math.max(0, m.receivedAt - m.sentAt) / 1000],
      ),
      waitSeconds:
        received.length === 0 ? undefined : Math.max(0, readAt - Math.min(...received)) / 1000,
      readSeconds: ids.size === 0 ? undefined : (readEnd - readAt) / 1000,
      publishSeconds: [...published.values()].map((at) => Math.max(0, at - readEnd) / 1000),
    };
    const batch: DoorbellBatch = {
      messages: messages.length,
      instances: ids.size,
      coalesced,
      ignored,
      unreadable,
      lagSeconds,
      timings,
      ...(error === undefined ? {} : { error }),
    };
    notifyAll(this.#listeners, (listener) => listener(batch));
    return batch;
  }

  /**
   * The host's part of each exit first carried by one of these doorbells (see
   * {@link DoorbellTimings}): not one the instance's report already carried before the read.
   */
  #hostTimes(
    messages: readonly QueueMessage[],
    byInstance: Map<string, PodRecord>,
    knownExits: Map<string, Set<string>>,
  ): number[] {
    const out: number[] = [];
    for (const m of messages) {
      const d = m.doorbell;
      if (d.kind !== "report" || m.sentAt === undefined) continue;
      const record = byInstance.get(d.instanceId);
      const report = record?.state?.report;
      if (record === undefined || report === undefined || report.seq !== d.seq) continue;
      const uid = record.facts.uid;
      const timed = this.#hostTimed.get(uid) ?? new Set<string>();
      this.#hostTimed.set(uid, timed);
      for (const exit of exitTimes(report)) {
        if (timed.has(exit) || knownExits.get(d.instanceId)?.has(exit)) continue;
        timed.add(exit);
        const ms = m.sentAt - Date.parse(exit);
        if (ms >= 0 && ms <= HOST_TIMING_LIMIT_MS) out.push(ms / 1000);
      }
    }
    // Forget the Pods this node no longer knows (their exits can ring no more).
    if (this.#hostTimed.size > 2 * this.#ctx.records.size + 100) {
      for (const uid of this.#hostTimed.keys()) {
        if (!this.#ctx.records.has(uid)) this.#hostTimed.delete(uid);
      }
    }
    return out;
  }

  /**
   * A doorbell rings after its report's tags were written, but EC2's reads are eventually
   * consistent: when the read does not show that report yet, read the instance again shortly, a
   * bounded number of times (the poll catches anything later).
   */
  #rereadLagging(messages: readonly QueueMessage[], byInstance: Map<string, PodRecord>): void {
    for (const m of messages) {
      const d = m.doorbell;
      if (d.kind !== "report") continue;
      const record = byInstance.get(d.instanceId);
      if (record === undefined || (record.state?.report?.seq ?? -1) >= d.seq) continue;
      void this.#reread(record, d.instanceId, d.seq, 1);
    }
  }

  async #reread(
    record: PodRecord,
    instanceId: string,
    seq: number,
    attempt: number,
  ): Promise<void> {
    const ctx = this.#ctx;
    await new Promise((r) => setTimeout(r, this.#options.rereadMs * attempt).unref?.());
    if (this.#signal?.aborted) return;
    if ((record.state?.report?.seq ?? -1) >= seq || record.instanceId !== instanceId) return;
    const readAt = ctx.now();
    try {
      const [instance] = await ctx.gateway.describeInstances([instanceId]);
      const uid = record.facts.uid;
      if (
        instance !== undefined &&
        (isGone(instance, uid) || disprove(ctx, instance, uid) === undefined) &&
        observe(ctx, record, instance, readAt)
      ) {
        refreshState(ctx, record);
        await this.#publisher.publish(record);
      }
    } catch (error) {
      ctx.log("warn", `event queue: reading ${instanceId} again: ${String(error)}`);
    }
    if (attempt < this.#options.rereads) await this.#reread(record, instanceId, seq, attempt + 1);
  }
}

/** Waits `ms`, or less when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted || ms <= 0) return resolve();
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
