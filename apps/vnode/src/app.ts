/**
 * The wiring of `nebula-vnode`: the provider on EC2, the Pod informer on `spec.nodeName`, the
 * Node and Pod controllers of `@nebula/virtual-node`, under `@nebula/kube`'s manager (health,
 * metrics, leader election, ordered shutdown). Nothing here is for a user to import.
 */
import { readFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { CoreV1Api, type KubeConfig, type V1Pod, type V1PodStatus } from "@kubernetes/client-node";
import {
  ConfigMapPodLedger,
  Controller,
  EventRecorder,
  type Logger,
  Manager,
  type ManagerLeaderElection,
  PODS,
  podInformer,
  StatusWriter,
} from "@nebula/kube";
import {
  Ec2PodProvider,
  type PodSourceRefs,
  type PodSources,
  type SourceObject,
} from "@nebula/provider";
import {
  type InstanceReclaimer,
  KubernetesPodApi,
  NodeController,
  type NodeHealthSource,
  PodController,
  type PodLifecycle,
  PodTeardown,
  type Runnable,
} from "@nebula/virtual-node";
import { Counter, Gauge, Histogram } from "prom-client";
import { z } from "zod";
import type { AppConfig, KubeletApiConfig } from "./config.js";
import { apiServerAuth, KubeletServer } from "./kubelet-server.js";
import { selfSignedServingCert } from "./serving-cert.js";

/** What {@link createVnode} needs. */
export interface VnodeOptions {
  /** Where and as whom to connect. */
  readonly kubeConfig: KubeConfig;
  /** The parsed configuration. */
  readonly config: AppConfig;
  /** The namespace of the app: the Pod ledger (ConfigMaps) and the leader-election Lease live there. */
  readonly namespace: string;
  /** This replica's name (Events' `reportingInstance`, the leader identity). */
  readonly identity: string;
  /** JSON logger. */
  readonly logger: Logger;
  /** `/metrics` address (`0` off). */
  readonly metricsBindAddress?: string;
  /** `/healthz` + `/readyz` address (`0` off). */
  readonly healthProbeBindAddress?: string;
  /** Leader election (absent: this replica always leads). */
  readonly leaderElection?: ManagerLeaderElection;
}

/** The running parts, for the entry point and for tests. */
export interface Vnode {
  /** The manager: `run()` until SIGTERM. */
  readonly manager: Manager;
  /** The provider. */
  readonly provider: Ec2PodProvider;
  /** The Node controller. */
  readonly nodes: NodeController;
  /** The Pod controller. */
  readonly pods: PodController;
  /** After `manager.run()` returned: flushes pending Events and closes the EC2 client. */
  close(): Promise<void>;
}

/** The parts of a ConfigMap or Secret the host needs; anything else the API server returns is dropped. */
const SourceObjectSchema = z.object({
  data: z.record(z.string(), z.string()).nullish(),
  binaryData: z.record(z.string(), z.string()).nullish(),
});

/**
 * Reads the ConfigMaps and Secrets a Pod references, from the Pod's own namespace only, at launch
 * (the parameters delivery). A 404 leaves the name out (the renderer decides: a mandatory
 * reference holds the Pod with `CreateContainerConfigError`, an optional one is skipped); any
 * other failure throws, and the provider holds the Pod and reads again on its next poll. Plain
 * GETs rather than a cluster-wide Secret informer: nothing but what bound Pods reference is read
 * or kept in memory.
 */
function sourceReader(
  kubeConfig: KubeConfig,
): (pod: V1Pod, refs: PodSourceRefs) => Promise<PodSources> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const read = async (
    kind: "ConfigMap" | "Secret",
    namespace: string,
    name: string,
  ): Promise<SourceObject | undefined> => {
    let object: unknown;
    try {
      object =
        kind === "ConfigMap"
          ? await core.readNamespacedConfigMap({ name, namespace })
          : await core.readNamespacedSecret({ name, namespace });
    } catch (error) {
      if ((error as { code?: number }).code === 404) return undefined;
      throw new Error(`reading ${kind} ${namespace}/${name}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const parsed = SourceObjectSchema.safeParse(object);
    if (!parsed.success)
      throw new Error(
        `${kind} ${namespace}/${name} is malformed: ${z.prettifyError(parsed.error)}`,
      );
    return {
      data: parsed.data.data ?? undefined,
      binaryData: parsed.data.binaryData ?? undefined,
    };
  };
  return async (pod, refs) => {
    const namespace = pod.metadata?.namespace ?? "default";
    const collect = async (kind: "ConfigMap" | "Secret", names: readonly string[]) => {
      const table: Record<string, SourceObject> = {};
      for (const name of names) {
        const object = await read(kind, namespace, name);
        if (object !== undefined) table[name] = object;
      }
      return table;
    };
    return {
      configMaps: await collect("ConfigMap", refs.configMaps),
      secrets: await collect("Secret", refs.secrets),
    };
  };
}

/** Reads a file the configuration names, saying which setting named it when it cannot. */
async function readConfigured(setting: string, path: string): Promise<string> {
  try {
    return await readFile(path, "utf8");
  } catch (error) {
    throw new Error(`kubeletApi.${setting}: cannot read ${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/**
 * The CA bundle that client certificates are verified against: the configured file, else what
 * kube-apiserver publishes from its `--client-ca-file` in `kube-system/extension-apiserver-authentication`
 * (readable through the bootstrap Role `extension-apiserver-authentication-reader`).
 */
async function clientCa(kubeConfig: KubeConfig, settings: KubeletApiConfig): Promise<string> {
  if (settings.clientCaFile !== undefined) {
    return readConfigured("clientCaFile", settings.clientCaFile);
  }
  const core = kubeConfig.makeApiClient(CoreV1Api);
  let map: unknown;
  try {
    map = await core.readNamespacedConfigMap({
      name: "extension-apiserver-authentication",
      namespace: "kube-system",
    });
  } catch (error) {
    throw new Error(
      `kubelet API: reading ConfigMap kube-system/extension-apiserver-authentication for the client CA failed (${(error as Error).message}); grant the Role extension-apiserver-authentication-reader (deploy/vnode/rbac.yaml) or set kubeletApi.clientCaFile`,
      { cause: error },
    );
  }
  const ca = z.object({ data: z.object({ "client-ca-file": z.string().min(1) }) }).safeParse(map);
  if (!ca.success) {
    throw new Error(
      "kubelet API: kube-system/extension-apiserver-authentication has no client-ca-file (kube-apiserver runs without --client-ca-file); set kubeletApi.clientCaFile",
    );
  }
  return ca.data.data["client-ca-file"];
}

/** Builds the virtual node; start it with `manager.run()`. */
export function createVnode(options: VnodeOptions): Vnode {
  const { kubeConfig, config, logger } = options;
  const nodeName = config.node.nodeName;
  const manager = new Manager({
    name: "nebula-vnode",
    kubeConfig,
    logger,
    ...(options.metricsBindAddress === undefined
      ? {}
      : { metricsBindAddress: options.metricsBindAddress }),
    ...(options.healthProbeBindAddress === undefined
      ? {}
      : { healthProbeBindAddress: options.healthProbeBindAddress }),
    ...(options.leaderElection === undefined ? {} : { leaderElection: options.leaderElection }),
  });
  const registry = manager.registry;
  const ec2Calls = new Counter({
    name: "nebula_vnode_ec2_calls_total",
    help: "EC2 API calls by action and outcome",
    labelNames: ["action", "outcome"],
    registers: [registry],
  });
  const exitToStatus = new Histogram({
    name: "nebula_vnode_exit_to_status_seconds",
    help: "From a container's exit to the Pod status that says so being written",
    buckets: [0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300],
    registers: [registry],
  });
  const terminalToTerminated = new Histogram({
    name: "nebula_vnode_terminal_to_terminated_seconds",
    help: "From a Pod turning terminal to its instance confirmed terminated",
    buckets: [1, 5, 10, 20, 30, 60, 120, 300, 600],
    registers: [registry],
  });
  const statusWrites = new Counter({
    name: "nebula_vnode_pod_status_writes_total",
    help: "Pod status writes by outcome",
    labelNames: ["outcome"],
    registers: [registry],
  });

  const informer = podInformer(kubeConfig, {
    name: "pods",
    fieldSelector: `spec.nodeName=${nodeName}`,
    resyncPeriodMs: config.node.podResyncSeconds * 1000,
    metrics: manager.metrics,
    logger,
  });
  const ledger = new ConfigMapPodLedger(kubeConfig, {
    namespace: options.namespace,
    prefix: `nebula-pod-`,
  });
  const log = (level: "debug" | "info" | "warn" | "error", message: string) =>
    logger[level](message);
  const provider = new Ec2PodProvider({
    config: config.provider,
    ledger,
    // The Pod controller drives every teardown (PodTeardown on the same ledger).
    teardowns: "caller",
    // The finalizer the Pod controller holds (node.podFinalizer), whatever it is configured to.
    finalizer: config.node.podFinalizer,
    livePodUids: () =>
      informer.list().flatMap((p) => (p.metadata?.uid === undefined ? [] : [p.metadata.uid])),
    readSources: sourceReader(kubeConfig),
    log,
  });
  // The app checks, at compile time, that the provider satisfies the interfaces the package owns.
  provider satisfies PodLifecycle & InstanceReclaimer & NodeHealthSource & Runnable;
  provider.client.middlewareStack.add(
    (next, context) => async (args) => {
      const action = String(context.commandName ?? "unknown").replace(/Command$/, "");
      try {
        const result = await next(args);
        ec2Calls.inc({ action, outcome: "ok" });
        return result;
      } catch (error) {
        ec2Calls.inc({ action, outcome: (error as { name?: string }).name ?? "Error" });
        throw error;
      }
    },
    { step: "initialize", name: "nebulaCallCounter" },
  );

  const api = new KubernetesPodApi(kubeConfig);
  const finalizer = config.node.podFinalizer;
  let pods: PodController | undefined;
  const teardown = new PodTeardown({
    store: ledger,
    // A missing entry (deleted by hand, a restore, a prune) is made again before a teardown starts.
    prepare: async (ref) => {
      await ledger.ensure({ podUid: ref.uid, namespace: ref.namespace, name: ref.name });
    },
    reclaimer: provider,
    removePod: async (ref) => {
      await api.deleteNow(ref);
      await api.removeFinalizer(ref, finalizer);
    },
    podPresent: (ref) => api.exists(ref),
    headroomSeconds: provider.config.apiHeadroomSeconds,
    onPodEvent: (ref, event) => pods?.recordPodEvent(ref, event),
    onTeardownEvent: (event) => {
      if (event.type === "error") logger.warn({ key: event.key, err: event.error }, "teardown");
    },
  });
  const events = new EventRecorder(kubeConfig, {
    reportingController: "nebula.dev/vnode",
    reportingInstance: options.identity.slice(0, 128),
    logger,
  });
  const controller = new Controller({
    name: "pods",
    workers: config.node.podWorkers,
    metrics: manager.metrics,
    logger,
    reconcile: (key) => (pods as PodController).reconcile(key),
  }).watch(informer);
  pods = new PodController({
    config: config.node,
    pods: informer,
    provider,
    teardown,
    api,
    status: new StatusWriter<V1PodStatus>(kubeConfig, {
      resource: PODS,
      fieldManager: "nebula-vnode",
    }),
    events,
    enqueue: (key) => controller.enqueue(key),
    ledger: {
      launches: async () =>
        (await ledger.list()).map((entry) => ({
          podUid: entry.launch.podUid,
          namespace: entry.launch.namespace,
          name: entry.launch.name,
          // Only a live instance of this node: other virtual nodes share the ledger.
          reclaimable: provider.listedInstance(entry.launch.podUid) !== undefined,
        })),
    },
    metrics: {
      statusWrite: (outcome) => statusWrites.inc({ outcome }),
      exitToStatus: (s) => exitToStatus.observe(s),
      terminalToTerminated: (s) => terminalToTerminated.observe(s),
    },
    log,
  });
  const podController = pods;
  new Gauge({
    name: "nebula_vnode_pods",
    help: "Pods bound to this virtual node, by phase",
    labelNames: ["phase"],
    registers: [registry],
    collect() {
      this.reset();
      for (const pod of informer.list()) this.inc({ phase: pod.status?.phase ?? "Unknown" });
    },
  });
  new Gauge({
    name: "nebula_vnode_instances",
    help: "This node's EC2 instances by state, from the latest poll",
    labelNames: ["state"],
    registers: [registry],
    collect() {
      this.reset();
      for (const [state, count] of Object.entries(provider.instanceCounts())) {
        this.set({ state }, count);
      }
    },
  });
  const leaksCollected = new Counter({
    name: "nebula_vnode_leaks_collected_total",
    help: "Instances the leak collector terminated (running with no live Pod)",
    registers: [registry],
  });
  provider.onLeakCollected(() => leaksCollected.inc());
  const pollDuration = new Histogram({
    name: "nebula_vnode_poll_duration_seconds",
    help: "One poll cycle: DescribeInstances, statuses published, reclaims advanced",
    labelNames: ["outcome"],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    registers: [registry],
  });
  provider.onPoll((result, seconds) =>
    pollDuration.observe({ outcome: result.ok ? "ok" : "error" }, seconds),
  );
  const nodes = new NodeController({ kubeConfig, config: config.node, health: provider, log });

  const kubeletRequests = new Counter({
    name: "nebula_vnode_kubelet_api_requests_total",
    help: "Kubelet API requests by route and HTTP status",
    labelNames: ["route", "status"],
    registers: [registry],
  });
  const kubeletApi = config.kubeletApi;
  const podReader = kubeConfig.makeApiClient(CoreV1Api);
  if (kubeletApi.enabled) {
    const startTime = new Date();
    manager.addRunnable(
      {
        name: "kubelet-api",
        run: async (signal) => {
          const serving =
            kubeletApi.tlsCertFile !== undefined && kubeletApi.tlsPrivateKeyFile !== undefined
              ? {
                  cert: await readConfigured("tlsCertFile", kubeletApi.tlsCertFile),
                  key: await readConfigured("tlsPrivateKeyFile", kubeletApi.tlsPrivateKeyFile),
                }
              : await selfSignedServingCert([nodeName, config.node.internalIP]);
          const server = new KubeletServer({
            nodeName,
            port: config.node.kubeletPort,
            bindAddress: kubeletApi.bindAddress,
            ...serving,
            clientCa: await clientCa(kubeConfig, kubeletApi),
            pods: () => informer.list(),
            // /runningpods/ reads through to the API server: the informer may not have heard yet
            // of a deletion that just completed.
            readPods: async () =>
              (
                await podReader.listPodForAllNamespaces({
                  fieldSelector: `spec.nodeName=${nodeName}`,
                })
              ).items,
            instanceState: (uid) => provider.listedInstance(uid)?.state,
            logs: provider.containerLogs,
            usage: provider.containerUsage,
            ...apiServerAuth(kubeConfig),
            startTime,
            usageCacheMs: kubeletApi.usageCacheSeconds * 1000,
            logger,
            onRequest: (route, status) => kubeletRequests.inc({ route, status: String(status) }),
          });
          try {
            await server.run(signal);
          } catch (error) {
            throw new Error(
              `kubelet API: cannot listen on ${kubeletApi.bindAddress}:${config.node.kubeletPort} (${(error as Error).message}); set node.kubeletPort, or kubeletApi.enabled: false`,
              { cause: error },
            );
          }
        },
      },
      // Every replica serves it: reading logs and usage changes nothing.
      { leaderOnly: false },
    );
  }

  /**
   * While leading: the ledger's launches whose Pod is gone get their teardown (after the first
   * poll, so that the listing proves which instances are this node's), then every leak-collection
   * interval.
   */
  const sweepLedger = async (signal: AbortSignal): Promise<void> => {
    const every = provider.config.leakCollection.intervalSeconds * 1000;
    let wait = provider.pollIntervalMs;
    while (!signal.aborted) {
      try {
        await sleep(wait, undefined, { signal });
      } catch {
        return;
      }
      wait = every;
      try {
        const queued = await podController.sweepLedger();
        if (queued > 0) logger.info({ queued }, "ledger sweep: teardowns of gone Pods queued");
      } catch (error) {
        logger.warn({ err: error }, "ledger sweep failed; trying again later");
      }
    }
  };

  manager.addController(controller);
  manager.addRunnable({ name: "node", run: (signal) => nodes.run(signal) });
  manager.addRunnable({
    name: "provider",
    run: async (signal) => {
      const stop = podController.start();
      try {
        await Promise.all([provider.run(signal), sweepLedger(signal)]);
      } finally {
        stop();
      }
    },
  });
  return {
    manager,
    provider,
    nodes,
    pods: podController,
    async close() {
      await events.close();
      provider.client.destroy();
    },
  };
}
