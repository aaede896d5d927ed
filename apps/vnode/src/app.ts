/**
 * The wiring of `nebula-vnode`: the provider on EC2, the Pod informer on `spec.nodeName`, the
 * Node and Pod controllers of `@nebula/virtual-node`, under `@nebula/kube`'s manager (health,
 * metrics, leader election, ordered shutdown). Nothing here is for a user to import.
 */
import type { KubeConfig, V1PodStatus } from "@kubernetes/client-node";
import { ConfigMapPodLedger } from "@nebula/kube";
import { podInformer } from "@nebula/kube/cache";
import { Controller, type Manager } from "@nebula/kube/controller";
import { EventRecorder } from "@nebula/kube/events";
import type { Logger } from "@nebula/kube/observability";
import { PODS, StatusWriter } from "@nebula/kube/status";
import { Ec2PodProvider, parseProviderConfig } from "@nebula/provider";
import {
  type InstanceReclaimer,
  KubernetesPodApi,
  ledgerLaunches,
  NodeController,
  type NodeHealthSource,
  PodController,
  type PodLifecycle,
  PodTeardown,
  type Runnable,
} from "@nebula/virtual-node";
import {
  type HostAgentLocation,
  type HostAgents,
  podServiceAccountReader,
  podSourceReader,
  podTokenRequester,
  serviceProxyAccess,
} from "@nebula/virtual-node/host";
import { kubeletApiServer } from "@nebula/virtual-node/kubelet";
import { readAgentClient } from "./agent-client.js";
import type { AppConfig } from "./config.js";
import { vnodeMetrics } from "./metrics.js";

/** What {@link createVnode} needs. */
export interface VnodeOptions {
  /** Where and as whom to connect. */
  readonly kubeConfig: KubeConfig;
  /** The parsed configuration. */
  readonly config: AppConfig;
  /** The manager (health, metrics, leader election) the virtual node's parts run under. */
  readonly manager: Manager;
  /** The namespace of the app: the Pod ledger (ConfigMaps) lives there. */
  readonly namespace: string;
  /** This replica's name (Events' `reportingInstance`). */
  readonly identity: string;
  /** JSON logger. */
  readonly logger: Logger;
}

/** The running parts, for the entry point and for tests. */
export interface Vnode {
  /** The provider. */
  readonly provider: Ec2PodProvider;
  /** The Pod controller. */
  readonly pods: PodController;
  /** After `manager.run()` returned: flushes pending Events and closes the EC2 client. */
  close(): Promise<void>;
}

