/**
 * `npm run demo`: the whole local world running the samples, with a live table and a summary.
 * See `USAGE` in cli.ts.
 */
import { appendFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DEFAULT_STABILITY_WINDOW_SECONDS } from "@nebula/state-mapping";
import { channelPodList } from "./channel.js";
import { type DemoOptions, parseDemoArgs, USAGE } from "./cli.js";
import { addMetrics, vnodeLatencies } from "./metrics.js";
import { EMPTY_SNAPSHOT, type Snapshot } from "./model.js";
import { observe, scrapeVnode } from "./observe.js";
import { SAMPLE_FILES, withReplicas, withSimulatedOom } from "./samples.js";
import { DELETE_POD, LOGS_POD, type ScenarioId, Tracker } from "./scenarios.js";
import {
  type SummaryInput,
  succeeded,
  summaryLine,
  summaryLines,
  type VnodeLatencies,
} from "./summary.js";
import { progressKey, progressLine, redraw, renderTable, type TableView } from "./table.js";
import {
  COLD_INSTANCE_TYPE,
  poolHostsLeft,
  ROUND_LABEL,
  WARM_INSTANCE_TYPE,
  type WarmPlan,
  warmBenchRows,
} from "./warm.js";
import { violationLine, Watch, type WatchOptions } from "./watch.js";
import {
  DEMO_NAMESPACE,
  NODE_NAME,
  POLLED_NODE_NAME,
  REPO_ROOT,
  startWorld,
  VNODE_API_HEADROOM_SECONDS,
  VNODE_POLL_INTERVAL_SECONDS,
  type World,
} from "./world.js";

const POLL_MS = 1_000;

/**
 * What the watch allows: the roll-up's own stability window (`@nebula/state-mapping`'s default,
 * which the operator uses: the demo passes it no other), the operator's reaction to a Pod's
 * change, and the vnode's poll interval and API headroom as `world.ts` configures them.
 */
const WATCH: WatchOptions = {
  stabilityWindowSeconds: DEFAULT_STABILITY_WINDOW_SECONDS,
  reactionSeconds: 5,
  pollIntervalSeconds: VNODE_POLL_INTERVAL_SECONDS,
  apiHeadroomSeconds: VNODE_API_HEADROOM_SECONDS,
  sampleSeconds: POLL_MS / 1000,
  // The watch catches what stays wrong (a Pod left in the API, an available crash loop), not how
  // fast the machine is: the CI machine runs the demo beside other suites, and 10 s once left six
  // Pods deleted together 1 to 3 s past a 25 s deadline, then gone. A lingering Pod stays past any.
  slackSeconds: 30,
};
/** Time kept back from the deadline for deleting the samples and reclaiming their instances. */
const RECLAIM_RESERVE_MS = 120_000;
/** How long, once every instance is terminated, the deleted Pods' removal is waited for. */
const PODS_GRACE_MS = 60_000;

/**
 * The warm pool's comparison's deadlines: its pool's preparation (the first round's starts with
 * the scenarios, while the samples start up), its Pods' start-up, and the wait for the other
 * Pods' start-up to settle once the pool is ready.
 */
const warmPlan = (options: DemoOptions): WarmPlan => ({
  rounds: options.warmRounds,
  perSide: options.warmPods,
  readyTimeoutMs: 240_000,
  roundTimeoutMs: 180_000,
  settleTimeoutMs: 60_000,
});

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });

/** The live output: a table redrawn in place, or one line per change. */
class Ui {
  readonly #redraw: boolean;
  #drawn = 0;
  #lastKey = "";
  readonly #notes: string[] = [];
  /** Notes taken since the last drawing (not on the screen yet). */
  readonly #unshown: string[] = [];

  constructor(redrawInPlace: boolean) {
    this.#redraw = redrawInPlace;
  }

