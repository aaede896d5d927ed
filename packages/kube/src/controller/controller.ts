/**
 * The controller loop: informers' handlers enqueue keys into a {@link WorkQueue}; N workers take
 * keys and call `reconcile(key, signal)`. A throw re-queues the key rate-limited; success forgets
 * its failures (and re-queues it after `requeueAfter` when asked).
 *
 * @packageDocumentation
 */
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Informer, InformerEvent } from "../cache/informer.js";
import { KubeError } from "../errors.js";
import type { Logger } from "../observability/logger.js";
import { silentLogger } from "../observability/logger.js";
import type { ControllerMetrics } from "../observability/metrics.js";
import type { RateLimiter } from "../queue/rate-limiter.js";
import { WorkQueue } from "../queue/work-queue.js";

/** What a reconcile asks for next. */
export interface ReconcileResult {
  /**
   * Reconcile this key again after this many ms (a poll), even if nothing changes; `0`: again at
   * once (the next step of a multi-step change that no watch event will announce).
   */
  readonly requeueAfter?: number;
}

/**
 * Brings the object named by `key` (`namespace/name`) to its desired state. Must be idempotent.
 * `signal` aborts when the controller must stop at once (leadership lost, drain deadline passed).
 * Throw to retry with back-off.
 */
export type Reconciler = (
  key: string,
  signal: AbortSignal,
) => Promise<ReconcileResult | undefined> | ReconcileResult | undefined;

/** Maps an informer event to the keys to reconcile (default: the object's own key). */
export type KeyMapper<T> = (event: InformerEvent<T>) => string | readonly string[] | undefined;

/** Options of {@link Controller}. */
export interface ControllerOptions {
  /** Name in logs, metrics and the queue. */
  readonly name: string;
  /** The reconcile function. */
  readonly reconcile: Reconciler;
  /** Concurrent workers (default 1). Keys are never reconciled concurrently with themselves. */
  readonly workers?: number;
  /** Limiter for failed keys (default: 5 ms → 1000 s per key, 10 qps / burst 100 overall). */
  readonly rateLimiter?: RateLimiter;
  /**
   * How long in-flight reconciles may run after a graceful stop before their signal aborts
   * (default 30 000 ms).
   */
  readonly drainTimeoutMs?: number;
  /** Logger (default: silent). */
  readonly logger?: Logger;
  /** Records reconciles, errors, durations and queue figures. */
  readonly metrics?: ControllerMetrics;
}

/** How {@link Controller.run} is stopped. */
export interface ControllerRunOptions {
  /** Abort to stop gracefully: no new keys, in-flight reconciles finish (up to `drainTimeoutMs`). */
  readonly signal: AbortSignal;
  /** Abort to stop at once: in-flight reconciles see their signal abort. */
  readonly hardStop?: AbortSignal;
}

/**
 * A controller: a queue, the informers feeding it, and N workers running `reconcile`.
 *
 * @example
 * ```ts
 * const controller = new Controller({
 *   name: "pods",
 *   workers: 4,
 *   reconcile: async (key, signal) => {
 *     const pod = pods.get(key);
 *     if (pod === undefined) return;           // deleted
 *     await ensureInstance(pod, signal);       // throw → retried with back-off
 *     return { requeueAfter: 30_000 };         // poll again in 30 s
 *   },
 * }).watch(pods);
 * await controller.run({ signal });            // resolves after a graceful drain
 * ```
 */
export class Controller {
  /** Name in logs and metrics. */
  readonly name: string;
  /** The controller's queue (add keys from outside with {@link Controller.enqueue}). */
  readonly queue: WorkQueue;
  readonly #options: ControllerOptions;
  readonly #log: Logger;
  readonly #informers: Array<Informer<KubernetesObject>> = [];
  #running = false;

  constructor(options: ControllerOptions) {
    this.#options = options;
    this.name = options.name;
    this.#log = (options.logger ?? silentLogger()).child({ controller: options.name });
    this.queue = new WorkQueue({
      name: options.name,
      ...(options.rateLimiter === undefined ? {} : { rateLimiter: options.rateLimiter }),
      ...(options.metrics === undefined
        ? {}
        : { observer: options.metrics.queueObserver(options.name) }),
    });
  }

