/**
 * On-Demand prices by instance type, as a launch wants them: read at most once per type per
 * cache period (a failed read too: one failure per type per period, never a retry storm), one
 * read per type in flight, and never waited on for longer than a bound.
 */
import { classifyAwsError, type ProviderErrorCode } from "./errors.js";
import { settlesWithin } from "./settles.js";

/** How long a price (or a failure to read one) stands: prices change a few times a year. */
export const ON_DEMAND_PRICE_TTL_MS = 12 * 60 * 60 * 1000;

/** What {@link OnDemandPriceCache} reads with, and how it waits and logs. */
export interface OnDemandPriceCacheOptions {
  /** Reads the price of one type (USD per hour; `undefined`: none listed); throws when it cannot. */
  readonly read: (instanceType: string) => Promise<string | undefined>;
  /** The clock, ms since the epoch. */
  readonly now: () => number;
  /** Where a failed read is said: the first of each error code at `warn`, later ones at `info`. */
  readonly log: (level: "info" | "warn", message: string) => void;
  /** The longest a caller waits for a read, counted from the read's start (ms). */
  readonly waitMs: number;
  /** How long a read's outcome stands (ms); default {@link ON_DEMAND_PRICE_TTL_MS}. */
  readonly ttlMs?: number;
}

/** One type's price as known: the latest read's, or the one before while a refresh is out. */
interface Entry {
  /** The price known (kept through a failed read), or `undefined`. */
  price: string | undefined;
  /** When the latest read started (ms): the cache period counts from here. */
  readonly since: number;
  /** The read, while in flight. */
  reading: Promise<void> | undefined;
  /** A caller gave up waiting for this read (said once). */
  late: boolean;
}

/**
 * The On-Demand price of each instance type, cached (see the module). {@link price} never
 * throws and never waits longer than `waitMs` from the start of the read it waits for: a read
 * that answers later still fills the cache for the next launch.
 */
export class OnDemandPriceCache {
  readonly #options: OnDemandPriceCacheOptions;
  readonly #ttlMs: number;
  readonly #entries = new Map<string, Entry>();
  /** The error codes already said at `warn`. */
  readonly #warned = new Set<ProviderErrorCode>();

  /** @param options - the read, the clock, the log and the bounds. */
  constructor(options: OnDemandPriceCacheOptions) {
    this.#options = options;
    this.#ttlMs = options.ttlMs ?? ON_DEMAND_PRICE_TTL_MS;
  }

  /**
   * The price of `instanceType` (USD per hour, as the Price List writes it), or `undefined` when
   * it is not known within the wait: never read, listed nowhere, or its read failed within the
   * cache period (it is not read again before the period ends).
   */
  async price(instanceType: string): Promise<string | undefined> {
    const now = this.#options.now();
    let entry = this.#entries.get(instanceType);
    if (entry === undefined || now - entry.since >= this.#ttlMs) {
      entry = this.#read(instanceType, entry?.price, now);
    }
    const reading = entry.reading;
    if (reading === undefined) return entry.price;
    const left = entry.since + this.#options.waitMs - now;
    if (left > 0 && (await settlesWithin(reading, left))) return entry.price;
    if (!entry.late) {
      entry.late = true;
      this.#say(
        "Unavailable",
        `the On-Demand price of ${instanceType} could not be read (no answer within ${this.#options.waitMs} ms); launches go on without it`,
      );
    }
    return entry.price;
  }

  /** Starts the read of one type's price; its outcome is kept only while its entry stands. */
  #read(instanceType: string, previous: string | undefined, now: number): Entry {
    const entry: Entry = { price: previous, since: now, reading: undefined, late: false };
    this.#entries.set(instanceType, entry);
    const current = () => this.#entries.get(instanceType) === entry;
    entry.reading = (async () => {
      try {
        const price = await this.#options.read(instanceType);
        if (current()) entry.price = price;
      } catch (error) {
        if (current()) {
          const hours = Math.round((this.#ttlMs / 3_600_000) * 10) / 10;
          this.#say(
            classifyAwsError(error),
            `the On-Demand price of ${instanceType} could not be read (${String(error)}); not asked again for ${hours} h`,
          );
        }
      } finally {
        entry.reading = undefined;
      }
    })();
    return entry;
  }

  /** The first failure of each kind at `warn` with what to do, the others at `info`. */
  #say(code: ProviderErrorCode, message: string): void {
    if (this.#warned.has(code)) {
      this.#options.log("info", message);
      return;
    }
    this.#warned.add(code);
    this.#options.log(
      "warn",
      `${message} (the controller needs pricing:GetProducts and a route to the Price List endpoint; pricing.onDemand: false turns the read off; further ${code} failures are logged at info)`,
    );
  }
}