/** Builds the virtual node under `options.manager`; start it with `manager.run()`. */
export function createVnode(options: VnodeOptions): Vnode {
  const { kubeConfig, config, logger, manager, namespace } = options;
  const nodeName = config.node.nodeName;
  const informer = podInformer(kubeConfig, {
    name: "pods",
    fieldSelector: `spec.nodeName=${nodeName}`,
    resyncPeriodMs: config.node.podResyncSeconds * 1000,
    metrics: manager.metrics,
    logger,
  });
  const ledger = new ConfigMapPodLedger(kubeConfig, { namespace, prefix: "nebula-pod-" });
  const log = (level: "debug" | "info" | "warn" | "error", message: string) =>
    logger[level](message);
  const api = new KubernetesPodApi(kubeConfig);
  // The provider validates its whole configuration again; here only what the app wires from it.
  const { serviceProxy, hostAgent } = parseProviderConfig(config.provider);
  // provider.hostAgent: the client certificate this node presents to the hosts' agents, and the
  // fingerprints the hosts accept (every certificate of the file).
  const agentClient = hostAgent === undefined ? undefined : readAgentClient(hostAgent);
  const provider = new Ec2PodProvider({
    config: config.provider,
    ledger,
    // capacity.onRebalance: evict (the optional RBAC rule deploy/vnode/rbac-rebalance-eviction.yaml).
    evictPod: (pod) => api.evict(pod),
    livePodUids: () =>
      informer.list().flatMap((p) => (p.metadata?.uid === undefined ? [] : [p.metadata.uid])),
    readSources: podSourceReader(kubeConfig),
    // Projected service-account tokens (kube-api-access-*, IRSA's): bound to the Pod, renewed.
    requestToken: podTokenRequester(kubeConfig),
    // provider.serviceProxy: kube-proxy in each Pod's network namespace, with a token of its own
    // ServiceAccount (system:node-proxier) bound to this Node and the CA this process trusts.
    ...(serviceProxy === undefined
      ? {}
      : {
          serviceProxy: serviceProxyAccess(kubeConfig, {
            serviceAccount: serviceProxy.serviceAccount,
            nodeName,
          }),
        }),
    ...(agentClient === undefined
      ? {}
      : { hostAgent: { clientFingerprints: agentClient.fingerprints } }),
    // A ServiceAccount's eks.amazonaws.com/role-arn gives its Pods that AWS role (as IRSA).
    readServiceAccount: podServiceAccountReader(kubeConfig),
    log,
  });
  // The app checks, at compile time, that the provider satisfies the interfaces the package owns.
  provider satisfies PodLifecycle & InstanceReclaimer & NodeHealthSource & Runnable;
  // What a drain (node.drain) waits for: no Pod bound and no instance of this node left, each
  // only once observed (the Pod cache synced, a poll done).
  let polled = false;
  provider.onPoll((result) => {
    if (result.ok) polled = true;
  });
  const drainProgress = () => ({
    pods: informer.hasSynced() ? informer.list().length : undefined,
    instances: polled
      ? Object.entries(provider.instanceCounts())
          .filter(([state]) => state !== "terminated")
          .reduce((sum, [, count]) => sum + count, 0)
      : undefined,
  });
  const metrics = vnodeMetrics(
    manager.registry,
    informer,
    provider,
    config.node.drain ? drainProgress : undefined,
  );
  // provider.warmPool: each take (hit, miss), launch, host ready and termination, one line each
  // (`kind`, `entry`, and the Pod, host, seconds or reason the event names).
  provider.onWarmPool((event) => logger.info({ ...event }, `warm pool ${event.kind}`));

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
    maxGraceSeconds: provider.config.maxGracePeriodSeconds,
    events,
    onTerminateSent: (podUid) => pods.terminateSent(podUid),
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
    // Only a live instance of this node is reclaimable: other virtual nodes share the ledger.
    ledger: ledgerLaunches(ledger, (uid) => provider.listedInstance(uid) !== undefined),
    metrics: metrics.pods,
    log,
  });
  const nodes = new NodeController({
    kubeConfig,
    config: config.node,
    health: provider,
    drainProgress,
    log,
  });
  if (config.kubeletApi.enabled) {
    // The listener: every replica serves it (reading logs and usage changes nothing).
    const serve = kubeletApiServer({
      kubeConfig,
      settings: config.kubeletApi,
      port: config.node.kubeletPort,
      hosts: [nodeName, config.node.internalIP],
      nodeName,
      pods: informer,
      instanceState: (uid) => provider.listedInstance(uid)?.state,
      logs: provider.containerLogs,
      usage: provider.containerUsage,
      startTime: new Date(),
      logger,
      onRequest: metrics.kubeletRequest,
      // kubectl exec, attach and port-forward, relayed to the Pod's host agent (provider.hostAgent).
      ...(agentClient === undefined
        ? {}
        : {
            agents: {
              locate: {
                locate: (pod): Promise<HostAgentLocation> => provider.locateHostAgent(pod),
              } satisfies HostAgents,
              clientCert: agentClient.cert,
              clientKey: agentClient.key,
            },
          }),
    });
    manager.addRunnable({ name: "kubelet-api", run: serve }, { leaderOnly: false });
  }

  manager.addController(controller);
  manager.addRunnable({ name: "node", run: (signal) => nodes.run(signal) });
  // While leading, the ledger's launches whose Pod is gone get their teardown: after the first
  // poll (its listing proves which instances are this node's), then every leak-collection interval.
  const sweep = {
    firstAfterMs: provider.pollIntervalMs,
    everyMs: provider.config.leakCollection.intervalSeconds * 1000,
  };
  manager.addRunnable({ name: "provider", run: (signal) => pods.run(signal, provider, sweep) });
  return {
    provider,
    pods,
    async close() {
      await events.close();
      provider.client.destroy();
    },
  };
}
