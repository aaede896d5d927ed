/**
 * An `events.k8s.io/v1` Event recorder: repeats aggregate into one Event with a growing series,
 * writes are rate limited per object and overall, and nothing is ever thrown at the caller.
 *
 * @packageDocumentation
 */
import {
  EventsV1Api,
  type EventsV1Event,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
} from "@kubernetes/client-node";
import { z } from "zod";
import { KubeError, statusOf } from "../errors.js";
import { TokenBucket } from "./token-bucket.js";

const qualifiedName =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

const Rate = z.strictObject({
  /** Writes allowed at once. */
  burst: z.number().int().min(1),
  /** Writes regained per second. */
  perSecond: z.number().min(0),
});

/** Options of {@link EventRecorder} (validated with zod; `logger` and `now` are checked separately). */
export const EventRecorderOptions = z.strictObject({
  /** The controller that emits, a qualified name such as `nebula.dev/vnode` (Event `reportingController`). */
  reportingController: z.string().max(253).regex(qualifiedName, "must be a qualified name"),
  /** This replica, e.g. the Pod name (Event `reportingInstance`, at most 128 characters). */
  reportingInstance: z.string().min(1).max(128),
  /**
   * A repeat (same regarding object, reason, action and type) within this many milliseconds of
   * the previous occurrence joins the same Event's series; a later one starts a new Event.
   * Default 10 minutes.
   */
  seriesWindowMs: z.number().int().min(0).default(600_000),
  /** Repeats are written as one series patch at most this often per Event (default 1 s). */
  flushIntervalMs: z.number().int().min(0).default(1_000),
  /** Writes per regarding object (default burst 25, one more every 5 minutes: client-go's spam filter). */
  perObject: Rate.default({ burst: 25, perSecond: 1 / 300 }),
  /** Writes overall (default burst 100, 10 per second). */
  global: Rate.default({ burst: 100, perSecond: 10 }),
  /** Series and per-object limiters remembered at most (oldest idle ones are forgotten first). */
  maxKeys: z.number().int().min(1).default(4096),
  /**
   * Tries of a new Event's create when the API server cannot take it (no answer, 429, 5xx): the
   * Event is worth more than the call (it may be all a user learns of a missing Secret), as
   * client-go's broadcaster retries too. 1 s, 2 s, 4 s... apart. Default 4; refusals (4xx) are not retried.
   */
  createAttempts: z.number().int().min(1).max(10).default(4),
});

/** Where the recorder reports its own failures (a pino logger fits). */
export interface EventLogger {
  /** Logs a warning with structured fields. */
  warn(fields: object, message: string): void;
}

/** Options accepted by {@link EventRecorder}. */
export type EventRecorderOptionsInput = z.input<typeof EventRecorderOptions> & {
  /** Where failures are logged (default: one line on stderr through `console.warn`). */
  readonly logger?: EventLogger;
  /** The clock in epoch milliseconds (default `Date.now`). */
  readonly now?: () => number;
};

const ObjectReference = z.object({
  apiVersion: z.string().min(1),
  kind: z.string().min(1),
  namespace: z.string().min(1).optional(),
  name: z.string().min(1).max(253),
  uid: z.string().optional(),
  fieldPath: z.string().optional(),
});

/** One occurrence to record. */
export const EventInput = z.object({
  /** The object the Event is about. */
  regarding: ObjectReference,
  /** A second object involved, if any. */
  related: ObjectReference.optional(),
  /** `Normal` or `Warning`. */
  type: z.enum(["Normal", "Warning"]),
  /** Why, in one CamelCase word (e.g. `InstanceLaunchFailed`); at most 128 characters. */
  reason: z.string().min(1).max(128),
  /** What was done or failed (e.g. `Launch`); at most 128 characters. */
  action: z.string().min(1).max(128),
  /** Human-readable detail; cut to 1024 characters. Repeats keep the first note. */
  note: z.string().optional(),
});

/** An occurrence accepted by {@link EventRecorder.record}. */
export type EventInputType = z.input<typeof EventInput>;

/** What {@link EventRecorder.record} did with one occurrence. */
export type EventRecordOutcome =
  /** A new Event object was created. */
  | "created"
  /** Counted into an existing Event's series (written by the next series patch). */
  | "aggregated"
  /** Dropped by the per-object or global rate limit (or after `close`). */
  | "dropped"
  /** Invalid, or the API request failed; logged. */
  | "failed";

