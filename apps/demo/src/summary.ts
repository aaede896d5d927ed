/**
 * The end of a run: per scenario what it should show against what it showed, the measured
 * latencies, and the instances left running. Pure.
 */
import type { Latencies, Verdict } from "./scenarios.js";
import { type WarmFigures, warmSummaryLines } from "./warm.js";
import { type Violation, violationLine } from "./watch.js";

/** Order statistics of a list of samples (milliseconds). */
export interface Stats {
  readonly n: number;
  readonly medianMs: number | null;
  readonly maxMs: number | null;
}

/** The median and maximum of `samples`; `null`s for none. Total. */
export function stats(samples: readonly number[]): Stats {
  const finite = samples.filter((s) => Number.isFinite(s)).sort((a, b) => a - b);
  if (finite.length === 0) return { n: 0, medianMs: null, maxMs: null };
  const mid = Math.floor(finite.length / 2);
  const median =
    finite.length % 2 === 1
      ? (finite[mid] as number)
      : ((finite[mid - 1] as number) + (finite[mid] as number)) / 2;
  return { n: finite.length, medianMs: median, maxMs: finite[finite.length - 1] as number };
}

/** A histogram of nebula-vnode as its mean. */
interface Mean {
  readonly count: number;
  readonly meanSeconds: number | null;
}

/** The latency figures nebula-vnode itself measured (from its histograms), when it was reachable. */
export interface VnodeLatencies {
  readonly exitToStatus: Mean;
  readonly terminalToTerminated: Mean;
  /** A Pod's terminal status written → `TerminateInstances` sent for its instance. */
  readonly terminalToTerminate: Mean;
  /** The event channel: SQS's receipt of a message → its Pod's status published. */
  readonly eventToStatus: Mean;
  /** The event channel's stages: `delivery`, `wait`, `read`, `publish`. */
  readonly stages: Readonly<Record<string, Mean>>;
  /** A Pod created → its status first Ready. */
  readonly startup: Mean;
  /** The same by phase: `schedule`, `admit`, `launch`, `boot`, `pull`, `start`, `ready`. */
  readonly startupPhases: Readonly<Record<string, Mean>>;
  /** The start-up by the histogram's `start` label, where the vnode has it (else no samples). */
  readonly startupByStart: Readonly<Record<"warm" | "cold", Mean>>;
}

/** What the summary is made from. */
export interface SummaryInput {
  readonly verdicts: readonly Verdict[];
  readonly latencies: Latencies;
  readonly vnodeLatencies: VnodeLatencies | undefined;
  /** The polling-only nebula-vnode's histograms (the channel's comparison), when it was reachable. */
  readonly polledLatencies: VnodeLatencies | undefined;
  /** The warm pool's comparison, when it ran (measured rounds only). */
  readonly warm: WarmFigures | undefined;
  /** Instances not terminated at the end; `undefined` when they were not counted. */
  readonly instancesLeft: number | undefined;
  /**
   * Pods (`name (phase)`) still present after every sample was deleted and every instance
   * terminated, once the wait for their removal ended. Reported, not judged: no instance bills.
   */
  readonly podsLeft: readonly string[];
  /** `--keep`: nothing was reclaimed on purpose. */
  readonly keep: boolean;
  readonly elapsedMs: number;
  /** Why the run ended early, if it did (timeout, Ctrl-C, an error). */
  readonly aborted: string | undefined;
  /** What the watch found: samples that contradicted the truth for longer than allowed. */
  readonly violations: readonly Violation[];
  /** The samples the watch checked (one a second from the first scenario to the end). */
  readonly watchedSamples: number;
}

