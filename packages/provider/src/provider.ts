import { Buffer } from "node:buffer";
import { CloudWatchClient } from "@aws-sdk/client-cloudwatch";
import { CloudWatchLogsClient } from "@aws-sdk/client-cloudwatch-logs";
import {
  CreateTagsCommand,
  DeleteTagsCommand,
  DescribeInstancesCommand,
  EC2Client,
  GetConsoleOutputCommand,
  RunInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { SSMClient } from "@aws-sdk/client-ssm";
import type { V1Pod, V1PodCondition, V1PodStatus } from "@kubernetes/client-node";
import { type InstanceState, needsConsoleOutput, toInstanceState } from "@nebula/state-mapping";
import {
  type AuxiliaryObject,
  COMPLETE_PHASE,
  decodeRecord,
  type InstanceObservation,
  type LaunchEntry,
  MemoryPodLedger,
  type ObserveInput,
  type PodLedger,
  type PodTeardownEffect,
  type PodTeardownObservation,
  type PodTeardownParams,
  podTeardown,
  type TeardownEvent,
  TeardownExecutor,
  type TickResult,
} from "@nebula/teardown";
import {
  type PodParameter,
  type PodSourceRefs,
  type PodSources,
  podSourceRefs,
  type RenderNotice,
  type RenderOptionsInput,
  type RenderResult,
  renderUserData,
} from "@nebula/userdata";
import { type Admission, admitPod } from "./admission.js";
import { InstanceBatcher } from "./batch.js";
import {
  ACCOUNT_POOL,
  afterCapacityError,
  choosePlacement,
  type LaunchBackoff,
  NO_BACKOFF,
  type Placement,
  placementsFor,
  poolOf,
} from "./capacity.js";
import { CloudWatchContainerLogs } from "./cloudwatch-logs.js";
import { CloudWatchUsage } from "./cloudwatch-usage.js";
import { type ProviderConfig, parseProviderConfig } from "./config.js";
import { ProviderError, toProviderError } from "./errors.js";
import { buildRunInstancesInput, type LaunchInput } from "./launch.js";
import {
  type LeakPlan,
  type ParameterLeakPlan,
  planLeakCollection,
  planParameterLeaks,
} from "./leaks.js";
import { disproveOwnership, type OwnershipRules } from "./ownership.js";
import { initialPacing, isOutage, nextPacing, type Pacing, type PacingBounds } from "./pacing.js";
import {
  accountOfArn,
  deleteParameters,
  deletePodParameters,
  instanceArn,
  isPodParametersAuxiliary,
  type ListedParameter,
  listClusterPodParameters,
  listPodParameterNames,
  podParametersAuxiliary,
  tagParametersWithInstance,
  writePodParameters,
  writeSharedParameters,
} from "./parameters.js";
import { type PodFacts, podFacts } from "./pod.js";
import { describeNodeInstances, type ObservedInstance, observeInstance } from "./poll.js";
import {
  CREATE_CONTAINER_CONFIG_ERROR,
  configErrorStatus,
  isTerminalStatus,
  LAUNCHED_CONDITION,
  podStatus,
} from "./status.js";
import { CLUSTER_TAG, ORPHANED_TAG, POD_UID_TAG, STOP_GRACE_TAG } from "./tags.js";

/**
 * The finalizer the caller (the virtual node's Pod controller) puts on a Pod before
 * {@link Ec2PodProvider.createPod}, and removes only once {@link Ec2PodProvider.deletePod} (or
 * {@link Ec2PodProvider.reclaimState}) reports the teardown complete: no deletion path, not even
 * `kubectl delete --force --grace-period=0`, can then skip reclaiming the instance.
 */
export const RECLAIM_FINALIZER = "nebula.dev/instance-reclaim";

/** Annotation keys the caller can write on the Pod with {@link instanceAnnotations}. */
export const INSTANCE_ANNOTATIONS = {
  instanceId: "nebula.dev/instance-id",
  instanceType: "nebula.dev/instance-type-launched",
  availabilityZone: "nebula.dev/availability-zone",
  capacityType: "nebula.dev/capacity-type",
} as const;

/** Something worth a Kubernetes Event on the Pod (the caller records it). */
export interface ProviderEvent {
  /** `Normal` or `Warning`. */
  readonly type: "Normal" | "Warning";
  /** CamelCase reason: `Launched`, `InsufficientCapacity`, `QuotaExceeded`, `DaemonSetPodNotLaunched`, a refusal reason... */
  readonly reason: string;
  /** A sentence naming the instance, type and subnet, or the field that was refused. */
  readonly message: string;
}

/** What the Pod runs on, for an annotation and the launch Event. */
export interface InstanceInfo {
  /** EC2 instance ID. */
  readonly instanceId: string;
  /** Instance type. */
  readonly instanceType: string | undefined;
  /** Availability Zone. */
  readonly availabilityZone: string | undefined;
  /** Subnet. */
  readonly subnetId: string | undefined;
  /** `spot` or `on-demand`. */
  readonly capacityType: "spot" | "on-demand";
}

/**
 * The annotations that show what a Pod runs on (instance ID, type, zone, capacity type); absent
 * values are left out. Pure.
 */
export function instanceAnnotations(info: InstanceInfo): Record<string, string> {
  const out: Record<string, string> = {
    [INSTANCE_ANNOTATIONS.instanceId]: info.instanceId,
    [INSTANCE_ANNOTATIONS.capacityType]: info.capacityType,
  };
  if (info.instanceType) out[INSTANCE_ANNOTATIONS.instanceType] = info.instanceType;
  if (info.availabilityZone) out[INSTANCE_ANNOTATIONS.availabilityZone] = info.availabilityZone;
  return out;
}

/** A Pod's status changed (or there are Events to record); `pod` is a copy carrying the new `status`. */
export interface PodStatusChange {
  /** The Pod's UID. */
  readonly uid: string;
  /** A deep copy of the Pod with `status` set. */
  readonly pod: V1Pod;
  /** The new status. */
  readonly status: V1PodStatus;
  /** True when the status is terminal (`Succeeded` / `Failed`). */
  readonly terminal: boolean;
  /** Events to record on the Pod (each delivered once). */
  readonly events: readonly ProviderEvent[];
  /** The instance, once it is known (write it with {@link instanceAnnotations}). */
  readonly instance?: InstanceInfo;
}

/**
 * Receives status changes. It may return a promise: a terminal status counts as written (and
 * the instance is reclaimed) only once every listener's promise has resolved; a rejection means
 * "not written", and the change is delivered again on the next poll.
 */
export type PodStatusListener = (change: PodStatusChange) => void | Promise<void>;

/** The provider's view of EC2 for the virtual Node's status. */
export interface NodeHealth {
  /** False while EC2 is unreachable or failing (a region outage is reported, never hidden). */
  readonly ready: boolean;
  /** `EC2Reachable`, `EC2Throttled` (still ready) or `EC2Unavailable`. */
  readonly reason: "EC2Reachable" | "EC2Throttled" | "EC2Unavailable";
  /** A sentence for the Node condition. */
  readonly message: string;
}

/** Where a Pod's reclaim stands. */
export interface ReclaimState {
  /** The Pod's UID. */
  readonly podUid: string;
  /** The teardown phase (`stopping`, `terminating`, ...), `complete`, or `none` before it started. */
  readonly phase: string;
  /**
   * True once the instance is confirmed terminated (or none was ever launched) and the record
   * says complete: the caller may then delete the Pod (grace 0, UID precondition) and remove
   * {@link RECLAIM_FINALIZER}.
   */
  readonly complete: boolean;
  /** The instance, when known. */
  readonly instanceId?: string;
  /** One line for people and logs. */
  readonly message: string;
}

/** An instance the leak collector terminated (see {@link Ec2PodProvider.onLeakCollected}). */
export interface CollectedLeak {
  /** The instance. */
  readonly instanceId: string;
  /** The Pod UID its tag carried. */
  readonly podUid: string | undefined;
  /** A sentence for an Event or a log line. */
  readonly message: string;
}

/**
 * Pod parameters the leak collector deleted (see {@link Ec2PodProvider.onParameterLeakCollected}):
 * parameters of a Pod that is neither live nor being torn down, older than the grace.
 */
export interface CollectedParameterLeak {
  /** The Pod UID in their names. */
  readonly podUid: string;
  /** The parameter names deleted. */
  readonly names: readonly string[];
  /** A sentence for an Event or a log line. */
  readonly message: string;
}

/** What one leak-collection pass decided: the instance plan, and the Pod parameters deleted. */
export interface LeakCollection extends LeakPlan {
  /** Pod parameters deleted (`podDelivery: "parameters"`; empty otherwise). */
  readonly parameters: ParameterLeakPlan;
}

/**
 * A rendered Pod as a {@link Ec2PodProviderOptions.renderUserData} override may return it:
 * `@nebula/userdata`'s `RenderedUserData` or any object with its `userData` and `bytes`, and the
 * parameters and notices when there are any.
 */
export interface RenderedPod {
  /** Base64 of the user-data. */
  readonly userData: string;
  /** Its size in bytes before base64. */
  readonly bytes: number;
  /** Pod parameters to write before `RunInstances` (`podDelivery: "parameters"`). */
  readonly parameters?: readonly PodParameter[];
  /** The supervisor's parameters, shared by every Pod: written once per process (create-only). */
  readonly sharedParameters?: readonly PodParameter[];
  /** Event-worthy facts (`OptionalSecretNotFound`, ...), published as Warning Events. */
  readonly notices?: readonly RenderNotice[];
}

/**
 * The Pod lifecycle a virtual node drives (virtual-kubelet's `PodLifecycleHandler` +
 * `PodNotifier`, keyed by Pod UID). Every method is idempotent.
 */
export interface PodLifecycle {
  /**
   * Launches the Pod's instance (`ClientToken` from the Pod UID; the instance ID is recorded
   * durably). The resulting status reaches the listeners in the background: `createPod` never
   * waits for a listener, so a listener may wait for the caller's own work without a deadlock.
   */
  createPod(pod: V1Pod): Promise<void>;
  /** Records a newer version of the Pod (no cloud call). */
  updatePod(pod: V1Pod): Promise<void>;
  /** The Pod's latest status, or `undefined` for a Pod this provider does not know. */
  getPodStatus(uid: string): V1PodStatus | undefined;
  /** Copies of every Pod this provider runs, each with its latest status. */
  listPods(): readonly V1Pod[];
  /** Subscribes to status changes; the promise resolves once written. Returns the unsubscribe. */
  notifyPods(listener: PodStatusListener): () => void;
  /** Forgets a Pod whose teardown completed (and its ledger entry). */
  forgetPod(uid: string): void;
}

/** Acting on instances by ID (NotFound counts as done); only instances proven to be Nebula's. */
export interface InstanceReclaimer {
  /** The Pod's instance: by its recorded ID, else by the `nebula:pod-uid` tag (proven ownership). */
  findInstance(podUid: string): Promise<{ instanceId: string; state: string } | undefined>;
  /**
   * `StopInstances` (batched), after tagging the stop's grace for the host; a stop EC2 refuses for
   * good becomes `TerminateInstances`.
   */
  stopInstance(
    instanceId: string,
    options?: { readonly graceSeconds?: number | undefined },
  ): Promise<void>;
  /** `TerminateInstances` (batched). */
  terminateInstance(instanceId: string): Promise<void>;
}

/** The provider's EC2 health for the virtual Node. */
export interface NodeHealthSource {
  /** The latest health. */
  health(): NodeHealth;
  /** Subscribes to changes; returns the unsubscribe. */
  onNodeHealth(listener: (health: NodeHealth) => void): () => void;
}

/** Something that runs until its signal aborts. */
export interface Runnable {
  /** Runs the loops; resolves once stopped after `signal` aborted. */
  run(signal: AbortSignal): Promise<void>;
}

/** Options of {@link Ec2PodProvider}. */
export interface Ec2PodProviderOptions {
  /** The configuration (validated with {@link parseProviderConfig}). */
  readonly config: unknown;
  /**
   * Options for `@nebula/userdata`'s `renderUserData`, which builds each Pod's user-data (the host
   * supervisor). `cluster` defaults to the configured `clusterName`; `delivery` is always the
   * configured `podDelivery`; `logs` and `metrics` are the configured ones when set.
   */
  readonly userData?: RenderOptionsInput;
  /**
   * Replaces `renderUserData` (tests, or a custom host). Returns a script or bytes (the provider
   * base64-encodes them), an already rendered `{ userData: base64, bytes, parameters?, notices? }`
   * ({@link RenderedPod}), or a whole `RenderResult` (whose `CreateContainerConfigError` holds the
   * Pod, and whose other errors refuse it). `sources` are the Pod's ConfigMaps and Secrets with
   * `podDelivery: "parameters"` (undefined otherwise).
   */
  readonly renderUserData?: (
    pod: V1Pod,
    sources: PodSources | undefined,
  ) => LaunchInput["userData"] | RenderedPod | RenderResult;
  /**
   * With `podDelivery: "parameters"`: reads the ConfigMaps and Secrets the Pod references
   * (`refs`, from `@nebula/userdata`'s `podSourceRefs`) in the Pod's namespace, as the API server
   * returns them, by name; a name left out is missing. Called before the Pod is rendered for
   * launch, and again on every poll while a mandatory one is missing
   * (`CreateContainerConfigError`). A rejection holds the Pod the same way and is retried.
   * Default: no sources (a Pod that needs one is held).
   */
  readonly readSources?: (pod: V1Pod, refs: PodSourceRefs) => Promise<PodSources>;
  /**
   * UIDs of the Pods that exist and are bound to this node (from the virtual node's Pod informer).
   * The leak collector reads it after listing instances; an instance whose Pod UID is not in it
   * is an orphan.
   */
  readonly livePodUids: () => Promise<Iterable<string>> | Iterable<string>;
  /**
   * The durable Pod ledger: launches (the instance ID as soon as `RunInstances` returned) and
   * teardown records, keyed by Pod UID, where tenants cannot write (`@nebula/kube`'s
   * `ConfigMapPodLedger` in the controller's namespace). Default: in memory (lost on restart).
   */
  readonly ledger?: PodLedger;
  /** The auxiliary objects a Pod owns (deleted after its instance is reclaimed). Default none. */
  readonly auxiliaries?: (pod: V1Pod) => AuxiliaryObject[];
  /** Deletes one auxiliary object; 404 counts as success. */
  readonly deleteAuxiliary?: (object: AuxiliaryObject) => Promise<void>;
  /** Receives every teardown event (transitions, effects issued, holds, errors). */
  readonly onTeardownEvent?: (event: TeardownEvent) => void;
  /**
   * Refuse `createPod` for a Pod without the reclaim finalizer (default true): without it a force
   * delete could remove the Pod before its instance is reclaimed.
   */
  readonly requireFinalizer?: boolean;
  /**
   * The reclaim finalizer the caller puts on every Pod before `createPod` (default
   * {@link RECLAIM_FINALIZER}). Set it to the finalizer your Pod controller holds, when that is not
   * the default (`@nebula/virtual-node`'s `podFinalizer`).
   */
  readonly finalizer?: string;
  /**
   * Who drives teardowns: `provider` (default) starts them itself (a terminal status written, a
   * teardown left by an earlier process, a Pod gone with its instance) and advances them every
   * poll; `caller` leaves that to the caller's own executor on the same ledger (the virtual node's
   * `PodTeardown`, through {@link InstanceReclaimer}), and only `deletePod` starts one here.
   */
  readonly teardowns?: "provider" | "caller";
  /** An EC2 client to use instead of the one built from the configuration (adaptive retry). */
  readonly client?: EC2Client;
  /**
   * An SSM client to use instead of the one built from the configuration (same Region, endpoint
   * and retry settings as the EC2 client); used with `podDelivery: "parameters"` only.
   */
  readonly ssmClient?: SSMClient;
  /** A CloudWatch Logs client to use instead of the one built from the configuration (with `config.logs`). */
  readonly logsClient?: CloudWatchLogsClient;
  /** A CloudWatch client to use instead of the one built from the configuration (with `config.metrics`). */
  readonly metricsClient?: CloudWatchClient;
  /** The clock, ms since the epoch (tests pass a fake one). Default `Date.now`. */
  readonly now?: () => number;
  /** Where the provider writes one-line diagnostics. Default: nowhere. */
  readonly log?: (level: "info" | "warn" | "error", message: string) => void;
}

/** What one poll cycle did. */
export interface PollResult {
  /** True when the poll reached EC2. */
  readonly ok: boolean;
  /** Instances of this node seen. */
  readonly instances: number;
  /** `DescribeInstances` pages requested. */
  readonly describeCalls: number;
  /** `GetConsoleOutput` calls made (fallback for stopped instances without report tags). */
  readonly consoleCalls: number;
  /** The error, when the poll failed. */
  readonly error?: ProviderError;
}

/** Annotation prefix of a pre-terminate hold on a Pod (its holders delay `terminating`). */
const PRE_TERMINATE_HOLD_PREFIX = "pre-terminate.teardown.nebula.dev/";

const OBSERVABLE_STATES = new Set<string>([
  "pending",
  "running",
  "stopping",
  "stopped",
  "shutting-down",
  "terminated",
]);

/** What the provider does with a Pod. */
type Mode =
  /** Launch (or launched). */
  | "launch"
  /** Not launched, Pending with a reason (DaemonSet). */
  | "hold"
  /**
   * Not launched yet: a mandatory ConfigMap or Secret is missing (`CreateContainerConfigError`);
   * its sources are read and the Pod rendered again on every poll until it renders.
   */
  | "config"
  /** Refused: Failed at once. */
  | "refused"
  /** Terminal in the API when first seen: never launched again. */
  | "terminal";

interface PodRecord {
  pod: V1Pod;
  facts: PodFacts;
  mode: Mode;
  instanceType?: string;
  userData?: LaunchInput["userData"];
  instanceId?: string;
  /** A `RunInstances` was (or may have been) sent: the ledger has its request time. */
  launchRequested: boolean;
  /** The `ClientToken` of the latest launch request, as the ledger recorded it. */
  clientToken?: string;
  requestedAt?: number | undefined;
  /** A launch attempt ended without a definite answer (timeout, 5xx): an instance may exist. */
  unknownOutcome: boolean;
  placement?: Placement;
  backoff: LaunchBackoff;
  launchError?: ProviderError | undefined;
  launching: boolean;
  /** The Pod's parameters (`podDelivery: "parameters"`), to write before `RunInstances`. */
  parameters?: readonly PodParameter[] | undefined;
  /** The supervisor's parameters the Pod's user-data reads (shared; see `#sharedWritten`). */
  sharedParameters?: readonly PodParameter[] | undefined;
  /** When this process last wrote them (ms); written again when half the leak grace old. */
  parametersWrittenAt?: number | undefined;
  /** The Pod's parameters may still lack the `nebula:instance-arn` tag of its instance. */
  parametersUntagged: boolean;
  /** Tagging in progress. */
  tagging?: boolean | undefined;
  /** The instance's account (`OwnerId` of `RunInstances`), for its ARN. */
  accountId?: string | undefined;
  /** The `CreateContainerConfigError` message the Pod is held with (one Event per message). */
  configError?: string | undefined;
  /** Reading the sources and rendering again is in progress. */
  readmitting?: boolean | undefined;
  /** Render notices already published as Events. */
  notices?: Set<string> | undefined;
  /** When RunInstances answered (the grace for an instance not yet listed starts here). */
  launchedAt?: Date;
  /** The instance ID still has to be written to the ledger (the write failed). */
  ledgerDirty: boolean;
  observed?: ObservedInstance | undefined;
  /**
   * This process has observed the instance: a poll listed it, a describe by ID found it (or proved
   * it absent), or this process launched it. Until then it has no state, and the Pod keeps the
   * status stored in the API (no state from no observation: brief C9).
   */
  seen: boolean;
  /** True after a poll that did not list the (known, seen) instance. */
  missing: boolean;
  state?: InstanceState | undefined;
  stoppedSince?: number | undefined;
  consoleReadAt?: number;
  consoleOutput?: string;
  status?: V1PodStatus;
  deliveredKey?: string;
  /** The publication in progress (one at a time per Pod, so no Event is delivered twice). */
  publishing?: Promise<void> | undefined;
  events: ProviderEvent[];
  deleted: boolean;
  teardown?: "active" | "done" | undefined;
  reclaim?: ReclaimState;
  ticking?: boolean;
}

const CONSOLE_RETRY_MS = 5 * 60 * 1000;

/**
 * An instance of the Pod `podUid` that is terminated or shutting down: nothing is ever sent to it
 * again, so it needs no proof of ownership to be observed (EC2 may stop reporting its instance
 * profile once it is shutting down, which fails the proof).
 */
function isGone(instance: ObservedInstance, podUid: string): boolean {
  return (
    (instance.state === "terminated" || instance.state === "shutting-down") &&
    instance.podUid === podUid
  );
}

const NO_PARAMETER_LEAKS: ParameterLeakPlan = { delete: [], podUids: [] };

/** The sources of a Pod without ConfigMap or Secret references (or without a `readSources`). */
const NO_SOURCES: PodSources = { configMaps: {}, secrets: {} };

/** Calls `call` for every listener; a listener's throw is its own and stops nothing. */
function notifyAll<L>(listeners: Iterable<L>, call: (listener: L) => void): void {
  for (const listener of listeners) {
    try {
      call(listener);
    } catch {
      // A listener's failure is its own.
    }
  }
}

/**
 * The virtual-node provider on EC2: one instance per Pod, launched idempotently, observed by one
 * tag-filtered, paginated `DescribeInstances` sequence per poll interval (the exit report rides in
 * the tags), mapped to a truthful Pod status, reclaimed (stop, then terminate) when the Pod is
 * finished or deleted, and backed by a two-phase leak collector. Launches and teardowns are
 * recorded in the {@link PodLedger} keyed by Pod UID; instances are acted on only when their
 * launch proves they belong to the Pod.
 *
 * @example
 * ```ts
 * const provider = new Ec2PodProvider({
 *   config, ledger: new ConfigMapPodLedger(kc, { namespace: "nebula-system" }),
 *   livePodUids: () => informer.list().map((p) => p.metadata?.uid ?? ""),
 * });
 * provider.notifyPods(({ pod, status }) => writeStatus(pod, status));
 * void provider.run(abort.signal);
 * await provider.createPod(podWithFinalizer);
 * ```
 */
export class Ec2PodProvider implements PodLifecycle, InstanceReclaimer, NodeHealthSource, Runnable {
  /** The parsed configuration. */
  readonly config: ProviderConfig;
  /** The EC2 client in use. */
  readonly client: EC2Client;
  /** The SSM client in use (Pod parameters, `podDelivery: "parameters"`). */
  readonly ssm: SSMClient;
  /**
   * The Pods' container logs in CloudWatch Logs, as the hosts write them (`config.logs`);
   * `undefined` when logging is off. A virtual node serves `kubectl logs` from it.
   */
  readonly containerLogs: CloudWatchContainerLogs | undefined;
  /**
   * The Pods' container usage in CloudWatch metrics, as the hosts publish it
   * (`config.metrics`); `undefined` when metrics are off. A virtual node serves
   * `/stats/summary` and `/metrics/resource` from it.
   */
  readonly containerUsage: CloudWatchUsage | undefined;
  /** The ledger in use. */
  readonly ledger: PodLedger;
  readonly #options: Ec2PodProviderOptions;
  readonly #now: () => number;
  readonly #records = new Map<string, PodRecord>();
  /** Teardowns found in the ledger at start-up whose Pod this process has not seen yet. */
  readonly #resuming = new Set<string>();
  /** The supervisor parameters this process has written (or found): each is written once. */
  readonly #sharedWritten = new Set<string>();
  readonly #listeners = new Set<PodStatusListener>();
  readonly #leakListeners = new Set<(leak: CollectedLeak) => void>();
  readonly #parameterLeakListeners = new Set<(leak: CollectedParameterLeak) => void>();
  readonly #pollListeners = new Set<(result: PollResult, seconds: number) => void>();
  readonly #nodeListeners = new Set<(health: NodeHealth) => void>();
  readonly #stop: InstanceBatcher;
  readonly #terminate: InstanceBatcher;
  readonly #bounds: PacingBounds;
  readonly #ownership: OwnershipRules;
  /** Capacity pools cooling down after a capacity or quota error: pool → until (ms). */
  readonly #pools = new Map<string, number>();
  /** The error that cooled each pool down, for the Pods that wait on it. */
  readonly #poolErrors = new Map<string, ProviderError>();
  /** The leak collector's own orphan marks: instance ID → when it marked it. */
  readonly #marks = new Map<string, number>();
  #pacing: Pacing;
  #health: NodeHealth = {
    ready: true,
    reason: "EC2Reachable",
    message: "EC2 has not been polled yet",
  };
  #lastInstances: readonly ObservedInstance[] | undefined;
  #pollTimer: ReturnType<typeof setTimeout> | undefined;
  #leakTimer: ReturnType<typeof setTimeout> | undefined;
  #running = false;
  #polling: Promise<PollResult> | undefined;
  readonly #executor: TeardownExecutor<
    PodTeardownObservation,
    PodTeardownEffect,
    PodTeardownParams
  >;

  /** @param options - see {@link Ec2PodProviderOptions}. */
  constructor(options: Ec2PodProviderOptions) {
    this.#options = options;
    this.config = parseProviderConfig(options.config);
    this.#now = options.now ?? Date.now;
    this.ledger = options.ledger ?? new MemoryPodLedger();
    const clientConfig = {
      region: this.config.region,
      retryMode: "adaptive",
      maxAttempts: this.config.maxAttempts,
      ...(this.config.endpoint === undefined ? {} : { endpoint: this.config.endpoint }),
    };
    this.client = options.client ?? new EC2Client(clientConfig);
    // Built lazily by the SDK (no call until used): only the parameters delivery sends anything.
    this.ssm = options.ssmClient ?? new SSMClient(clientConfig);
    // What the hosts write (config.logs, config.metrics), read back for the kubelet API.
    const logs = this.config.logs;
    this.containerLogs =
      logs === undefined
        ? undefined
        : new CloudWatchContainerLogs({
            client: options.logsClient ?? new CloudWatchLogsClient(clientConfig),
            group: logs.group,
          });
    const metrics = this.config.metrics;
    this.containerUsage =
      metrics === undefined
        ? undefined
        : new CloudWatchUsage({
            client: options.metricsClient ?? new CloudWatchClient(clientConfig),
            namespace: metrics.namespace,
          });
    this.#ownership = {
      clusterName: this.config.clusterName,
      nodeName: this.config.nodeName,
      instanceProfile: this.config.instanceProfile,
      clientToken: this.config.ownership.clientToken,
    };
    const batch = { batchSize: this.config.batchSize, windowMs: this.config.batchWindowMs };
    this.#stop = new InstanceBatcher(
      (ids) => this.client.send(new StopInstancesCommand({ InstanceIds: ids })),
      "StopInstances",
      batch,
    );
    this.#terminate = new InstanceBatcher(
      (ids) => this.client.send(new TerminateInstancesCommand({ InstanceIds: ids })),
      "TerminateInstances",
      batch,
    );
    this.#bounds = {
      baseMs: this.config.pollIntervalSeconds * 1000,
      maxMs: this.config.maxPollIntervalSeconds * 1000,
      outageAfterFailures: this.config.outageAfterFailures,
    };
    this.#pacing = initialPacing(this.#bounds);
    this.#executor = new TeardownExecutor({
      teardown: podTeardown,
      store: this.ledger,
      now: this.#now,
      observe: (input) => this.#observeTeardown(input),
      handlers: {
        StopInstance: (effect) => this.#reclaimEffect(effect.podUid, effect.instanceId, "stop"),
        TerminateInstance: (effect) =>
          this.#reclaimEffect(effect.podUid, effect.instanceId, "terminate"),
        DeleteAuxiliary: async (effect) => {
          if (isPodParametersAuxiliary(effect.object)) {
            await this.deletePodParameters(effect.object.name);
            return;
          }
          if (!options.deleteAuxiliary) {
            throw new ProviderError("InvalidConfiguration", "no deleteAuxiliary is configured");
          }
          await options.deleteAuxiliary(effect.object);
        },
        // The provider's teardowns end by clearing (`finish: "clear"`): the caller deletes the Pod.
        DeletePod: () => undefined,
      },
      ...(options.onTeardownEvent ? { onEvent: options.onTeardownEvent } : {}),
    });
  }

  // ---- Pod lifecycle -------------------------------------------------------------------------

  /**
   * Starts the Pod's instance, unless the Pod is refused (then `Failed` at once, with the reason
   * and a message naming the field, and a Warning Event), held (a DaemonSet Pod: `Pending` with a
   * reason), terminal in the API (never relaunched: its teardown resumes instead) or being deleted.
   * Idempotent: a Pod whose launch the ledger recorded is adopted, not launched again; the launch
   * intent is recorded before `RunInstances` and the instance ID as soon as it returns. Capacity,
   * quota, throttling and server errors leave the Pod `Pending` with the reason; the launch is
   * retried by the poll with back-off (other subnets and fallback types first).
   *
   * @throws ProviderError `MissingFinalizer` for a Pod without the reclaim finalizer
   * ({@link RECLAIM_FINALIZER} unless the `finalizer` option names another);
   * `InvalidPodSpec` for a Pod without a UID, name or containers; a ledger failure (retry later).
   */
  async createPod(pod: V1Pod): Promise<void> {
    const facts = podFacts(pod);
    const existing = this.#records.get(facts.uid);
    if (existing) {
      this.#refreshPod(existing, pod);
      return;
    }
    const finalizer = this.#options.finalizer ?? RECLAIM_FINALIZER;
    if (
      this.#options.requireFinalizer !== false &&
      !facts.deleting &&
      !facts.finalizers.includes(finalizer)
    ) {
      throw new ProviderError(
        "MissingFinalizer",
        `pod ${facts.key} has no ${finalizer} finalizer: add it before createPod, so that no deletion can skip reclaiming the instance`,
      );
    }
    const record = await this.#load(pod, facts);
    if (record.deleted || record.mode === "terminal") {
      if (this.#drivesTeardowns && (record.deleted || record.launchRequested)) {
        await this.#startReclaim(record);
      }
      return;
    }
    // Held for a missing ConfigMap or Secret after a launch whose outcome is unknown (a crash):
    // an instance may exist with the parameters written then; adopt it rather than hold the Pod.
    if (record.mode === "config" && record.launchRequested && (await this.#adopt(record))) {
      this.#leaveConfigHold(record);
    }
    if (record.mode === "launch") {
      const adopted = await this.#adopt(record);
      if (adopted) await this.#tagParameters(record);
      if (!adopted && !record.instanceId) {
        try {
          await this.#launch(record);
        } catch (error) {
          // Not retryable (configuration, permissions): the caller reports it; the next call retries.
          this.#records.delete(facts.uid);
          throw error;
        }
      }
      this.#refreshState(record);
    }
    // Published in the background, not awaited: a listener may wait for its caller's own work
    // (a controller writes the status in the reconcile that called createPod), and awaiting it
    // here would hold that reconcile until the listener's deadline.
    this.#publish(record).catch((error: unknown) =>
      this.#log("warn", `status of pod ${facts.key} not published: ${String(error)}`),
    );
  }

  /** Records the newer Pod object (its deletion grace, labels, holds); EC2 is not called. */
  async updatePod(pod: V1Pod): Promise<void> {
    const facts = podFacts(pod);
    const record = this.#records.get(facts.uid);
    if (!record) return this.createPod(pod);
    this.#refreshPod(record, pod);
  }

  /**
   * Reclaims the Pod's instance and reports where that stands: the teardown (stop with the
   * deletion's grace period, capped, plus headroom; then terminate) is recorded in the ledger
   * before any effect and advanced one step per call and per poll. Call it on every reconcile of
   * a Pod being deleted; once it returns `complete: true`, delete the Pod (grace 0, UID
   * precondition), remove {@link RECLAIM_FINALIZER}, then {@link forgetPod}. Idempotent; a Pod
   * this process never saw is looked up in the ledger and by its UID tag.
   */
  async deletePod(pod: V1Pod): Promise<ReclaimState> {
    const facts = podFacts(pod);
    let record = this.#records.get(facts.uid);
    if (record) this.#refreshPod(record, pod);
    else record = await this.#load(pod, facts);
    record.deleted = true;
    if (record.teardown === undefined) await this.#startReclaim(record);
    else await this.#advanceReclaim(record);
    return this.reclaimState(facts.uid) ?? this.#stateOf(record);
  }

  /** Where the Pod's reclaim stands, or `undefined` for a Pod this provider does not know. */
  reclaimState(uid: string): ReclaimState | undefined {
    const record = this.#records.get(uid);
    return record ? this.#stateOf(record) : undefined;
  }

  /** {@inheritDoc PodLifecycle.getPodStatus} */
  getPodStatus(uid: string): V1PodStatus | undefined {
    const record = this.#records.get(uid);
    return record?.status === undefined ? undefined : structuredClone(record.status);
  }

  /** A copy of the Pod with its latest status, or `undefined`. */
  getPod(uid: string): V1Pod | undefined {
    const record = this.#records.get(uid);
    return record ? withStatus(record) : undefined;
  }

  /** {@inheritDoc PodLifecycle.listPods} */
  listPods(): V1Pod[] {
    return [...this.#records.values()]
      .filter((r) => !r.deleted || r.teardown !== "done")
      .map(withStatus);
  }

  /** {@inheritDoc PodLifecycle.notifyPods} */
  notifyPods(listener: PodStatusListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Subscribes to the leaks the collector terminates: one call per instance, after its
   * `TerminateInstances` was accepted. A listener that throws is ignored. Returns the unsubscribe.
   *
   * @example
   * ```ts
   * provider.onLeakCollected((leak) => log.warn(leak.message));
   * ```
   */
  onLeakCollected(listener: (leak: CollectedLeak) => void): () => void {
    this.#leakListeners.add(listener);
    return () => this.#leakListeners.delete(listener);
  }

  /**
   * Subscribes to the Pod parameters the leak collector deletes (`podDelivery: "parameters"`): one
   * call per Pod, after its parameters were deleted. A listener that throws is ignored. Returns
   * the unsubscribe.
   *
   * @example
   * ```ts
   * provider.onParameterLeakCollected((leak) => leaks.inc({ kind: "parameters" }));
   * ```
   */
  onParameterLeakCollected(listener: (leak: CollectedParameterLeak) => void): () => void {
    this.#parameterLeakListeners.add(listener);
    return () => this.#parameterLeakListeners.delete(listener);
  }

  /**
   * The Pod's cloud objects besides its instance, for a caller's teardown (`InstanceReclaimer`):
   * with `podDelivery: "parameters"`, its Parameter Store parameters; otherwise none.
   */
  auxiliariesOf(podUid: string): readonly AuxiliaryObject[] {
    return this.#parametersDelivery ? [podParametersAuxiliary(podUid)] : [];
  }

  /**
   * Releases an object of {@link auxiliariesOf} (deletes the Pod's parameters); idempotent.
   * Refuses an object it did not name.
   */
  async releaseAuxiliary(object: AuxiliaryObject): Promise<void> {
    if (!isPodParametersAuxiliary(object)) {
      throw new ProviderError(
        "InvalidConfiguration",
        `cannot release ${object.apiVersion}/${object.kind} ${object.name}: not one of this provider's objects`,
      );
    }
    await this.deletePodParameters(object.name);
  }

  /**
   * Deletes every Parameter Store parameter the Pod can have (all `MAX_POD_PARAMETERS` names, one
   * `DeleteParameters` call; missing names are not an error), so it is safe to repeat. The Pod's
   * teardown does it in its `releasing` phase (the provider's own, or a caller's through
   * {@link auxiliariesOf} and {@link releaseAuxiliary}); {@link forgetPod} does it again for a Pod
   * whose teardown never ran (never launched), and the leak collector for whatever is left.
   *
   * @throws ProviderError classified from SSM (`Throttled`, `Unauthorized`, ...).
   */
  async deletePodParameters(podUid: string): Promise<void> {
    const deleted = await deletePodParameters(this.ssm, this.config.clusterName, podUid);
    if (deleted.length > 0) {
      this.#log("info", `deleted ${deleted.length} parameter(s) of pod UID ${podUid}`);
    }
  }

  /**
   * This node's instances by EC2 state, from the latest poll (`{}` before the first one):
   * what a metric of instances by state reads.
   *
   * @example
   * ```ts
   * provider.instanceCounts(); // { running: 12, stopped: 1, terminated: 30 }
   * ```
   */
  instanceCounts(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const instance of this.#lastInstances ?? []) {
      counts[instance.state] = (counts[instance.state] ?? 0) + 1;
    }
    return counts;
  }

  /**
   * The instance the latest poll listed for Pod `podUid` (this node's, in a live state, proving it
   * was launched for that Pod), or `undefined`: no listing yet, or none listed for it.
   *
   * @example
   * ```ts
   * provider.listedInstance(uid); // { instanceId: "i-0123456789abcdef0", state: "running" }
   * ```
   */
  listedInstance(podUid: string): { instanceId: string; state: string } | undefined {
    const listed = this.#lastInstances?.find(
      (i) => i.podUid === podUid && this.#disprove(i, podUid) === undefined,
    );
    return listed === undefined
      ? undefined
      : { instanceId: listed.instanceId, state: listed.state };
  }

  /** Same as {@link notifyPods}. */
  onStatusChange(listener: PodStatusListener): () => void {
    return this.notifyPods(listener);
  }

  /**
   * Forgets a Pod that is gone from the API. Its ledger entry is removed when its teardown is
   * complete (or nothing was launched); otherwise it stays, and the teardown resumes from it.
   */
  async forgetPod(uid: string): Promise<void> {
    const record = this.#records.get(uid);
    this.#records.delete(uid);
    this.#resuming.delete(uid);
    if (!this.#drivesTeardowns) {
      // The caller drives the teardowns and forgets a Pod once its teardown completed (its
      // instance terminated or provably never there): the entry has done its work.
      if (this.#parametersDelivery) await this.#releaseParametersOf(uid, record);
      try {
        await this.ledger.remove(uid);
      } catch (error) {
        this.#log("warn", `ledger entry of pod ${uid} not removed: ${String(error)}`);
      }
      return;
    }
    const state = record ? this.#stateOf(record) : undefined;
    if (state !== undefined && !state.complete && record?.launchRequested) {
      this.#log(
        "warn",
        `pod ${uid} forgotten before its instance was reclaimed; the ledger keeps it`,
      );
      return;
    }
    try {
      const entry = await this.ledger.get(uid);
      if (entry === undefined) return;
      if (entry.launch.requestedAt !== undefined || entry.launch.instanceId !== undefined) {
        if (!isCompleteRecord(entry.record)) {
          this.#resuming.add(uid);
          return;
        }
      }
      await this.ledger.remove(uid, { ifVersion: entry.version });
    } catch (error) {
      this.#log("warn", `ledger entry of pod ${uid} not removed: ${String(error)}`);
    }
  }

  /**
   * `teardowns: "caller"`: a Pod the caller forgets has its parameters deleted here too, once its
   * ledger record is complete or nothing was launched (a Pod held or refused, whose teardown never
   * ran). Repeats the teardown's release harmlessly; a failure is left to the leak collector.
   */
  async #releaseParametersOf(uid: string, record: PodRecord | undefined): Promise<void> {
    try {
      const entry = await this.ledger.get(uid);
      if (entry === undefined && record?.parametersWrittenAt === undefined) return;
      const launched =
        entry?.launch.requestedAt !== undefined || entry?.launch.instanceId !== undefined;
      if (launched && !isCompleteRecord(entry?.record)) return;
      await this.deletePodParameters(uid);
    } catch (error) {
      this.#log(
        "warn",
        `parameters of pod UID ${uid} not deleted (the leak collector will): ${String(error)}`,
      );
    }
  }

  // ---- instances -----------------------------------------------------------------------------

  /**
   * The Pod's instance: by its recorded ID, else by the `nebula:pod-uid` tag (proven ownership).
   * Throws `NotFound` instead of answering
   * `undefined` while a launch of the Pod is younger than `eventualConsistencySeconds` (EC2 may
   * still hide it): "not found" then is not "absent".
   */
  async findInstance(podUid: string): Promise<{ instanceId: string; state: string } | undefined> {
    const record = this.#records.get(podUid);
    if (record?.launching) {
      // A RunInstances may be under way: its answer, not this lookup, says whether one exists.
      throw new ProviderError(
        "NotFound",
        `a launch for pod ${podUid} is under way: ask again once it has answered`,
      );
    }
    let recorded = record?.instanceId;
    if (recorded === undefined) recorded = (await this.ledger.get(podUid))?.launch.instanceId;
    const found = await this.#provenInstance(podUid, recorded);
    if (found) {
      if (
        record?.mode === "launch" &&
        (record.instanceId ?? found.instanceId) === found.instanceId
      ) {
        // What the teardown sees is an observation too: the final report a stopping host wrote is
        // in the Pod's status before the teardown goes on to terminate (the next status write
        // carries it), not left to a poll that may come after the instance is gone.
        this.#observe(record, found);
        this.#refreshState(record);
        this.#computeStatus(record);
      }
      return { instanceId: found.instanceId, state: found.state };
    }
    const entry = record ? undefined : await this.ledger.get(podUid);
    const since =
      record?.launchedAt?.getTime() ??
      record?.requestedAt ??
      entry?.launch.launchedAt ??
      entry?.launch.requestedAt;
    this.#throwIfRecent(since, `the instance of pod ${podUid}`);
    return undefined;
  }

  /** Within the eventual-consistency window of a launch, "not found" is not an answer: throw. */
  #throwIfRecent(since: number | undefined, what: string): void {
    if (since === undefined) return;
    if (this.#now() - since < this.config.eventualConsistencySeconds * 1000) {
      throw new ProviderError(
        "NotFound",
        `${what} is not listed yet: EC2 is eventually consistent for ${this.config.eventualConsistencySeconds} s after a launch; ask again`,
      );
    }
  }

  #recentLaunchOf(instanceId: string): number | undefined {
    for (const record of this.#records.values()) {
      if (record.instanceId === instanceId)
        return record.launchedAt?.getTime() ?? record.requestedAt;
    }
    return undefined;
  }

  /**
   * `StopInstances` (batched); a stop EC2 refuses for good becomes `TerminateInstances`. Only an
   * instance that proves Nebula launched it
   * (`NotOwned` otherwise); NotFound is done, except for an instance this process launched within
   * the eventual-consistency window (then it throws, to be asked again).
   */
  async stopInstance(
    instanceId: string,
    options: { readonly graceSeconds?: number | undefined } = {},
  ): Promise<void> {
    const instance = await this.#describeById(instanceId);
    if (instance === undefined) {
      this.#throwIfRecent(this.#recentLaunchOf(instanceId), `instance ${instanceId}`);
      return;
    }
    // A terminated (or terminating) instance is done: nothing more is sent to it, so it needs no
    // proof (EC2 may drop its instance profile once it is terminated, which would fail the proof).
    if (instance.state === "terminated" || instance.state === "shutting-down") return;
    this.#prove(instance, undefined);
    if (options.graceSeconds !== undefined && instance.state !== "stopped") {
      await this.#tagStopGrace(instance, options.graceSeconds);
    }
    await this.#act(instance, "stop");
  }

  /**
   * Tells the host the stop's grace ({@link STOP_GRACE_TAG}) before the stop reaches it. A failure
   * is logged, not thrown: the host then stops with the Pod's own grace, later but still whole.
   */
  async #tagStopGrace(instance: ObservedInstance, graceSeconds: number): Promise<void> {
    const value = String(Math.max(0, Math.floor(graceSeconds)));
    if (instance.tags.get(STOP_GRACE_TAG) === value) return;
    try {
      await this.client.send(
        new CreateTagsCommand({
          Resources: [instance.instanceId],
          Tags: [{ Key: STOP_GRACE_TAG, Value: value }],
        }),
      );
    } catch (error) {
      this.#log(
        "warn",
        `${toProviderError(error, `CreateTags ${STOP_GRACE_TAG} on ${instance.instanceId}`).message}; the host stops with the Pod's own grace`,
      );
    }
  }

  /** {@inheritDoc InstanceReclaimer.terminateInstance} */
  async terminateInstance(instanceId: string): Promise<void> {
    const instance = await this.#describeById(instanceId);
    if (instance === undefined) {
      this.#throwIfRecent(this.#recentLaunchOf(instanceId), `instance ${instanceId}`);
      return;
    }
    // A terminated (or terminating) instance is done: nothing more is sent to it, so it needs no
    // proof (EC2 may drop its instance profile once it is terminated, which would fail the proof).
    if (instance.state === "terminated" || instance.state === "shutting-down") return;
    this.#prove(instance, undefined);
    await this.#act(instance, "terminate");
  }

  /** Subscribes to changes of {@link NodeHealth}; returns the unsubscribe function. */
  onNodeHealth(listener: (health: NodeHealth) => void): () => void {
    this.#nodeListeners.add(listener);
    return () => this.#nodeListeners.delete(listener);
  }

  /** EC2 as the provider last saw it, for the virtual Node's conditions. */
  health(): NodeHealth {
    return this.#health;
  }

  /** Milliseconds until the next poll (grows under throttling and failures). */
  get pollIntervalMs(): number {
    return this.#pacing.intervalMs;
  }

  get #drivesTeardowns(): boolean {
    return this.#options.teardowns !== "caller";
  }

  get #parametersDelivery(): boolean {
    return this.config.podDelivery === "parameters";
  }

  // ---- loops ---------------------------------------------------------------------------------

  /**
   * Runs the poll loop and the leak collector until `signal` aborts, then stops them and sends
   * what is queued. Teardowns recorded in the ledger by an earlier process resume.
   */
  async run(signal: AbortSignal): Promise<void> {
    await this.resume();
    this.start();
    if (!signal.aborted) {
      await new Promise<void>((resolve) =>
        signal.addEventListener("abort", () => resolve(), { once: true }),
      );
    }
    await this.stop();
  }

  /**
   * Reads the ledger and resumes every teardown that an earlier process left unfinished (each poll
   * then advances it), so no instance waits for its Pod to be seen again.
   */
  async resume(): Promise<number> {
    if (!this.#drivesTeardowns) return 0;
    let entries: Awaited<ReturnType<PodLedger["list"]>>;
    try {
      entries = await this.ledger.list();
    } catch (error) {
      this.#log("warn", `ledger not read at start-up: ${String(error)}`);
      return 0;
    }
    for (const entry of entries) {
      if (entry.record !== undefined && !isCompleteRecord(entry.record)) {
        if (!this.#records.has(entry.launch.podUid)) this.#resuming.add(entry.launch.podUid);
      }
    }
    return this.#resuming.size;
  }

  /** Starts the poll loop and the leak collector (whose first pass follows the first poll). */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    const pollLoop = async () => {
      await this.pollOnce();
      if (this.#running) this.#pollTimer = setTimeout(pollLoop, this.#pacing.intervalMs);
    };
    const leakLoop = async () => {
      try {
        await this.collectLeaks();
      } catch (error) {
        this.#log("warn", `leak collection failed: ${String(error)}`);
      }
      if (this.#running) {
        this.#leakTimer = setTimeout(leakLoop, this.config.leakCollection.intervalSeconds * 1000);
      }
    };
    this.#pollTimer = setTimeout(async () => {
      await pollLoop();
      if (this.#running) this.#leakTimer = setTimeout(leakLoop, 0);
    }, 0);
  }

  /** Stops both loops and sends whatever stop/terminate requests are queued. */
  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#pollTimer);
    clearTimeout(this.#leakTimer);
    await this.#polling;
    await Promise.all([this.#stop.flush(), this.#terminate.flush()]);
  }

  /**
   * One poll cycle: one paginated, tag-filtered `DescribeInstances` sequence; every known Pod's
   * status recomputed from its instance and exit report; `GetConsoleOutput` only for stopped
   * instances without readable report tags after the settle window; reclaims advanced; pending
   * launches retried (with back-off). Never throws: a failed poll is reported in the result and in
   * {@link Ec2PodProvider.health}, and slows the loop down.
   */
  pollOnce(): Promise<PollResult> {
    this.#polling ??= this.#timedPoll().finally(() => {
      this.#polling = undefined;
    });
    return this.#polling;
  }

  /**
   * Subscribes to every finished poll cycle: its result and how long it took in seconds (listing,
   * statuses published, reclaims advanced). A listener that throws is ignored. Returns the
   * unsubscribe.
   *
   * @example
   * ```ts
   * provider.onPoll((result, seconds) => pollDuration.observe({ ok: String(result.ok) }, seconds));
   * ```
   */
  onPoll(listener: (result: PollResult, seconds: number) => void): () => void {
    this.#pollListeners.add(listener);
    return () => this.#pollListeners.delete(listener);
  }

  async #timedPoll(): Promise<PollResult> {
    const started = performance.now();
    const result = await this.#pollOnce();
    const seconds = (performance.now() - started) / 1000;
    notifyAll(this.#pollListeners, (listener) => listener(result, seconds));
    return result;
  }

  async #pollOnce(): Promise<PollResult> {
    let listing: Awaited<ReturnType<typeof describeNodeInstances>>;
    try {
      listing = await describeNodeInstances(this.client, {
        clusterName: this.config.clusterName,
        nodeName: this.config.nodeName,
        pageSize: this.config.pageSize,
      });
    } catch (error) {
      const wrapped = toProviderError(error, "poll");
      this.#pacing = nextPacing(this.#pacing, wrapped.code, this.#bounds);
      await this.#updateHealth(wrapped);
      return { ok: false, instances: 0, describeCalls: 0, consoleCalls: 0, error: wrapped };
    }
    this.#pacing = nextPacing(this.#pacing, "ok", this.#bounds);
    this.#lastInstances = listing.instances;
    await this.#updateHealth(undefined);
    const groups = new Map<string, ObservedInstance[]>();
    for (const instance of listing.instances) {
      if (instance.podUid === undefined) continue;
      const group = groups.get(instance.podUid) ?? [];
      group.push(instance);
      groups.set(instance.podUid, group);
    }
    const byUid = new Map<string, ObservedInstance>();
    const duplicates: string[] = [];
    for (const [uid, group] of groups) {
      // Only instances that prove they were launched for this Pod count (tags can be forged).
      const proven = group.filter((i) => this.#disprove(i, uid) === undefined);
      if (proven.length === 0) continue;
      const keep = pickKeeper(proven, this.#records.get(uid)?.instanceId);
      byUid.set(uid, keep);
      for (const other of proven) {
        if (other !== keep && other.state !== "shutting-down") duplicates.push(other.instanceId);
      }
    }
    if (duplicates.length > 0) {
      // EC2 honours ClientToken, so this only happens when a token expired or an endpoint (moto)
      // ignores it: never leave two instances running for one Pod.
      this.#log(
        "warn",
        `terminating ${duplicates.length} duplicate instance(s): ${duplicates.join(", ")}`,
      );
      for (const id of duplicates) {
        this.#terminate.add(id).catch((error) => this.#log("warn", String(error)));
      }
    }
    // Pods held for a missing ConfigMap or Secret: adopt an instance a lost launch left, else read
    // their sources and render them again; those that render now launch below.
    await Promise.all(
      [...this.#records.values()]
        .filter((r) => r.mode === "config" && !r.deleted)
        .map((r) => this.#readmit(r, byUid.get(r.facts.uid))),
    );
    // Recorded instances this listing does not show (it lists live states only): described by ID,
    // terminated ones included, before anything is concluded. A terminated instance still carries
    // its final report; "not listed" is not "lost" (an instance adopted from the ledger, or one the
    // teardown stopped and terminated between two polls).
    const unlisted = [...this.#records.values()].filter(
      (r) =>
        r.mode === "launch" &&
        r.instanceId !== undefined &&
        !r.missing &&
        r.observed?.state !== "terminated" &&
        byUid.get(r.facts.uid)?.instanceId !== r.instanceId,
    );
    if (unlisted.length > 0) await this.#describeUnlisted(unlisted);
    let consoleCalls = 0;
    const work: Promise<void>[] = [];
    for (const record of this.#records.values()) {
      if (record.mode !== "launch") {
        work.push(this.#publish(record));
        continue;
      }
      const instance = byUid.get(record.facts.uid);
      if (instance && this.#disprove(instance, record.facts.uid) === undefined) {
        this.#observe(record, instance);
      }
      // Otherwise: observed or proven absent by the lookup above, or nothing concluded yet (the
      // lookup failed, or a new instance is within EC2's consistency window): the last
      // observation stands.
      if (record.ledgerDirty) work.push(this.#recordInstance(record));
      if (record.instanceId === undefined && !record.deleted && !record.launching) {
        work.push(
          this.#launch(record)
            .catch(() => undefined)
            .then(() => {
              this.#refreshState(record);
              return this.#publish(record);
            }),
        );
        continue;
      }
      this.#refreshState(record);
      if (record.parametersUntagged && !record.deleted && !isTerminalStatus(record.status)) {
        work.push(this.#tagParameters(record));
      }
      if (this.#needsConsole(record)) {
        consoleCalls++;
        work.push(
          this.#readConsole(record).then(() => {
            this.#refreshState(record);
            return this.#publish(record);
          }),
        );
        continue;
      }
      work.push(this.#publish(record));
    }
    await Promise.all(work);
    await Promise.all([...this.#records.values()].map((r) => this.#advanceReclaim(r)));
    for (const uid of [...this.#resuming]) {
      if (this.#records.has(uid)) {
        this.#resuming.delete(uid);
        continue;
      }
      const result = await this.#executor.tick(uid);
      if (result.status === "complete" || result.status === "absent") this.#resuming.delete(uid);
    }
    return {
      ok: true,
      instances: listing.instances.length,
      describeCalls: listing.calls,
      consoleCalls,
    };
  }

  /**
   * Describes the recorded instances of `records` (not in the latest listing) with one filtered
   * `DescribeInstances` sequence per 200 IDs, every state included. A found instance that proves
   * it is the Pod's (a terminated or shutting-down one by its Pod UID tag alone) is observed; one
   * not found is proven absent only outside the eventual-consistency window of its launch. A
   * failed call concludes nothing.
   */
  async #describeUnlisted(records: readonly PodRecord[]): Promise<void> {
    for (let i = 0; i < records.length; i += 200) {
      const chunk = records.slice(i, i + 200);
      let found: readonly ObservedInstance[];
      try {
        const page = await describeNodeInstances(this.client, {
          clusterName: this.config.clusterName,
          nodeName: this.config.nodeName,
          pageSize: this.config.pageSize,
          filters: [{ Name: "instance-id", Values: chunk.map((r) => r.instanceId ?? "") }],
          states: [...OBSERVABLE_STATES],
        });
        found = page.instances;
      } catch (error) {
        this.#log("warn", `describing unlisted instances: ${String(error)}`);
        continue;
      }
      for (const record of chunk) {
        const uid = record.facts.uid;
        const instance = found.find((f) => f.instanceId === record.instanceId);
        if (instance !== undefined) {
          if (this.#disprove(instance, uid) !== undefined && !isGone(instance, uid)) continue;
          this.#observe(record, instance);
          continue;
        }
        const since = record.launchedAt?.getTime() ?? record.requestedAt;
        if (
          since !== undefined &&
          this.#now() - since < this.config.eventualConsistencySeconds * 1000
        ) {
          continue;
        }
        record.seen = true;
        record.missing = true;
        record.observed = undefined;
      }
    }
  }

  /**
   * One leak-collection pass over the latest poll (polling first when there is none): instances
   * of this node that prove Nebula launched them (tags, instance profile, client token) and whose
   * Pod UID is not live, older than the grace period, are marked (the collector's own mark, also
   * written as `nebula:orphaned-at` for people); those it marked on an earlier pass and still
   * orphaned are terminated; marks of instances whose Pod is live again are removed. Ledger
   * entries of Pods that are gone and whose teardown completed are removed. With
   * `podDelivery: "parameters"`, the cluster's Pod parameters are listed too, and those of a Pod
   * that is neither live nor held by an unfinished ledger record, unmodified for
   * `leakCollection.parameterGraceSeconds` and without a live instance of the cluster (another
   * virtual node's Pod), are deleted.
   */
  async collectLeaks(): Promise<LeakCollection> {
    if (this.#lastInstances === undefined) await this.pollOnce();
    const instances = this.#lastInstances;
    if (instances === undefined) {
      throw new ProviderError("Unavailable", "leak collection skipped: EC2 could not be listed");
    }
    // Listed before the live Pods and the ledger are read, as the instances are.
    const parameters = this.#parametersDelivery ? await this.#listParameters() : undefined;
    // Live Pods are read after the listing, so a Pod created in between counts as live.
    const live = new Set(await this.#options.livePodUids());
    for (const record of this.#records.values()) {
      if (!record.deleted || record.teardown !== "done") live.add(record.facts.uid);
    }
    const now = this.#now();
    const plan = planLeakCollection({
      instances,
      livePodUids: live,
      now,
      graceMs: this.config.leakCollection.graceSeconds * 1000,
      confirmAfterMs: Math.min(60, this.config.leakCollection.intervalSeconds / 2) * 1000,
      marks: this.#marks,
      disprove: (instance) => this.#disprove(instance, undefined),
    });
    for (const id of plan.mark) this.#marks.set(id, now);
    for (const id of plan.unmark) this.#marks.delete(id);
    for (const id of plan.terminate) this.#marks.delete(id);
    const stamp = new Date(now).toISOString();
    for (const ids of chunkIds(plan.mark, this.config.batchSize)) {
      await this.#call(
        () =>
          this.client.send(
            new CreateTagsCommand({ Resources: ids, Tags: [{ Key: ORPHANED_TAG, Value: stamp }] }),
          ),
        "CreateTags (orphan mark)",
      ).catch((error) => this.#log("warn", String(error)));
    }
    for (const ids of chunkIds(plan.unmark, this.config.batchSize)) {
      await this.#call(
        () =>
          this.client.send(
            new DeleteTagsCommand({ Resources: ids, Tags: [{ Key: ORPHANED_TAG }] }),
          ),
        "DeleteTags (orphan mark)",
      ).catch((error) => this.#log("warn", String(error)));
    }
    const byId = new Map(instances.map((i) => [i.instanceId, i]));
    await Promise.all(
      plan.terminate.map(async (id) => {
        await this.#terminate.add(id);
        const podUid = byId.get(id)?.podUid;
        const leak: CollectedLeak = {
          instanceId: id,
          podUid,
          message: `instance ${id} of pod UID ${podUid ?? "(none)"} was running with no live Pod; the leak collector terminated it`,
        };
        notifyAll(this.#leakListeners, (listener) => listener(leak));
      }),
    );
    for (const { instanceId, why } of plan.unproven) {
      this.#log("warn", `leak collection leaves ${instanceId} alone: ${why}`);
    }
    if (plan.mark.length + plan.terminate.length > 0) {
      this.#log(
        "info",
        `leak collection: marked ${plan.mark.length}, terminated ${plan.terminate.length}, unmarked ${plan.unmark.length}`,
      );
    }
    const parameterPlan =
      parameters === undefined
        ? NO_PARAMETER_LEAKS
        : await this.#collectParameters(parameters, live);
    await this.#sweepLedger(live);
    return { ...plan, parameters: parameterPlan };
  }

  async #listParameters(): Promise<ListedParameter[] | undefined> {
    try {
      return await listClusterPodParameters(this.ssm, this.config.clusterName);
    } catch (error) {
      this.#log("warn", `leak collection skips Pod parameters: ${String(error)}`);
      return undefined;
    }
  }

  /** Deletes the Pod parameters no live Pod, unfinished teardown or live instance accounts for. */
  async #collectParameters(
    parameters: readonly ListedParameter[],
    live: ReadonlySet<string>,
  ): Promise<ParameterLeakPlan> {
    let unfinished: Set<string>;
    try {
      const entries = await this.ledger.list();
      unfinished = new Set(
        entries.filter((e) => !isCompleteRecord(e.record)).map((e) => e.launch.podUid),
      );
    } catch (error) {
      this.#log("warn", `leak collection skips Pod parameters (ledger): ${String(error)}`);
      return NO_PARAMETER_LEAKS;
    }
    const planned = planParameterLeaks({
      parameters,
      livePodUids: live,
      unfinished,
      now: this.#now(),
      graceMs: this.config.leakCollection.parameterGraceSeconds * 1000,
    });
    if (planned.podUids.length === 0) return planned;
    // The path is the cluster's, not this node's: a Pod of another virtual node of the cluster is
    // not live here. Its instance is: leave the parameters of any Pod UID with a live instance.
    let running: Set<string>;
    try {
      running = await this.#podsWithInstances(planned.podUids);
    } catch (error) {
      this.#log("warn", `leak collection skips Pod parameters: ${String(error)}`);
      return NO_PARAMETER_LEAKS;
    }
    const podUids = planned.podUids.filter((uid) => !running.has(uid));
    const byPod = new Map<string, string[]>();
    for (const p of parameters) {
      if (podUids.includes(p.podUid) && planned.delete.includes(p.name)) {
        byPod.set(p.podUid, [...(byPod.get(p.podUid) ?? []), p.name]);
      }
    }
    const deleted: string[] = [];
    const collected: string[] = [];
    for (const [podUid, names] of byPod) {
      try {
        await deleteParameters(this.ssm, names);
      } catch (error) {
        this.#log("warn", `leaked parameters of pod UID ${podUid} not deleted: ${String(error)}`);
        continue;
      }
      deleted.push(...names);
      collected.push(podUid);
      const leak: CollectedParameterLeak = {
        podUid,
        names,
        message: `${names.length} Parameter Store parameter(s) of pod UID ${podUid} had no live Pod and no teardown; the leak collector deleted them`,
      };
      notifyAll(this.#parameterLeakListeners, (listener) => listener(leak));
    }
    if (collected.length > 0) {
      this.#log(
        "info",
        `leak collection: deleted ${deleted.length} parameter(s) of ${collected.length} pod(s)`,
      );
    }
    return { delete: deleted, podUids: collected };
  }

  /** The Pod UIDs among `uids` that have a live instance of this cluster (any node). */
  async #podsWithInstances(uids: readonly string[]): Promise<Set<string>> {
    const found = new Set<string>();
    for (let i = 0; i < uids.length; i += 200) {
      const values = uids.slice(i, i + 200);
      let token: string | undefined;
      const seen = new Set<string>();
      do {
        const page = await this.#call(
          () =>
            this.client.send(
              new DescribeInstancesCommand({
                Filters: [
                  { Name: `tag:${CLUSTER_TAG}`, Values: [this.config.clusterName] },
                  { Name: `tag:${POD_UID_TAG}`, Values: values },
                  {
                    Name: "instance-state-name",
                    Values: ["pending", "running", "stopping", "stopped"],
                  },
                ],
                MaxResults: 1000,
                ...(token === undefined ? {} : { NextToken: token }),
              }),
            ),
          "DescribeInstances (instances of leaked parameters)",
        );
        for (const reservation of page.Reservations ?? []) {
          for (const raw of reservation.Instances ?? []) {
            const uid = observeInstance(raw)?.podUid;
            if (uid !== undefined) found.add(uid);
          }
        }
        token = page.NextToken || undefined;
        if (token !== undefined && seen.has(token)) break;
        if (token !== undefined) seen.add(token);
      } while (token !== undefined);
    }
    return found;
  }

  // ---- internals -----------------------------------------------------------------------------

  async #sweepLedger(live: ReadonlySet<string>): Promise<void> {
    try {
      for (const entry of await this.ledger.list()) {
        const uid = entry.launch.podUid;
        if (live.has(uid) || this.#records.has(uid)) continue;
        const launched =
          entry.launch.requestedAt !== undefined || entry.launch.instanceId !== undefined;
        // Only the entry as listed: one written since (a launch, a teardown) is not deleted.
        if (!launched || isCompleteRecord(entry.record)) {
          await this.ledger.remove(uid, { ifVersion: entry.version });
        } else if (this.#drivesTeardowns && !this.#resuming.has(uid)) {
          // A Pod gone with its teardown unfinished (or never started): reclaim its instance.
          this.#resuming.add(uid);
          if (entry.record === undefined) {
            await this.#executor.request(uid, {
              params: {
                namespace: entry.launch.namespace,
                name: entry.launch.name,
                podUid: uid,
                ...(entry.launch.instanceId ? { instanceId: entry.launch.instanceId } : {}),
                launchRequested: true,
                headroomSeconds: this.config.apiHeadroomSeconds,
                auxiliaries: this.#parametersDelivery ? [podParametersAuxiliary(uid)] : [],
                finish: "clear",
              },
              cause: "PodGone",
              uid,
            });
          }
        }
      }
    } catch (error) {
      this.#log("warn", `ledger sweep failed: ${String(error)}`);
    }
  }

  async #call<T>(send: () => Promise<T>, action: string): Promise<T> {
    try {
      return await send();
    } catch (error) {
      throw toProviderError(error, action);
    }
  }

  /** Builds the in-memory record of a Pod from the Pod and its ledger entry. */
  async #load(pod: V1Pod, facts: PodFacts): Promise<PodRecord> {
    const entry = await this.ledger.get(facts.uid);
    const launch = entry?.launch;
    const record: PodRecord = {
      pod: structuredClone(pod),
      facts,
      mode: "launch",
      launchRequested: launch?.requestedAt !== undefined || launch?.instanceId !== undefined,
      unknownOutcome: launch?.requestedAt !== undefined && launch.instanceId === undefined,
      backoff: NO_BACKOFF,
      launching: false,
      // After a restart, an instance launched within the parameter grace may still wait for the
      // instance-ARN tag on its parameters (the process may have died before writing it).
      parametersUntagged:
        this.#parametersDelivery &&
        (launch?.launchedAt === undefined
          ? launch?.instanceId === undefined
          : this.#now() - launch.launchedAt <
            this.config.leakCollection.parameterGraceSeconds * 1000),
      ledgerDirty: false,
      seen: false,
      missing: false,
      events: [],
      deleted: facts.deleting,
    };
    if (launch?.instanceId !== undefined) record.instanceId = launch.instanceId;
    if (launch?.requestedAt !== undefined) record.requestedAt = launch.requestedAt;
    if (launch?.clientToken !== undefined) record.clientToken = launch.clientToken;
    if (launch?.launchedAt !== undefined) record.launchedAt = new Date(launch.launchedAt);
    if (isCompleteRecord(entry?.record)) {
      record.teardown = "done";
    }
    this.#records.set(facts.uid, record);
    this.#resuming.delete(facts.uid);
    if (facts.apiPhase === "Succeeded" || facts.apiPhase === "Failed") {
      // Terminal in the API: the stored status is the truth; never launched again.
      record.mode = "terminal";
      if (pod.status) {
        record.status = structuredClone(pod.status);
        record.deliveredKey = this.#deliveryKey(record, pod.status);
      }
      return record;
    }
    if (record.deleted || record.instanceId !== undefined) return record;
    // Not launched yet, or a launch whose outcome is unknown (repeated with the same token if no
    // instance turns up). The parameters delivery reads the Pod's ConfigMaps and Secrets first.
    const admission = admitPod(facts, this.config);
    const sources = admission.kind === "launch" ? await this.#readSources(record) : NO_READ;
    this.#admit(record, admission, sources);
    return record;
  }

  /** The Pod's ConfigMaps and Secrets (`podDelivery: "parameters"` only; never throws). */
  async #readSources(record: PodRecord): Promise<SourcesRead> {
    if (!this.#parametersDelivery) return NO_READ;
    const refs = podSourceRefs(record.pod);
    const read = this.#options.readSources;
    if (read === undefined || refs.configMaps.length + refs.secrets.length === 0) {
      return { ok: true, sources: NO_SOURCES };
    }
    try {
      return { ok: true, sources: await read(record.pod, refs) };
    } catch (error) {
      return {
        ok: false,
        message: `the ConfigMaps and Secrets of pod ${record.facts.key} could not be read: ${error instanceof Error ? error.message : String(error)}`,
      };
    }
  }

  /**
   * A Pod held for a missing ConfigMap or Secret, on a poll: its instance when a lost launch left
   * one, else its sources read and the Pod rendered again (it launches once it renders).
   */
  async #readmit(record: PodRecord, listed: ObservedInstance | undefined): Promise<void> {
    if (record.readmitting) return;
    record.readmitting = true;
    try {
      if (
        record.launchRequested &&
        listed &&
        this.#disprove(listed, record.facts.uid) === undefined
      ) {
        this.#observe(record, listed);
        record.ledgerDirty = true;
        this.#leaveConfigHold(record);
        return;
      }
      const sources = await this.#readSources(record);
      if (record.mode !== "config" || record.deleted) return;
      this.#admit(record, admitPod(record.facts, this.config), sources);
    } finally {
      record.readmitting = false;
    }
  }

  /** Holds the Pod `Pending` with `CreateContainerConfigError` (one Warning per distinct message). */
  #holdForConfig(record: PodRecord, reason: string, message: string): void {
    record.mode = "config";
    const previous =
      record.status === undefined ? record.pod : { ...record.pod, status: record.status };
    record.status = configErrorStatus(previous, message, new Date(this.#now()));
    if (record.configError !== message) {
      record.events.push({ type: "Warning", reason, message });
      record.configError = message;
    }
  }

  /** The Pod renders (or has an instance) now: it is launched, or observed, from here on. */
  #leaveConfigHold(record: PodRecord): void {
    if (record.mode !== "config") return;
    record.mode = "launch";
    record.configError = undefined;
    if (record.status) {
      // The hold's condition is not carried into the launched Pod's status.
      record.status = {
        ...record.status,
        conditions: (record.status.conditions ?? []).filter((c) => c.type !== LAUNCHED_CONDITION),
      };
    }
  }

  /**
   * Applies the admission decision; renders the user-data of a Pod to launch (may refuse it, or
   * hold it for a missing ConfigMap or Secret).
   */
  #admit(record: PodRecord, admission: Admission, sources: SourcesRead): void {
    const now = new Date(this.#now());
    if (admission.kind === "launch") {
      if (!sources.ok) {
        this.#holdForConfig(record, "FailedToReadSources", sources.message);
        return;
      }
      try {
        const rendered = this.#render(record, sources.sources);
        if ("held" in rendered) {
          this.#holdForConfig(record, rendered.held.reason, rendered.held.message);
          return;
        }
        // Measures it (16 KiB) before anything is recorded or launched.
        buildRunInstancesInput({
          pod: record.facts,
          config: this.config,
          instanceType: admission.instanceType,
          userData: rendered.userData,
        });
        record.instanceType = admission.instanceType;
        record.userData = rendered.userData;
        const parameters = this.#parametersDelivery ? rendered.parameters : [];
        record.sharedParameters = this.#parametersDelivery ? rendered.sharedParameters : [];
        if (JSON.stringify(parameters) !== JSON.stringify(record.parameters)) {
          record.parameters = parameters;
          record.parametersWrittenAt = undefined;
        }
        record.notices ??= new Set();
        for (const notice of rendered.notices) {
          const key = `${notice.reason}\n${notice.message}`;
          if (record.notices.has(key)) continue;
          record.notices.add(key);
          record.events.push({ type: "Warning", reason: notice.reason, message: notice.message });
        }
        this.#leaveConfigHold(record);
        return;
      } catch (error) {
        const wrapped = error instanceof ProviderError ? error : toProviderError(error, "render");
        const reason = /user-data is \d+ bytes/.test(wrapped.message)
          ? "UserDataTooLarge"
          : (wrapped.reason ?? wrapped.code);
        admission = { kind: "refuse", reason, message: wrapped.message };
      }
    }
    if (admission.kind === "hold") {
      record.mode = "hold";
      record.status = heldStatus(record.pod, admission.reason, admission.message, now);
      record.events.push({ type: "Normal", reason: admission.reason, message: admission.message });
      return;
    }
    record.mode = "refused";
    record.status = refusedStatus(record.pod, admission.reason, admission.message, now);
    record.events.push({ type: "Warning", reason: admission.reason, message: admission.message });
  }

  #refreshPod(record: PodRecord, pod: V1Pod): void {
    record.pod = structuredClone(pod);
    const facts = podFacts(pod);
    record.facts = facts;
    if (facts.deleting) record.deleted = true;
  }

  /**
   * Adopts the Pod's instance when the ledger recorded a launch, or a poll or a lookup by the
   * Pod UID tag finds a proven one (after a restart, or a launch whose outcome was unknown).
   */
  async #adopt(record: PodRecord): Promise<boolean> {
    const uid = record.facts.uid;
    const listed = this.#lastInstances?.find(
      (i) => i.podUid === uid && this.#disprove(i, uid) === undefined,
    );
    if (listed) {
      this.#observe(record, listed);
      if (record.ledgerDirty || !record.launchRequested) await this.#recordInstance(record);
      return true;
    }
    if (record.instanceId !== undefined) return true;
    if (!record.launchRequested) return false;
    try {
      const found = await this.#provenInstance(uid, undefined);
      if (found) {
        this.#observe(record, found);
        await this.#recordInstance(record);
        return true;
      }
    } catch (error) {
      this.#log("warn", `looking up the instance of pod ${record.facts.key}: ${String(error)}`);
    }
    return false;
  }

  async #launch(record: PodRecord): Promise<void> {
    const { facts } = record;
    const instanceType = record.instanceType;
    const userData = record.userData;
    if (instanceType === undefined || userData === undefined) return;
    const placements = placementsFor(facts, instanceType, this.config);
    // After an unknown outcome, repeat the same request (same token: EC2 returns that instance).
    const repeat = record.placement ?? placements.find((p) => p.clientToken === record.clientToken);
    const choice =
      record.unknownOutcome && repeat
        ? ({ kind: "launch", placement: repeat } as const)
        : choosePlacement(placements, record.backoff, this.#pools, this.#now());
    if (choice.kind === "wait") {
      if (this.#now() >= record.backoff.notBefore) this.#waitOnPools(record, placements);
      return;
    }
    const placement = choice.placement;
    record.launching = true;
    try {
      const base = launchBase(facts);
      const requestedAt = this.#now();
      try {
        // The intent, durably, before the call: a crash from here on leaves a launch to look for.
        await this.ledger.recordLaunch(base, { requestedAt, clientToken: placement.clientToken });
      } catch (error) {
        record.launchError = new ProviderError(
          "Unavailable",
          `pod ${facts.key}: the launch could not be recorded in the ledger (${String(error)}); not launched`,
          { cause: error },
        );
        return;
      }
      record.launchRequested = true;
      record.requestedAt ??= requestedAt;
      record.placement = placement;
      record.clientToken = placement.clientToken;
      // The Pod's parameters before the instance that reads them can exist: a crash from here on
      // leaves parameters that the teardown (or the leak collector) deletes.
      if (!(await this.#writeParameters(record))) return;
      // Deleted while the intent and parameters were written: nothing is launched for it.
      if (record.deleted) {
        this.#noInstanceCanExist(record);
        return;
      }
      const input = buildRunInstancesInput({
        pod: facts,
        config: this.config,
        instanceType: placement.instanceType,
        userData,
        subnetId: placement.subnetId,
        clientToken: placement.clientToken,
      });
      let instanceId: string | undefined;
      try {
        const output = await this.#call(
          () => this.client.send(new RunInstancesCommand(input)),
          `RunInstances for pod ${facts.key}`,
        );
        instanceId = output.Instances?.[0]?.InstanceId;
        if (output.OwnerId) record.accountId = output.OwnerId;
      } catch (error) {
        this.#launchFailed(record, placement, placements.length, error as ProviderError);
        return;
      }
      if (instanceId === undefined) {
        record.unknownOutcome = true;
        record.launchError = new ProviderError(
          "Unavailable",
          `RunInstances for pod ${facts.key} returned no instance`,
        );
        return;
      }
      if (this.#records.get(facts.uid) !== record) {
        // The Pod was forgotten (its teardown completed) while RunInstances was under way: no one
        // else knows this instance, so it goes at once rather than to the leak collector.
        this.#log(
          "warn",
          `pod ${facts.key} is gone: terminating ${instanceId}, launched after it went`,
        );
        await this.#terminate
          .add(instanceId)
          .catch((error: unknown) =>
            this.#log("warn", `terminating ${instanceId}: ${String(error)}`),
          );
        return;
      }
      record.instanceId = instanceId;
      record.launchedAt = new Date(this.#now());
      record.launchError = undefined;
      record.unknownOutcome = false;
      record.backoff = NO_BACKOFF;
      // RunInstances' answer is an observation: the instance exists and is pending.
      record.seen = true;
      record.missing = false;
      record.events.push({
        type: "Normal",
        reason: "Launched",
        message: `launched instance ${instanceId} (${placement.instanceType}) in ${placement.subnetId}`,
      });
      // Recorded as soon as RunInstances returned; the parameters are tagged with the instance's
      // ARN at the same time (a failure is retried by the next poll).
      await Promise.all([this.#recordInstance(record), this.#tagParameters(record)]);
    } finally {
      record.launching = false;
    }
  }

  /** A Pod that makes no call because every pool it could use is cooling down: say why. */
  #waitOnPools(record: PodRecord, placements: readonly Placement[]): void {
    const cause =
      this.#poolErrors.get(ACCOUNT_POOL) ??
      placements.map((p) => this.#poolErrors.get(poolOf(p))).find((e) => e !== undefined);
    if (
      cause === undefined ||
      (cause.code !== "InsufficientCapacity" && cause.code !== "QuotaExceeded")
    ) {
      return;
    }
    const previous = record.launchError?.code;
    const what =
      cause.code === "QuotaExceeded"
        ? `an account quota stops launches (${cause.awsCode ?? cause.code})`
        : `EC2 has no capacity in any configured subnet and instance type (${cause.awsCode ?? cause.code})`;
    record.launchError = new ProviderError(
      cause.code,
      `pod ${record.facts.key}: ${what}; waiting to retry`,
      { cause, ...(cause.awsCode ? { awsCode: cause.awsCode } : {}) },
    );
    if (previous !== cause.code) {
      record.events.push({
        type: "Warning",
        reason: cause.code,
        message: record.launchError.message,
      });
    }
  }

  #launchFailed(
    record: PodRecord,
    placement: Placement,
    placements: number,
    error: ProviderError,
  ): void {
    const { facts } = record;
    const previous = record.launchError?.code;
    if (error.code === "InsufficientCapacity" || error.code === "QuotaExceeded") {
      // A definite answer: no instance was started by this request.
      const next = afterCapacityError(
        record.backoff,
        placement,
        error.code,
        placements,
        this.#now(),
        this.config.capacityBackoff,
      );
      record.backoff = next.backoff;
      this.#pools.set(next.pool, Math.max(this.#pools.get(next.pool) ?? 0, next.poolUntil));
      this.#poolErrors.set(next.pool, error);
      const what =
        error.code === "QuotaExceeded"
          ? `an account quota stops the launch (${error.awsCode ?? error.code})`
          : `EC2 has no ${placement.instanceType} capacity in ${placement.subnetId} (${error.awsCode ?? error.code})`;
      record.launchError = new ProviderError(
        error.code,
        `pod ${facts.key}: ${what}; retrying with back-off${placements > 1 ? " in the other configured subnets and instance types" : ""}`,
        { cause: error, ...(error.awsCode ? { awsCode: error.awsCode } : {}) },
      );
      // A definite "no": nothing can exist, a later teardown need not look for an instance.
      this.#noInstanceCanExist(record);
      if (previous !== error.code) {
        record.events.push({
          type: "Warning",
          reason: error.code,
          message: record.launchError.message,
        });
      }
      this.#log("warn", record.launchError.message);
      return;
    }
    record.launchError = error;
    if (error.retryable || error.code === "Unknown") {
      // No definite answer: an instance may exist; the next attempt repeats the same request.
      record.unknownOutcome = true;
      this.#log("warn", `${error.message} (will retry on the next poll)`);
      return;
    }
    if (previous !== error.code) {
      record.events.push({ type: "Warning", reason: "LaunchFailed", message: error.message });
    }
    throw error;
  }

  /**
   * A launch attempt that provably started no instance (a definite refusal, or no `RunInstances`
   * sent) clears the launch intent, unless an earlier attempt's outcome is unknown or an instance
   * is known: a later teardown need not look for one.
   */
  #noInstanceCanExist(record: PodRecord): void {
    if (record.unknownOutcome || record.instanceId !== undefined) return;
    record.launchRequested = false;
    // No launch to wait for: a lookup need not wait out EC2's consistency window either.
    record.requestedAt = undefined;
    void this.ledger
      .recordLaunch(launchBase(record.facts), { requestedAt: undefined, clientToken: undefined })
      .catch(() => undefined);
  }

  /** Writes the instance ID to the ledger (retried by the poll when it fails). */
  async #recordInstance(record: PodRecord): Promise<void> {
    const instanceId = record.instanceId;
    if (instanceId === undefined) return;
    try {
      await this.ledger.recordLaunch(launchBase(record.facts), {
        instanceId,
        launchedAt: record.launchedAt?.getTime() ?? this.#now(),
        ...(record.requestedAt === undefined ? { requestedAt: this.#now() } : {}),
      });
      record.launchRequested = true;
      record.ledgerDirty = false;
    } catch (error) {
      record.ledgerDirty = true;
      this.#log(
        "warn",
        `instance ${instanceId} of pod ${record.facts.key} not yet in the ledger: ${String(error)}`,
      );
    }
  }

  /**
   * Renders the Pod (`@nebula/userdata`, or the `renderUserData` override): its user-data, its
   * parameters and notices, or `held` for a missing mandatory ConfigMap or Secret. Throws a
   * `ProviderError` (`InvalidPodSpec`, with the renderer's code as `reason`) for a Pod to refuse.
   */
  #render(record: PodRecord, sources: PodSources | undefined): Rendered {
    const override = this.#options.renderUserData;
    const out = override
      ? override(record.pod, sources)
      : renderUserData(record.pod, renderOptionsOf(this.config, this.#options.userData), sources);
    if (typeof out === "string" || out instanceof Uint8Array) {
      return { userData: out, parameters: [], sharedParameters: [], notices: [] };
    }
    if (!("ok" in out)) return renderedOf(out);
    if (out.ok) return renderedOf(out.value);
    if (out.error.code === CREATE_CONTAINER_CONFIG_ERROR) {
      return { held: { reason: out.error.reason ?? out.error.code, message: out.error.message } };
    }
    const error = new ProviderError(
      "InvalidPodSpec",
      `pod ${record.facts.key}: ${out.error.path}: ${out.error.message}`,
      { cause: out.error },
    );
    error.reason = out.error.code;
    throw error;
  }

  /**
   * Writes the Pod's parameters before its `RunInstances` (again once they are half the leak
   * grace old, so a launch that keeps waiting is never collected). False when they could not be
   * written: the launch waits for the next poll (no instance without its parameters).
   */
  async #writeParameters(record: PodRecord): Promise<boolean> {
    const parameters = record.parameters;
    if (!this.#parametersDelivery || parameters === undefined || parameters.length === 0) {
      return true;
    }
    const now = this.#now();
    const refreshMs = (this.config.leakCollection.parameterGraceSeconds * 1000) / 2;
    if (record.parametersWrittenAt !== undefined && now - record.parametersWrittenAt < refreshMs) {
      return true;
    }
    const { facts } = record;
    try {
      const shared = (record.sharedParameters ?? []).filter(
        (p) => !this.#sharedWritten.has(p.name),
      );
      if (shared.length > 0) {
        await writeSharedParameters(this.ssm, {
          cluster: this.config.clusterName,
          parameters: shared,
        });
        for (const p of shared) this.#sharedWritten.add(p.name);
      }
      await writePodParameters(this.ssm, {
        cluster: this.config.clusterName,
        podUid: facts.uid,
        parameters,
        keyId: this.config.parameterKeyId,
      });
      record.parametersWrittenAt = now;
      return true;
    } catch (error) {
      const wrapped = toProviderError(error, `PutParameter for pod ${facts.key}`);
      const previous = record.launchError?.code;
      record.launchError = new ProviderError(
        wrapped.code,
        `pod ${facts.key}: its parameters could not be written to Parameter Store (${wrapped.awsCode ?? wrapped.code}); not launched, retrying`,
        { cause: wrapped, ...(wrapped.awsCode ? { awsCode: wrapped.awsCode } : {}) },
      );
      // No RunInstances was sent (the parameters are the teardown's).
      this.#noInstanceCanExist(record);
      if (previous !== wrapped.code) {
        record.events.push({
          type: "Warning",
          reason: "ParametersNotWritten",
          message: `${record.launchError.message}: ${wrapped.message}`,
        });
      }
      this.#log("warn", `${record.launchError.message}: ${wrapped.message}`);
      return false;
    }
  }

  /**
   * Tags the Pod's parameters with its instance's ARN (`nebula:instance-arn`): the host role may
   * read only parameters carrying its own ARN, and the supervisor waits for it with a bounded
   * retry. Never throws: a failure is logged and retried by the next poll.
   */
  async #tagParameters(record: PodRecord): Promise<void> {
    const instanceId = record.instanceId;
    if (!record.parametersUntagged || instanceId === undefined || record.tagging) return;
    const account =
      record.accountId ??
      accountOfArn(record.observed?.instanceProfileArn) ??
      accountOfArn(this.config.instanceProfile);
    if (account === undefined) return; // the poll's observation brings the instance profile's ARN
    record.tagging = true;
    const { facts } = record;
    try {
      const arn = instanceArn(this.config.region, account, instanceId);
      // Names this process wrote, else (written by an earlier process) those that exist.
      const names =
        record.parametersWrittenAt !== undefined && record.parameters !== undefined
          ? record.parameters.map((p) => p.name)
          : await listPodParameterNames(this.ssm, this.config.clusterName, facts.uid);
      try {
        await tagParametersWithInstance(this.ssm, names, arn);
      } catch (error) {
        const parameters = record.parameters;
        if (toProviderError(error, "tag").code !== "NotFound" || !parameters?.length) throw error;
        // Deleted behind our back (or written by an earlier render): write them again, then tag.
        record.parametersWrittenAt = undefined;
        if (!(await this.#writeParameters(record))) throw error;
        await tagParametersWithInstance(
          this.ssm,
          parameters.map((p) => p.name),
          arn,
        );
      }
      record.parametersUntagged = false;
    } catch (error) {
      this.#log(
        "warn",
        `parameters of pod ${facts.key} not yet tagged with instance ${instanceId}: ${String(error)} (will retry)`,
      );
    } finally {
      record.tagging = false;
    }
  }

  #observe(record: PodRecord, instance: ObservedInstance): void {
    record.instanceId ??= instance.instanceId;
    record.observed = instance;
    record.seen = true;
    record.missing = false;
    if (instance.state === "stopped") record.stoppedSince ??= this.#now();
    else record.stoppedSince = undefined;
  }

  /** Recomputes the instance state from the latest observation, feeding the previous state back. */
  #refreshState(record: PodRecord): void {
    const now = new Date(this.#now());
    if (record.instanceId === undefined && record.observed === undefined) {
      record.state = toInstanceState(undefined, { now, launchedAt: now });
      return;
    }
    // An instance adopted from the ledger and not observed since this process started has no
    // state yet: "not observed" is not "lost", and the Pod keeps its stored status meanwhile.
    if (!record.seen) {
      record.state = undefined;
      return;
    }
    record.state = toInstanceState(record.missing ? undefined : record.observed?.raw, {
      now,
      previous: record.state,
      consoleOutput: record.consoleOutput,
      launchedAt: record.launchedAt,
    });
  }

  #needsConsole(record: PodRecord): boolean {
    if (record.observed?.state !== "stopped" || record.stoppedSince === undefined) return false;
    if (record.state === undefined || !needsConsoleOutput(record.state)) return false;
    const now = this.#now();
    if (now - record.stoppedSince < this.config.consoleSettleSeconds * 1000) return false;
    return record.consoleReadAt === undefined || now - record.consoleReadAt >= CONSOLE_RETRY_MS;
  }

  async #readConsole(record: PodRecord): Promise<void> {
    const instanceId = record.instanceId;
    if (instanceId === undefined) return;
    record.consoleReadAt = this.#now();
    try {
      const output = await this.client.send(
        new GetConsoleOutputCommand({ InstanceId: instanceId }),
      );
      record.consoleOutput = Buffer.from(output.Output ?? "", "base64").toString("utf8");
    } catch (error) {
      this.#log("warn", toProviderError(error, `GetConsoleOutput ${instanceId}`).message);
    }
  }

  /** Publishes the Pod's status and events to the listeners, one publication per Pod at a time. */
  #publish(record: PodRecord): Promise<void> {
    const next = (record.publishing ?? Promise.resolve()).then(() => this.#publishNow(record));
    const settled = next.catch(() => undefined);
    record.publishing = settled;
    void settled.then(() => {
      if (record.publishing === settled) record.publishing = undefined;
    });
    return next;
  }

  /**
   * Recomputes `record.status` of a launched Pod from its instance state; `false` when there is
   * nothing to compute from yet (not observed), or the status is held (stopped without a readable
   * report, until the console has been read after the settle window: the Pod is not failed, nor
   * its instance reclaimed, on a guess).
   */
  #computeStatus(record: PodRecord): boolean {
    if (record.state === undefined) this.#refreshState(record);
    const state = record.state;
    if (state === undefined) return false;
    if (record.observed?.state === "stopped" && !record.missing && needsConsoleOutput(state)) {
      return false;
    }
    record.status = podStatus({
      pod: record.status === undefined ? record.pod : { ...record.pod, status: record.status },
      state,
      now: new Date(this.#now()),
      launchError: record.launchError,
      ec2Unavailable: this.#health.ready ? undefined : this.#health.message,
    });
    return true;
  }

  async #publishNow(record: PodRecord): Promise<void> {
    if (record.mode === "launch" && !this.#computeStatus(record)) return;
    const status = record.status;
    if (status === undefined) return;
    const key = this.#deliveryKey(record, status);
    if (key === record.deliveredKey && record.events.length === 0) return;
    const terminal = isTerminalStatus(status);
    const events = record.events;
    const instance = this.#instanceInfo(record);
    const change: PodStatusChange = {
      uid: record.facts.uid,
      pod: withStatus(record),
      status: structuredClone(status),
      terminal,
      events: [...events],
      ...(instance ? { instance } : {}),
    };
    const results = await Promise.allSettled([...this.#listeners].map(async (l) => l(change)));
    const failed = results.find((r) => r.status === "rejected");
    if (failed) {
      this.#log("warn", `status of pod ${record.facts.key} not written: ${String(failed.reason)}`);
      return;
    }
    record.deliveredKey = key;
    record.events = record.events.slice(events.length);
    // The terminal status is written: reclaim the instance (the report has been read).
    if (terminal && record.launchRequested && this.#drivesTeardowns)
      await this.#startReclaim(record);
  }

  /**
   * What a delivery carries: the status and the instance facts. A fact first observed after the
   * launch (its Availability Zone) is delivered when it is observed, not by the next process to
   * start (which would then write a Pod a quiet world should leave alone).
   */
  #deliveryKey(record: PodRecord, status: V1PodStatus | undefined): string {
    return JSON.stringify([status, this.#instanceInfo(record)]);
  }

  #instanceInfo(record: PodRecord): InstanceInfo | undefined {
    const id = record.instanceId;
    if (id === undefined) return undefined;
    const seen = record.observed;
    return {
      instanceId: id,
      instanceType: seen?.instanceType ?? record.placement?.instanceType,
      availabilityZone: seen?.availabilityZone,
      subnetId: seen?.subnetId ?? record.placement?.subnetId,
      capacityType: seen?.capacityType ?? "on-demand",
    };
  }

  /**
   * Starts the Pod's teardown in the ledger (before any effect), its parameters rebuilt from the
   * Pod and the ledger's launch: stop (grace of the deletion, capped), wait (grace + headroom from
   * the stop request), terminate, wait, release auxiliaries, then the record is kept as complete.
   */
  async #startReclaim(record: PodRecord): Promise<void> {
    if (record.teardown !== undefined) return this.#advanceReclaim(record);
    const { facts } = record;
    try {
      await this.ledger.ensure(launchBase(facts));
    } catch (error) {
      this.#log("warn", `teardown of pod ${facts.key} not recorded: ${String(error)}`);
      return;
    }
    record.teardown = "active";
    const result = await this.#executor.request(facts.uid, {
      params: {
        namespace: facts.namespace,
        name: facts.name,
        podUid: facts.uid,
        ...(record.instanceId === undefined ? {} : { instanceId: record.instanceId }),
        launchRequested: record.launchRequested,
        gracePeriodSeconds: Math.min(facts.gracePeriodSeconds, this.config.maxGracePeriodSeconds),
        headroomSeconds: this.config.apiHeadroomSeconds,
        // The Pod's parameters are released with its other auxiliaries, once the instance that
        // could read them is terminated (or was never launched).
        auxiliaries: [
          ...(this.#options.auxiliaries?.(record.pod) ?? []),
          ...(this.#parametersDelivery ? [podParametersAuxiliary(facts.uid)] : []),
        ],
        finish: "clear",
      },
      cause: record.deleted ? "DeletionRequested" : "TerminalStatusWritten",
      uid: facts.uid,
    });
    this.#afterTick(record, result);
  }

  async #advanceReclaim(record: PodRecord): Promise<void> {
    if (record.teardown !== "active" || record.ticking) return;
    record.ticking = true;
    try {
      this.#afterTick(record, await this.#executor.tick(record.facts.uid));
    } finally {
      record.ticking = false;
    }
  }

  #afterTick(record: PodRecord, result: TickResult): void {
    const uid = record.facts.uid;
    switch (result.status) {
      case "complete":
        record.teardown = "done";
        record.reclaim = {
          podUid: uid,
          phase: COMPLETE_PHASE,
          complete: true,
          ...(record.instanceId ? { instanceId: record.instanceId } : {}),
          message: record.launchRequested
            ? `instance ${record.instanceId ?? "(none found)"} is terminated`
            : "no instance was launched",
        };
        return;
      case "absent":
      case "idle":
        // No ledger entry (or record): the teardown cannot progress; start it again next time.
        record.teardown = undefined;
        return;
      case "waiting":
      case "held":
      case "progressed": {
        const summary = podTeardown.describe(result.record, this.#now());
        record.reclaim = {
          podUid: uid,
          phase: result.record.phase,
          complete: false,
          ...(record.instanceId ? { instanceId: record.instanceId } : {}),
          message: summary.text,
        };
        return;
      }
      case "error":
        this.#log(
          "warn",
          `teardown of pod ${record.facts.key}: ${result.error.message} (will retry)`,
        );
        return;
      case "invalid":
      case "foreign":
        this.#log("error", `teardown of pod ${record.facts.key}: ${result.reason}`);
        return;
      default:
        return;
    }
  }

  #stateOf(record: PodRecord): ReclaimState {
    if (record.reclaim) return record.reclaim;
    if (record.teardown === "done") {
      return {
        podUid: record.facts.uid,
        phase: COMPLETE_PHASE,
        complete: true,
        message: "reclaimed",
      };
    }
    return {
      podUid: record.facts.uid,
      phase: "none",
      complete: false,
      ...(record.instanceId ? { instanceId: record.instanceId } : {}),
      message: "the teardown has not started",
    };
  }

  async #observeTeardown(input: ObserveInput): Promise<PodTeardownObservation> {
    const uid = input.key;
    const record = this.#records.get(uid);
    const params = input.record.params as { instanceId?: unknown };
    const recorded =
      record?.instanceId ?? (typeof params.instanceId === "string" ? params.instanceId : undefined);
    const annotations = record?.pod.metadata?.annotations ?? {};
    const holds = Object.keys(annotations).filter((k) => k.startsWith(PRE_TERMINATE_HOLD_PREFIX));
    const since = record?.launchedAt?.getTime() ?? record?.requestedAt ?? input.record.startedAt;
    let instance: InstanceObservation;
    try {
      const found = await this.#provenInstance(uid, recorded);
      if (found) {
        if (record && record.instanceId === undefined) {
          record.instanceId = found.instanceId;
          await this.#recordInstance(record);
        }
        instance = OBSERVABLE_STATES.has(found.state)
          ? (found.state as InstanceObservation)
          : "unknown";
      } else {
        // Not listed is not proof of absence while EC2 may still hide a new instance.
        const window = this.config.eventualConsistencySeconds * 1000;
        instance = this.#now() - since < window ? "unknown" : "absent";
      }
    } catch {
      instance = "unknown";
    }
    return { instance, pod: "present", holds };
  }

  /** Stops or terminates the Pod's instance for the teardown (found and proven first). */
  async #reclaimEffect(
    podUid: string,
    recorded: string | undefined,
    action: "stop" | "terminate",
  ): Promise<void> {
    const record = this.#records.get(podUid);
    const instance = await this.#provenInstance(podUid, record?.instanceId ?? recorded);
    if (instance === undefined) {
      const since = record?.launchedAt?.getTime() ?? record?.requestedAt;
      if (
        since !== undefined &&
        this.#now() - since < this.config.eventualConsistencySeconds * 1000
      ) {
        throw new ProviderError(
          "NotFound",
          `the instance of pod ${podUid} is not listed yet (EC2 is eventually consistent); will look again`,
        );
      }
      return;
    }
    await this.#act(instance, action);
  }

  async #act(instance: ObservedInstance, action: "stop" | "terminate"): Promise<void> {
    const state = instance.state;
    if (state === "shutting-down" || state === "terminated") return;
    const since = this.#recentLaunchOf(instance.instanceId) ?? instance.launchTime;
    if (action === "stop") {
      if (state === "stopped" || state === "stopping") return;
      try {
        const outcome = await this.#stop.add(instance.instanceId);
        // EC2 may still deny knowing a new instance: that is not "already gone".
        if (outcome === "notFound") this.#throwIfRecent(since, `instance ${instance.instanceId}`);
      } catch (error) {
        const wrapped = toProviderError(error, `StopInstances ${instance.instanceId}`);
        if (wrapped.awsCode === "UnsupportedOperation" || wrapped.code === "Unauthorized") {
          // Refused for good (Spot, instance-store root, permissions): terminate instead.
          this.#log("warn", `${wrapped.message}; terminating instead`);
          await this.#terminate.add(instance.instanceId);
          return;
        }
        throw wrapped;
      }
      return;
    }
    const outcome = await this.#terminate.add(instance.instanceId);
    if (outcome === "notFound") this.#throwIfRecent(since, `instance ${instance.instanceId}`);
  }

  /**
   * The Pod's instance, proven to belong to it: the recorded one when it proves it (from the latest
   * poll, else described by ID, terminated included), else one found by its `nebula:pod-uid` tag.
   */
  async #provenInstance(
    podUid: string,
    recorded: string | undefined,
  ): Promise<ObservedInstance | undefined> {
    if (recorded !== undefined) {
      const fresh = this.#health.ready
        ? this.#lastInstances?.find((i) => i.instanceId === recorded)
        : undefined;
      const instance = fresh ?? (await this.#describeById(recorded));
      if (instance !== undefined) {
        // Nothing is ever done to a terminated or shutting-down instance, so it needs no proof to
        // be observed (EC2 may drop its instance profile once it is shutting down).
        if (isGone(instance, podUid)) return instance;
        const why = this.#disprove(instance, podUid);
        if (why === undefined) return instance;
        this.#log("warn", `not acting on ${recorded} for pod ${podUid}: ${why}`);
      }
    }
    const found = await describeNodeInstances(this.client, {
      clusterName: this.config.clusterName,
      nodeName: this.config.nodeName,
      pageSize: this.config.pageSize,
      filters: [{ Name: `tag:${POD_UID_TAG}`, Values: [podUid] }],
      states: [...OBSERVABLE_STATES],
    });
    const proven = found.instances.filter(
      (i) => this.#disprove(i, podUid) === undefined || isGone(i, podUid),
    );
    if (proven.length === 0) return undefined;
    const live = proven.filter((i) => !isGone(i, podUid));
    return pickKeeper(live.length > 0 ? live : proven, recorded);
  }

  async #describeById(instanceId: string): Promise<ObservedInstance | undefined> {
    try {
      const page = await this.client.send(
        new DescribeInstancesCommand({ InstanceIds: [instanceId] }),
      );
      for (const reservation of page.Reservations ?? []) {
        for (const raw of reservation.Instances ?? []) {
          const observed = observeInstance(raw);
          if (observed?.instanceId === instanceId) return observed;
        }
      }
      return undefined;
    } catch (error) {
      const wrapped = toProviderError(error, `DescribeInstances ${instanceId}`);
      if (wrapped.code === "NotFound") return undefined;
      throw wrapped;
    }
  }

  #disprove(instance: ObservedInstance, podUid: string | undefined): string | undefined {
    return disproveOwnership(instance, podUid, this.#ownership);
  }

  #prove(instance: ObservedInstance, podUid: string | undefined): void {
    const why = this.#disprove(instance, podUid);
    if (why !== undefined) {
      throw new ProviderError(
        "NotOwned",
        `instance ${instance.instanceId} does not prove that Nebula launched it: ${why}`,
      );
    }
  }

  async #updateHealth(error: ProviderError | undefined): Promise<void> {
    const previous = this.#health;
    let next: NodeHealth;
    if (!error) next = { ready: true, reason: "EC2Reachable", message: "EC2 answers the poll" };
    else if (isOutage(this.#pacing, this.#bounds)) {
      next = {
        ready: false,
        reason: "EC2Unavailable",
        message: `EC2 in ${this.config.region} has failed ${this.#pacing.consecutiveFailures} polls in a row (${error.code}): instance states are unknown`,
      };
    } else if (error.code === "Throttled") {
      next = {
        ready: previous.ready,
        reason: previous.ready ? "EC2Throttled" : previous.reason,
        message: previous.ready
          ? `EC2 is throttling the poll; polling every ${Math.round(this.#pacing.intervalMs / 1000)} s`
          : previous.message,
      };
    } else next = previous;
    if (
      next.ready === previous.ready &&
      next.reason === previous.reason &&
      next.message === previous.message
    ) {
      return;
    }
    this.#health = next;
    notifyAll(this.#nodeListeners, (listener) => listener(next));
    if (previous.ready !== next.ready) {
      // Outage begins or ends: every Pod's status says so.
      await Promise.all([...this.#records.values()].map((r) => this.#publish(r)));
    }
  }

  #log(level: "info" | "warn" | "error", message: string): void {
    this.#options.log?.(level, message);
  }
}

/** A rendered Pod, or why it is held. */
type Rendered =
  | {
      readonly userData: LaunchInput["userData"];
      readonly parameters: readonly PodParameter[];
      readonly sharedParameters: readonly PodParameter[];
      readonly notices: readonly RenderNotice[];
    }
  | { readonly held: { readonly reason: string; readonly message: string } };

/** The Pod's sources, or why they could not be read. */
type SourcesRead =
  | { readonly ok: true; readonly sources: PodSources | undefined }
  | { readonly ok: false; readonly message: string };

/** No sources to read (`user-data` delivery). */
const NO_READ: SourcesRead = { ok: true, sources: undefined };

/**
 * The options the provider gives `@nebula/userdata`'s `renderUserData`: `cluster` defaults to the
 * configured `clusterName` (the `userData` option may set it); `delivery` is always the configured
 * `podDelivery`; `logs` and `metrics` are the configured ones when set (so that the hosts write
 * where the virtual node reads), else whatever the `userData` option says.
 */
export function renderOptionsOf(
  config: ProviderConfig,
  userData: RenderOptionsInput | undefined,
): RenderOptionsInput {
  return {
    cluster: config.clusterName,
    ...userData,
    ...(config.logs === undefined ? {} : { logs: config.logs }),
    ...(config.metrics === undefined ? {} : { metrics: config.metrics }),
    delivery: config.podDelivery,
  };
}

function renderedOf(value: RenderedPod): Rendered {
  return {
    userData: { userData: value.userData, bytes: value.bytes },
    parameters: value.parameters ?? [],
    sharedParameters: value.sharedParameters ?? [],
    notices: value.notices ?? [],
  };
}

function launchBase(facts: PodFacts): LaunchEntry {
  return { podUid: facts.uid, namespace: facts.namespace, name: facts.name };
}

function isCompleteRecord(text: string | undefined): boolean {
  if (text === undefined) return false;
  const decoded = decodeRecord(text);
  return decoded.ok && decoded.record.phase === COMPLETE_PHASE;
}

function launchCondition(
  reason: string,
  message: string,
  now: Date,
  previous: V1PodStatus | undefined,
): V1PodCondition {
  const before = previous?.conditions?.find((c) => c.type === LAUNCHED_CONDITION);
  return {
    type: LAUNCHED_CONDITION,
    status: "False",
    reason,
    message,
    lastTransitionTime:
      before?.status === "False" && before.lastTransitionTime ? before.lastTransitionTime : now,
  };
}

/** A Pod left `Pending`, not launched, with a reason (a DaemonSet Pod). */
function heldStatus(pod: V1Pod, reason: string, message: string, now: Date): V1PodStatus {
  return {
    ...(pod.status ?? {}),
    phase: "Pending",
    reason,
    message,
    conditions: [launchCondition(reason, message, now, pod.status)],
  };
}

/** A Pod refused at once: `Failed`, with the reason and a message naming the field. */
function refusedStatus(pod: V1Pod, reason: string, message: string, now: Date): V1PodStatus {
  return {
    phase: "Failed",
    reason,
    message,
    conditions: [launchCondition(reason, message, now, pod.status)],
    containerStatuses: (pod.spec?.containers ?? []).map((c) => ({
      name: c.name,
      image: c.image ?? "",
      imageID: "",
      ready: false,
      restartCount: 0,
      started: false,
      state: { waiting: { reason, message } },
    })),
  };
}

function withStatus(record: PodRecord): V1Pod {
  const pod = structuredClone(record.pod);
  if (record.status) pod.status = structuredClone(record.status);
  return pod;
}

/**
 * Of several instances carrying one Pod UID, the one to keep: the one the provider recorded at
 * launch, else the earliest launched (then the smallest ID), preferring any not shutting down.
 */
function pickKeeper(
  group: readonly ObservedInstance[],
  recorded: string | undefined,
): ObservedInstance {
  const mine = group.find((i) => i.instanceId === recorded);
  if (mine) return mine;
  const sorted = [...group].sort(
    (a, b) =>
      Number(a.state === "shutting-down") - Number(b.state === "shutting-down") ||
      (a.launchTime ?? Number.POSITIVE_INFINITY) - (b.launchTime ?? Number.POSITIVE_INFINITY) ||
      a.instanceId.localeCompare(b.instanceId),
  );
  return sorted[0] as ObservedInstance;
}

function chunkIds(ids: readonly string[], size: number): string[][] {
  const out: string[][] = [];
  for (let i = 0; i < ids.length; i += size) out.push(ids.slice(i, i + size));
  return out;
}
