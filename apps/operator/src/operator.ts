/**
 * The operator's wiring: informers on Workload, WorkloadDeployment, Instance and Pods, three
 * controllers whose reconcilers load their scope from the caches, compute the status with the
 * pure functions of `reconcile.ts` and write it only when it changed, Events when a Workload's
 * `Available` flips, metrics, health and leader election through `@nebula/kube`'s manager.
 *
 * @packageDocumentation
 */
import type { KubeConfig, KubernetesObject, V1Pod } from "@kubernetes/client-node";
import {
  INSTANCE_KIND,
  type Instance,
  type KindDescription,
  matchesSelector,
  parseInstance,
  parseWorkload,
  parseWorkloadDeployment,
  WORKLOAD_DEPLOYMENT_KIND,
  WORKLOAD_KIND,
  type Workload,
  type WorkloadDeployment,
} from "@nebula/api";
import {
  customObjectInformer,
  type Informer,
  type InformerEvent,
  objectKey,
  podInformer,
} from "@nebula/kube/cache";
import { Controller, Manager, type ManagerLeaderElection } from "@nebula/kube/controller";
import { EventRecorder } from "@nebula/kube/events";
import { type Logger, silentLogger } from "@nebula/kube/observability";
import { type ResourceType, type StatusWriteOutcome, StatusWriter } from "@nebula/kube/status";
import { Counter } from "prom-client";
import {
  availabilityEvent,
  desiredWorkloadStatus,
  planInstance,
  planWorkloadDeployment,
  REFERENCES_RESOLVED,
} from "./reconcile.js";

/** The field manager of every status write, and the Events' reporting controller. */
const FIELD_MANAGER = "nebula-operator";

/** The Events' `reportingController`. */
const REPORTING_CONTROLLER = "compute.nebula.dev/operator";

/** The condition types the operator owns on Workloads and WorkloadDeployments. */
const OWNED_CONDITIONS = [
  "Available",
  "ReplicasReady",
  "Degraded",
  "Progressing",
  REFERENCES_RESOLVED,
  "Reconciling",
  "Stalled",
] as const;

/** The condition types the operator owns on Instances (the rest are their provider's). */
const OWNED_INSTANCE_CONDITIONS = ["Reconciling", "Stalled"] as const;

/** Options of {@link createOperator}. */
export interface OperatorOptions {
  /** The cluster. */
  readonly kubeConfig: KubeConfig;
  /** Watch only this namespace (default: all). */
  readonly namespace?: string | undefined;
  /** Structured logger (default: silent). */
  readonly logger?: Logger | undefined;
  /** Take part in leader election with this Lease (default: run unconditionally). */
  readonly leaderElection?: ManagerLeaderElection | undefined;
  /** `host:port` for `/metrics` (default `0`: off). */
  readonly metricsBindAddress?: string | undefined;
  /** `host:port` for `/healthz` and `/readyz` (default `0`: off). */
  readonly healthProbeBindAddress?: string | undefined;
  /** This replica's name (Events' `reportingInstance`; default the host name). */
  readonly identity?: string | undefined;
  /** Workers per controller (default 2). */
  readonly workers?: number | undefined;
  /** Handle SIGTERM/SIGINT (default true; tests pass false). */
  readonly handleSignals?: boolean | undefined;
  /** The clock (default `() => new Date()`). */
  readonly now?: (() => Date) | undefined;
  /**
   * Reconcile every object again this often even without a change, in ms (default 10 minutes;
   * 0: never). A repeat writes nothing when the world is unchanged.
   */
  readonly resyncPeriodMs?: number | undefined;
  /**
   * The stability window in seconds (default 600, `@nebula/state-mapping`'s): an instance whose
   * container restarted less than this long ago counts as crashing, not ready. The object is
   * reconciled again when the window ends, so `Available` turns True with no other event.
   */
  readonly stabilityWindowSeconds?: number | undefined;
}

/** The running parts of an operator, for its entry point and its tests. */
export interface Operator {
  /** Runs everything; resolve `run(signal)` by aborting `signal` or with SIGTERM. */
  readonly manager: Manager;
  /** The three controllers by kind. */
  readonly controllers: {
    readonly workloads: Controller;
    readonly workloadDeployments: Controller;
    readonly instances: Controller;
  };
  /** Closes the event recorder (flushes pending series). Call after `manager.run` resolved. */
  close(): Promise<void>;
}

const resourceOf = (kind: KindDescription): ResourceType => ({
  group: kind.group,
  version: kind.version,
  plural: kind.plural,
  kind: kind.kind,
});

