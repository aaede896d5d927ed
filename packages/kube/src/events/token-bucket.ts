/**
 * A token bucket on an injected clock: `burst` tokens, refilled at `perSecond`.
 *
 * @packageDocumentation
 */

/**
 * A token bucket (the rate limiter behind client-go's event spam filter): it holds at most
 * `burst` tokens, starts full, and gains `perSecond` tokens per second. Pure arithmetic on the
 * times handed to it; reads no clock.
 *
 * @example
 * ```ts
 * const bucket = new TokenBucket({ burst: 2, perSecond: 1 }, 0);
 * bucket.take(0); bucket.take(0); // true, true
 * bucket.take(0);                 // false: empty
 * bucket.take(1000);              // true: one token refilled after a second
 * ```
 */
export class TokenBucket {
  readonly #burst: number;
  readonly #perMs: number;
  #tokens: number;
  #at: number;

  /** `burst` ≥ 1 tokens (the bucket starts full), refilled at `perSecond` ≥ 0, clock at `nowMs`. */
  constructor(rate: { readonly burst: number; readonly perSecond: number }, nowMs: number) {
    this.#burst = Math.max(1, rate.burst);
    this.#perMs = Math.max(0, rate.perSecond) / 1000;
    this.#tokens = this.#burst;
    this.#at = nowMs;
  }

  /** Tokens available at `nowMs` (fractional). */
  tokens(nowMs: number): number {
    this.#refill(nowMs);
    return this.#tokens;
  }

  /** Takes one token if one is available at `nowMs`. */
  take(nowMs: number): boolean {
    this.#refill(nowMs);
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Milliseconds from `nowMs` until a token is available (0 if one is; Infinity if it never refills). */
  waitMs(nowMs: number): number {
    this.#refill(nowMs);
    if (this.#tokens >= 1) return 0;
    if (this.#perMs === 0) return Number.POSITIVE_INFINITY;
    return Math.ceil((1 - this.#tokens) / this.#perMs);
  }

  /** Whether the bucket is full at `nowMs` (an idle bucket that can be forgotten). */
  full(nowMs: number): boolean {
    return this.tokens(nowMs) >= this.#burst;
  }

  #refill(nowMs: number): void {
    if (nowMs > this.#at) {
      this.#tokens = Math.min(this.#burst, this.#tokens + (nowMs - this.#at) * this.#perMs);
      this.#at = nowMs;
    }
  }
}
