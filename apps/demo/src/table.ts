/**
 * The live view: a compact table redrawn in place on a terminal, or one progress line per change
 * under `--ci`. Pure: strings in, strings out.
 */
import type { Snapshot } from "./model.js";
import type { Verdict } from "./scenarios.js";

/** What the table shows besides the snapshot. */
export interface TableView {
  readonly snapshot: Snapshot;
  readonly verdicts: readonly Verdict[];
  /** What the demo is doing now, e.g. "running the scenarios". */
  readonly stage: string;
}

const PHASE_ORDER = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];
const STATE_ORDER = ["pending", "running", "stopping", "stopped", "shutting-down", "terminated"];

/** `m:ss` of a duration. */
export function clock(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  return `${Math.floor(total / 60)}:${String(total % 60).padStart(2, "0")}`;
}

const rank = (order: readonly string[], key: string): number => {
  const i = order.indexOf(key);
  return i === -1 ? order.length : i;
};

/** Pods counted by phase and reason, in phase order then by count. */
export function podCounts(
  snapshot: Snapshot,
): { phase: string; reason: string; count: number; deleting: number }[] {
  const counts = new Map<
    string,
    { phase: string; reason: string; count: number; deleting: number }
  >();
  for (const pod of snapshot.pods) {
    const reason = pod.reason ?? "";
    const key = `${pod.phase}\u0000${reason}`;
    const row = counts.get(key) ?? { phase: pod.phase, reason, count: 0, deleting: 0 };
    row.count += 1;
    if (pod.deleting) row.deleting += 1;
    counts.set(key, row);
  }
  return [...counts.values()].sort(
    (a, b) =>
      rank(PHASE_ORDER, a.phase) - rank(PHASE_ORDER, b.phase) ||
      b.count - a.count ||
      a.reason.localeCompare(b.reason),
  );
}

/** Instances counted by EC2 state, in lifecycle order. */
export function instanceCounts(snapshot: Snapshot): { state: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const instance of snapshot.instances)
    counts.set(instance.state, (counts.get(instance.state) ?? 0) + 1);
  return [...counts.entries()]
    .map(([state, count]) => ({ state, count }))
    .sort((a, b) => rank(STATE_ORDER, a.state) - rank(STATE_ORDER, b.state));
}

/** The total of EC2 calls and the busiest actions, e.g. `41 (DescribeInstances 30, RunInstances 8, …)`. */
export function ec2CallsText(calls: Readonly<Record<string, number>>, top = 4): string {
  const entries = Object.entries(calls).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  const total = entries.reduce((sum, [, n]) => sum + n, 0);
  if (total === 0) return "0";
  const shown = entries.slice(0, top).map(([action, n]) => `${action} ${n}`);
  return `${total} (${shown.join(", ")}${entries.length > top ? ", …" : ""})`;
}

const mark = (v: Verdict): string => (v.ok ? "ok" : "..");

const cut = (line: string, width: number): string =>
  [...line].length <= width ? line : `${[...line].slice(0, Math.max(1, width - 1)).join("")}…`;

const pad = (text: string, width: number): string => text.padEnd(width);

/** The table, one string per line, each cut to `width` characters. */
export function renderTable(view: TableView, width = 120): string[] {
  const { snapshot } = view;
  const lines: string[] = [];
  lines.push(`Nebula demo  ${clock(snapshot.elapsedMs)}  ${view.stage}`);
  lines.push(`EC2 calls by nebula-vnode: ${ec2CallsText(snapshot.ec2Calls)}`);
  lines.push("");
  const pods = podCounts(snapshot);
  const instances = instanceCounts(snapshot);
  lines.push(
    `${pad(`PODS (${snapshot.pods.length})`, 44)}INSTANCES (${snapshot.instances.length})`,
  );
  const rows = Math.max(pods.length, instances.length, 1);
  for (let i = 0; i < rows; i++) {
    const p = pods[i];
    const podText =
      p === undefined
        ? i === 0
          ? "  none"
          : ""
        : `  ${pad(p.phase, 10)}${pad(p.reason || "-", 20)}${String(p.count).padStart(4)}${p.deleting > 0 ? ` (${p.deleting} deleting)` : ""}`;
    const s = instances[i];
    const instanceText =
      s === undefined
        ? i === 0
          ? "  none"
          : ""
        : `  ${pad(s.state, 14)}${String(s.count).padStart(4)}`;
    lines.push(`${pad(podText, 44)}${instanceText}`.trimEnd());
  }
  lines.push("");
  lines.push(`${pad("WORKLOADS", 44)}${pad("AVAILABLE", 11)}${pad("READY", 7)}REASON`);
  if (snapshot.workloads.length === 0) lines.push("  none");
  for (const w of snapshot.workloads) {
    const name = `${w.kind === "Workload" ? "Workload" : "WorkloadDeployment"} ${w.name}`;
    lines.push(
      `  ${pad(name, 42)}${pad(w.available, 11)}${pad(`${w.readyReplicas}/${w.desiredReplicas}`, 7)}${w.reason}`,
    );
  }
  lines.push("");
  lines.push("SCENARIOS");
  for (const v of view.verdicts) lines.push(`  ${mark(v)} ${pad(v.id, 19)}${v.observed}`);
  return lines.map((line) => cut(line, width));
}

/**
 * What to write to a terminal to replace the previous drawing (`previousLines` lines) with
 * `lines`: cursor up to the drawing's first line, clear to the end of the screen, write.
 */
export function redraw(previousLines: number, lines: readonly string[]): string {
  const up = previousLines > 0 ? `\u001b[${previousLines}F` : "";
  return `${up}\u001b[0J${lines.join("\n")}\n`;
}

/**
 * The `--ci` progress line: everything but the clock and the EC2 call count. A new line is
 * printed when this key changes.
 */
export function progressKey(view: TableView): string {
  const { snapshot } = view;
  const pods = podCounts(snapshot)
    .map((p) => `${p.phase}${p.reason ? `/${p.reason}` : ""}=${p.count}`)
    .join(" ");
  const instances = instanceCounts(snapshot)
    .map((s) => `${s.state}=${s.count}`)
    .join(" ");
  const workloads = snapshot.workloads
    .map((w) => `${w.name}=${w.available}${w.reason ? `/${w.reason}` : ""}`)
    .join(" ");
  const ok = view.verdicts.filter((v) => v.ok).length;
  return `${view.stage} | pods ${pods || "none"} | instances ${instances || "none"} | workloads ${workloads || "none"} | scenarios ok ${ok}/${view.verdicts.length}`;
}

/** The `--ci` progress line for a view: the clock, the key, the EC2 call count. */
export function progressLine(view: TableView): string {
  const calls = Object.values(view.snapshot.ec2Calls).reduce((sum, n) => sum + n, 0);
  return `[${clock(view.snapshot.elapsedMs)}] ${progressKey(view)} | ec2 calls ${calls}`;
}
