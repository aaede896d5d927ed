/**
 * The manager: runs an app's informers, controllers and other loops, the metrics and health-probe
 * servers, and (optionally) leader election, and stops them in order.
 *
 * - Informers run on every replica (a standby's cache is warm); controllers and leader-only
 *   runnables run only while leading, and only after every informer has synced.
 * - `/readyz` is ready when every informer has synced — leading or not, so a standby is Ready.
 *   `/healthz` is ok while the manager runs.
 * - Shutdown (SIGTERM, SIGINT or the `signal` given to {@link Manager.run}), in this order:
 *   1. `stop-leading`: controllers stop taking keys, `/readyz` turns 503;
 *   2. `drained`: in-flight reconciles and leader-only runnables have finished, or the drain
 *      deadline (`drainTimeoutMs` after the stop) has passed: a reconcile's signal aborts then,
 *      and a runnable still running is logged and no longer waited for;
 *   3. `lease-released`: the Lease's holder is cleared (a standby takes over at once) — only now,
 *      so two replicas never reconcile at the same time;
 *   4. `server-closed`: informers stopped, the other runnables too (each waited for at most 5 s),
 *      the HTTP servers closed; `run` resolves.
 * - Leadership lost (no renewal within the renew deadline): in-flight reconciles are aborted at
 *   once and `run` resolves with exit code 1 so the process restarts and campaigns afresh.
 *
 * @packageDocumentation
 */
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { KubeConfig, KubernetesObject } from "@kubernetes/client-node";
import type { Informer } from "../cache/informer.js";
import { KubeError } from "../errors.js";
import { LeaderElector, type StoppedLeadingReason } from "../leader/leader-elector.js";
import type { Logger } from "../observability/logger.js";
import { silentLogger } from "../observability/logger.js";
import { ControllerMetrics, createRegistry, type Registry } from "../observability/metrics.js";
import {
  type BindAddress,
  type ProbeResult,
  type ProbeServer,
  parseBindAddress,
  startProbeServer,
} from "../observability/server.js";
import type { Controller } from "./controller.js";

/**
 * How long a runnable that is not leader-only may take to stop once the informers are told to
 * (ms); past it the shutdown goes on without it.
 */
const RUNNABLE_CLOSE_MS = 5_000;

/** A long-running loop the manager starts and stops (a poller, a heartbeat, ...). */
export interface Runnable {
  /** Name in logs. */
  readonly name: string;
  /** Runs until `signal` aborts, then returns. A rejection stops the manager with exit code 1. */
  run(signal: AbortSignal): Promise<void>;
}

/** Leader-election settings of a {@link Manager}. */
export interface ManagerLeaderElection {
  /** Namespace of the Lease. */
  readonly namespace: string;
  /** Name of the Lease (default: the manager's name). */
  readonly name?: string;
  /** This replica's identity (default: `<hostname>_<random>`). */
  readonly identity?: string;
  /** Lease duration in ms (default 15 000). */
  readonly leaseDurationMs?: number;
  /** Renew deadline in ms (default 10 000). */
  readonly renewDeadlineMs?: number;
  /** Retry period in ms (default 2 000). */
  readonly retryPeriodMs?: number;
}

/** A step of the ordered shutdown (see the module doc). */
export type ShutdownPhase = "stop-leading" | "drained" | "lease-released" | "server-closed";

/** Options of {@link Manager}. */
export interface ManagerOptions {
  /** The app's name (logs, default Lease name), e.g. `nebula-operator`. */
  readonly name: string;
  /** Configuration of the cluster (for the Lease). */
  readonly kubeConfig: KubeConfig;
  /** Logger (default: silent). */
  readonly logger?: Logger;
  /** Registry served on `/metrics` (default: a new one with the default process metrics). */
  readonly registry?: Registry;
  /** Metrics of the toolkit (default: registered on `registry`). Pass it to informers and controllers. */
  readonly metrics?: ControllerMetrics;
  /** `host:port` of `/metrics` (`:8080` style; `0` = off; default `0`). */
  readonly metricsBindAddress?: string;
  /** `host:port` of `/healthz` and `/readyz` (`0` = off; default `0`). Equal to the metrics address: one server. */
  readonly healthProbeBindAddress?: string;
  /** Leader election (absent: this replica always leads). */
  readonly leaderElection?: ManagerLeaderElection;
  /**
   * How long in-flight reconciles and leader-only runnables may run after shutdown begins, in ms
   * (default: none of its own; a reconcile gets its controller's deadline, 30 s unless set, and a
   * runnable is waited for until it stops).
   */
  readonly drainTimeoutMs?: number;
  /** Stop on SIGTERM and SIGINT (default true). */
  readonly handleSignals?: boolean;
  /** Called at each step of the shutdown, in order. */
  readonly onShutdownPhase?: (phase: ShutdownPhase) => void;
}

