import type { NodeHealth } from "@nebula/virtual-node";
import type { ProviderConfig } from "./config.js";
import type { ProviderError } from "./errors.js";
import { notifyAll } from "./listeners.js";
import { initialPacing, isOutage, nextPacing, type Pacing, type PacingBounds } from "./pacing.js";

/**
 * EC2's health as the poll sees it, and the poll's pace: every poll outcome goes in
 * ({@link HealthTracker.record}); the virtual Node's condition and the interval to the next poll
 * come out. A region outage is reported, never hidden; throttling slows the poll and keeps the
 * Node ready.
 */
export class HealthTracker {
  readonly #bounds: PacingBounds;
  readonly #region: string;
  readonly #listeners = new Set<(health: NodeHealth) => void>();
  #pacing: Pacing;
  #health: NodeHealth = {
    ready: true,
    reason: "EC2Reachable",
    message: "EC2 has not been polled yet",
  };

  /** @param config - the poll interval bounds, the outage threshold and the Region. */
  constructor(config: ProviderConfig) {
    this.#bounds = {
      baseMs: config.pollIntervalSeconds * 1000,
      maxMs: config.maxPollIntervalSeconds * 1000,
      outageAfterFailures: config.outageAfterFailures,
    };
    this.#region = config.region;
    this.#pacing = initialPacing(this.#bounds);
  }

  /** The latest health. */
  get current(): NodeHealth {
    return this.#health;
  }

  /** Milliseconds until the next poll. */
  get intervalMs(): number {
    return this.#pacing.intervalMs;
  }

  /** Subscribes to changes; returns the unsubscribe. */
  subscribe(listener: (health: NodeHealth) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Takes a poll's outcome (`undefined`: it reached EC2). Returns true when readiness flipped
   * (an outage began or ended): every Pod's status must then say so.
   */
  record(error: ProviderError | undefined): boolean {
    this.#pacing = nextPacing(this.#pacing, error === undefined ? "ok" : error.code, this.#bounds);
    const previous = this.#health;
    let next: NodeHealth;
    if (!error) next = { ready: true, reason: "EC2Reachable", message: "EC2 answers the poll" };
    else if (isOutage(this.#pacing, this.#bounds)) {
      next = {
        ready: false,
        reason: "EC2Unavailable",
        message: `EC2 in ${this.#region} has failed ${this.#pacing.consecutiveFailures} polls in a row (${error.code}): instance states are unknown`,
      };
    } else if (error.code === "Throttled") {
      next = {
        ready: previous.ready,
        reason: previous.ready ? "EC2Throttled" : previous.reason,
        message: previous.ready
          ? `EC2 is throttling the poll; polling every ${Math.round(this.#pacing.intervalMs / 1000)} s`
          : previous.message,
      };
    } else next = previous;
    if (
      next.ready === previous.ready &&
      next.reason === previous.reason &&
      next.message === previous.message
    ) {
      return false;
    }
    this.#health = next;
    notifyAll(this.#listeners, (listener) => listener(next));
    return previous.ready !== next.ready;
  }
}
