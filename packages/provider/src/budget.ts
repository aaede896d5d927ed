/**
 * A virtual node's share of the account's EC2 request budget. EC2 throttles each API per account
 * and Region with a token bucket (`RequestLimitExceeded` when it is empty); several virtual nodes,
 * and the hosts' own report writes, draw from the same buckets. Each node therefore spends only its
 * configured share, per API, from a bucket of its own, and halves its rate when EC2 throttles it
 * anyway (others are using more than theirs), climbing back by a tenth of the share per call that
 * goes through: additive increase, multiplicative decrease, as TCP shares a link.
 *
 * Pure: time is passed in, nothing here waits or reads a clock. {@link reserve} reserves a call's
 * token and says how long to wait before sending it; reservations are served in order.
 */

/** One API's share: calls per second, and how many may go at once after a quiet spell. */
export interface BudgetLimit {
  /** The sustained rate this node may use (calls per second). */
  readonly perSecond: number;
  /** The bucket's size: calls that may go at once when it is full. */
  readonly burst: number;
}

/** One API's bucket. */
export interface BudgetBucket {
  /** Tokens in the bucket at `at`; negative while reservations wait. */
  readonly tokens: number;
  /** When `tokens` was computed (ms). */
  readonly at: number;
  /** The current rate (calls per second): the share, or less after throttling. */
  readonly rate: number;
}

/** The lowest rate throttling can bring a bucket to, as a share of its configured rate. */
export const MIN_RATE_SHARE = 1 / 16;

/** A full bucket at `now`, at the configured rate. */
export function fullBucket(limit: BudgetLimit, now: number): BudgetBucket {
  return { tokens: limit.burst, at: now, rate: limit.perSecond };
}

/** The bucket refilled up to `now` (never above its burst; time going backwards adds nothing). */
function refilled(bucket: BudgetBucket, limit: BudgetLimit, now: number): BudgetBucket {
  const elapsed = Math.max(0, now - bucket.at);
  const tokens = Math.min(limit.burst, bucket.tokens + (elapsed / 1000) * bucket.rate);
  return { tokens, at: Math.max(now, bucket.at), rate: bucket.rate };
}

/**
 * Reserves one call's token at `now`: the bucket after it, and the milliseconds to wait before
 * sending the call (0 when a token was there). A reservation is never taken back: the caller
 * waits, then sends.
 */
export function reserve(
  bucket: BudgetBucket,
  limit: BudgetLimit,
  now: number,
): { readonly bucket: BudgetBucket; readonly waitMs: number } {
  const current = refilled(bucket, limit, now);
  const tokens = current.tokens - 1;
  const waitMs = tokens >= 0 ? 0 : Math.ceil((-tokens / current.rate) * 1000);
  return { bucket: { ...current, tokens }, waitMs };
}

/**
 * After EC2 throttled a call: the rate halves (not below {@link MIN_RATE_SHARE} of the share) and
 * what is left in the bucket is dropped, so the calls already waiting spread out at the new rate.
 */
export function throttled(bucket: BudgetBucket, limit: BudgetLimit, now: number): BudgetBucket {
  const current = refilled(bucket, limit, now);
  return {
    tokens: Math.min(0, current.tokens),
    at: current.at,
    rate: Math.max(limit.perSecond * MIN_RATE_SHARE, current.rate / 2),
  };
}

/** After a call that went through: the rate climbs by a tenth of the share, up to the share. */
export function succeeded(bucket: BudgetBucket, limit: BudgetLimit, now: number): BudgetBucket {
  const current = refilled(bucket, limit, now);
  return { ...current, rate: Math.min(limit.perSecond, current.rate + limit.perSecond / 10) };
}

/** The class of an EC2 API for its default share: `read` (Describe*, Get*, List*, Search*) or `write`. */
export function apiClass(action: string): "read" | "write" {
  return /^(Describe|Get|List|Search)/.test(action) ? "read" : "write";
}