/** How {@link Manager.run} ended. */
export interface ManagerExit {
  /** `stopped` (signal or abort), `leadership-lost`, or `failed` (a server or runnable failed). */
  readonly reason: "stopped" | "leadership-lost" | "failed";
  /** The process exit code to use: 0 for `stopped`, else 1. */
  readonly exitCode: 0 | 1;
  /** What failed, for `failed`. */
  readonly error?: unknown;
}

/**
 * Runs an app's informers, controllers and loops with health, metrics and leader election.
 *
 * @example
 * ```ts
 * const manager = new Manager({
 *   name: "nebula-operator", kubeConfig, logger,
 *   metricsBindAddress: ":8080", healthProbeBindAddress: ":8081",
 *   leaderElection: { namespace: "nebula-system" },
 * });
 * const pods = podInformer(kubeConfig, { metrics: manager.metrics });
 * manager.addController(new Controller({ name: "pods", reconcile, metrics: manager.metrics }).watch(pods));
 * const exit = await manager.run();   // until SIGTERM
 * process.exit(exit.exitCode);
 * ```
 */
export class Manager {
  /** The registry served on `/metrics`. */
  readonly registry: Registry;
  /** The toolkit's metrics on {@link registry}. */
  readonly metrics: ControllerMetrics;
  /** The manager's logger. */
  readonly logger: Logger;
  readonly #options: ManagerOptions;
  readonly #informers = new Set<Informer<KubernetesObject>>();
  readonly #controllers: Controller[] = [];
  readonly #runnables: Array<{ runnable: Runnable; leaderOnly: boolean }> = [];
  readonly #servers: ProbeServer[] = [];
  readonly #urls: { metrics?: string; health?: string } = {};
  #elector: LeaderElector | undefined;
  #stopping = false;
  #running = false;

  constructor(options: ManagerOptions) {
    this.#options = options;
    this.logger = options.logger ?? silentLogger();
    this.registry = options.registry ?? createRegistry();
    this.metrics = options.metrics ?? new ControllerMetrics(this.registry);
  }

  /** Adds an informer (run on every replica; part of readiness). */
  addInformer<T extends KubernetesObject>(informer: Informer<T>): this {
    this.#informers.add(informer as unknown as Informer<KubernetesObject>);
    return this;
  }

  /** Adds a controller (run while leading) and the informers it watches. */
  addController(controller: Controller): this {
    this.#controllers.push(controller);
    for (const informer of controller.informers()) this.#informers.add(informer);
    return this;
  }

  /** Adds a loop; `leaderOnly` (default true) runs it only while leading. */
  addRunnable(runnable: Runnable, options: { leaderOnly?: boolean } = {}): this {
    this.#runnables.push({ runnable, leaderOnly: options.leaderOnly ?? true });
    return this;
  }

