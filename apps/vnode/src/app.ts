/**
 * The wiring of `nebula-vnode`: the provider on EC2, the Pod informer on `spec.nodeName`, the
 * Node and Pod controllers of `@nebula/virtual-node`, under `@nebula/kube`'s manager (health,
 * metrics, leader election, ordered shutdown). Nothing here is for a user to import.
 */
import { once } from "node:events";
import { readFile } from "node:fs/promises";
import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import {
  AuthenticationV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1Pod,
  type V1PodStatus,
} from "@kubernetes/client-node";
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
  apiServerClientCa,
  createKubeletHandler,
  type InstanceReclaimer,
  KubernetesPodApi,
  NodeController,
  type NodeHealthSource,
  PodController,
  type PodLifecycle,
  PodTeardown,
  type Runnable,
} from "@nebula/virtual-node";
import { z } from "zod";
import type { AppConfig } from "./config.js";
import { vnodeMetrics } from "./metrics.js";
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
    livePodUids: () =>
      informer.list().flatMap((p) => (p.metadata?.uid === undefined ? [] : [p.metadata.uid])),
    readSources: sourceReader(kubeConfig),
    log,
  });
  // The app checks, at compile time, that the provider satisfies the interfaces the package owns.
  provider satisfies PodLifecycle & InstanceReclaimer & NodeHealthSource & Runnable;
  const metrics = vnodeMetrics(manager.registry, informer, provider);

  const api = new KubernetesPodApi(kubeConfig);
  const events = new EventRecorder(kubeConfig, {
    reportingController: "nebula.dev/vnode",
    reportingInstance: options.identity.slice(0, 128),
    logger,
  });
  const teardown = new PodTeardown({
    store: ledger,
    // A missing entry (deleted by hand, a restore, a prune) is made again before a teardown starts.
    prepare: async (ref) => {
      await ledger.ensure({ podUid: ref.uid, namespace: ref.namespace, name: ref.name });
    },
    reclaimer: provider,
    removePod: async (ref) => {
      await api.deleteNow(ref);
      await api.removeFinalizer(ref, config.node.podFinalizer);
    },
    podPresent: (ref) => api.exists(ref),
    headroomSeconds: provider.config.apiHeadroomSeconds,
    events,
    onTeardownEvent: (event) => {
      if (event.type === "error") logger.warn({ key: event.key, err: event.error }, "teardown");
    },
  });
  const controller = new Controller({
    name: "pods",
    workers: config.node.podWorkers,
    metrics: manager.metrics,
    logger,
    reconcile: (key) => pods.reconcile(key),
  }).watch(informer);
  const pods = new PodController({
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
    metrics: metrics.pods,
    log,
  });
  const nodes = new NodeController({ kubeConfig, config: config.node, health: provider, log });
  const kubeletApi = config.kubeletApi;
  if (kubeletApi.enabled) {
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const kubelet = createKubeletHandler({
      nodeName,
      pods: informer,
      core,
      authentication: kubeConfig.makeApiClient(AuthenticationV1Api),
      authorization: kubeConfig.makeApiClient(AuthorizationV1Api),
      instanceState: (uid) => provider.listedInstance(uid)?.state,
      logs: provider.containerLogs,
      usage: provider.containerUsage,
      startTime: new Date(),
      usageCacheMs: kubeletApi.usageCacheSeconds * 1000,
      logger,
      onRequest: metrics.kubeletRequest,
    });
    const { tlsCertFile, tlsPrivateKeyFile, clientCaFile, bindAddress } = kubeletApi;
    const port = config.node.kubeletPort;
    // The listener: every replica serves it (reading logs and usage changes nothing).
    const listen = async (signal: AbortSignal) => {
      const serving =
        tlsCertFile !== undefined && tlsPrivateKeyFile !== undefined
          ? {
              cert: await readConfigured("tlsCertFile", tlsCertFile),
              key: await readConfigured("tlsPrivateKeyFile", tlsPrivateKeyFile),
            }
          : await selfSignedServingCert([nodeName, config.node.internalIP]);
      const ca =
        clientCaFile !== undefined
          ? await readConfigured("clientCaFile", clientCaFile)
          : await apiServerClientCa(core).catch((error: Error) => {
              throw new Error(`kubelet API: ${error.message}; or set kubeletApi.clientCaFile`, {
                cause: error,
              });
            });
      // Client certificates are verified against the CA per request: a client without one may
      // still present a bearer token.
      const tls = { ...serving, ca, requestCert: true, rejectUnauthorized: false };
      const server = createServer(tls, kubelet.handle).listen(port, bindAddress);
      try {
        await once(server, "listening");
      } catch (error) {
        throw new Error(
          `kubelet API: cannot listen on ${bindAddress}:${port} (${(error as Error).message}); set node.kubeletPort, or kubeletApi.enabled: false`,
          { cause: error },
        );
      }
      const bound = (server.address() as AddressInfo).port;
      logger.info({ port: bound, address: bindAddress }, "kubelet API listening");
      if (!signal.aborted) await once(signal, "abort");
      kubelet.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    };
    manager.addRunnable({ name: "kubelet-api", run: listen }, { leaderOnly: false });
  }

  manager.addController(controller);
  manager.addRunnable({ name: "node", run: (signal) => nodes.run(signal) });
  manager.addRunnable({
    name: "provider",
    run: async (signal) => {
      const stop = pods.start();
      try {
        // While leading, the ledger's launches whose Pod is gone get their teardown: after the
        // first poll (its listing proves which instances are this node's), then every
        // leak-collection interval.
        const every = provider.config.leakCollection.intervalSeconds * 1000;
        const sweep = { firstAfterMs: provider.pollIntervalMs, everyMs: every };
        await Promise.all([provider.run(signal), pods.sweepLedgerEvery(signal, sweep)]);
      } finally {
        stop();
      }
    },
  });
  return {
    manager,
    provider,
    nodes,
    pods,
    async close() {
      await events.close();
      provider.client.destroy();
    },
  };
}
