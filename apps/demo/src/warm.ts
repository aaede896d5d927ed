/**
 * The warm pool's comparison (issue #32): nebula-vnode keeps a pool entry of prepared, stopped
 * hosts; the demo waits until the pool is ready, then creates, at the same moment, Pods that fit
 * the entry (they take a pool host: `StartInstances`) and the same Pods on another instance type
 * (they launch cold: `RunInstances`), in rounds, and measures each Pod's start-up from what the API
 * shows: created → container running, created → Ready, and nebula-vnode's own `StartupTimes`
 * breakdown. Pure: time comes from the snapshots, never from a clock.
 */
import type { InstanceView, PodView, Snapshot, StartupEventView } from "./model.js";

/** The pool entry nebula-vnode is configured with (`provider.warmPool[].name`). */
export const WARM_POOL_ENTRY = "demo-warm";
/** The entry's instance type: only the warm side's Pods ask for it. */
export const WARM_INSTANCE_TYPE = "t3.small";
/** The cold side's instance type (the node's default, in no pool entry). */
export const COLD_INSTANCE_TYPE = "t3.micro";
/** What the pool's hosts pull while they prepare (the comparison's Pods run it). */
export const WARM_POOL_IMAGES: readonly string[] = ["busybox"];
/** Pods per side and round by default (the pool's size is the same). */
export const DEFAULT_WARM_PODS = 3;
/** The label that says which side a comparison Pod is on (`warm` or `cold`). */
export const START_LABEL = "nebula.dev/demo-start";
/** The label that holds a comparison Pod's round (1, 2, …). */
export const ROUND_LABEL = "nebula.dev/demo-round";
/** EC2's state reason of an instance that powered itself off: a prepared pool host. */
const PREPARED_REASON = "Client.InstanceInitiatedShutdown";
/** Pod waiting reasons that never end by themselves (a Pod that waits so is not starting up). */
const STUCK_REASONS = new Set(["ErrImagePull", "ImagePullBackOff"]);

/** Which side of the comparison a Pod is on. */
export type StartSide = "warm" | "cold";

/** The side of a comparison Pod, from its label; `undefined` for any other Pod. */
function startSide(pod: PodView): StartSide | undefined {
  const side = pod.labels[START_LABEL];
  return side === "warm" || side === "cold" ? side : undefined;
}

/**
 * One round's Pods as one `kubectl apply` document (a `v1` `List`): `perSide` Pods asking for the
 * pool entry's instance type (`warm-<round>-<i>`) and as many asking for another
 * (`cold-<round>-<i>`), through the `nebula.dev/instance-type` annotation; scheduled like the
 * samples (`type: virtual-kubelet`), busybox sleeping until the demo deletes them.
 */
export function warmPodList(options: {
  readonly namespace: string;
  readonly round: number;
  readonly perSide: number;
}): Record<string, unknown> {
  const items = (["warm", "cold"] as const).flatMap((side) =>
    Array.from({ length: options.perSide }, (_, i) => ({
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: `${side}-${options.round}-${i}`,
        namespace: options.namespace,
        labels: { app: "warm-pool", [START_LABEL]: side, [ROUND_LABEL]: String(options.round) },
        annotations: {
          "nebula.dev/instance-type": side === "warm" ? WARM_INSTANCE_TYPE : COLD_INSTANCE_TYPE,
        },
      },
      spec: {
        nodeSelector: { type: "virtual-kubelet" },
        tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
        restartPolicy: "Never",
        terminationGracePeriodSeconds: 5,
        containers: [{ name: "app", image: "busybox", command: ["sleep", "600"] }],
      },
    })),
  );
  return { apiVersion: "v1", kind: "List", items };
}

/** The pool's free hosts (its entry's, no Pod's), by what they are doing. */
export interface PoolCounts {
  /** Prepared and stopped by themselves: a Pod may take one. */
  readonly ready: number;
  /** Launched, booting, pulling, powering off. */
  readonly preparing: number;
}

/** Counts the entry's free hosts in a listing. Total. */
export function poolCounts(
  instances: readonly InstanceView[],
  entry = WARM_POOL_ENTRY,
): PoolCounts {
  let ready = 0;
  let preparing = 0;
  for (const i of instances) {
    if (i.tags["nebula:pool"] !== entry || i.podUid !== undefined) continue;
    if (i.state === "stopped" && i.stateReason === PREPARED_REASON) ready += 1;
    else if (i.state === "pending" || i.state === "running" || i.state === "stopping")
      preparing += 1;
  }
  return { ready, preparing };
}

