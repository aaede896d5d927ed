/**
 * A work queue of keys with client-go's semantics.
 *
 * - A key waiting in the queue is there once, however often it is added (de-duplicated).
 * - A key is handed to at most one worker at a time. Added again while a worker holds it, it is
 *   queued again only when that worker calls {@link WorkQueue.done}.
 * - `addAfter` delays a key (the earliest pending delay wins); `addRateLimited` delays it by the
 *   rate limiter (per-key exponential back-off and an overall token bucket by default).
 * - After `shutdown` no key is accepted; keys already queued are still handed out until the queue is
 *   empty, then {@link WorkQueue.get} returns `undefined`.
 *
 * @packageDocumentation
 */
import { defaultControllerRateLimiter, type RateLimiter } from "./rate-limiter.js";

/** Timer functions (injected by tests; default: the global ones). */
export interface Timers {
  /** Runs `callback` after `ms`; returns a handle for `clearTimeout`. */
  setTimeout(callback: () => void, ms: number): unknown;
  /** Cancels a timer made by `setTimeout`. */
  clearTimeout(handle: unknown): void;
  /** The current time in ms, on the same clock as `setTimeout` (default `Date.now`). */
  now?(): number;
}

/** Receives the queue's figures (e.g. {@link ControllerMetrics.queueObserver}). */
export interface QueueObserver {
  /** Keys waiting to be handed out (not counting delayed ones). */
  depth(depth: number): void;
  /** A key was accepted by `add` (including ones already waiting). */
  added(): void;
  /** A key was re-added through `addRateLimited`. */
  retried(): void;
}

/** Options of {@link WorkQueue}. */
export interface WorkQueueOptions {
  /** Name used in metrics and logs (default `queue`). */
  readonly name?: string;
  /** Limiter behind `addRateLimited` (default {@link defaultControllerRateLimiter}). */
  readonly rateLimiter?: RateLimiter;
  /** Timer functions for `addAfter` (default: global timers). */
  readonly timers?: Timers;
  /** Receives depth, adds and retries. */
  readonly observer?: QueueObserver;
}

const globalTimers: Timers = {
  setTimeout: (callback, ms) => {
    const handle = setTimeout(callback, ms);
    handle.unref?.();
    return handle;
  },
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/**
 * A de-duplicating, per-key serial, rate-limited work queue.
 *
 * @example
 * ```ts
 * const queue = new WorkQueue({ name: "pods" });
 * queue.add("default/web-0");
 * for (let key = await queue.get(); key !== undefined; key = await queue.get()) {
 *   try { await reconcile(key); queue.forget(key); } catch { queue.addRateLimited(key); }
 *   finally { queue.done(key); }
 * }
 * ```
 */
export class WorkQueue {
  /** Name used in metrics and logs. */
  readonly name: string;
  readonly #queue: string[] = [];
  readonly #dirty = new Set<string>();
  readonly #processing = new Set<string>();
  readonly #waiting = new Map<string, { at: number; handle: unknown }>();
  readonly #getters: Array<(key: string | undefined) => void> = [];
  readonly #drained: Array<() => void> = [];
  readonly #limiter: RateLimiter;
  readonly #timers: Timers;
  readonly #observer: QueueObserver | undefined;
  #shuttingDown = false;

  constructor(options: WorkQueueOptions = {}) {
    this.name = options.name ?? "queue";
    this.#limiter = options.rateLimiter ?? defaultControllerRateLimiter();
    this.#timers = options.timers ?? globalTimers;
    this.#observer = options.observer;
  }

  /** Queues `key` unless it is already waiting; ignored after shutdown. */
  add(key: string): void {
    if (this.#shuttingDown) return;
    this.#observer?.added();
    if (this.#dirty.has(key)) return;
    this.#dirty.add(key);
    if (this.#processing.has(key)) return;
    this.#push(key);
  }

  /** Queues `key` after `delayMs` (at once when ≤ 0). A key already delayed keeps the earlier time. */
  addAfter(key: string, delayMs: number): void {
    if (this.#shuttingDown) return;
    if (!(delayMs > 0)) {
      this.add(key);
      return;
    }
    const at = (this.#timers.now?.() ?? Date.now()) + delayMs;
    const pending = this.#waiting.get(key);
    if (pending !== undefined) {
      if (pending.at <= at) return;
      this.#timers.clearTimeout(pending.handle);
    }
    const handle = this.#timers.setTimeout(() => {
      this.#waiting.delete(key);
      this.add(key);
    }, delayMs);
    this.#waiting.set(key, { at, handle });
  }

  /** Queues `key` after the rate limiter's delay (counts one more failure for it). */
  addRateLimited(key: string): void {
    if (this.#shuttingDown) return;
    this.#observer?.retried();
    this.addAfter(key, this.#limiter.when(key));
  }

  /** Clears `key`'s failure count: its next `addRateLimited` starts from the base delay. */
  forget(key: string): void {
    this.#limiter.forget(key);
  }

  /** How often `key` was rate-limited since it was last forgotten. */
  numRequeues(key: string): number {
    return this.#limiter.numRequeues(key);
  }

  /**
   * The next key to process (the caller must call {@link done} with it), or `undefined` once the
   * queue is shut down and empty. Waits while the queue is empty.
   */
  get(): Promise<string | undefined> {
    const key = this.#queue.shift();
    if (key !== undefined) return Promise.resolve(this.#take(key));
    if (this.#shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#getters.push(resolve));
  }

  /** Marks `key` processed; if it was added meanwhile, it is queued again. */
  done(key: string): void {
    if (!this.#processing.delete(key)) return;
    if (this.#dirty.has(key)) this.#push(key);
    else if (this.#processing.size === 0) for (const wake of this.#drained.splice(0)) wake();
  }

  /** Keys waiting to be handed out (not counting delayed or in-flight ones). */
  len(): number {
    return this.#queue.length;
  }

  /** Keys handed out and not yet `done`. */
  inFlight(): number {
    return this.#processing.size;
  }

  /** Whether `shutdown` was called. */
  shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  /**
   * Stops accepting keys and cancels delayed ones. Keys already queued are still handed out;
   * idle `get` calls return `undefined`.
   */
  shutdown(): void {
    if (this.#shuttingDown) return;
    this.#shuttingDown = true;
    for (const { handle } of this.#waiting.values()) this.#timers.clearTimeout(handle);
    this.#waiting.clear();
    for (const wake of this.#getters.splice(0)) wake(undefined);
  }

  /** {@link shutdown}, then waits until no key is in flight. */
  async shutDownWithDrain(): Promise<void> {
    this.shutdown();
    if (this.#processing.size === 0) return;
    await new Promise<void>((resolve) => this.#drained.push(resolve));
  }

  #push(key: string): void {
    const getter = this.#getters.shift();
    if (getter !== undefined) getter(this.#take(key));
    else this.#queue.push(key);
    this.#observer?.depth(this.#queue.length);
  }

  #take(key: string): string {
    this.#processing.add(key);
    this.#dirty.delete(key);
    this.#observer?.depth(this.#queue.length);
    return key;
  }
}