  /**
   * Enqueues keys on every event of `informer` (mapped by `map`, default the object's own key).
   * The handler only enqueues, so it cannot fail.
   */
  watch<T extends KubernetesObject>(informer: Informer<T>, map?: KeyMapper<T>): this {
    this.#informers.push(informer as unknown as Informer<KubernetesObject>);
    informer.onEvent((event) => {
      const keys = map === undefined ? event.key : map(event);
      if (keys === undefined) return;
      if (typeof keys === "string") this.queue.add(keys);
      else for (const key of keys) this.queue.add(key);
    });
    return this;
  }

  /** The informers this controller watches. */
  informers(): readonly Informer<KubernetesObject>[] {
    return this.#informers;
  }

  /** Adds `key` to the queue (e.g. from a timer or another controller). */
  enqueue(key: string): void {
    this.queue.add(key);
  }

  /**
   * Runs the workers until `signal` aborts, then drains: no new key is started, in-flight
   * reconciles finish (their signal aborts after `drainTimeoutMs` or on `hardStop`). Resolves once
   * every worker has returned. A controller runs once; its queue is shut down afterwards.
   */
  async run(options: ControllerRunOptions): Promise<void> {
    if (this.#running)
      throw new KubeError("AlreadyRunning", `controller ${this.name} is already running`);
    this.#running = true;
    const { signal, hardStop } = options;
    const inFlight = new AbortController();
    let drainTimer: ReturnType<typeof setTimeout> | undefined;
    const onStop = (): void => {
      this.queue.shutdown();
      drainTimer = setTimeout(
        () => inFlight.abort(new Error("drain deadline passed")),
        this.#options.drainTimeoutMs ?? 30_000,
      );
      drainTimer.unref();
    };
    const onHardStop = (): void => {
      this.queue.shutdown();
      inFlight.abort(new Error("controller stopped"));
    };
    if (signal.aborted) onStop();
    else signal.addEventListener("abort", onStop, { once: true });
    if (hardStop?.aborted) onHardStop();
    else hardStop?.addEventListener("abort", onHardStop, { once: true });
    const workers = Math.max(1, Math.floor(this.#options.workers ?? 1));
    this.#log.info({ workers }, "controller started");
    try {
      await Promise.all(
        Array.from({ length: workers }, () => this.#worker(signal, inFlight.signal)),
      );
    } finally {
      signal.removeEventListener("abort", onStop);
      hardStop?.removeEventListener("abort", onHardStop);
      if (drainTimer !== undefined) clearTimeout(drainTimer);
      this.queue.shutdown();
      this.#log.info("controller drained");
    }
  }

  async #worker(stop: AbortSignal, inFlight: AbortSignal): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      if (stop.aborted) {
        // Stopping: keys still queued are left for the next leader.
        this.queue.done(key);
        continue;
      }
      await this.#reconcileOne(key, inFlight);
      this.queue.done(key);
    }
  }

  async #reconcileOne(key: string, signal: AbortSignal): Promise<void> {
    const { metrics, reconcile } = this.#options;
    const labels = { controller: this.name };
    const started = performance.now();
    try {
      const result = await reconcile(key, signal);
      this.queue.forget(key);
      const after = result?.requeueAfter;
      if (after !== undefined && after > 0) {
        this.queue.addAfter(key, after);
        metrics?.reconciles.inc({ ...labels, result: "requeue_after" });
      } else if (after === 0) {
        // Again at once: the queue hands the key out after this reconcile's `done`.
        this.queue.add(key);
        metrics?.reconciles.inc({ ...labels, result: "requeue" });
      } else {
        metrics?.reconciles.inc({ ...labels, result: "success" });
      }
    } catch (error) {
      metrics?.reconciles.inc({ ...labels, result: "error" });
      metrics?.errors.inc(labels);
      this.#log.warn(
        { err: error, key, requeues: this.queue.numRequeues(key) },
        "reconcile failed; retrying with back-off",
      );
      this.queue.addRateLimited(key);
    } finally {
      metrics?.duration.observe(labels, (performance.now() - started) / 1000);
    }
  }
}