/** The pool's hosts not terminated yet (free or used), e.g. while it is drained. */
export function poolHostsLeft(instances: readonly InstanceView[], entry = WARM_POOL_ENTRY): number {
  return instances.filter((i) => i.tags["nebula:pool"] === entry && i.state !== "terminated")
    .length;
}

/** A Pod's start-up as nebula-vnode's `StartupTimes` Event gives it. */
export interface StartupLine {
  /** Created → Ready, seconds (absent when the vnode did not know the creation time). */
  readonly totalSeconds: number | undefined;
  /** The Pod took a warm-pool host (`StartInstances (warm pool)`). */
  readonly warm: boolean;
  /** Seconds by phase: `schedule`, `admit`, `launch`, `boot`, `pull`, `start`, `ready`. */
  readonly phases: Readonly<Record<string, number>>;
}

/** The Event's words for each phase (`@nebula/provider`'s `startupLine`). */
const PHASE_WORDS: readonly (readonly [string, string])[] = [
  ["scheduled", "schedule"],
  ["admitted", "admit"],
  ["RunInstances", "launch"],
  ["StartInstances (warm pool)", "launch"],
  ["host boot", "boot"],
  ["image pull", "pull"],
  ["container start", "start"],
  ["ready", "ready"],
];

/** The phases in the order a start-up goes through them. */
const PHASES = ["schedule", "admit", "launch", "boot", "pull", "start", "ready"] as const;

/**
 * Reads a `StartupTimes` Event: `Ready 4.2 s after creation: scheduled 0.0 s, admitted 0.1 s,
 * StartInstances (warm pool) 0.3 s, host boot 1.2 s, …`. `undefined` for any other text. Total.
 */
export function parseStartupLine(message: string): StartupLine | undefined {
  const head = /^Ready(?: ([\d.]+) s after creation)?(?:: (.*))?$/s.exec(message.trim());
  if (head === null) return undefined;
  const phases: Record<string, number> = {};
  let warm = false;
  for (const part of (head[2] ?? "").split(", ")) {
    const m = /^(.+) ([\d.]+) s$/.exec(part);
    if (m === null) continue;
    const phase = PHASE_WORDS.find(([word]) => word === m[1])?.[1];
    if (phase === undefined) continue;
    if (m[1] === "StartInstances (warm pool)") warm = true;
    phases[phase] = Number(m[2]);
  }
  const total = head[1] === undefined ? undefined : Number(head[1]);
  return { totalSeconds: Number.isFinite(total) ? total : undefined, warm, phases };
}

/** One comparison Pod's start-up, as measured. */
export interface StartSample {
  readonly pod: string;
  readonly side: StartSide;
  readonly round: number;
  /** Created → its container's `startedAt` (both whole seconds, as the API stores them), ms. */
  readonly toRunningMs: number | undefined;
  /** Created → its `Ready=True` condition's `lastTransitionTime` (whole seconds), ms. */
  readonly toReadyMs: number | undefined;
  /** nebula-vnode's breakdown (its `StartupTimes` Event), tenths of a second. */
  readonly line: StartupLine | undefined;
}

const diff = (from: string | undefined, to: string | undefined): number | undefined => {
  if (from === undefined || to === undefined) return undefined;
  const d = Date.parse(to) - Date.parse(from);
  return Number.isFinite(d) ? Math.max(0, d) : undefined;
};

/** A comparison Pod's sample from its view and its Event (if read). Total. */
export function startSample(
  pod: PodView,
  events: readonly StartupEventView[],
): StartSample | undefined {
  const side = startSide(pod);
  if (side === undefined) return undefined;
  const app = pod.containers.find((c) => !c.init);
  const event = events.find((e) => e.podUid === pod.uid);
  return {
    pod: pod.name,
    side,
    round: Number(pod.labels[ROUND_LABEL] ?? 0),
    toRunningMs: diff(pod.createdAt, app?.startedAt),
    toReadyMs: diff(pod.createdAt, pod.readySince),
    line: event === undefined ? undefined : parseStartupLine(event.message),
  };
}

/** Created → container started by nebula-vnode's breakdown: its phases up to `start`, ms. */
export function vnodeToStartedMs(line: StartupLine | undefined): number | undefined {
  if (line?.phases.start === undefined) return undefined;
  let sum = 0;
  for (const phase of PHASES) {
    sum += line.phases[phase] ?? 0;
    if (phase === "start") break;
  }
  return sum * 1000;
}