/** Counters of an {@link EventRecorder} since it was made. */
export interface EventRecorderStats {
  /** Event objects created. */
  readonly created: number;
  /** Series patches written. */
  readonly patched: number;
  /** Occurrences counted into an existing series. */
  readonly aggregated: number;
  /** Occurrences dropped by a rate limit or after `close`. */
  readonly dropped: number;
  /** Invalid occurrences and failed requests. */
  readonly failed: number;
}

interface Series {
  readonly key: string;
  readonly objectKey: string;
  readonly namespace: string;
  name: string | undefined;
  creating: Promise<void> | undefined;
  count: number;
  persisted: number;
  lastAt: number;
  timer: NodeJS.Timeout | undefined;
  flushing: Promise<void> | undefined;
}

const NOTE_LIMIT = 1024;

/**
 * Formats epoch milliseconds as a `metav1.MicroTime` string (six fractional digits, UTC), the
 * only form the API server parses for `eventTime`, `series.lastObservedTime` and Lease times.
 *
 * @example
 * ```ts
 * microTime(Date.parse("2026-11-30T15:25:52.545Z")); // "2026-11-30T15:25:52.545000Z"
 * ```
 */
export function microTime(epochMs: number): string {
  return new Date(epochMs).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

function objectKeyOf(ref: z.output<typeof ObjectReference>): string {
  return [ref.apiVersion, ref.kind, ref.namespace ?? "", ref.name, ref.uid ?? ""].join("\u0000");
}

/**
 * Records `events.k8s.io/v1` Events the way a crash loop should look: one Event whose
 * `series.count` and `series.lastObservedTime` grow, not thousands of objects.
 *
 * - Aggregation: an occurrence with the same regarding object, reason, action and type as one
 *   recorded within `seriesWindowMs` joins that Event's series (`series.count` = occurrences so
 *   far, the first included); the series is written by a merge patch at most every
 *   `flushIntervalMs`, and by {@link EventRecorder.flush}.
 * - Rate limits: token buckets per regarding object and overall; a new Event without a token is
 *   dropped and counted, a series patch without one waits for the next token.
 * - Never throws: invalid occurrences and API failures are logged and come back as `failed`.
 *
 * Needs `create` and `patch` on `events.events.k8s.io` in the regarding objects' namespaces
 * (`default` for cluster-scoped objects).
 *
 * @example
 * ```ts
 * const recorder = new EventRecorder(kc, {
 *   reportingController: "nebula.dev/vnode",
 *   reportingInstance: "vnode-7d9f",
 * });
 * await recorder.record({
 *   regarding: { apiVersion: "v1", kind: "Pod", namespace: "default", name: "web-0", uid },
 *   type: "Warning", reason: "InstanceLaunchFailed", action: "Launch", note: "InsufficientInstanceCapacity",
 * }); // "created"; repeats → "aggregated" into the same Event's series
 * await recorder.close(); // writes pending series, stops timers
 * ```
 */
export class EventRecorder {
  readonly #api: EventsV1Api;
  readonly #options: z.output<typeof EventRecorderOptions>;
  readonly #logger: EventLogger;
  readonly #now: () => number;
  readonly #series = new Map<string, Series>();
  /** Final series patches of Events whose series is over (no longer in `#series`), in flight. */
  readonly #retiring = new Set<Promise<void>>();
  readonly #buckets = new Map<string, TokenBucket>();
  readonly #global: TokenBucket;
  readonly #stats = { created: 0, patched: 0, aggregated: 0, dropped: 0, failed: 0 };
  #sequence = 0;
  #closed = false;

  /** @throws KubeError `InvalidOptions` when the options fail validation. */
  constructor(kubeConfig: KubeConfig, options: EventRecorderOptionsInput) {
    const { logger, now, ...rest } = options;
    const parsed = EventRecorderOptions.safeParse(rest);
    if (!parsed.success) {
      throw new KubeError(
        "InvalidOptions",
        `invalid EventRecorder options: ${parsed.error.message}`,
        { cause: parsed.error },
      );
    }
    this.#options = parsed.data;
    this.#logger = logger ?? {
      warn: (fields, message) => console.warn(`${message} ${JSON.stringify(fields)}`),
    };
    this.#now = now ?? Date.now;
    this.#api = kubeConfig.makeApiClient(EventsV1Api);
    this.#global = new TokenBucket(parsed.data.global, this.#now());
  }

  /** Counters since the recorder was made. */
  stats(): EventRecorderStats {
    return { ...this.#stats };
  }

  /**
   * Records one occurrence. Resolves once a new Event is created (or failed); an aggregated
   * repeat resolves at once. Never rejects.
   */
  async record(occurrence: EventInputType): Promise<EventRecordOutcome> {
    try {
      return await this.#record(occurrence);
    } catch (error) {
      this.#stats.failed += 1;
      this.#logger.warn({ err: error }, "event recorder: unexpected failure");
      return "failed";
    }
  }

  /** Writes every pending series now (rate limits still apply) and waits for creations in flight. Never rejects. */
  async flush(): Promise<void> {
    const pending = [...this.#series.values()].map(async (series) => {
      if (series.timer !== undefined) clearTimeout(series.timer);
      series.timer = undefined;
      await this.#flushSeries(series);
    });
    await Promise.all([...pending, ...this.#retiring]);
  }

  /** Flushes, then stops: later occurrences are dropped, no timer is left behind. Never rejects. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.flush();
    for (const series of this.#series.values()) {
      if (series.timer !== undefined) clearTimeout(series.timer);
      series.timer = undefined;
    }
  }

  async #record(occurrence: EventInputType): Promise<EventRecordOutcome> {
    if (this.#closed) {
      this.#stats.dropped += 1;
      return "dropped";
    }
    const parsed = EventInput.safeParse(occurrence);
    if (!parsed.success) {
      this.#stats.failed += 1;
      this.#logger.warn({ issues: parsed.error.issues }, "event recorder: invalid event dropped");
      return "failed";
    }
    const event = parsed.data;
    const now = this.#now();
    const objectKey = objectKeyOf(event.regarding);
    const key = [objectKey, event.reason, event.action, event.type].join("\u0001");
    const existing = this.#series.get(key);
    if (
      existing !== undefined &&
      (existing.name !== undefined || existing.creating !== undefined) &&
      now - existing.lastAt <= this.#options.seriesWindowMs
    ) {
      existing.count += 1;
      existing.lastAt = Math.max(existing.lastAt, now);
      this.#stats.aggregated += 1;
      this.#schedule(existing);
      return "aggregated";
    }
    if (!this.#takeToken(objectKey, now)) {
      this.#stats.dropped += 1;
      return "dropped";
    }
    if (existing !== undefined) {
      // The previous series is over: write what it still owes, then forget it.
      if (existing.timer !== undefined) clearTimeout(existing.timer);
      existing.timer = undefined;
      // Not awaited here (the new Event goes out now), but flush() and close() wait for it.
      const retiring = this.#flushSeries(existing).catch(() => undefined);
      this.#retiring.add(retiring);
      void retiring.finally(() => this.#retiring.delete(retiring));
    }
    const series: Series = {
      key,
      objectKey,
      namespace: event.regarding.namespace ?? "default",
      name: undefined,
      creating: undefined,
      count: 1,
      persisted: 0,
      lastAt: now,
      timer: undefined,
      flushing: undefined,
    };
    this.#series.delete(key);
    this.#series.set(key, series);
    this.#evict();
    let outcome: EventRecordOutcome = "failed";
    series.creating = this.#create(series, event, now).then((created) => {
      outcome = created ? "created" : "failed";
    });
    await series.creating;
    series.creating = undefined;
    return outcome;
  }

  async #create(series: Series, event: z.output<typeof EventInput>, now: number): Promise<boolean> {
    const name = `${event.regarding.name.slice(0, 200)}.${this.#suffix(now)}`;
    const reference = (ref: z.output<typeof ObjectReference>) => ({
      apiVersion: ref.apiVersion,
      kind: ref.kind,
      name: ref.name,
      ...(ref.namespace !== undefined ? { namespace: ref.namespace } : {}),
      ...(ref.uid !== undefined ? { uid: ref.uid } : {}),
      ...(ref.fieldPath !== undefined ? { fieldPath: ref.fieldPath } : {}),
    });
    const body: EventsV1Event = {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name, namespace: series.namespace },
      eventTime: new V1MicroTime(now),
      reportingController: this.#options.reportingController,
      reportingInstance: this.#options.reportingInstance,
      regarding: reference(event.regarding),
      ...(event.related !== undefined ? { related: reference(event.related) } : {}),
      type: event.type,
      reason: event.reason,
      action: event.action,
      ...(event.note !== undefined ? { note: event.note.slice(0, NOTE_LIMIT) } : {}),
    };
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          await this.#api.createNamespacedEvent({ namespace: series.namespace, body });
          break;
        } catch (error) {
          const status = statusOf(error);
          const transient = status === undefined || status === 429 || status >= 500;
          if (!transient || attempt >= this.#options.createAttempts || this.#closed) throw error;
          await new Promise((resolve) => setTimeout(resolve, 1000 * 2 ** (attempt - 1)));
        }
      }
      series.name = name;
      series.persisted = 1;
      this.#stats.created += 1;
      return true;
    } catch (error) {
      this.#stats.failed += 1;
      this.#series.delete(series.key);
      this.#logger.warn(
        {
          err: error,
          status: statusOf(error),
          reason: event.reason,
          regarding: event.regarding.name,
        },
        "event recorder: creating an Event failed",
      );
      return false;
    }
  }

  #suffix(now: number): string {
    this.#sequence = (this.#sequence + 1) % 1_000_000;
    return (BigInt(Math.trunc(now)) * 1_000_000n + BigInt(this.#sequence)).toString(16);
  }

  #takeToken(objectKey: string, now: number): boolean {
    let bucket = this.#buckets.get(objectKey);
    if (bucket === undefined) {
      bucket = new TokenBucket(this.#options.perObject, now);
      this.#buckets.set(objectKey, bucket);
    }
    if (this.#global.tokens(now) < 1 || bucket.tokens(now) < 1) return false;
    this.#global.take(now);
    bucket.take(now);
    return true;
  }

  #waitMs(objectKey: string, now: number): number {
    const bucket = this.#buckets.get(objectKey);
    return Math.max(this.#global.waitMs(now), bucket?.waitMs(now) ?? 0);
  }

  #schedule(series: Series, delayMs = this.#options.flushIntervalMs): void {
    if (series.timer !== undefined || this.#closed) return;
    series.timer = setTimeout(() => {
      series.timer = undefined;
      void this.#flushSeries(series);
    }, delayMs);
    series.timer.unref();
  }

  async #flushSeries(series: Series): Promise<void> {
    while (series.flushing !== undefined) await series.flushing;
    if (series.creating !== undefined) await series.creating;
    if (series.name === undefined || series.count <= series.persisted) return;
    const now = this.#now();
    if (!this.#takeToken(series.objectKey, now)) {
      // Out of tokens: the repeats stay counted and go out with the next token.
      const wait = this.#waitMs(series.objectKey, now);
      if (Number.isFinite(wait))
        this.#schedule(series, Math.max(wait, this.#options.flushIntervalMs));
      return;
    }
    const count = series.count;
    series.flushing = this.#patch(series, count).finally(() => {
      series.flushing = undefined;
    });
    await series.flushing;
  }

  async #patch(series: Series, count: number): Promise<void> {
    const name = series.name;
    if (name === undefined) return;
    try {
      await this.#api.patchNamespacedEvent(
        {
          name,
          namespace: series.namespace,
          body: { series: { count, lastObservedTime: microTime(series.lastAt) } },
        },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
      series.persisted = Math.max(series.persisted, count);
      this.#stats.patched += 1;
    } catch (error) {
      this.#stats.failed += 1;
      // Not retried: the repeats stay counted and go out with the next occurrence's patch. A 404
      // means the Event expired (the API server keeps Events for --event-ttl): start a new one.
      if (statusOf(error) === 404 && this.#series.get(series.key) === series) {
        this.#series.delete(series.key);
      }
      this.#logger.warn(
        { err: error, status: statusOf(error), event: name, count },
        "event recorder: patching an Event series failed",
      );
    }
  }

  #evict(): void {
    const now = this.#now();
    for (const [key, series] of this.#series) {
      if (this.#series.size <= this.#options.maxKeys) break;
      const idle =
        series.creating === undefined &&
        series.timer === undefined &&
        series.flushing === undefined;
      if (idle && series.count <= series.persisted) this.#series.delete(key);
    }
    for (const [key, bucket] of this.#buckets) {
      if (this.#buckets.size <= this.#options.maxKeys) break;
      if (bucket.full(now)) this.#buckets.delete(key);
    }
  }
}
