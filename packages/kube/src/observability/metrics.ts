/**
 * Prometheus metrics: a prom-client registry with Node's default metrics and the controller
 * toolkit's own (reconciles, errors, reconcile duration, queue depth, adds, retries, informer
 * restarts, leadership).
 *
 * @packageDocumentation
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { QueueObserver } from "../queue/work-queue.js";

export type { Registry } from "prom-client";

/** Options of {@link createRegistry}. */
export interface RegistryOptions {
  /** Collect prom-client's default process and Node.js metrics (default true). */
  readonly defaultMetrics?: boolean;
}

/** A fresh prom-client registry, with the default process metrics unless turned off. */
export function createRegistry(options: RegistryOptions = {}): Registry {
  const registry = new Registry();
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry });
  return registry;
}

/**
 * The toolkit's metrics, registered once per registry. Components take an instance through their
 * `metrics` option; without one they record nothing.
 *
 * | metric | type | labels |
 * | --- | --- | --- |
 * | `nebula_controller_reconcile_total` | counter | `controller`, `result` |
 * | `nebula_controller_reconcile_errors_total` | counter | `controller` |
 * | `nebula_controller_reconcile_duration_seconds` | histogram | `controller` |
 * | `nebula_workqueue_depth` | gauge | `name` |
 * | `nebula_workqueue_adds_total` | counter | `name` |
 * | `nebula_workqueue_retries_total` | counter | `name` |
 * | `nebula_informer_restarts_total` | counter | `informer` |
 * | `nebula_informer_synced` | gauge | `informer` |
 * | `nebula_leader_election_is_leader` | gauge | `lease` |
 */
export class ControllerMetrics {
  /** Reconciles by controller and result. */
  readonly reconciles: Counter<"controller" | "result">;
  /** Reconciles that threw, by controller. */
  readonly errors: Counter<"controller">;
  /** Reconcile duration in seconds, by controller. */
  readonly duration: Histogram<"controller">;
  /** Keys waiting in a queue. */
  readonly queueDepth: Gauge<"name">;
  /** Keys added to a queue. */
  readonly queueAdds: Counter<"name">;
  /** Rate-limited re-adds. */
  readonly queueRetries: Counter<"name">;
  /** Informer restarts after an error. */
  readonly informerRestarts: Counter<"informer">;
  /** 1 once an informer has synced. */
  readonly informerSynced: Gauge<"informer">;
  /** 1 while this process holds the Lease. */
  readonly isLeader: Gauge<"lease">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.reconciles = new Counter({
      name: "nebula_controller_reconcile_total",
      help: "Reconciles by controller and result.",
      labelNames: ["controller", "result"],
      registers,
    });
    this.errors = new Counter({
      name: "nebula_controller_reconcile_errors_total",
      help: "Reconciles that failed, by controller.",
      labelNames: ["controller"],
      registers,
    });
    this.duration = new Histogram({
      name: "nebula_controller_reconcile_duration_seconds",
      help: "Reconcile duration in seconds, by controller.",
      labelNames: ["controller"],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.queueDepth = new Gauge({
      name: "nebula_workqueue_depth",
      help: "Keys waiting in the work queue.",
      labelNames: ["name"],
      registers,
    });
    this.queueAdds = new Counter({
      name: "nebula_workqueue_adds_total",
      help: "Keys added to the work queue.",
      labelNames: ["name"],
      registers,
    });
    this.queueRetries = new Counter({
      name: "nebula_workqueue_retries_total",
      help: "Rate-limited re-adds to the work queue.",
      labelNames: ["name"],
      registers,
    });
    this.informerRestarts = new Counter({
      name: "nebula_informer_restarts_total",
      help: "Informer restarts after a watch or list error.",
      labelNames: ["informer"],
      registers,
    });
    this.informerSynced = new Gauge({
      name: "nebula_informer_synced",
      help: "1 once the informer's cache has synced.",
      labelNames: ["informer"],
      registers,
    });
    this.isLeader = new Gauge({
      name: "nebula_leader_election_is_leader",
      help: "1 while this process holds the leader-election Lease.",
      labelNames: ["lease"],
      registers,
    });
  }

  /** A {@link QueueObserver} that records the queue named `name`. */
  queueObserver(name: string): QueueObserver {
    return {
      depth: (depth) => this.queueDepth.set({ name }, depth),
      added: () => this.queueAdds.inc({ name }),
      retried: () => this.queueRetries.inc({ name }),
    };
  }
}