/** Order statistics (nearest rank) of samples in ms. */
export interface Quantiles {
  readonly n: number;
  readonly p50Ms: number | null;
  readonly p99Ms: number | null;
}

/**
 * p50 and p99 by nearest rank (the smallest sample with at least that share of the samples at or
 * below it; with fewer than 100 samples p99 is the largest). `null`s for none. Total.
 */
export function quantiles(samples: readonly (number | undefined)[]): Quantiles {
  const sorted = samples
    .filter((s): s is number => s !== undefined && Number.isFinite(s))
    .sort((a, b) => a - b);
  if (sorted.length === 0) return { n: 0, p50Ms: null, p99Ms: null };
  const rank = (q: number) => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] as number;
  return { n: sorted.length, p50Ms: rank(0.5), p99Ms: rank(0.99) };
}

/** One measure on both sides, and the ratio of their p50s. */
interface SideBySide {
  readonly warm: Quantiles;
  readonly cold: Quantiles;
  /** Cold p50 / warm p50 (how many times faster the warm start is); `null` without both. */
  readonly coldOverWarm: number | null;
}

/** The comparison's figures: each measure side by side, and the phases' means per side. */
export interface WarmFigures {
  /** Pods created at the same moment on each side, per round. */
  readonly perSide: number;
  readonly rounds: number;
  /** Created → container running, from the Pod's status (whole seconds). */
  readonly toRunning: SideBySide;
  /** Created → Ready, from the Pod's status (whole seconds). */
  readonly toReady: SideBySide;
  /** Created → container started, nebula-vnode's breakdown (tenths of a second). */
  readonly vnodeToStarted: SideBySide;
  /** Created → Ready, nebula-vnode's breakdown. */
  readonly vnodeToReady: SideBySide;
  /** Mean seconds of each phase per side (nebula-vnode's breakdown); a phase without samples is absent. */
  readonly phases: Readonly<Record<StartSide, Readonly<Record<string, number>>>>;
  /** Pods meant for the pool that launched cold (their Event says `RunInstances`). */
  readonly misses: number;
}

function sideBySide(samples: readonly StartSample[], pick: (s: StartSample) => number | undefined) {
  const warm = quantiles(samples.filter((s) => s.side === "warm").map(pick));
  const cold = quantiles(samples.filter((s) => s.side === "cold").map(pick));
  const coldOverWarm =
    warm.p50Ms === null || cold.p50Ms === null || warm.p50Ms === 0
      ? null
      : Math.round((cold.p50Ms / warm.p50Ms) * 100) / 100;
  return { warm, cold, coldOverWarm };
}

/** The comparison's figures from its samples. The warm side counts only Pods that started warm. */
export function warmFigures(
  samples: readonly StartSample[],
  perSide: number,
  rounds: number,
): WarmFigures {
  // A Pod meant for the pool that launched cold is no warm start: it is counted as a miss.
  const misses = samples.filter((s) => s.side === "warm" && s.line !== undefined && !s.line.warm);
  const used = samples.filter((s) => !misses.includes(s));
  const phases: Record<StartSide, Record<string, number>> = { warm: {}, cold: {} };
  for (const side of ["warm", "cold"] as const) {
    const lines = used.filter((s) => s.side === side).flatMap((s) => (s.line ? [s.line] : []));
    for (const phase of PHASES) {
      const values = lines.flatMap((l) => (l.phases[phase] === undefined ? [] : [l.phases[phase]]));
      if (values.length > 0)
        phases[side][phase] = values.reduce((a, b) => a + b, 0) / values.length;
    }
  }
  return {
    perSide,
    rounds,
    toRunning: sideBySide(used, (s) => s.toRunningMs),
    toReady: sideBySide(used, (s) => s.toReadyMs),
    vnodeToStarted: sideBySide(used, (s) => vnodeToStartedMs(s.line)),
    vnodeToReady: sideBySide(used, (s) =>
      s.line?.totalSeconds === undefined ? undefined : s.line.totalSeconds * 1000,
    ),
    phases,
    misses: misses.length,
  };
}

/** How the comparison runs. */
export interface WarmPlan {
  /** Rounds (each waits for the pool to be ready again). */
  readonly rounds: number;
  /** Pods per side per round (the pool's size). */
  readonly perSide: number;
  /** The most a round waits for the pool to be ready, ms. */
  readonly readyTimeoutMs: number;
  /** The most a round waits for its Pods to be running, Ready and broken down, ms. */
  readonly roundTimeoutMs: number;
  /**
   * Once the pool is ready, the most a round waits for the other Pods' start-up to settle (no
   * other Pod Pending, save those stuck on an image pull), so that both sides start on a quieter
   * machine, ms.
   */
  readonly settleTimeoutMs: number;
}

