import type { EC2Client } from "@aws-sdk/client-ec2";
import type { SSMClient } from "@aws-sdk/client-ssm";
import type { V1Pod } from "@kubernetes/client-node";
import { MemoryPodLedger } from "@nebula/teardown";
import { Admitter } from "./admitter.js";
import { createAwsClients } from "./clients.js";
import { CloudWatchContainerLogs } from "./cloudwatch-logs.js";
import { CloudWatchUsage } from "./cloudwatch-usage.js";
import { type ProviderConfig, parseProviderConfig } from "./config.js";
import { SqsDoorbellQueue } from "./doorbell-queue.js";
import { Doorbells } from "./doorbells.js";
import { AwsGateway } from "./gateway.js";
import { HealthTracker } from "./health.js";
import { catalogueFor } from "./instance-types.js";
import { Launcher } from "./launcher.js";
import { LeakCollector } from "./leak-collector.js";
import type { Ec2PodProviderOptions } from "./options.js";
import { ParameterDelivery } from "./parameter-delivery.js";
import { PodTokens } from "./pod-tokens.js";
import { Poller } from "./poller.js";
import { StatusPublisher } from "./publisher.js";
import { Reclaimer } from "./reclaimer.js";
import type { ProviderContext } from "./record.js";
import { WarmPool } from "./warm-pool.js";

/** The provider's parts, wired: what `Ec2PodProvider` is a façade over. */
export interface ProviderParts {
  readonly config: ProviderConfig;
  readonly client: EC2Client;
  readonly ssm: SSMClient;
  readonly containerLogs: CloudWatchContainerLogs | undefined;
  readonly containerUsage: CloudWatchUsage | undefined;
  readonly ctx: ProviderContext;
  readonly admitter: Admitter;
  readonly launcher: Launcher;
  readonly parameters: ParameterDelivery;
  /** The Pods' service-account tokens: issued before launch, renewed while they run. */
  readonly tokens: PodTokens;
  readonly publisher: StatusPublisher;
  readonly reclaimer: Reclaimer;
  readonly leaks: LeakCollector;
  readonly poller: Poller;
  /** The event channel's reader (`config.events`). */
  readonly doorbells: Doorbells | undefined;
  /** The warm pool (`config.warmPool`; idle without entries). */
  readonly pool: WarmPool;
}

/**
 * Builds the provider's parts from its options: the configuration parsed, the AWS clients (given
 * or built), the gateway, the shared context, and each collaborator over it.
 */
export function composeProvider(options: Ec2PodProviderOptions): ProviderParts {
  const config = parseProviderConfig(options.config);
  const clients = createAwsClients(config, {
    ...(options.client ? { ec2: options.client } : {}),
    ...(options.ssmClient ? { ssm: options.ssmClient } : {}),
    ...(options.logsClient ? { logs: options.logsClient } : {}),
    ...(options.metricsClient ? { metrics: options.metricsClient } : {}),
    ...(options.sqsClient ? { sqs: options.sqsClient } : {}),
  });
  const gateway = options.gateway ?? new AwsGateway(clients, config);
  const now = options.now ?? Date.now;
  const log: ProviderContext["log"] = (level, message) => options.log?.(level, message);
  const records: ProviderContext["records"] = new Map();
  const ctx: ProviderContext = {
    config,
    gateway,
    instanceTypes: catalogueFor(config, gateway, now, log),
    ledger: options.ledger ?? new MemoryPodLedger(),
    records,
    health: new HealthTracker(config),
    now,
    log,
    ownership: {
      clusterName: config.clusterName,
      nodeName: config.nodeName,
      instanceProfile: config.instanceProfile,
      clientToken: config.ownership.clientToken,
      // A warm-pool host is a Pod's when the ledger assigned it (loaded into the Pod's record).
      assignedInstance: (podUid) => records.get(podUid)?.instanceId,
    },
    listing: undefined,
    listingReadAt: undefined,
  };
  // A Pod's host Pod (its ServiceAccount's role added) is the admitter's to find out: at launch,
  // and for a renewal after a restart.
  const tokens: PodTokens = new PodTokens(
    ctx,
    options.requestToken,
    options.userData?.cluster ?? config.clusterName,
    options.readServiceAccount
      ? async (pod): Promise<V1Pod> => {
          const found = await admitter.hostPod(pod);
          if (!found.ok) throw new Error(found.message);
          return found.pod;
        }
      : undefined,
    options.serviceProxy?.requestToken,
  );
  const admitter: Admitter = new Admitter(ctx, options, tokens);
  const parameters = new ParameterDelivery(ctx);
  const publisher = new StatusPublisher(ctx, options.evictPod);
  const reclaimer = new Reclaimer(ctx);
  // What the teardown's lookup finds is an observation of the Pod too.
  reclaimer.onFound = (record) => publisher.computeStatus(record);
  const launcher = new Launcher(ctx, parameters, reclaimer);
  const pool = new WarmPool(ctx, parameters, options.userData?.sandbox?.image);
  launcher.pool = pool;
  const { logs, metrics, events } = config;
  return {
    config,
    client: clients.ec2,
    ssm: clients.ssm,
    containerLogs:
      logs && clients.logs
        ? new CloudWatchContainerLogs({ client: clients.logs, group: logs.group })
        : undefined,
    containerUsage:
      metrics && clients.metrics
        ? new CloudWatchUsage({ client: clients.metrics, namespace: metrics.namespace })
        : undefined,
    ctx,
    admitter,
    launcher,
    parameters,
    tokens,
    publisher,
    reclaimer,
    leaks: new LeakCollector(ctx, options.livePodUids),
    poller: new Poller(ctx, { admitter, launcher, parameters, publisher, tokens }),
    pool,
    doorbells:
      events && clients.sqs
        ? new Doorbells(ctx, publisher, new SqsDoorbellQueue(clients.sqs, events.queueUrl), events)
        : undefined,
  };
}
