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

function mean(metrics: ReadonlyMap<string, number>, name: string) {
  const count = metrics.get(`${name}_count`) ?? 0;
  const sum = metrics.get(`${name}_sum`) ?? 0;
  return { count, meanSeconds: count > 0 ? sum / count : null };
}

/** The vnode's own exit-to-status and terminal-to-terminated histograms, as means. */
export function vnodeLatencies(metrics: ReadonlyMap<string, number>): VnodeLatencies {
  return {
    exitToStatus: mean(metrics, "nebula_vnode_exit_to_status_seconds"),
    terminalToTerminated: mean(metrics, "nebula_vnode_terminal_to_terminated_seconds"),
  };
}