/** What the demo must do for the comparison now. */
export type WarmAction =
  | { readonly kind: "create"; readonly round: number; readonly list: Record<string, unknown> }
  | { readonly kind: "delete"; readonly round: number };

type Stage =
  | {
      readonly kind: "waiting";
      readonly round: number;
      readonly since: number;
      /** The first sample with enough ready hosts, and the vnode's polls then. */
      readonly readyAt?: number;
      readonly pollsAtReady?: number;
    }
  | { readonly kind: "create"; readonly round: number }
  | { readonly kind: "measuring"; readonly round: number; readonly since: number }
  | { readonly kind: "delete"; readonly round: number }
  | { readonly kind: "done" }
  | { readonly kind: "failed"; readonly why: string };

const sec = (ms: number): string => `${Math.round(ms / 1000)} s`;

/**
 * The comparison's course, fed every snapshot: wait until the pool has `perSide` ready hosts and
 * nebula-vnode has polled twice since (so its own listing shows them), and the other Pods'
 * start-up has settled; create the round's Pods; once each is running, Ready and has its
 * `StartupTimes` Event, keep their samples and delete them; again for the next round.
 */
export class WarmPoolRun {
  readonly plan: WarmPlan;
  #stage: Stage | undefined;
  readonly #samples: StartSample[] = [];
  readonly #notes: string[] = [];
  #lastProgress = "";
  /** The latest snapshot's time (epoch ms). */
  #at = 0;

  constructor(plan: WarmPlan) {
    this.plan = plan;
  }

  /** Takes one snapshot in (in time order). */
  observe(snapshot: Snapshot): void {
    this.#at = snapshot.at;
    this.#stage ??= { kind: "waiting", round: 1, since: snapshot.at };
    const stage = this.#stage;
    if (stage.kind === "waiting") this.#waiting(stage, snapshot);
    else if (stage.kind === "measuring") this.#measuring(stage, snapshot);
  }

