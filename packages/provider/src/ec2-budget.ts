import {
  apiClass,
  type BudgetBucket,
  type BudgetLimit,
  fullBucket,
  reserve,
  succeeded,
  throttled,
} from "./budget.js";
import { ProviderError } from "./errors.js";

/** The configured share of the account's EC2 budget (`config.ec2Budget`). */
export interface Ec2BudgetSettings {
  /** Each Describe/Get/List/Search API's share. */
  readonly reads: BudgetLimit;
  /** Each other API's share (RunInstances, TerminateInstances, CreateTags, ...). */
  readonly writes: BudgetLimit;
  /** A call that would wait longer than this for its token fails at once as `Throttled`. */
  readonly maxWaitSeconds: number;
}

/** One API's budget as it stands, for metrics. */
export interface Ec2BudgetState {
  /** The EC2 API, e.g. `DescribeInstances`. */
  readonly action: string;
  /** Its current rate (calls per second): the share, or less after throttling. */
  readonly rate: number;
  /** Calls that have reserved a token and wait to be sent. */
  readonly waiting: number;
}

/**
 * The virtual node's EC2 budget, per API (pure arithmetic in `budget.ts`): {@link take} waits for a
 * call's token, {@link result} tells the budget how EC2 answered. A call that would wait longer than
 * `maxWaitSeconds` fails at once with a `Throttled` {@link ProviderError}, which every caller already
 * handles by backing off, so a long queue never builds up behind a throttled account.
 */
export class Ec2Budget {
  readonly #settings: Ec2BudgetSettings;
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #buckets = new Map<string, BudgetBucket>();
  readonly #waiting = new Map<string, number>();

  /**
   * @param settings - the shares and the longest wait.
   * @param clock - the clock and the timer (tests pass their own).
   */
  constructor(
    settings: Ec2BudgetSettings,
    clock: { now?: () => number; sleep?: (ms: number) => Promise<void> } = {},
  ) {
    this.#settings = settings;
    this.#now = clock.now ?? Date.now;
    this.#sleep = clock.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
  }

  /** Waits until `action` may be called; throws `Throttled` when that would take too long. */
  async take(action: string): Promise<void> {
    const limit = this.#limit(action);
    const now = this.#now();
    const { bucket, waitMs } = reserve(this.#bucket(action, now), limit, now);
    if (waitMs > this.#settings.maxWaitSeconds * 1000) {
      throw new ProviderError(
        "Throttled",
        `${action}: this node's EC2 budget (${this.#bucket(action, now).rate.toFixed(2)} calls/s) would make the call wait ${Math.round(waitMs / 1000)} s; retried later (raise ec2Budget if the account has room)`,
      );
    }
    this.#buckets.set(action, bucket);
    if (waitMs === 0) return;
    this.#waiting.set(action, (this.#waiting.get(action) ?? 0) + 1);
    try {
      await this.#sleep(waitMs);
    } finally {
      this.#waiting.set(action, (this.#waiting.get(action) ?? 1) - 1);
    }
  }

  /** How EC2 answered a call: throttled (the rate halves) or not (it climbs back). */
  result(action: string, wasThrottled: boolean): void {
    const limit = this.#limit(action);
    const now = this.#now();
    const bucket = this.#bucket(action, now);
    this.#buckets.set(
      action,
      wasThrottled ? throttled(bucket, limit, now) : succeeded(bucket, limit, now),
    );
  }

  /** Every API called so far, with its current rate and waiting calls. */
  state(): Ec2BudgetState[] {
    return [...this.#buckets].map(([action, bucket]) => ({
      action,
      rate: bucket.rate,
      waiting: this.#waiting.get(action) ?? 0,
    }));
  }

  #limit(action: string): BudgetLimit {
    return apiClass(action) === "read" ? this.#settings.reads : this.#settings.writes;
  }

  #bucket(action: string, now: number): BudgetBucket {
    return this.#buckets.get(action) ?? fullBucket(this.#limit(action), now);
  }
}
