/** Reading nebula-vnode's `/metrics`. Pure. */
import type { VnodeLatencies } from "./summary.js";

/** Reads a Prometheus text exposition: the value of every series (`name{labels}`). */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const space = line.lastIndexOf(" ");
    if (space <= 0) continue;
    const value = Number(line.slice(space + 1));
    if (!Number.isNaN(value)) out.set(line.slice(0, space).trim(), value);
  }
  return out;
}

const label = (series: string, name: string): string | undefined =>
  new RegExp(`[{,]${name}="([^"]*)"`).exec(series)?.[1];

/** EC2 calls by action, from `nebula_vnode_ec2_calls_total{action,outcome}` (outcomes summed). */
export function ec2CallsByAction(metrics: ReadonlyMap<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [series, value] of metrics) {
    if (!series.startsWith("nebula_vnode_ec2_calls_total{")) continue;
    const action = label(series, "action") ?? "unknown";
    out[action] = (out[action] ?? 0) + value;
  }
  return out;
}

/** The labels of a series key (`name{a="1",b="2"}`), as a map; none for a bare name. */
function labelsOf(series: string): Map<string, string> {
  const out = new Map<string, string>();
  const open = series.indexOf("{");
  if (open === -1) return out;
  for (const match of series.slice(open).matchAll(/([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"/g))
    out.set(match[1] as string, match[2] as string);
  return out;
}

/**
 * A histogram's mean over every series of `name` whose labels include `labels` (other labels,
 * such as a `start` label added later, are summed over).
 */
function mean(
  metrics: ReadonlyMap<string, number>,
  name: string,
  labels: Readonly<Record<string, string>> = {},
) {
  let count = 0;
  let sum = 0;
  for (const [series, value] of metrics) {
    const bare = series.split("{")[0];
    if (bare !== `${name}_count` && bare !== `${name}_sum`) continue;
    const has = labelsOf(series);
    if (!Object.entries(labels).every(([k, v]) => has.get(k) === v)) continue;
    if (bare === `${name}_count`) count += value;
    else sum += value;
  }
  return { count, meanSeconds: count > 0 ? sum / count : null };
}

/** Poll cycles nebula-vnode finished, whatever their outcome (`nebula_vnode_poll_duration_seconds`). */
export function pollsDone(metrics: ReadonlyMap<string, number>): number {
  return mean(metrics, "nebula_vnode_poll_duration_seconds").count;
}

/**
 * Two scrapes of the same app's counters and histograms, before and after it restarted (its
 * counters start again from 0): each series summed. Gauges are not meaningful in the result.
 */
export function addMetrics(
  a: ReadonlyMap<string, number>,
  b: ReadonlyMap<string, number>,
): Map<string, number> {
  const out = new Map(a);
  for (const [series, value] of b) out.set(series, (out.get(series) ?? 0) + value);
  return out;
}

/** The event channel's stages, in the order a doorbell goes through them. */
const STAGES = ["host", "delivery", "wait", "read", "publish"] as const;

/** A Pod's start-up phases, in order (`@nebula/provider`'s `STARTUP_PHASES`). */
const STARTUP_PHASES = ["schedule", "admit", "launch", "boot", "pull", "start", "ready"] as const;

/**
 * The vnode's own latency histograms, as means: exit → status written, terminal → instance
 * terminated, terminal status written → `TerminateInstances` sent, the event channel's receipt →
 * status published and its stages (no samples on a node without the channel), and a Pod's
 * start-up (created → first Ready) and its phases; the start-up also by its `start` label
 * (`warm`: a warm-pool host, `cold`: a launch) where the vnode labels it (none where it does not).
 */
export function vnodeLatencies(metrics: ReadonlyMap<string, number>): VnodeLatencies {
  const stages: Record<string, { count: number; meanSeconds: number | null }> = {};
  for (const stage of STAGES)
    stages[stage] = mean(metrics, "nebula_vnode_event_stage_seconds", { stage });
  const startupPhases: Record<string, { count: number; meanSeconds: number | null }> = {};
  for (const phase of STARTUP_PHASES)
    startupPhases[phase] = mean(metrics, "nebula_vnode_startup_phase_seconds", { phase });
  return {
    exitToStatus: mean(metrics, "nebula_vnode_exit_to_status_seconds"),
    terminalToTerminated: mean(metrics, "nebula_vnode_terminal_to_terminated_seconds"),
    terminalToTerminate: mean(metrics, "nebula_vnode_terminal_to_terminate_seconds"),
    eventToStatus: mean(metrics, "nebula_vnode_event_to_status_seconds"),
    stages,
    startup: mean(metrics, "nebula_vnode_startup_seconds"),
    startupPhases,
    startupByStart: {
      warm: mean(metrics, "nebula_vnode_startup_seconds", { start: "warm" }),
      cold: mean(metrics, "nebula_vnode_startup_seconds", { start: "cold" }),
    },
  };
}