/** The machine-readable summary (the `SUMMARY <json>` line). */
export interface SummaryJson {
  readonly ok: boolean;
  readonly scenarios: Record<string, { expected: string; observed: string; ok: boolean }>;
  readonly instancesLeft: number | null;
  readonly podsLeft: readonly string[];
  readonly latencies: {
    readonly exitToStatus: Stats;
    readonly terminalToTerminated: Stats;
    readonly vnode: VnodeLatencies | null;
    /** The event channel's comparison: the same Pods with the channel on and off, one run. */
    readonly channel: {
      readonly on: { readonly exitToStatus: Stats; readonly vnode: VnodeLatencies | null };
      readonly off: { readonly exitToStatus: Stats; readonly vnode: VnodeLatencies | null };
    };
    /** The warm pool's comparison: warm vs cold start-ups of the same Pods, one run. */
    readonly warm: WarmFigures | null;
  };
  readonly elapsedSeconds: number;
  readonly aborted: string | null;
  /** Every violation the watch found (none in a good run). */
  readonly violations: readonly Violation[];
  readonly watchedSamples: number;
}

/** The run is a success: every scenario ok, no instance left, no violation, not aborted. */
export function succeeded(input: SummaryInput): boolean {
  return (
    input.aborted === undefined &&
    input.violations.length === 0 &&
    input.verdicts.length > 0 &&
    input.verdicts.every((v) => v.ok) &&
    input.instancesLeft === 0
  );
}

/** Builds the machine-readable summary. */
export function summaryJson(input: SummaryInput): SummaryJson {
  const scenarios: SummaryJson["scenarios"] = {};
  for (const v of input.verdicts)
    scenarios[v.id] = { expected: v.expected, observed: v.observed, ok: v.ok };
  return {
    ok: succeeded(input),
    scenarios,
    instancesLeft: input.instancesLeft ?? null,
    podsLeft: input.podsLeft,
    latencies: {
      exitToStatus: stats(input.latencies.exitToStatus),
      terminalToTerminated: stats(input.latencies.terminalToTerminated),
      vnode: input.vnodeLatencies ?? null,
      channel: {
        on: {
          exitToStatus: stats(input.latencies.channel.on),
          vnode: input.vnodeLatencies ?? null,
        },
        off: {
          exitToStatus: stats(input.latencies.channel.off),
          vnode: input.polledLatencies ?? null,
        },
      },
      warm: input.warm ?? null,
    },
    elapsedSeconds: Math.round(input.elapsedMs / 100) / 10,
    aborted: input.aborted ?? null,
    violations: input.violations.map((v) => ({ ...v })),
    watchedSamples: input.watchedSamples,
  };
}

const sec = (ms: number | null): string => (ms === null ? "-" : `${(ms / 1000).toFixed(1)} s`);

const statsText = (s: Stats): string =>
  s.n === 0 ? "no samples" : `median ${sec(s.medianMs)}, max ${sec(s.maxMs)} (n=${s.n})`;

const vnodeText = (v: Mean | undefined, digits = 1): string =>
  v === undefined || v.count === 0 || v.meanSeconds === null
    ? "no samples"
    : `mean ${v.meanSeconds.toFixed(digits)} s (n=${v.count})`;