  /** A line that stays (start-up steps, actions taken). */
  note(line: string): void {
    if (this.#redraw && this.#drawn > 0) {
      this.#notes.push(line);
      this.#unshown.push(line);
      if (this.#notes.length > 4) this.#notes.shift();
    } else {
      process.stdout.write(`${line}\n`);
    }
  }

  update(view: TableView): void {
    if (this.#redraw) {
      const width = Math.max(60, (process.stdout.columns ?? 120) - 1);
      const lines = [
        ...renderTable(view, width),
        ...this.#notes.map((n) => `  ${n}`.slice(0, width)),
      ];
      process.stdout.write(redraw(this.#drawn, lines));
      this.#drawn = lines.length;
      this.#unshown.length = 0;
      return;
    }
    const key = progressKey(view);
    if (key !== this.#lastKey) {
      this.#lastKey = key;
      process.stdout.write(`${progressLine(view)}\n`);
    }
  }

  /** Ends the live drawing: later output goes below it. */
  done(): void {
    this.#drawn = 0;
    this.#notes.length = 0;
    for (const note of this.#unshown.splice(0)) process.stdout.write(`  ${note}\n`);
  }
}

interface RunState {
  world: World | undefined;
  readonly tracker: Tracker;
  /** Checks every sample from the first scenario to the end. */
  readonly watch: Watch;
  snapshot: Snapshot;
  aborted: string | undefined;
  instancesLeft: number | undefined;
  podsLeft: string[];
  /** Seconds into the run when the scenarios' deadline passed, if it did. */
  scenarioDeadlinePassedAt: number | undefined;
  vnodeLatencies: VnodeLatencies | undefined;
  polledLatencies: VnodeLatencies | undefined;
  /** The warm pool's hosts not terminated yet, as the clean-up last counted them. */
  poolHostsLeft: number | undefined;
}

function blockFor(tracker: Tracker, ids: readonly ScenarioId[], why: string): void {
  for (const id of ids) tracker.block(id, why);
}

async function applySamples(world: World, options: DemoOptions, state: RunState, ui: Ui) {
  const chosen = state.tracker.scenarios;
  for (const sample of SAMPLE_FILES) {
    // The namespace always; a sample only when a chosen scenario needs it.
    if (sample.scenarios.length > 0 && !sample.scenarios.some((id) => chosen.includes(id)))
      continue;
    const path = join(REPO_ROOT, "samples", sample.file);
    let text = readFileSync(path, "utf8");
    if (sample.file === "prints-and-exits.yaml") text = withReplicas(text, options.replicas);
    if (sample.file === "oom-killed.yaml") text = withSimulatedOom(text, 2);
    try {
      await world.kubectl(["apply", "-f", "-"], text);
      ui.note(
        `kubectl apply -f samples/${sample.file}${sample.file === "prints-and-exits.yaml" ? ` (replicas ${options.replicas})` : ""}${sample.file === "oom-killed.yaml" ? " (image nebula-sim/oomkill)" : ""}`,
      );
    } catch (error) {
      const why = `kubectl apply -f samples/${sample.file} failed: ${(error as Error).message}`;
      ui.note(why);
      blockFor(state.tracker, sample.scenarios.length > 0 ? sample.scenarios : chosen, why);
    }
  }
}

/**
 * Seconds after its start the first comparison Pod's container exits (the rest 3 s apart): late
 * enough that the samples' start-up has mostly settled, so the comparison measures the channel more
 * than a saturated machine.
 */
const CHANNEL_FIRST_EXIT_SECONDS = 60;

/** Applies the event channel's comparison Pods (the same on both virtual nodes) with kubectl. */
async function applyChannelPods(world: World, state: RunState, ui: Ui): Promise<void> {
  const list = channelPodList({
    namespace: DEMO_NAMESPACE,
    nodes: { on: NODE_NAME, off: POLLED_NODE_NAME },
    firstExitSeconds: CHANNEL_FIRST_EXIT_SECONDS,
  });
  try {
    await world.kubectl(["apply", "-f", "-"], JSON.stringify(list));
    ui.note(
      `kubectl apply: the event channel's comparison, the same Pods on ${NODE_NAME} (channel) and ${POLLED_NODE_NAME} (poll)`,
    );
  } catch (error) {
    state.tracker.block(
      "event-channel",
      `kubectl apply of the comparison Pods failed: ${(error as Error).message}`,
    );
  }
}

/**
 * The warm pool's comparison: creates a round's Pods once the pool is ready, deletes them once
 * measured (their hosts are terminated after them; the pool refills), with the real kubectl.
 */
async function maybeWarm(world: World, state: RunState, ui: Ui): Promise<void> {
  const warm = state.tracker.warm;
  if (warm === undefined) return;
  for (const note of warm.takeNotes()) ui.note(note);
  const action = warm.next(DEMO_NAMESPACE);
  if (action === undefined) return;
  const n = warm.plan.perSide;
  if (action.kind === "create") {
    try {
      await world.kubectl(["apply", "-f", "-"], JSON.stringify(action.list));
      warm.created();
      ui.note(
        `kubectl apply: the warm pool's comparison, round ${action.round}: ${n} Pods on ${WARM_INSTANCE_TYPE} (the pool's type) and ${n} on ${COLD_INSTANCE_TYPE} (cold), at the same moment`,
      );
    } catch (error) {
      warm.fail(`kubectl apply of round ${action.round} failed: ${(error as Error).message}`);
    }
    return;
  }
  try {
    await world.kubectl([
      "delete",
      "pods",
      "-n",
      DEMO_NAMESPACE,
      "-l",
      `${ROUND_LABEL}=${action.round}`,
      "--wait=false",
    ]);
    ui.note(
      `kubectl delete pods -l ${ROUND_LABEL}=${action.round}: round ${action.round} measured`,
    );
  } catch (error) {
    // The clean-up deletes them in any case.
    ui.note(`deleting round ${action.round}'s Pods failed: ${(error as Error).message}`);
  }
}

/** Deletes the running Pod with the real kubectl once it runs. */
async function maybeDelete(world: World, state: RunState, ui: Ui): Promise<void> {
  if (state.tracker.deleteRequested) return;
  const pod = state.snapshot.pods.find((p) => p.name === DELETE_POD && !p.deleting);
  if (pod === undefined || pod.phase !== "Running" || pod.exit !== undefined) return;
  state.tracker.markDeleteRequested(Date.now(), pod.uid);
  try {
    await world.kubectl(["delete", "pod", DELETE_POD, "-n", DEMO_NAMESPACE, "--wait=false"]);
    ui.note(`kubectl delete pod ${DELETE_POD} -n ${DEMO_NAMESPACE}`);
  } catch (error) {
    state.tracker.block("kubectl-delete", `kubectl delete failed: ${(error as Error).message}`);
  }
}

/** Reads the finished Pod's output with the real kubectl once its instance is terminated. */
async function maybeReadLogs(world: World, state: RunState, ui: Ui): Promise<void> {
  if (!state.tracker.logsWanted()) return;
  try {
    const text = await world.kubectl(["logs", LOGS_POD, "-n", DEMO_NAMESPACE]);
    if (text !== "")
      ui.note(`kubectl logs ${LOGS_POD} -n ${DEMO_NAMESPACE}: ${JSON.stringify(text)}`);
    state.tracker.markLogs(text);
  } catch (error) {
    // Not settled: the next tick asks again until the scenarios' deadline.
    state.tracker.markLogs(`(kubectl logs failed: ${(error as Error).message.split("\n")[0]})`);
  }
}

function appTrouble(world: World): string | undefined {
  for (const app of world.apps.values()) {
    const code = app.exitCode();
    if (code !== undefined)
      return `${app.name} exited (code ${code}); its last lines:\n${app.tail(10).join("\n")}`;
  }
  return undefined;
}

async function tick(world: World, state: RunState, startedAt: number, ui: Ui, stage: string) {
  state.snapshot = await observe(world, startedAt, state.snapshot);
  state.tracker.observe(state.snapshot);
  for (const violation of state.watch.observe(state.snapshot)) ui.note(violationLine(violation));
  ui.update({ snapshot: state.snapshot, verdicts: state.tracker.verdicts(), stage });
}

async function runScenarios(
  world: World,
  state: RunState,
  ui: Ui,
  startedAt: number,
  until: number,
  signal: AbortSignal,
): Promise<void> {
  while (!signal.aborted) {
    const sampled = Date.now();
    await tick(world, state, startedAt, ui, "running the scenarios");
    await maybeDelete(world, state, ui);
    await maybeReadLogs(world, state, ui);
    await maybeWarm(world, state, ui);
    const trouble = appTrouble(world);
    if (trouble !== undefined) {
      state.aborted = trouble;
      return;
    }
    if (state.tracker.pending().length === 0) return;
    if (Date.now() > until) {
      // The clean-up goes on; scenarios still settling (a deletion finishing) may still get there.
      state.scenarioDeadlinePassedAt = Math.round((Date.now() - startedAt) / 1000);
      state.tracker.close();
      return;
    }
    // One sample a second: the rest of the second after the tick and its actions.
    await sleep(Math.max(0, POLL_MS - (Date.now() - sampled)), signal);
  }
}

async function reclaim(
  world: World,
  state: RunState,
  ui: Ui,
  startedAt: number,
  deadline: number,
  signal: AbortSignal,
): Promise<void> {
  try {
    await world.kubectl([
      "delete",
      "deployments,pods,workloaddeployments,workloads",
      "--all",
      "-n",
      DEMO_NAMESPACE,
      "--wait=false",
    ]);
    ui.note(
      `kubectl delete deployments,pods,workloaddeployments,workloads --all -n ${DEMO_NAMESPACE}`,
    );
  } catch (error) {
    ui.note(`deleting the samples failed: ${(error as Error).message}`);
  }
  let allTerminatedAt: number | undefined;
  while (!signal.aborted) {
    const sampled = Date.now();
    await tick(world, state, startedAt, ui, "reclaiming: every sample deleted");
    const left = state.snapshot.instances.filter((i) => i.state !== "terminated").length;
    state.instancesLeft = left;
    const pool = poolHostsLeft(state.snapshot.instances);
    if (pool !== state.poolHostsLeft) {
      if (state.poolHostsLeft !== undefined)
        ui.note(`warm pool: ${pool} host${pool === 1 ? "" : "s"} not terminated yet`);
      state.poolHostsLeft = pool;
    }
    state.podsLeft = state.snapshot.pods.map((p) => `${p.name} (${p.phase})`);
    if (left === 0) {
      if (state.snapshot.pods.length === 0) return;
      // Every instance is reclaimed; the Pods' removal is waited for a while, then reported.
      allTerminatedAt ??= Date.now();
      if (Date.now() - allTerminatedAt > PODS_GRACE_MS || Date.now() > deadline) return;
    } else if (Date.now() > deadline) {
      state.aborted ??= `timeout: ${left} instances were not terminated when the deadline passed (--timeout)`;
      return;
    }
    await sleep(Math.max(0, POLL_MS - (Date.now() - sampled)), signal);
  }
}

function waitForSignal(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

async function main(argv: readonly string[]): Promise<number> {
  const parsed = parseDemoArgs(argv);
  if (parsed.kind === "help") {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (parsed.kind === "error") {
    process.stderr.write(`demo: ${parsed.message} (see --help)\n`);
    return 2;
  }
  const options = parsed.options;
  const startedAt = Date.now();
  const deadline = startedAt + options.timeoutSeconds * 1000;
  const ui = new Ui(!options.ci && process.stdout.isTTY === true);
  const stop = new AbortController();
  const state: RunState = {
    world: undefined,
    tracker: new Tracker(options.replicas, {
      scenarios: options.scenarios,
      ...(options.scenarios.includes("warm-pool") ? { warm: warmPlan(options) } : {}),
    }),
    watch: new Watch(WATCH),
    snapshot: EMPTY_SNAPSHOT,
    aborted: undefined,
    instancesLeft: undefined,
    podsLeft: [],
    scenarioDeadlinePassedAt: undefined,
    vnodeLatencies: undefined,
    polledLatencies: undefined,
    poolHostsLeft: undefined,
  };

  let signals = 0;
  const onSignal = (name: NodeJS.Signals) => {
    signals += 1;
    if (signals === 1) {
      state.aborted ??= `interrupted (${name})`;
      process.stderr.write(`\ndemo: ${name}: stopping everything (again to kill at once)\n`);
      stop.abort();
    } else {
      state.world?.kill();
      process.exit(130);
    }
  };
  for (const name of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(name, onSignal);
  // The phases keep their own deadlines; this is the last resort if one of them hangs.
  const hardStop = setTimeout(
    () => {
      state.aborted ??= `timeout: the run exceeded --timeout ${options.timeoutSeconds} s`;
      process.stderr.write(`\ndemo: ${state.aborted}; stopping everything\n`);
      stop.abort();
    },
    options.timeoutSeconds * 1000 + 30_000,
  );

  ui.note(
    `Nebula demo: starting the local world (replicas ${options.replicas}, deadline ${options.timeoutSeconds} s)`,
  );
  try {
    state.world = await startWorld({
      signal: stop.signal,
      warmPoolSize: state.tracker.warm === undefined ? 0 : options.warmPods,
      hostTimes: options.hostTimes,
      report: (step, status, detail) => {
        if (status === "start") return;
        ui.note(
          `  ${status === "done" ? "ok    " : "FAILED"} ${step}${detail ? `: ${detail}` : ""}`,
        );
      },
    });
  } catch (error) {
    state.aborted ??= `the local world did not start: ${(error as Error).message}`;
    blockFor(state.tracker, state.tracker.scenarios, state.aborted);
  }

  const world = state.world;
  if (world !== undefined) {
    const vnodeProblem = world.unusable.get("nebula-vnode");
    const operatorProblem = world.unusable.get("nebula-operator");
    const polledProblem = world.unusable.get("nebula-vnode-polled");
    if (polledProblem !== undefined)
      blockFor(
        state.tracker,
        ["event-channel"],
        `nebula-vnode-polled is not usable: ${polledProblem}`,
      );
    if (vnodeProblem !== undefined)
      blockFor(
        state.tracker,
        state.tracker.scenarios,
        `nebula-vnode is not usable: ${vnodeProblem}`,
      );
    if (operatorProblem !== undefined)
      blockFor(
        state.tracker,
        ["workload-healthy", "workload-crashing", "workload"],
        `nebula-operator is not usable: ${operatorProblem}`,
      );
    try {
      if (vnodeProblem === undefined && !stop.signal.aborted) {
        await applySamples(world, options, state, ui);
        if (polledProblem === undefined && state.tracker.scenarios.includes("event-channel"))
          await applyChannelPods(world, state, ui);
        await runScenarios(world, state, ui, startedAt, deadline - RECLAIM_RESERVE_MS, stop.signal);
      }
      const metrics = await scrapeVnode(world);
      const latencies = metrics === undefined ? undefined : vnodeLatencies(metrics);
      if (options.keep && !stop.signal.aborted) {
        ui.done();
        clearTimeout(hardStop);
        const input = summaryInput(state, startedAt, latencies, true);
        for (const line of summaryLines(input)) process.stdout.write(`${line}\n`);
        process.stdout.write(
          [
            "",
            "--keep: everything is still running. In another shell:",
            ...world.connectionHelp().map((l) => `  ${l}`),
            "Ctrl-C stops everything.",
            "",
          ].join("\n"),
        );
        await waitForSignal(stop.signal);
        state.aborted = undefined;
      }
      // Before a restart of nebula-vnode (its histograms start again from 0), its first process's.
      let beforeRestart: Map<string, number> | undefined;
      if (vnodeProblem === undefined && !stop.signal.aborted && !options.keep) {
        if (world.warmPoolSize > 0) {
          // The pool's hosts are collected as an operator would: its size set to 0, the vnode
          // restarted with it.
          beforeRestart = metrics;
          await world.drainWarmPool();
          ui.note(
            "nebula-vnode restarted with the warm pool's size set to 0: it terminates the pool's hosts",
          );
        }
        await reclaim(world, state, ui, startedAt, deadline, stop.signal);
      }
      const after = await scrapeVnode(world);
      const merged =
        beforeRestart === undefined || after === undefined
          ? (after ?? beforeRestart)
          : addMetrics(beforeRestart, after);
      state.vnodeLatencies = merged === undefined ? latencies : vnodeLatencies(merged);
      const polled = await scrapeVnode(world, "nebula-vnode-polled");
      state.polledLatencies = polled === undefined ? undefined : vnodeLatencies(polled);
    } catch (error) {
      state.aborted ??= `error: ${(error as Error).message}`;
    } finally {
      ui.done();
      ui.note("stopping the local world…");
      const stopping = Date.now();
      await world.stop();
      ui.note(`stopped in ${((Date.now() - stopping) / 1000).toFixed(1)} s; nothing left running`);
    }
  }
  clearTimeout(hardStop);
  ui.done();
  const pending = state.tracker.pending();
  if (state.scenarioDeadlinePassedAt !== undefined && pending.length > 0)
    state.aborted ??= `timeout: ${state.scenarioDeadlinePassedAt} s into the run (--timeout ${options.timeoutSeconds} minus ${RECLAIM_RESERVE_MS / 1000} s kept for the clean-up) these scenarios had not shown what they should: ${pending.join(", ")}`;
  const input = summaryInput(state, startedAt, state.vnodeLatencies, options.keep);
  if (options.keep && state.aborted === undefined) return 0;
  if (state.aborted !== undefined) process.stderr.write(`demo: ${state.aborted}\n`);
  for (const line of summaryLines(input)) process.stdout.write(`${line}\n`);
  if (world !== undefined && !succeeded(input))
    process.stdout.write(`logs of nebula-vnode and nebula-operator: ${world.logDir}\n`);
  const benchOut = process.env.NEBULA_BENCH_OUT;
  if (benchOut !== undefined && benchOut !== "" && input.warm !== undefined)
    for (const row of warmBenchRows(input.warm))
      appendFileSync(benchOut, `${JSON.stringify(row)}\n`);
  if (options.ci) process.stdout.write(`${summaryLine(input)}\n`);
  if (signals > 0) return 130;
  return succeeded(input) ? 0 : 1;
}

function summaryInput(
  state: RunState,
  startedAt: number,
  latencies: SummaryInput["vnodeLatencies"],
  keep: boolean,
): SummaryInput {
  return {
    keep,
    verdicts: state.tracker.verdicts(),
    latencies: state.tracker.latencies(),
    vnodeLatencies: latencies,
    polledLatencies: state.polledLatencies,
    warm: state.tracker.warm?.figures(),
    instancesLeft: state.instancesLeft,
    podsLeft: state.podsLeft,
    elapsedMs: Date.now() - startedAt,
    aborted: state.aborted,
    violations: state.watch.violations(),
    watchedSamples: state.watch.samples,
  };
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`demo: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
