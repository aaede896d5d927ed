/**
 * Turns executor events into Kubernetes-Event-shaped summaries (type, CamelCase reason, message),
 * for an event recorder, a log line or a metric label. Pure.
 *
 * @packageDocumentation
 */
import type { TeardownEvent } from "./executor.js";

/** A Kubernetes-Event-shaped summary of a {@link TeardownEvent}. */
export interface TeardownEventSummary {
  /** `Normal` or `Warning`, as Kubernetes Events use them. */
  readonly type: "Normal" | "Warning";
  /** CamelCase reason: `TeardownStopping`, `TeardownComplete`, `TeardownEffectFailed`, ... */
  readonly reason: string;
  /** One sentence for people, free of volatile values (no times), so repeats aggregate. */
  readonly message: string;
}

const because: Record<string, string> = {
  Started: "teardown requested",
  Done: "the previous phase is done",
  DeadlineExpired: "the previous phase's deadline passed",
  HoldExpired: "the hold on this phase timed out",
};

/**
 * Summarizes an event for Kubernetes Events and logs. Returns `undefined` for routine events not
 * worth an Event (`issuing`, and `conflict`, which the next tick resolves).
 *
 * @example
 * ```ts
 * new TeardownExecutor({ ..., onEvent: (e) => {
 *   const s = summarizeEvent(e);
 *   if (s) recorder.emit(pod, s.type, s.reason, s.message);
 * } });
 * ```
 */
export function summarizeEvent(event: TeardownEvent): TeardownEventSummary | undefined {
  switch (event.type) {
    case "transition": {
      const { from, to, reason, skipped } = event.transition;
      const warning = reason === "DeadlineExpired" || reason === "HoldExpired";
      const skippedText = skipped.length > 0 ? ` (skipped: ${skipped.join(", ")})` : "";
      return {
        type: warning ? "Warning" : "Normal",
        reason: `Teardown${pascal(to)}`,
        message: `${from ?? "start"} → ${to}: ${because[reason] ?? reason}${skippedText}`,
      };
    }
    case "held":
      return { type: "Normal", reason: "TeardownHeld", message: `waiting for ${event.waitingFor}` };
    case "error":
      return {
        type: "Warning",
        reason: `Teardown${event.error.code}`,
        message: event.error.message,
      };
    case "invalid":
      return { type: "Warning", reason: "TeardownRecordInvalid", message: event.reason };
    default:
      return undefined;
  }
}

function pascal(name: string): string {
  return name
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((part) => part[0]?.toUpperCase() + part.slice(1))
    .join("");
}
