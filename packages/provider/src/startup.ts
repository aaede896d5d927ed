/**
 * Where a Pod's start-up went, phase by phase, from what the control plane, the provider and the
 * host each recorded: Pod created → scheduled → launch requested → `RunInstances` answered → host
 * supervisor started (boot, cloud-init, user-data) → images pulled → containers started → Ready.
 * Pure and total: a time that is missing or unreadable leaves out the phases it bounds.
 *
 * @packageDocumentation
 */
import type { ExitReport } from "@nebula/state-mapping";

/** The phases of a start-up, in order. */
export const STARTUP_PHASES = [
  "schedule",
  "admit",
  "launch",
  "boot",
  "pull",
  "start",
  "ready",
] as const;

/** One phase of a start-up (see {@link STARTUP_PHASES}). */
type StartupPhase = (typeof STARTUP_PHASES)[number];

/** What a start-up breakdown is computed from; every field may be missing. */
export interface StartupTimes {
  /** The Pod's `metadata.creationTimestamp`. */
  readonly createdAt?: Date | string | undefined;
  /** The `lastTransitionTime` of its `PodScheduled=True` condition. */
  readonly scheduledAt?: Date | string | undefined;
  /** When this provider recorded the launch request (before `RunInstances`), ms. */
  readonly requestedAt?: number | undefined;
  /** When `RunInstances` answered with the instance, ms. */
  readonly launchedAt?: number | undefined;
  /** The host's report: `supervisorStartedAt` and each container's pull and first start. */
  readonly report?: ExitReport | undefined;
  /** When the Pod's status first said Ready, ms. */
  readonly readyAt: number;
  /**
   * The Pod took a warm-pool host: `requestedAt` is when it took it, `launchedAt` when
   * `StartInstances` answered, and the host's boot is a start from stopped.
   */
  readonly warm?: boolean | undefined;
}

/** A start-up broken down: seconds per phase known, and from creation to Ready. */
export interface StartupBreakdown {
  /** Seconds of each phase whose two ends are known, in phase order; never negative. */
  readonly phases: ReadonlyArray<{ readonly phase: StartupPhase; readonly seconds: number }>;
  /** Seconds from the Pod's creation to Ready, when its creation time is known. */
  readonly totalSeconds?: number;
  /** The Pod started on a warm-pool host (`launch` is then `StartInstances`). */
  readonly warm: boolean;
}

const LABELS: Record<StartupPhase, string> = {
  schedule: "scheduled",
  admit: "admitted",
  launch: "RunInstances",
  boot: "host boot",
  pull: "image pull",
  start: "container start",
  ready: "ready",
};

/**
 * Breaks a Pod's start-up into phases. Each phase runs from the last known moment before it to
 * its own end: `schedule` (created → scheduled), `admit` (scheduled → launch requested: admission,
 * parameters, the EC2 budget), `launch` (requested → `RunInstances` answered), `boot` (answered →
 * the host supervisor started), `pull` (→ the last image pull finished), `start` (→ the last
 * container's first start), `ready` (→ the status said Ready, readiness probes and the report's
 * way to the controller included). A phase whose end is unknown is left out and the next one
 * starts from the last known moment, so the phases always add up to the total when the first and
 * the last moments are known.
 *
 * @example
 * ```ts
 * const b = startupBreakdown({ createdAt: pod.metadata?.creationTimestamp, readyAt: Date.now() });
 * startupLine(b); // "Ready 12.0 s after creation: ready 12.0 s"
 * ```
 */
export function startupBreakdown(times: StartupTimes): StartupBreakdown {
  const given = (typeof times === "object" && times !== null ? times : {}) as Partial<StartupTimes>;
  const report = (
    typeof given.report === "object" && given.report !== null ? given.report : {}
  ) as Partial<ExitReport>;
  const containers = Array.isArray(report.containers) ? report.containers : [];
  const latest = (values: Array<number | undefined>) => {
    const known = values.filter((v): v is number => v !== undefined);
    return known.length === 0 ? undefined : Math.max(...known);
  };
  const ends: Array<[StartupPhase, number | undefined]> = [
    ["schedule", ms(given.scheduledAt)],
    ["admit", ms(given.requestedAt)],
    ["launch", ms(given.launchedAt)],
    ["boot", ms(report.supervisorStartedAt)],
    ["pull", latest(containers.map((c) => ms(c?.pullFinishedAt)))],
    ["start", latest(containers.map((c) => ms(c?.firstStartedAt)))],
    ["ready", ms(given.readyAt)],
  ];
  const created = ms(given.createdAt);
  const phases: Array<{ phase: StartupPhase; seconds: number }> = [];
  let from = created;
  for (const [phase, end] of ends) {
    if (end === undefined) continue;
    if (from !== undefined) phases.push({ phase, seconds: seconds(end - from) });
    // Host clocks can run a little behind: a moment earlier than the last one moves nothing.
    from = from === undefined ? end : Math.max(from, end);
  }
  // `from` is now the latest moment known: the phases add up to it.
  return {
    phases,
    warm: given.warm === true,
    ...(created === undefined || from === undefined || ms(given.readyAt) === undefined
      ? {}
      : { totalSeconds: seconds(from - created) }),
  };
}

/**
 * One line for the Pod's Event: `Ready 74.2 s after creation: scheduled 0.0 s, admitted 0.4 s,
 * RunInstances 0.6 s, host boot 31.0 s, image pull 12.0 s, container start 1.0 s, ready 2.0 s`.
 */
export function startupLine(breakdown: StartupBreakdown): string {
  const phases: StartupBreakdown["phases"] = Array.isArray(breakdown?.phases)
    ? breakdown.phases
    : [];
  const warm = breakdown?.warm === true;
  const label = (phase: StartupPhase) =>
    warm && phase === "launch" ? "StartInstances (warm pool)" : (LABELS[phase] ?? phase);
  const parts = phases.map((p) => `${label(p.phase)} ${p.seconds.toFixed(1)} s`);
  const head =
    breakdown?.totalSeconds === undefined
      ? "Ready"
      : `Ready ${breakdown.totalSeconds.toFixed(1)} s after creation`;
  return parts.length === 0 ? head : `${head}: ${parts.join(", ")}`;
}

function ms(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value !== "string" && !(value instanceof Date)) return undefined;
  const t = new Date(value).getTime();
  return Number.isNaN(t) ? undefined : t;
}

function seconds(deltaMs: number): number {
  return Math.max(0, deltaMs) / 1000;
}