  #waiting(stage: Extract<Stage, { kind: "waiting" }>, snapshot: Snapshot): void {
    const counts = poolCounts(snapshot.instances);
    const waited = snapshot.at - stage.since;
    const others = snapshot.pods.filter(
      (p) =>
        startSide(p) === undefined &&
        !p.deleting &&
        p.phase === "Pending" &&
        !STUCK_REASONS.has(p.reason ?? ""),
    ).length;
    this.#progress(
      `warm pool ${WARM_POOL_ENTRY} (round ${stage.round}/${this.plan.rounds}): ${counts.ready}/${this.plan.perSide} hosts ready, ${counts.preparing} preparing (${sec(waited)})`,
    );
    if (counts.ready < this.plan.perSide) {
      if (stage.readyAt !== undefined)
        this.#stage = { kind: "waiting", round: stage.round, since: stage.since };
      if (waited > this.plan.readyTimeoutMs)
        this.#fail(
          `round ${stage.round}: the pool had ${counts.ready}/${this.plan.perSide} hosts ready (${counts.preparing} preparing) after ${sec(waited)}`,
        );
      return;
    }
    if (stage.readyAt === undefined) {
      this.#stage = { ...stage, readyAt: snapshot.at, pollsAtReady: snapshot.vnodePolls };
      return;
    }
    // nebula-vnode takes hosts from its own listing: two polls later it has seen them stopped.
    if (snapshot.vnodePolls < (stage.pollsAtReady ?? 0) + 2) return;
    const settling = snapshot.at - stage.readyAt;
    if (others > 0 && settling < this.plan.settleTimeoutMs) {
      this.#progress(
        `warm pool ${WARM_POOL_ENTRY} ready; waiting for ${others} other Pod${others === 1 ? "" : "s"} to start first (${sec(settling)})`,
      );
      return;
    }
    this.#stage = { kind: "create", round: stage.round };
  }

  #measuring(stage: Extract<Stage, { kind: "measuring" }>, snapshot: Snapshot): void {
    const pods = this.#roundPods(snapshot, stage.round);
    const samples = pods.flatMap((p) => {
      const s = startSample(p, snapshot.startupEvents);
      return s === undefined ? [] : [s];
    });
    const complete = samples.filter(
      (s) => s.toRunningMs !== undefined && s.toReadyMs !== undefined && s.line !== undefined,
    );
    const expected = 2 * this.plan.perSide;
    this.#progress(
      `warm pool comparison, round ${stage.round}/${this.plan.rounds}: ${complete.length}/${expected} Pods running, Ready and broken down`,
    );
    const ended = pods.filter((p) => p.phase === "Failed" || p.phase === "Succeeded");
    if (ended.length > 0) {
      this.#fail(
        `round ${stage.round}: ${ended.map((p) => `${p.name} ${p.phase}${p.reason ? ` (${p.reason})` : ""}`).join(", ")} before its start-up was measured`,
      );
      return;
    }
    if (complete.length >= expected) {
      this.#samples.push(...complete);
      this.#stage = { kind: "delete", round: stage.round };
      return;
    }
    const waited = snapshot.at - stage.since;
    if (waited > this.plan.roundTimeoutMs)
      this.#fail(
        `round ${stage.round}: after ${sec(waited)}, ${complete.length}/${expected} Pods were running, Ready and broken down (${pods.length} seen)`,
      );
  }

  #roundPods(snapshot: Snapshot, round: number): PodView[] {
    return snapshot.pods.filter(
      (p) => startSide(p) !== undefined && p.labels[ROUND_LABEL] === String(round) && !p.deleting,
    );
  }

  /**
   * What to do now: create a round's Pods (until {@link WarmPoolRun.created} or
   * {@link WarmPoolRun.fail} is called), or delete a measured round's (once).
   */
  next(namespace: string): WarmAction | undefined {
    const stage = this.#stage;
    if (stage?.kind === "create") {
      return {
        kind: "create",
        round: stage.round,
        list: warmPodList({ namespace, round: stage.round, perSide: this.plan.perSide }),
      };
    }
    if (stage?.kind === "delete") {
      this.#stage =
        stage.round >= this.plan.rounds
          ? { kind: "done" }
          : { kind: "waiting", round: stage.round + 1, since: this.#at };
      return { kind: "delete", round: stage.round };
    }
    return undefined;
  }

  /** The round's Pods were created: their start-ups are measured from now on. */
  created(): void {
    const stage = this.#stage;
    if (stage?.kind === "create")
      this.#stage = { kind: "measuring", round: stage.round, since: this.#at };
  }

  /** The comparison cannot go on (a kubectl call failed, a deadline passed). */
  fail(why: string): void {
    this.#fail(why);
  }

  #fail(why: string): void {
    if (this.#stage?.kind === "failed" || this.#stage?.kind === "done") return;
    this.#stage = { kind: "failed", why };
    this.#notes.push(`warm pool comparison: ${why}`);
  }

  #progress(line: string): void {
    if (line.replace(/\(\d+ s\)$/, "") === this.#lastProgress.replace(/\(\d+ s\)$/, "")) return;
    this.#lastProgress = line;
    this.#notes.push(line);
  }

  /** Lines to show since the last call (progress, failures). */
  takeNotes(): string[] {
    return this.#notes.splice(0);
  }

  /** Every measured Pod's sample so far. */
  samples(): readonly StartSample[] {
    return this.#samples;
  }

  /** The figures of the rounds measured so far. */
  figures(): WarmFigures {
    return warmFigures(this.#samples, this.plan.perSide, this.plan.rounds);
  }

  /**
   * The verdict: ok once every round was measured and every Pod meant for the pool took a pool
   * host (its Event says `StartInstances (warm pool)`) while every other launched
   * (`RunInstances`). The times are reported, not judged.
   */
  judge(): { observed: string; ok: boolean } {
    const stage = this.#stage;
    const f = this.figures();
    const measured = this.#samples.length;
    const figures =
      measured === 0
        ? ""
        : `; created → container running p50 warm ${secOrDash(f.toRunning.warm.p50Ms)}, cold ${secOrDash(f.toRunning.cold.p50Ms)}`;
    const coldWarm = this.#samples.filter((s) => s.side === "cold" && s.line?.warm === true).length;
    const sides = `${this.#samples.filter((s) => s.side === "warm" && s.line?.warm).length} Pods took a warm-pool host (StartInstances), ${this.#samples.filter((s) => s.side === "cold" && s.line?.warm === false).length} launched cold (RunInstances)`;
    if (stage === undefined) return { observed: "not started", ok: false };
    if (stage.kind === "failed") return { observed: `${stage.why}${figures}`, ok: false };
    if (stage.kind !== "done") {
      const where =
        stage.kind === "waiting"
          ? `round ${stage.round}: waiting for the pool`
          : `round ${stage.round}: ${stage.kind === "measuring" ? "measuring" : stage.kind}`;
      return {
        observed: measured === 0 ? where : `${where}; so far ${sides}${figures}`,
        ok: false,
      };
    }
    const problems: string[] = [];
    if (f.misses > 0)
      problems.push(
        `${f.misses} Pod${f.misses === 1 ? "" : "s"} meant for the pool launched cold (no ready host in nebula-vnode's view)`,
      );
    if (coldWarm > 0) problems.push(`${coldWarm} Pods on the other type took a pool host`);
    return {
      observed: `${sides}${problems.length > 0 ? `; ${problems.join("; ")}` : ""}${figures}`,
      ok: problems.length === 0,
    };
  }
}

const secOrDash = (ms: number | null): string =>
  ms === null ? "-" : `${(ms / 1000).toFixed(ms % 1000 === 0 ? 0 : 1)} s`;

/** The comparison as the summary's lines. */
export function warmSummaryLines(f: WarmFigures): string[] {
  const q = (x: Quantiles): string =>
    x.n === 0 ? "no samples" : `p50 ${secOrDash(x.p50Ms)}, p99 ${secOrDash(x.p99Ms)} (n=${x.n})`;
  const row = (label: string, s: SideBySide): string =>
    `    ${label.padEnd(44)} warm ${q(s.warm)}; cold ${q(s.cold)}${s.coldOverWarm === null ? "" : `; cold/warm ${s.coldOverWarm}×`}`;
  const phases = (side: StartSide): string =>
    PHASES.flatMap((p) => {
      const m = f.phases[side][p];
      return m === undefined ? [] : [`${p} ${m.toFixed(1)}`];
    }).join(", ") || "none";
  return [
    `  the warm pool, the same Pods at the same moment (warm: ${WARM_INSTANCE_TYPE}, pool entry ${WARM_POOL_ENTRY}; cold: ${COLD_INSTANCE_TYPE}), ${f.rounds} round${f.rounds === 1 ? "" : "s"} of ${f.perSide} + ${f.perSide}:`,
    row("Pod created -> container running (status):", f.toRunning),
    row("Pod created -> Ready (status):", f.toReady),
    row("created -> container started (vnode):", f.vnodeToStarted),
    row("created -> Ready (vnode's StartupTimes):", f.vnodeToReady),
    `      by phase (means, s): warm ${phases("warm")}; cold ${phases("cold")}`,
    "      (status: whole seconds as the API stores them; vnode: its StartupTimes Event, tenths)",
    ...(f.misses > 0
      ? [`      ${f.misses} Pod(s) meant for the pool launched cold (left out)`]
      : []),
  ];
}

/** One `npm run bench` row (see scripts/bench.mjs). */
export interface BenchRow {
  readonly package: string;
  readonly figure: string;
  readonly value: number;
  readonly unit: string;
  readonly baseline: number | null;
  readonly baselineLabel: string | null;
  readonly ratio: number | null;
  readonly goal: string | null;
}

/**
 * The comparison as `npm run bench` rows: each measure's warm p50 and p99 against the cold one
 * of the same run (ratio warm / cold; the goal: the warm path at least 3× faster).
 */
export function warmBenchRows(f: WarmFigures): BenchRow[] {
  const rows: BenchRow[] = [];
  const measures: [string, SideBySide][] = [
    ["Pod created → container running (status, whole s)", f.toRunning],
    ["Pod created → Ready (vnode's StartupTimes)", f.vnodeToReady],
  ];
  for (const [label, s] of measures) {
    for (const [q, warm, cold] of [
      ["p50", s.warm.p50Ms, s.cold.p50Ms],
      ["p99", s.warm.p99Ms, s.cold.p99Ms],
    ] as const) {
      if (warm === null || cold === null) continue;
      rows.push({
        package: "@nebula/demo-app",
        figure: `${label}, ${q}, warm pool (n=${s.warm.n}; the local world)`,
        value: warm / 1000,
        unit: "s",
        baseline: cold / 1000,
        baselineLabel: `cold launch, same run, n=${s.cold.n}`,
        ratio: cold === 0 ? null : Math.round((warm / cold) * 100) / 100,
        goal: q === "p50" ? "≤ 0.33× (the warm path ≥ 3× faster)" : null,
      });
    }
  }
  return rows;
}
