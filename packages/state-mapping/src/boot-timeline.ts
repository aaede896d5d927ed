/**
 * Where a Pod's start-up time went, from the boot timings of its exit report: launch → host
 * supervisor started (user-data, cloud-init, Docker) → image pulls → first container start.
 * Pure and total: missing or unreadable times leave their steps out.
 *
 * @packageDocumentation
 */
import type { ExitReport } from "./report.js";

/** One step of a Pod's start-up, with its length in milliseconds. */
interface BootStep {
  /**
   * `supervisor`: from the instance's `LaunchTime` to the host supervisor's start (boot,
   * cloud-init, user-data); `pull`: one container's image pull; `start`: from the end of the
   * container's pull (or the supervisor's start) to its first start.
   */
  readonly step: "supervisor" | "pull" | "start";
  /** The container, for `pull` and `start`. */
  readonly container?: string;
  /** When the step began. */
  readonly from: Date;
  /** When it ended. */
  readonly to: Date;
  /** `to − from`, never negative (host clocks can be a little off). */
  readonly ms: number;
}

/** The boot timeline of a report: the steps in the order they began. */
export interface BootTimeline {
  readonly steps: readonly BootStep[];
  /** From `LaunchTime` (or the supervisor's start) to the first container start, when both are known. */
  readonly toFirstContainerMs?: number;
}

/**
 * Builds the boot timeline from a report's `supervisorStartedAt` and each container's
 * `pullStartedAt`, `pullFinishedAt` and `firstStartedAt`.
 *
 * @param report - an exit report (the newest one has the most steps).
 * @param launchTime - the instance's `LaunchTime`, when known: adds the `supervisor` step.
 */
export function bootTimeline(report: ExitReport, launchTime?: Date): BootTimeline {
  const steps: BootStep[] = [];
  // Total: a report or launch time that is not what the types say yields the steps it can.
  const given = typeof report === "object" && report !== null ? report : undefined;
  const supervisor = time(given?.supervisorStartedAt);
  const launched = time(launchTime);
  const step = (
    kind: BootStep["step"],
    from: Date | undefined,
    to: Date | undefined,
    container?: string,
  ) => {
    if (from === undefined || to === undefined) return;
    steps.push({
      step: kind,
      ...(container === undefined ? {} : { container }),
      from,
      to,
      ms: Math.max(0, to.getTime() - from.getTime()),
    });
  };
  step("supervisor", launched, supervisor);
  let first: Date | undefined;
  const containers = Array.isArray(given?.containers) ? given.containers : [];
  for (const c of containers) {
    if (typeof c !== "object" || c === null) continue;
    const pulledFrom = time(c.pullStartedAt);
    const pulledTo = time(c.pullFinishedAt);
    const started = time(c.firstStartedAt);
    step("pull", pulledFrom, pulledTo, c.name);
    step("start", pulledTo ?? supervisor, started, c.name);
    if (started !== undefined && (first === undefined || started < first)) first = started;
  }
  steps.sort((a, b) => a.from.getTime() - b.from.getTime());
  const origin = launched ?? supervisor;
  return {
    steps,
    ...(origin === undefined || first === undefined
      ? {}
      : { toFirstContainerMs: Math.max(0, first.getTime() - origin.getTime()) }),
  };
}

function time(value: unknown): Date | undefined {
  if (typeof value !== "string" && !(value instanceof Date)) return undefined;
  const t = new Date(value);
  return Number.isNaN(t.getTime()) ? undefined : t;
}
