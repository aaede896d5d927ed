import type { ProviderErrorCode } from "./errors.js";

/** How the last poll ended. */
export type PollOutcome = "ok" | ProviderErrorCode;

/** The poll loop's pacing state. */
export interface Pacing {
  /** Milliseconds until the next poll. */
  readonly intervalMs: number;
  /** Failed polls in a row that were not throttling (throttling is EC2 working, slowly). */
  readonly consecutiveFailures: number;
  /** Throttled polls in a row. */
  readonly consecutiveThrottles: number;
}

/** Bounds of the pacing: the configured interval and its ceiling, and the outage threshold. */
export interface PacingBounds {
  /** The configured poll interval (ms): the floor. */
  readonly baseMs: number;
  /** The ceiling of the interval under throttling or failures (ms). */
  readonly maxMs: number;
  /** Failed polls in a row (not throttling) that make an outage. */
  readonly outageAfterFailures: number;
}

/** The pacing before the first poll: the base interval, no failures. */
export function initialPacing(bounds: PacingBounds): Pacing {
  return { intervalMs: bounds.baseMs, consecutiveFailures: 0, consecutiveThrottles: 0 };
}

/**
 * The next pacing after a poll, as a pure function: a throttled or failed poll doubles the
 * interval (up to `maxMs`); a successful one halves it back towards `baseMs`. The SDK's adaptive
 * retry slows each call down; this slows the loop itself, so a throttled account recovers.
 */
export function nextPacing(pacing: Pacing, outcome: PollOutcome, bounds: PacingBounds): Pacing {
  if (outcome === "ok") {
    return {
      intervalMs: Math.max(bounds.baseMs, Math.floor(pacing.intervalMs / 2)),
      consecutiveFailures: 0,
      consecutiveThrottles: 0,
    };
  }
  const intervalMs = Math.min(bounds.maxMs, Math.max(bounds.baseMs, pacing.intervalMs * 2));
  if (outcome === "Throttled") {
    return {
      intervalMs,
      consecutiveFailures: 0,
      consecutiveThrottles: pacing.consecutiveThrottles + 1,
    };
  }
  return {
    intervalMs,
    consecutiveFailures: pacing.consecutiveFailures + 1,
    consecutiveThrottles: 0,
  };
}

/** True when the failures in a row reach the threshold: the region is reported unavailable. */
export function isOutage(pacing: Pacing, bounds: PacingBounds): boolean {
  return pacing.consecutiveFailures >= bounds.outageAfterFailures;
}