  /** `/readyz`: true when every informer has synced and no shutdown has begun. */
  ready(): ProbeResult {
    if (this.#stopping) return "shutting down";
    const pending = [...this.#informers].filter((i) => !i.hasSynced()).map((i) => i.name);
    return pending.length === 0 ? true : `informers not synced: ${pending.join(", ")}`;
  }

  /** `/healthz`: true while the manager runs. */
  healthy(): ProbeResult {
    return this.#running ? true : "not running";
  }

  /** Whether this replica leads (always true without leader election, once running). */
  isLeader(): boolean {
    if (this.#options.leaderElection !== undefined) return this.#elector?.isLeader() ?? false;
    return this.#running && !this.#stopping;
  }

  /** URLs of the running servers (`http://host:port`), once {@link run} has started them. */
  urls(): { readonly metrics?: string; readonly health?: string } {
    return { ...this.#urls };
  }

  /**
   * Runs everything until `signal` aborts (or SIGTERM/SIGINT), then shuts down in order. Never
   * rejects: failures come back as `{ reason: "failed", exitCode: 1, error }`.
   */
  async run(signal?: AbortSignal): Promise<ManagerExit> {
    if (this.#running)
      throw new KubeError("AlreadyRunning", `manager ${this.#options.name} is already running`);
    this.#running = true;
    const log = this.logger;
    const phase = (name: ShutdownPhase): void => {
      log.info({ phase: name }, "shutdown");
      try {
        this.#options.onShutdownPhase?.(name);
      } catch (error) {
        log.error({ err: error }, "onShutdownPhase threw");
      }
    };
    const stop = new AbortController();
    const onStop = (): void => {
      if (!stop.signal.aborted) {
        this.#stopping = true;
        log.info("stop requested");
        stop.abort();
      }
    };
    if (signal?.aborted) onStop();
    signal?.addEventListener("abort", onStop, { once: true });
    const handleSignals = this.#options.handleSignals ?? true;
    if (handleSignals) {
      process.once("SIGTERM", onStop);
      process.once("SIGINT", onStop);
    }
    let failure: unknown;
    const fail = (error: unknown): void => {
      if (failure === undefined) failure = error;
      onStop();
    };
    const informersStop = new AbortController();
    const informerRuns: Promise<void>[] = [];
    const everyReplicaRuns: Array<{ name: string; run: Promise<void> }> = [];
    let exitReason: ManagerExit["reason"] = "stopped";
    try {
      await this.#startServers();
      for (const informer of this.#informers) {
        informerRuns.push(informer.run(informersStop.signal).catch(fail));
      }
      for (const { runnable } of this.#runnables.filter((r) => !r.leaderOnly)) {
        const run = this.#runRunnable(runnable, informersStop.signal, fail);
        everyReplicaRuns.push({ name: runnable.name, run });
      }
      const election = this.#options.leaderElection;
      if (election === undefined) {
        const work = this.#leaderWork(stop.signal, new AbortController().signal, fail);
        await new Promise<void>((resolve) => {
          if (stop.signal.aborted) resolve();
          else stop.signal.addEventListener("abort", () => resolve(), { once: true });
        });
        phase("stop-leading");
        await work;
        phase("drained");
      } else {
        const elector = new LeaderElector(
          this.#options.kubeConfig,
          {
            namespace: election.namespace,
            name: election.name ?? this.#options.name,
            identity: election.identity ?? `${hostname()}_${randomBytes(4).toString("hex")}`,
            ...(election.leaseDurationMs === undefined
              ? {}
              : { leaseDurationMs: election.leaseDurationMs }),
            ...(election.renewDeadlineMs === undefined
              ? {}
              : { renewDeadlineMs: election.renewDeadlineMs }),
            ...(election.retryPeriodMs === undefined
              ? {}
              : { retryPeriodMs: election.retryPeriodMs }),
          },
          { logger: log, metrics: this.metrics },
        );
        this.#elector = elector;
        let work: Promise<void> | undefined;
        const hardStop = new AbortController();
        const reason: StoppedLeadingReason = await elector.run(stop.signal, {
          onStartedLeading: (term) => {
            work = this.#leaderWork(term, hardStop.signal, fail);
          },
          onStoppedLeading: async (why) => {
            phase("stop-leading");
            if (why === "lost") hardStop.abort(new Error("leadership lost"));
            await work;
            phase("drained");
          },
        });
        if (reason === "lost") {
          exitReason = "leadership-lost";
          onStop();
        } else if (work !== undefined && elector.options.releaseOnCancel) {
          phase("lease-released");
        }
      }
    } catch (error) {
      fail(error);
    } finally {
      this.#stopping = true;
      informersStop.abort();
      const closeDeadline = AbortSignal.timeout(RUNNABLE_CLOSE_MS);
      await Promise.all([
        ...informerRuns,
        ...everyReplicaRuns.map(({ name, run }) => this.#waitUntil(run, closeDeadline, name)),
      ]);
      await Promise.all(this.#servers.map((s) => s.close()));
      if (this.#servers.length > 0) phase("server-closed");
      this.#servers.length = 0;
      if (handleSignals) {
        process.off("SIGTERM", onStop);
        process.off("SIGINT", onStop);
      }
      signal?.removeEventListener("abort", onStop);
      this.#running = false;
    }
    if (failure !== undefined) {
      log.error({ err: failure }, "manager failed");
      return { reason: "failed", exitCode: 1, error: failure };
    }
    return exitReason === "stopped"
      ? { reason: "stopped", exitCode: 0 }
      : { reason: exitReason, exitCode: 1 };
  }

  /** Controllers and leader-only runnables, after every informer has synced. */
  async #leaderWork(
    term: AbortSignal,
    hardStop: AbortSignal,
    fail: (e: unknown) => void,
  ): Promise<void> {
    const synced = await Promise.all([...this.#informers].map((i) => i.waitForSync(term)));
    if (synced.includes(false)) return;
    this.logger.info("caches synced; starting controllers");
    // The manager's drain deadline: once the shutdown begins, in-flight reconciles get
    // `drainTimeoutMs`, then their signal aborts (each controller's own deadline still applies).
    const deadline = new AbortController();
    const drainMs = this.#options.drainTimeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const startDeadline = (): void => {
      if (drainMs === undefined) return;
      timer = setTimeout(() => deadline.abort(new Error("drain deadline passed")), drainMs);
      timer.unref();
    };
    if (term.aborted) startDeadline();
    else term.addEventListener("abort", startDeadline, { once: true });
    const stopNow = AbortSignal.any([hardStop, deadline.signal]);
    try {
      await this.#runLeaderWork(term, stopNow, fail);
    } finally {
      term.removeEventListener("abort", startDeadline);
      if (timer !== undefined) clearTimeout(timer);
    }
  }

  async #runLeaderWork(
    term: AbortSignal,
    hardStop: AbortSignal,
    fail: (e: unknown) => void,
  ): Promise<void> {
    await Promise.all([
      ...this.#controllers.map((c) => c.run({ signal: term, hardStop }).catch(fail)),
      // A runnable is waited for until the drain deadline (or a lost Lease), like a reconcile:
      // one stuck in a call that ignores its signal must not hold the shutdown past the grace
      // the process is given (the kubelet's SIGKILL would end it without the ordered steps).
      ...this.#runnables
        .filter((r) => r.leaderOnly)
        .map(({ runnable }) =>
          this.#waitUntil(this.#runRunnable(runnable, term, fail), hardStop, runnable.name),
        ),
    ]);
  }

  /**
   * Resolves when `run` settles or `deadline` aborts, whichever is first; in the second case the
   * runnable is left running (logged by name), and the shutdown goes on without it.
   */
  async #waitUntil(run: Promise<void>, deadline: AbortSignal, name: string): Promise<void> {
    let onAbort = (): void => {};
    const passed = new Promise<"passed">((resolve) => {
      onAbort = () => resolve("passed");
      if (deadline.aborted) resolve("passed");
      else deadline.addEventListener("abort", onAbort, { once: true });
    });
    try {
      const first = await Promise.race([run.then(() => "stopped" as const), passed]);
      if (first === "passed") {
        this.logger.warn(
          { runnable: name, reason: String(deadline.reason) },
          "runnable still running at the drain deadline; shutting down without it",
        );
      }
    } finally {
      deadline.removeEventListener("abort", onAbort);
    }
  }

  async #runRunnable(
    runnable: Runnable,
    signal: AbortSignal,
    fail: (e: unknown) => void,
  ): Promise<void> {
    try {
      await runnable.run(signal);
    } catch (error) {
      this.logger.error({ err: error, runnable: runnable.name }, "runnable failed");
      fail(error);
    }
  }

  async #startServers(): Promise<void> {
    const parse = (flag: string, text: string): BindAddress | undefined => {
      const address = parseBindAddress(text);
      if (address === null)
        throw new KubeError("InvalidOptions", `${flag}: not a host:port address: ${text}`);
      return address;
    };
    const metrics = parse("metricsBindAddress", this.#options.metricsBindAddress ?? "0");
    const health = parse("healthProbeBindAddress", this.#options.healthProbeBindAddress ?? "0");
    const healthy = (): ProbeResult => this.healthy();
    const ready = (): ProbeResult => this.ready();
    if (
      metrics !== undefined &&
      health !== undefined &&
      metrics.host === health.host &&
      metrics.port === health.port &&
      metrics.port !== 0
    ) {
      const both = await startProbeServer({
        address: metrics,
        registry: this.registry,
        healthy,
        ready,
      });
      this.#servers.push(both);
      this.#urls.metrics = both.url;
      this.#urls.health = both.url;
    } else {
      if (metrics !== undefined) {
        const server = await startProbeServer({ address: metrics, registry: this.registry });
        this.#servers.push(server);
        this.#urls.metrics = server.url;
      }
      if (health !== undefined) {
        const server = await startProbeServer({ address: health, healthy, ready });
        this.#servers.push(server);
        this.#urls.health = server.url;
      }
    }
    for (const server of this.#servers) this.logger.info({ url: server.url }, "listening");
  }
}
