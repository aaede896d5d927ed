import { Buffer } from "node:buffer";
import {
  CreateTagsCommand,
  DeleteTagsCommand,
  EC2Client,
  GetConsoleOutputCommand,
  RunInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { type InstanceState, needsConsoleOutput, toInstanceState } from "@nebula/state-mapping";
import {
  type AuxiliaryObject,
  type InstanceObservation,
  MemoryStore,
  type ObserveInput,
  type PodTeardownEffect,
  type PodTeardownObservation,
  type PodTeardownParams,
  podTeardown,
  type TeardownEvent,
  TeardownExecutor,
  type TeardownStore,
  type TickResult,
} from "@nebula/teardown";
import { type RenderOptionsInput, renderUserData } from "@nebula/userdata";
import { InstanceBatcher } from "./batch.js";
import { type ProviderConfig, parseProviderConfig } from "./config.js";
import { ProviderError, toProviderError } from "./errors.js";
import { buildRunInstancesInput, type LaunchInput } from "./launch.js";
import { type LeakPlan, planLeakCollection } from "./leaks.js";
import { initialPacing, isOutage, nextPacing, type Pacing, type PacingBounds } from "./pacing.js";
import { type PodFacts, podFacts, resolveInstanceType } from "./pod.js";
import { describeNodeInstances, type ObservedInstance } from "./poll.js";
import { isTerminalStatus, podStatus } from "./status.js";
import { ORPHANED_TAG } from "./tags.js";

/** A Pod's status changed; `pod` is a copy carrying the new `status`. */
export interface PodStatusChange {
  /** A deep copy of the Pod with `status` set. */
  readonly pod: V1Pod;
  /** The new status. */
  readonly status: V1PodStatus;
  /** True when the status is terminal (`Succeeded` / `Failed`). */
  readonly terminal: boolean;
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

/**
 * The Pod lifecycle a virtual node drives, in the spirit of virtual-kubelet's
 * `PodLifecycleHandler` + `PodNotifier`. Every method is idempotent.
 */
export interface PodLifecycle {
  /** Starts the Pod's instance (idempotent: the Pod UID is the launch's `ClientToken`). */
  createPod(pod: V1Pod): Promise<void>;
  /** Records a newer version of the Pod (an instance cannot change: nothing is sent to EC2). */
  updatePod(pod: V1Pod): Promise<void>;
  /** Reclaims the Pod's instance (stop with grace + headroom, then terminate). May be called again. */
  deletePod(pod: V1Pod): Promise<void>;
  /** The Pod's latest status, or `undefined` for a Pod this provider does not know. */
  getPodStatus(namespace: string, name: string): V1PodStatus | undefined;
  /** A copy of the Pod with its latest status, or `undefined`. */
  getPod(namespace: string, name: string): V1Pod | undefined;
  /** Copies of every Pod this provider runs, each with its latest status. */
  listPods(): V1Pod[];
  /** Subscribes to status changes; returns the unsubscribe function. */
  onStatusChange(listener: PodStatusListener): () => void;
}

/** Options of {@link Ec2PodProvider}. */
export interface Ec2PodProviderOptions {
  /** The configuration (validated with {@link parseProviderConfig}). */
  readonly config: unknown;
  /**
   * Options for `@nebula/userdata`'s `renderUserData`, which builds each Pod's user-data (the host
   * supervisor). `cluster` defaults to the configured `clusterName`.
   */
  readonly userData?: RenderOptionsInput;
  /**
   * Replaces `renderUserData` (tests, or a custom host). Returns a script or bytes (the provider
   * base64-encodes them) or an already rendered `{ userData: base64, bytes }`.
   */
  readonly renderUserData?: (pod: V1Pod) => LaunchInput["userData"];
  /**
   * UIDs of the Pods that exist and are bound to this node (from the virtual node's Pod informer).
   * The leak collector reads it after listing instances; an instance whose Pod UID is not in it
   * is an orphan.
   */
  readonly livePodUids: () => Promise<Iterable<string>> | Iterable<string>;
  /**
   * Durable teardown. Without it, teardown records live in memory (a `MemoryStore`) and are rebuilt
   * from EC2 after a restart; with it, they are recorded on the Pods (compare-and-swap) by the
   * virtual node's store and resume after a crash at the phase they reached.
   */
  readonly teardown?: ProviderTeardownOptions;
  /** An EC2 client to use instead of the one built from the configuration (adaptive retry). */
  readonly client?: EC2Client;
  /** The clock, ms since the epoch (tests pass a fake one). Default `Date.now`. */
  readonly now?: () => number;
  /** Where the provider writes one-line diagnostics. Default: nowhere. */
  readonly log?: (level: "info" | "warn" | "error", message: string) => void;
}

/** Where teardowns are recorded, and the effects only the virtual node can perform. */
export interface ProviderTeardownOptions {
  /**
   * The store of teardown records, keyed `namespace/name` (the Kubernetes Pod store of the
   * virtual node: records in the `teardown.nebula.dev/record` annotation).
   */
  readonly store: TeardownStore;
  /** Deletes the Pod object with grace 0 and a UID precondition; 404 counts as success. */
  readonly deletePod: (effect: Extract<PodTeardownEffect, { kind: "DeletePod" }>) => Promise<void>;
  /** Deletes one auxiliary object the Pod owned; 404 counts as success. */
  readonly deleteAuxiliary?: (object: AuxiliaryObject) => Promise<void>;
  /** The auxiliary objects a Pod owns (deleted after its instance is reclaimed). Default none. */
  readonly auxiliaries?: (pod: V1Pod) => AuxiliaryObject[];
  /** Receives every teardown event (transitions, effects issued, holds, errors). */
  readonly onEvent?: (event: TeardownEvent) => void;
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

const POLLED_OR_TERMINATED = [
  "pending",
  "running",
  "stopping",
  "stopped",
  "shutting-down",
  "terminated",
] as const;

interface PodRecord {
  pod: V1Pod;
  facts: PodFacts;
  instanceId?: string;
  launchError?: ProviderError | undefined;
  launching: boolean;
  /** When RunInstances answered (the grace for an instance not yet listed starts here). */
  launchedAt?: Date;
  observed?: ObservedInstance | undefined;
  /** True after a poll that did not list the (known) instance. */
  missing: boolean;
  /** The instance state (`@nebula/state-mapping`), the previous one fed back each poll. */
  state?: InstanceState;
  stoppedSince?: number | undefined;
  consoleReadAt?: number;
  /** Serial console output read once for a stopped instance without readable report tags. */
  consoleOutput?: string;
  status?: V1PodStatus;
  deliveredKey?: string;
  deleted: boolean;
  /** The teardown: running, or finished (the instance is reclaimed). */
  teardown?: "active" | "done";
  ticking?: boolean;
}

const CONSOLE_RETRY_MS = 5 * 60 * 1000;

/**
 * The virtual-node provider on EC2: one instance per Pod, launched idempotently (brief C1),
 * observed by one tag-filtered, paginated `DescribeInstances` sequence per poll interval (the
 * exit report rides in the tags), mapped to a truthful Pod status, reclaimed (batched stop, then
 * terminate) when the Pod is finished or deleted, and backed by a two-phase leak collector.
 *
 * @example
 * ```ts
 * const provider = new Ec2PodProvider({
 *   config: { clusterName: "prod", nodeName: "nebula", region: "eu-west-1", subnetIds: ["subnet-0abc"],
 *     securityGroupIds: ["sg-0abc"], imageId: "ami-0abc", instanceProfile: "nebula-host",
 *     instanceTypes: { default: "m7i.large" } },
 *   renderUserData: (pod) => renderUserData(pod, { region: "eu-west-1" }),
 *   livePodUids: () => informer.list().map((p) => p.metadata?.uid ?? ""),
 * });
 * provider.onStatusChange(({ pod, status }) => writeStatus(pod, status));
 * provider.start();
 * await provider.createPod(pod);
 * ```
 */
export class Ec2PodProvider implements PodLifecycle {
  /** The parsed configuration. */
  readonly config: ProviderConfig;
  /** The EC2 client in use. */
  readonly client: EC2Client;
  readonly #options: Ec2PodProviderOptions;
  readonly #now: () => number;
  readonly #records = new Map<string, PodRecord>();
  readonly #byKey = new Map<string, string>();
  readonly #listeners = new Set<PodStatusListener>();
  readonly #nodeListeners = new Set<(health: NodeHealth) => void>();
  readonly #stop: InstanceBatcher;
  readonly #terminate: InstanceBatcher;
  readonly #bounds: PacingBounds;
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
  readonly #memoryStore: MemoryStore | undefined;
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
    this.client =
      options.client ??
      new EC2Client({
        region: this.config.region,
        retryMode: "adaptive",
        maxAttempts: this.config.maxAttempts,
        ...(this.config.endpoint === undefined ? {} : { endpoint: this.config.endpoint }),
      });
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
    const teardown = options.teardown;
    this.#memoryStore = teardown ? undefined : new MemoryStore();
    const memory = this.#memoryStore;
    this.#executor = new TeardownExecutor({
      teardown: podTeardown,
      store: teardown?.store ?? (memory as MemoryStore),
      now: this.#now,
      observe: (input) => this.#observeTeardown(input),
      handlers: {
        StopInstance: (effect) => this.#stopInstance(effect.instanceId),
        TerminateInstance: (effect) => this.#terminateInstance(effect.instanceId),
        DeleteAuxiliary: async (effect) => {
          if (!teardown?.deleteAuxiliary) {
            throw new ProviderError(
              "InvalidConfiguration",
              "no deleteAuxiliary handler is configured",
            );
          }
          await teardown.deleteAuxiliary(effect.object);
        },
        DeletePod: async (effect) => {
          if (teardown) await teardown.deletePod(effect);
          else memory?.remove(`${effect.namespace}/${effect.name}`);
        },
      },
      ...(teardown?.onEvent ? { onEvent: teardown.onEvent } : {}),
    });
  }

  // ---- Pod lifecycle -------------------------------------------------------------------------

  /**
   * Launches the Pod's instance. Idempotent: a Pod already launched (or adopted from a poll after
   * a restart) is not launched again, and EC2 answers a repeated `ClientToken` with the same
   * instance. Throttling, capacity and server errors do not fail the Pod: it stays `Pending`
   * with the reason in its status and the launch is retried on the next poll. Configuration and
   * Pod-spec errors throw a {@link ProviderError}.
   */
  async createPod(pod: V1Pod): Promise<void> {
    const facts = podFacts(pod);
    const existing = this.#records.get(facts.uid);
    if (existing) {
      existing.pod = structuredClone(pod);
      if (existing.instanceId !== undefined || existing.launching || existing.deleted) return;
    }
    const record: PodRecord = existing ?? {
      pod: structuredClone(pod),
      facts,
      launching: false,
      missing: false,
      deleted: false,
    };
    this.#records.set(facts.uid, record);
    this.#byKey.set(facts.key, facts.uid);
    const adopted = this.#lastInstances?.find((i) => i.podUid === facts.uid);
    if (adopted) {
      this.#observe(record, adopted);
    } else {
      try {
        await this.#launch(record);
      } catch (error) {
        // Not retryable (configuration, Pod spec, permissions): the caller reports it on the Pod.
        this.#forget(record);
        throw error;
      }
    }
    this.#refreshState(record);
    await this.#publish(record);
  }

  /** Records the newer Pod object; EC2 is not called (an instance's spec cannot change). */
  async updatePod(pod: V1Pod): Promise<void> {
    const facts = podFacts(pod);
    const record = this.#records.get(facts.uid);
    if (!record) return this.createPod(pod);
    record.pod = structuredClone(pod);
    record.facts = facts;
  }

  /**
   * Reclaims the Pod's instance: `StopInstances` (batched) so the host stops the containers
   * within the Pod's grace period and writes its final report, then `TerminateInstances` once the
   * instance is stopped or `terminationGracePeriodSeconds + apiHeadroomSeconds` have passed. The
   * poll loop drives the steps; this call only records the intent and sends the stop. Safe to call
   * again; a Pod the provider never saw is looked up by its UID tag on the next poll.
   */
  async deletePod(pod: V1Pod): Promise<void> {
    const facts = podFacts(pod);
    let record = this.#records.get(facts.uid);
    if (!record) {
      record = {
        pod: structuredClone(pod),
        facts,
        launching: false,
        missing: false,
        deleted: true,
      };
      this.#records.set(facts.uid, record);
      this.#byKey.set(facts.key, facts.uid);
      const seen = this.#lastInstances?.find((i) => i.podUid === facts.uid);
      if (seen) this.#observe(record, seen);
    }
    if (record.instanceId === undefined && this.#lastInstances === undefined) {
      // Before the first poll: look for an instance launched by an earlier run of the provider.
      await this.pollOnce();
      const seen = this.#seenPod(facts.uid);
      if (seen) this.#observe(record, seen);
    }
    record.deleted = true;
    await this.#startReclaim(record);
  }

  /** {@inheritDoc PodLifecycle.getPodStatus} */
  getPodStatus(namespace: string, name: string): V1PodStatus | undefined {
    const record = this.#recordByKey(namespace, name);
    return record?.status === undefined ? undefined : structuredClone(record.status);
  }

  /** {@inheritDoc PodLifecycle.getPod} */
  getPod(namespace: string, name: string): V1Pod | undefined {
    const record = this.#recordByKey(namespace, name);
    return record ? withStatus(record) : undefined;
  }

  /** {@inheritDoc PodLifecycle.listPods} */
  listPods(): V1Pod[] {
    return [...this.#records.values()]
      .filter((r) => !r.deleted || r.teardown !== "done")
      .map(withStatus);
  }

  /** {@inheritDoc PodLifecycle.onStatusChange} */
  onStatusChange(listener: PodStatusListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Subscribes to changes of {@link NodeHealth}; returns the unsubscribe function. */
  onNodeHealth(listener: (health: NodeHealth) => void): () => void {
    this.#nodeListeners.add(listener);
    return () => this.#nodeListeners.delete(listener);
  }

  /** EC2 as the provider last saw it, for the virtual Node's conditions. */
  get health(): NodeHealth {
    return this.#health;
  }

  /** Milliseconds until the next poll (grows under throttling and failures). */
  get pollIntervalMs(): number {
    return this.#pacing.intervalMs;
  }

  // ---- loops ---------------------------------------------------------------------------------

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
      this.#leakTimer = setTimeout(leakLoop, 0);
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
   * launches retried. Never throws: a failed poll is reported in the result and in
   * {@link Ec2PodProvider.health}, and slows the loop down.
   */
  pollOnce(): Promise<PollResult> {
    this.#polling ??= this.#pollOnce().finally(() => {
      this.#polling = undefined;
    });
    return this.#polling;
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
      const keep = pickKeeper(group, this.#records.get(uid)?.instanceId);
      byUid.set(uid, keep);
      for (const other of group) {
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
    let consoleCalls = 0;
    const work: Promise<void>[] = [];
    for (const record of this.#records.values()) {
      const instance = byUid.get(record.facts.uid);
      if (instance) this.#observe(record, instance);
      else if (record.instanceId !== undefined) {
        record.missing = true;
        record.observed = undefined;
      }
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
    return {
      ok: true,
      instances: listing.instances.length,
      describeCalls: listing.calls,
      consoleCalls,
    };
  }

  /**
   * One leak-collection pass over the latest poll (polling first when there is none): instances
   * of this node whose Pod UID is not live and older than the grace period are marked with
   * `nebula:orphaned-at` (one `CreateTags` call per batch); those marked on an earlier pass and
   * still orphaned are terminated (batched); marks on instances whose Pod is live are removed.
   */
  async collectLeaks(): Promise<LeakPlan> {
    if (this.#lastInstances === undefined) await this.pollOnce();
    const instances = this.#lastInstances;
    if (instances === undefined) {
      throw new ProviderError("Unavailable", "leak collection skipped: EC2 could not be listed");
    }
    // Live Pods are read after the listing, so a Pod created in between counts as live.
    const live = new Set(await this.#options.livePodUids());
    for (const record of this.#records.values()) {
      if (!record.deleted) live.add(record.facts.uid);
    }
    const now = this.#now();
    const plan = planLeakCollection({
      instances,
      livePodUids: live,
      now,
      graceMs: this.config.leakCollection.graceSeconds * 1000,
      confirmAfterMs: Math.min(60, this.config.leakCollection.intervalSeconds / 2) * 1000,
    });
    const stamp = new Date(now).toISOString();
    for (const ids of chunkIds(plan.mark, this.config.batchSize)) {
      await this.#call(
        () =>
          this.client.send(
            new CreateTagsCommand({ Resources: ids, Tags: [{ Key: ORPHANED_TAG, Value: stamp }] }),
          ),
        "CreateTags (orphan mark)",
      );
    }
    for (const ids of chunkIds(plan.unmark, this.config.batchSize)) {
      await this.#call(
        () =>
          this.client.send(
            new DeleteTagsCommand({ Resources: ids, Tags: [{ Key: ORPHANED_TAG }] }),
          ),
        "DeleteTags (orphan mark)",
      );
    }
    await Promise.all(plan.terminate.map((id) => this.#terminate.add(id)));
    if (plan.mark.length + plan.terminate.length > 0) {
      this.#log(
        "info",
        `leak collection: marked ${plan.mark.length}, terminated ${plan.terminate.length}, unmarked ${plan.unmark.length}`,
      );
    }
    return plan;
  }

  // ---- internals -----------------------------------------------------------------------------

  async #call<T>(send: () => Promise<T>, action: string): Promise<T> {
    try {
      return await send();
    } catch (error) {
      throw toProviderError(error, action);
    }
  }

  async #launch(record: PodRecord): Promise<void> {
    record.launching = true;
    try {
      const instanceType = resolveInstanceType(record.facts, this.config);
      const input = buildRunInstancesInput({
        pod: record.facts,
        config: this.config,
        instanceType,
        userData: this.#userData(record),
      });
      const output = await this.#call(
        () => this.client.send(new RunInstancesCommand(input)),
        `RunInstances for pod ${record.facts.key}`,
      );
      const instanceId = output.Instances?.[0]?.InstanceId;
      if (instanceId === undefined) {
        throw new ProviderError(
          "Unavailable",
          `RunInstances for pod ${record.facts.key} returned no instance`,
        );
      }
      record.instanceId = instanceId;
      record.launchedAt = new Date(this.#now());
      record.launchError = undefined;
      record.missing = false;
    } catch (error) {
      const wrapped = toProviderError(error, `launch of pod ${record.facts.key}`);
      record.launchError = wrapped;
      if (wrapped.retryable) {
        this.#log("warn", `${wrapped.message} (will retry on the next poll)`);
        return;
      }
      throw wrapped;
    } finally {
      record.launching = false;
    }
  }

  #userData(record: PodRecord): LaunchInput["userData"] {
    if (this.#options.renderUserData) return this.#options.renderUserData(record.pod);
    const rendered = renderUserData(record.pod, {
      cluster: this.config.clusterName,
      ...this.#options.userData,
    });
    if (!rendered.ok) {
      throw new ProviderError(
        "InvalidPodSpec",
        `pod ${record.facts.key}: ${rendered.error.message}`,
        { cause: rendered.error },
      );
    }
    return rendered.value;
  }

  #observe(record: PodRecord, instance: ObservedInstance): void {
    record.instanceId ??= instance.instanceId;
    record.observed = instance;
    record.missing = false;
    if (instance.state === "stopped") record.stoppedSince ??= this.#now();
    else record.stoppedSince = undefined;
  }

  /** Recomputes the instance state from the latest observation, feeding the previous state back. */
  #refreshState(record: PodRecord): void {
    const now = new Date(this.#now());
    if (record.instanceId === undefined && record.observed === undefined) {
      // Not launched yet (or launch being retried): pending, whatever came before.
      record.state = toInstanceState(undefined, { now, launchedAt: now });
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

  async #publish(record: PodRecord): Promise<void> {
    if (record.state === undefined) this.#refreshState(record);
    const state = record.state;
    if (state === undefined) return;
    // Stopped without a readable report: hold the last status until the console has been read
    // (after the settle window), so the Pod is not failed, nor its instance reclaimed, on a guess.
    if (record.observed?.state === "stopped" && !record.missing && needsConsoleOutput(state))
      return;
    const status = podStatus({
      // No copy: the mapping is pure and reads the Pod only (copies are made for listeners).
      pod: record.status === undefined ? record.pod : { ...record.pod, status: record.status },
      state,
      now: new Date(this.#now()),
      launchError: record.launchError,
      ec2Unavailable: this.#health.ready ? undefined : this.#health.message,
    });
    record.status = status;
    const key = JSON.stringify(status);
    if (key === record.deliveredKey) return;
    const terminal = isTerminalStatus(status);
    const change: PodStatusChange = {
      pod: withStatus(record),
      status: structuredClone(status),
      terminal,
    };
    const results = await Promise.allSettled([...this.#listeners].map(async (l) => l(change)));
    const failed = results.find((r) => r.status === "rejected");
    if (failed) {
      this.#log("warn", `status of pod ${record.facts.key} not written: ${String(failed.reason)}`);
      return;
    }
    record.deliveredKey = key;
    // The terminal status is written: reclaim the instance (the report has been read).
    if (terminal && record.instanceId !== undefined) await this.#startReclaim(record);
  }

  /**
   * Starts the Pod's teardown (`@nebula/teardown`'s `podTeardown`), durably recorded in the store
   * before any effect: stop, wait (grace + headroom from the stop request), terminate, wait, release,
   * then remove the Pod (deleted Pods) or clear the record (finished Pods, whose status stays).
   */
  async #startReclaim(record: PodRecord): Promise<void> {
    if (record.teardown !== undefined) return;
    record.teardown = "active";
    const { facts } = record;
    this.#memoryStore?.get(facts.key) ?? this.#memoryStore?.put(facts.key, {}, facts.uid);
    const result = await this.#executor.request(facts.key, {
      params: {
        namespace: facts.namespace,
        name: facts.name,
        podUid: facts.uid,
        ...(record.instanceId === undefined ? {} : { instanceId: record.instanceId }),
        gracePeriodSeconds: facts.gracePeriodSeconds,
        headroomSeconds: this.config.apiHeadroomSeconds,
        auxiliaries: this.#options.teardown?.auxiliaries?.(record.pod) ?? [],
        finish: record.deleted ? "delete-pod" : "clear",
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
      this.#afterTick(record, await this.#executor.tick(record.facts.key));
    } finally {
      record.ticking = false;
    }
  }

  #afterTick(record: PodRecord, result: TickResult): void {
    switch (result.status) {
      case "complete":
      case "absent":
      case "idle":
        record.teardown = "done";
        if (record.deleted) this.#forget(record);
        return;
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

  /** EC2 state of an instance as the latest poll saw it, for the teardown's observation. */
  #instanceObservation(instanceId: string | undefined): InstanceObservation {
    if (instanceId === undefined) return "absent";
    if (this.#lastInstances === undefined || !this.#health.ready) return "unknown";
    const seen = this.#lastInstances.find((i) => i.instanceId === instanceId);
    if (!seen) return "absent";
    const state = seen.state;
    return (POLLED_OR_TERMINATED as readonly string[]).includes(state)
      ? (state as InstanceObservation)
      : "unknown";
  }

  #observeTeardown(input: ObserveInput): PodTeardownObservation {
    const params = input.record.params as { instanceId?: unknown };
    const instanceId = typeof params.instanceId === "string" ? params.instanceId : undefined;
    const annotations =
      (input.subject as { metadata?: { annotations?: Record<string, string> } } | undefined)
        ?.metadata?.annotations ?? {};
    const holds = Object.keys(annotations).filter((k) => k.startsWith(PRE_TERMINATE_HOLD_PREFIX));
    return { instance: this.#instanceObservation(instanceId), pod: "present", holds };
  }

  async #stopInstance(instanceId: string): Promise<void> {
    const seen = this.#instanceObservation(instanceId);
    // Already stopped or further: nothing to ask EC2 (the teardown only needs "stopped or gone").
    if (
      seen === "stopped" ||
      seen === "shutting-down" ||
      seen === "terminated" ||
      seen === "absent"
    ) {
      return;
    }
    await this.#stop.add(instanceId);
  }

  async #terminateInstance(instanceId: string): Promise<void> {
    const seen = this.#instanceObservation(instanceId);
    if (seen === "shutting-down" || seen === "terminated" || seen === "absent") return;
    await this.#terminate.add(instanceId);
  }

  #forget(record: PodRecord): void {
    this.#records.delete(record.facts.uid);
    if (this.#byKey.get(record.facts.key) === record.facts.uid)
      this.#byKey.delete(record.facts.key);
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
    for (const listener of this.#nodeListeners) listener(next);
    if (previous.ready !== next.ready) {
      // Outage begins or ends: every Pod's status says so.
      await Promise.all([...this.#records.values()].map((r) => this.#publish(r)));
    }
  }

  #seenPod(uid: string): ObservedInstance | undefined {
    return this.#lastInstances?.find((i) => i.podUid === uid);
  }

  #recordByKey(namespace: string, name: string): PodRecord | undefined {
    const uid = this.#byKey.get(`${namespace}/${name}`);
    return uid === undefined ? undefined : this.#records.get(uid);
  }

  #log(level: "info" | "warn" | "error", message: string): void {
    this.#options.log?.(level, message);
  }
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