/** The human summary, one string per line. */
export function summaryLines(input: SummaryInput): string[] {
  const json = summaryJson(input);
  const lines: string[] = [];
  lines.push(
    `SUMMARY  ${json.ok ? "every scenario showed what it should" : "NOT OK"}  (${json.elapsedSeconds} s)`,
  );
  if (input.aborted !== undefined) lines.push(`  stopped early: ${input.aborted}`);
  for (const v of input.verdicts) {
    lines.push(`  ${v.ok ? "ok  " : "FAIL"} ${v.id}`);
    lines.push(`       expected: ${v.expected}`);
    lines.push(`       observed: ${v.observed}`);
  }
  lines.push(
    input.violations.length === 0
      ? `  watch: ${input.watchedSamples} samples, no contradiction`
      : `  watch: ${input.watchedSamples} samples, ${input.violations.length} violation${input.violations.length === 1 ? "" : "s"}:`,
  );
  for (const v of input.violations) lines.push(`    ${violationLine(v)}`);
  lines.push(
    "  latencies (observed by the demo, polling every second; exits carry whole seconds):",
  );
  lines.push(
    `    container exit -> Pod status says so:        ${statsText(json.latencies.exitToStatus)}`,
  );
  lines.push(
    `    Pod terminal -> instance terminated:         ${statsText(json.latencies.terminalToTerminated)}`,
  );
  if (input.vnodeLatencies !== undefined) {
    lines.push("  latencies (measured by nebula-vnode, its /metrics histograms):");
    lines.push(
      `    exit -> status written:                      ${vnodeText(input.vnodeLatencies.exitToStatus)}`,
    );
    lines.push(
      `    terminal -> instance terminated:             ${vnodeText(input.vnodeLatencies.terminalToTerminated)}`,
    );
    lines.push(
      `    terminal status -> TerminateInstances sent:  ${vnodeText(input.vnodeLatencies.terminalToTerminate)}`,
    );
    lines.push(
      `    Pod created -> Ready (start-up):             ${vnodeText(input.vnodeLatencies.startup)}`,
    );
    if (input.vnodeLatencies.startup.count > 0) {
      const phases = Object.entries(input.vnodeLatencies.startupPhases)
        .map(
          ([phase, m]) =>
            `${phase} ${m.meanSeconds === null ? "-" : `${m.meanSeconds.toFixed(1)} s`}`,
        )
        .join(", ");
      lines.push(`      by phase (means): ${phases}`);
    }
    const { warm, cold } = input.vnodeLatencies.startupByStart;
    if (warm.count > 0 || cold.count > 0)
      lines.push(`      by start: warm ${vnodeText(warm)}; cold ${vnodeText(cold)}`);
  }
  lines.push(...channelLines(input, json));
  if (input.warm !== undefined && input.warm.toRunning.warm.n + input.warm.toRunning.cold.n > 0)
    lines.push(...warmSummaryLines(input.warm));
  lines.push(
    input.instancesLeft === undefined
      ? input.keep
        ? "  instances left running: not reclaimed (--keep)"
        : "  instances left running: not counted (the run stopped before reclaiming them)"
      : `  instances left running: ${input.instancesLeft}${input.instancesLeft === 0 ? "" : " (must be 0)"}`,
  );
  if (input.podsLeft.length > 0)
    lines.push(
      `  Pods not removed after their deletion (their instances are terminated): ${input.podsLeft.join(", ")}`,
    );
  return lines;
}

/** The event channel's comparison: the same Pods with the channel on and off, side by side. */
function channelLines(input: SummaryInput, json: SummaryJson): string[] {
  const { on, off } = json.latencies.channel;
  if (on.exitToStatus.n === 0 && off.exitToStatus.n === 0 && input.polledLatencies === undefined)
    return [];
  const lines = [
    "  the event channel, the same Pods on two nodes (on: nebula-demo, off: nebula-demo-polled):",
    `    exit -> status, observed by the demo:   on ${statsText(on.exitToStatus)}; off ${statsText(off.exitToStatus)}`,
    `    exit -> status written (vnode):         on ${vnodeText(on.vnode?.exitToStatus, 2)}; off ${vnodeText(off.vnode?.exitToStatus, 2)}`,
    `    terminal -> TerminateInstances (vnode): on ${vnodeText(on.vnode?.terminalToTerminate, 2)}; off ${vnodeText(off.vnode?.terminalToTerminate, 2)}`,
  ];
  const v = input.vnodeLatencies;
  if (v !== undefined && v.eventToStatus.count > 0) {
    const stages = Object.entries(v.stages)
      .map(
        ([stage, m]) =>
          `${stage} ${m.meanSeconds === null ? "-" : `${m.meanSeconds.toFixed(3)} s`}`,
      )
      .join(", ");
    lines.push(
      `    on: queue receipt -> status published ${vnodeText(v.eventToStatus, 2)}; its stages (means): ${stages}`,
    );
  }
  return lines;
}

/** The last line under `--ci`. */
export function summaryLine(input: SummaryInput): string {
  return `SUMMARY ${JSON.stringify(summaryJson(input))}`;
}