/** Parses each cached object once per version of it (informers replace objects on change). */
function memo<T>(parse: (value: unknown) => { ok: true; value: T } | { ok: false }) {
  const cache = new WeakMap<object, T | null>();
  return (object: KubernetesObject | undefined): T | undefined => {
    if (object === undefined) return undefined;
    let parsed = cache.get(object);
    if (parsed === undefined) {
      const result = parse(object);
      parsed = result.ok ? result.value : null;
      cache.set(object, parsed);
    }
    return parsed ?? undefined;
  };
}

/** Builds the operator: informers, controllers and the manager that runs them. */
export function createOperator(options: OperatorOptions): Operator {
  const { kubeConfig, namespace } = options;
  const logger = options.logger ?? silentLogger();
  const now = options.now ?? (() => new Date());
  const workers = options.workers ?? 2;
  const manager = new Manager({
    name: "nebula-operator",
    kubeConfig,
    logger,
    metricsBindAddress: options.metricsBindAddress ?? "0",
    healthProbeBindAddress: options.healthProbeBindAddress ?? "0",
    ...(options.leaderElection ? { leaderElection: options.leaderElection } : {}),
    ...(options.handleSignals === undefined ? {} : { handleSignals: options.handleSignals }),
  });
  const writes = new Counter({
    name: "nebula_operator_status_writes_total",
    help: "Status writes by kind and outcome (written, unchanged, conflict, gone).",
    labelNames: ["kind", "outcome"],
    registers: [manager.registry],
  });
  const flips = new Counter({
    name: "nebula_operator_availability_changes_total",
    help: "Workloads whose Available condition changed status.",
    labelNames: ["to"],
    registers: [manager.registry],
  });

  const resyncPeriodMs = options.resyncPeriodMs ?? 600_000;
  const informerOptions = (kind: KindDescription) => ({
    resyncPeriodMs,
    group: kind.group,
    version: kind.version,
    plural: kind.plural,
    logger,
    metrics: manager.metrics,
    ...(namespace === undefined ? {} : { namespace }),
  });
  const workloads = customObjectInformer<KubernetesObject>(
    kubeConfig,
    informerOptions(WORKLOAD_KIND),
  );
  const deployments = customObjectInformer<KubernetesObject>(
    kubeConfig,
    informerOptions(WORKLOAD_DEPLOYMENT_KIND),
  );
  const instances = customObjectInformer<KubernetesObject>(
    kubeConfig,
    informerOptions(INSTANCE_KIND),
  );
  const pods: Informer<V1Pod> = podInformer(kubeConfig, {
    logger,
    metrics: manager.metrics,
    ...(namespace === undefined ? {} : { namespace }),
  });

  const asWorkload = memo<Workload>(parseWorkload);
  const asDeployment = memo<WorkloadDeployment>(parseWorkloadDeployment);
  const asInstance = memo<Instance>(parseInstance);

  const recorder = new EventRecorder(kubeConfig, {
    reportingController: REPORTING_CONTROLLER,
    reportingInstance: (options.identity ?? process.env.HOSTNAME ?? FIELD_MANAGER).slice(0, 128),
    logger,
  });
  const writer = (kind: KindDescription, owned: readonly string[]) =>
    new StatusWriter<object>(kubeConfig, {
      resource: resourceOf(kind),
      fieldManager: FIELD_MANAGER,
      ownedConditions: [...owned],
    });
  const deploymentWriter = writer(WORKLOAD_DEPLOYMENT_KIND, OWNED_CONDITIONS);
  const workloadWriter = writer(WORKLOAD_KIND, OWNED_CONDITIONS);
  const instanceWriter = writer(INSTANCE_KIND, OWNED_INSTANCE_CONDITIONS);

  const count = (kind: string, outcome: StatusWriteOutcome) => writes.inc({ kind, outcome });
  const judge = { stabilityWindowSeconds: options.stabilityWindowSeconds };
  /**
   * A conflict means the cache is behind: its watch event enqueues the key again; retry soon
   * anyway. A stability window that holds an instance: again when it ends (the earlier wins).
   */
  const after = (outcome: StatusWriteOutcome, windowEndsInMs?: number) => {
    const delays = [outcome === "conflict" ? 1_000 : undefined, windowEndsInMs].filter(
      (d): d is number => d !== undefined,
    );
    return delays.length === 0 ? undefined : { requeueAfter: Math.min(...delays) };
  };
  const split = (key: string) => {
    const slash = key.indexOf("/");
    return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
  };

  // --- WorkloadDeployments: from their instances ------------------------------------------------

  const workloadDeployments = new Controller({
    name: "workloaddeployments",
    workers,
    logger,
    metrics: manager.metrics,
    reconcile: async (key) => {
      const stored = deployments.get(key);
      const deployment = asDeployment(stored);
      if (stored === undefined || deployment === undefined) {
        if (stored !== undefined)
          logger.warn({ key }, "WorkloadDeployment does not parse; skipped");
        return undefined;
      }
      const ns = deployment.metadata.namespace ?? "";
      const workload = asWorkload(workloads.get(`${ns}/${deployment.spec.workloadRef.name}`));
      const scopeInstances = instances
        .list(ns)
        .map(asInstance)
        .filter((i): i is Instance => i !== undefined);
      const plan = planWorkloadDeployment(
        { deployment, workload, pods: pods.list(ns) as never[], instances: scopeInstances },
        now(),
        judge,
      );
      const result = await deploymentWriter.write(split(key), plan.status, { current: stored });
      count("WorkloadDeployment", result.outcome);
      return after(result.outcome, plan.requeueAfterMs);
    },
  });

  /** The WorkloadDeployments whose selector matches an instance's labels, before or after the change. */
  const deploymentsSelecting = (
    event: InformerEvent<{ metadata?: { namespace?: string; labels?: Record<string, string> } }>,
  ): string[] => {
    const ns = event.object.metadata?.namespace;
    const labelSets = [event.object.metadata?.labels, event.oldObject?.metadata?.labels];
    const keys: string[] = [];
    for (const stored of deployments.list(ns)) {
      const d = asDeployment(stored);
      if (
        d !== undefined &&
        labelSets.some((l) => l !== undefined && matchesSelector(d.spec.selector, l))
      ) {
        keys.push(objectKey(stored));
      }
    }
    return keys;
  };
  workloadDeployments
    .watch(deployments)
    .watch(pods, deploymentsSelecting as never)
    .watch(instances, deploymentsSelecting as never)
    .watch(workloads, (event) => {
      const ns = event.object.metadata?.namespace;
      const name = event.object.metadata?.name;
      return deployments
        .list(ns)
        .filter((d) => asDeployment(d)?.spec.workloadRef.name === name)
        .map(objectKey);
    });

  // --- Workloads: from their WorkloadDeployments ------------------------------------------------

  const workloadController = new Controller({
    name: "workloads",
    workers,
    logger,
    metrics: manager.metrics,
    reconcile: async (key) => {
      const stored = workloads.get(key);
      const workload = asWorkload(stored);
      if (stored === undefined || workload === undefined) {
        if (stored !== undefined) logger.warn({ key }, "Workload does not parse; skipped");
        return undefined;
      }
      const ns = workload.metadata.namespace ?? "";
      const serving = deployments
        .list(ns)
        .map(asDeployment)
        .filter(
          (d): d is WorkloadDeployment => d?.spec.workloadRef.name === workload.metadata.name,
        );
      const status = desiredWorkloadStatus({ workload, deployments: serving }, now());
      const result = await workloadWriter.write(split(key), status, { current: stored });
      count("Workload", result.outcome);
      if (result.outcome === "written") {
        const flip = availabilityEvent(workload.status?.conditions, status.conditions);
        if (flip !== undefined) {
          flips.inc({ to: flip.type === "Normal" ? "True" : "False" });
          logger.info({ key, reason: flip.reason, to: flip.type }, "Workload availability changed");
          void recorder.record({
            regarding: {
              apiVersion: `${WORKLOAD_KIND.group}/${WORKLOAD_KIND.version}`,
              kind: WORKLOAD_KIND.kind,
              namespace: ns,
              name: workload.metadata.name ?? "",
              uid: workload.metadata.uid,
            },
            type: flip.type,
            reason: flip.reason,
            action: "RollUp",
            note: flip.note,
          });
        }
      }
      return after(result.outcome);
    },
  });
  workloadController.watch(workloads).watch(deployments, (event) => {
    const ns = event.object.metadata?.namespace ?? "";
    const refs = [asDeployment(event.object), asDeployment(event.oldObject)]
      .map((d) => d?.spec.workloadRef.name)
      .filter((n): n is string => n !== undefined);
    return [...new Set(refs)].map((name) => `${ns}/${name}`);
  });

  // --- Instances: kstatus conditions from their own reason --------------------------------------

  const instanceController = new Controller({
    name: "instances",
    workers,
    logger,
    metrics: manager.metrics,
    reconcile: async (key) => {
      const stored = instances.get(key);
      const instance = asInstance(stored);
      if (stored === undefined || instance === undefined) return undefined;
      const plan = planInstance(instance, now(), judge);
      const result = await instanceWriter.write(
        split(key),
        { conditions: plan.status },
        { current: stored },
      );
      count("Instance", result.outcome);
      return after(result.outcome, plan.requeueAfterMs);
    },
  });
  instanceController.watch(instances);

  manager
    .addController(workloadDeployments)
    .addController(workloadController)
    .addController(instanceController);

  return {
    manager,
    controllers: {
      workloads: workloadController,
      workloadDeployments,
      instances: instanceController,
    },
    close: () => recorder.close(),
  };
}
