/**
 * The Node's cumulative CPU counter for the kubelet API. A kubelet reads its machine's root cgroup,
 * a counter that only grows; a virtual node has no machine, and the sum of its containers'
 * counters drops whenever a Pod ends or a container restarts. metrics-server refuses a counter
 * that went down ("unexpected decrease in cumulative CPU usage value") and shows no Node usage
 * for that scrape. {@link NodeCpuCounter} keeps what the ended runs used, so the counter only
 * grows while the virtual node runs.
 */
import type { PodUsage } from "./kubelet-api.js";

/** How many runs that vanished from a read are remembered, in case they come back. */
const DEFAULT_REMEMBERED = 10_000;

/**
 * The Node's CPU counter (core-seconds) across reads of its containers' usage. Pure state, no I/O.
 *
 * - A run that leaves the usage (its Pod ended, or CloudWatch missed it this once) keeps counting
 *   its last value; if it comes back with at least that value, it is the same run and counts once.
 * - A counter that went down is a new run: the old run's last value is kept.
 *
 * So the value never decreases, whatever the reads. It starts again at the sum of the containers'
 * counters when the virtual node restarts (metrics-server skips the Node for one scrape then).
 *
 * @example
 * ```ts
 * const counter = new NodeCpuCounter();
 * const seconds = counter.observe(usage); // ≥ every earlier answer
 * ```
 */
export class NodeCpuCounter {
  readonly #remembered: number;
  // Nanoseconds as bigint: exact sums, so adding and taking back a run's time leaves no rounding.
  /** The latest counter of each run present in the latest read, by `uid\0container`. */
  #last = new Map<string, bigint>();
  /** Runs that left: the value kept for them, oldest first. */
  readonly #gone = new Map<string, bigint>();
  /** What ended or departed runs used. */
  #kept = 0n;

  /** @param remembered - how many departed runs are remembered (default 10,000); older ones count once. */
  constructor(remembered: number = DEFAULT_REMEMBERED) {
    this.#remembered = Number.isInteger(remembered) && remembered >= 0 ? remembered : 0;
  }

  /**
   * Takes a read of the containers' usage and answers the Node's counter, core-seconds: never less
   * than an earlier answer. Values that are not finite or are negative count as 0.
   */
  observe(usage: PodUsage): number {
    const next = new Map<string, bigint>();
    for (const [uid, containers] of usage) {
      for (const [name, sample] of containers) {
        const v = sample.cpuCoreSeconds;
        next.set(`${uid}\0${name}`, Number.isFinite(v) && v > 0 ? BigInt(Math.round(v * 1e9)) : 0n);
      }
    }
    for (const [key, value] of next) {
      const before = this.#last.get(key);
      if (before !== undefined) {
        // Went down: a new run; the old one's time stays counted.
        if (value < before) this.#kept += before;
        continue;
      }
      const kept = this.#gone.get(key);
      if (kept === undefined) continue;
      this.#gone.delete(key);
      // Back with at least what was kept: the same run, now counted by its own value.
      if (value >= kept) this.#kept -= kept;
    }
    for (const [key, value] of this.#last) {
      if (next.has(key)) continue;
      this.#kept += value;
      this.#gone.delete(key);
      this.#gone.set(key, value);
    }
    while (this.#gone.size > this.#remembered) {
      const oldest = this.#gone.keys().next().value;
      if (oldest === undefined) break;
      this.#gone.delete(oldest);
    }
    this.#last = next;
    let sum = this.#kept;
    for (const value of next.values()) sum += value;
    return Number(sum) / 1e9;
  }
}
