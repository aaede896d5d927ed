/**
 * Rate limiters for {@link WorkQueue.addRateLimited}, with client-go's semantics: a per-item
 * exponential back-off, an overall token bucket, and the maximum of several limiters.
 *
 * @packageDocumentation
 */

/** Decides how long an item waits before it is retried. */
export interface RateLimiter {
  /** The delay in milliseconds before `key` may be processed again; counts one more failure. */
  when(key: string): number;
  /** Forgets `key`'s failures (call after it was processed successfully). */
  forget(key: string): void;
  /** How many times `key` has been rate-limited since it was last forgotten. */
  numRequeues(key: string): number;
}

/** A source of the current time in milliseconds (injected by tests). */
export type Now = () => number;

/** Options of {@link ExponentialFailureRateLimiter}. */
export interface ExponentialBackoffOptions {
  /** Delay after the first failure, in ms (default 5, as client-go). */
  readonly baseDelayMs?: number;
  /** Largest delay, in ms (default 1 000 000 = 1000 s, as client-go). */
  readonly maxDelayMs?: number;
}

/**
 * Per-item exponential back-off: `baseDelayMs * 2^failures`, capped at `maxDelayMs`.
 * 5 ms, 10 ms, 20 ms, … 1000 s by default.
 */
export class ExponentialFailureRateLimiter implements RateLimiter {
  readonly #failures = new Map<string, number>();
  readonly #base: number;
  readonly #max: number;

  constructor(options: ExponentialBackoffOptions = {}) {
    this.#base = Math.max(0, options.baseDelayMs ?? 5);
    this.#max = Math.max(this.#base, options.maxDelayMs ?? 1_000_000);
  }

  when(key: string): number {
    const failures = this.#failures.get(key) ?? 0;
    this.#failures.set(key, failures + 1);
    // 2^failures overflows to Infinity well after the cap is reached; min() keeps it finite.
    return Math.min(this.#base * 2 ** failures, this.#max);
  }

  forget(key: string): void {
    this.#failures.delete(key);
  }

  numRequeues(key: string): number {
    return this.#failures.get(key) ?? 0;
  }
}

/** Options of {@link BucketRateLimiter}. */
export interface BucketOptions {
  /** Tokens added per second (default 10, as client-go). */
  readonly qps?: number;
  /** Bucket size: how many items may go at once (default 100, as client-go). */
  readonly burst?: number;
  /** Clock (default `Date.now`). */
  readonly now?: Now;
}

/**
 * An overall token bucket shared by every item: each call reserves one token and returns how long
 * until that token exists. Bounds the retry rate of the whole queue whatever the number of keys.
 */
export class BucketRateLimiter implements RateLimiter {
  readonly #qps: number;
  readonly #burst: number;
  readonly #now: Now;
  #tokens: number;
  #last: number;

  constructor(options: BucketOptions = {}) {
    this.#qps = Math.max(Number.MIN_VALUE, options.qps ?? 10);
    this.#burst = Math.max(1, options.burst ?? 100);
    this.#now = options.now ?? Date.now;
    this.#tokens = this.#burst;
    this.#last = this.#now();
  }

  when(_key: string): number {
    const now = this.#now();
    const elapsed = Math.max(0, now - this.#last);
    this.#last = now;
    this.#tokens = Math.min(this.#burst, this.#tokens + (elapsed / 1000) * this.#qps);
    this.#tokens -= 1;
    return this.#tokens >= 0 ? 0 : Math.ceil((-this.#tokens / this.#qps) * 1000);
  }

  forget(_key: string): void {}

  numRequeues(_key: string): number {
    return 0;
  }
}

/** The largest delay of several limiters; `numRequeues` is the largest count among them. */
export class MaxOfRateLimiter implements RateLimiter {
  readonly #limiters: readonly RateLimiter[];

  constructor(...limiters: RateLimiter[]) {
    this.#limiters = limiters;
  }

  when(key: string): number {
    let delay = 0;
    for (const limiter of this.#limiters) delay = Math.max(delay, limiter.when(key));
    return delay;
  }

  forget(key: string): void {
    for (const limiter of this.#limiters) limiter.forget(key);
  }

  numRequeues(key: string): number {
    let count = 0;
    for (const limiter of this.#limiters) count = Math.max(count, limiter.numRequeues(key));
    return count;
  }
}

/** Options of {@link defaultControllerRateLimiter}. */
export interface DefaultRateLimiterOptions extends ExponentialBackoffOptions, BucketOptions {}

/**
 * client-go's default controller limiter: the maximum of a per-item exponential back-off
 * (5 ms → 1000 s) and an overall 10 qps / burst 100 token bucket.
 *
 * @example
 * ```ts
 * const queue = new WorkQueue({ rateLimiter: defaultControllerRateLimiter({ baseDelayMs: 100 }) });
 * ```
 */
export function defaultControllerRateLimiter(options: DefaultRateLimiterOptions = {}): RateLimiter {
  const bucket: BucketOptions = {
    ...(options.qps === undefined ? {} : { qps: options.qps }),
    ...(options.burst === undefined ? {} : { burst: options.burst }),
    ...(options.now === undefined ? {} : { now: options.now }),
  };
  return new MaxOfRateLimiter(
    new ExponentialFailureRateLimiter(options),
    new BucketRateLimiter(bucket),
  );
}
