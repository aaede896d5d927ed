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

function mean(metrics: ReadonlyMap<string, number>, name: string, labels = "") {
  const count = metrics.get(`${name}_count${labels}`) ?? 0;
  const sum = metrics.get(`${name}_sum${labels}`) ?? 0;
  return { count, meanSeconds: count > 0 ? sum / count : null };
}

/** The event channel's stages, in the order a doorbell goes through them. */
const STAGES = ["host", "delivery", "wait", "read", "publish"] as const;

/** A Pod's start-up phases, in order (`@nebula/provider`'s `STARTUP_PHASES`). */
const STARTUP_PHASES = ["schedule", "admit", "launch", "boot", "pull", "start", "ready"] as const;

/**
 * The vnode's own latency histograms, as means: exit → status written, terminal → instance
 * terminated, terminal status written → `TerminateInstances` sent, the event channel's receipt →
 * status published and its stages (no samples on a node without the channel), and a Pod's
 * start-up (created → first Ready) and its phases.
 */
export function vnodeLatencies(metrics: ReadonlyMap<string, number>): VnodeLatencies {
  const stages: Record<string, { count: number; meanSeconds: number | null }> = {};
  for (const stage of STAGES)
    stages[stage] = mean(metrics, "nebula_vnode_event_stage_seconds", `{stage="${stage}"}`);
  const startupPhases: Record<string, { count: number; meanSeconds: number | null }> = {};
  for (const phase of STARTUP_PHASES)
    startupPhases[phase] = mean(
      metrics,
      "nebula_vnode_startup_phase_seconds",
      `{phase="${phase}"}`,
    );
  return {
    exitToStatus: mean(metrics, "nebula_vnode_exit_to_status_seconds"),
    terminalToTerminated: mean(metrics, "nebula_vnode_terminal_to_terminated_seconds"),
    terminalToTerminate: mean(metrics, "nebula_vnode_terminal_to_terminate_seconds"),
    eventToStatus: mean(metrics, "nebula_vnode_event_to_status_seconds"),
    stages,
    startup: mean(metrics, "nebula_vnode_startup_seconds"),
    startupPhases,
  };
}
