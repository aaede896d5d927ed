import type { EC2Client } from "@aws-sdk/client-ec2";
import type { SSMClient } from "@aws-sdk/client-ssm";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import type { AuxiliaryObject, PodLedger } from "@nebula/teardown";
import type {
  FoundInstance,
  InstanceReclaimer,
  LeakCollected,
  NodeHealth,
  NodeHealthSource,
  PodLifecycle,
  PodStatusChange,
  Runnable,
} from "@nebula/virtual-node";
import type { Admitter } from "./admitter.js";
import type { CloudWatchContainerLogs } from "./cloudwatch-logs.js";
import type { CloudWatchUsage } from "./cloudwatch-usage.js";
import { composeProvider } from "./compose.js";
import type { ProviderConfig } from "./config.js";
import type { DoorbellBatch, Doorbells } from "./doorbells.js";
import type { Gateway } from "./gateway.js";
import { type HostAgentLocation, locateHostAgent } from "./host-agents.js";
import type { Launcher } from "./launcher.js";
import type { CollectedParameterLeak, LeakCollection, LeakCollector } from "./leak-collector.js";
import type { Ec2PodProviderOptions } from "./options.js";
import type { ParameterDelivery } from "./parameter-delivery.js";
import { podFacts } from "./pod.js";
import type { PodTokens } from "./pod-tokens.js";
import type { Poller, PollResult } from "./poller.js";
import type { PodStartup, SpotSignal, StatusPublisher } from "./publisher.js";
import type { Reclaimer, ReclaimOptions } from "./reclaimer.js";
import { disprove, type ProviderContext, refreshState, withStatus } from "./record.js";
import { POOL_TAG } from "./tags.js";
import type { WarmPool, WarmPoolEvent, WarmPoolStatus } from "./warm-pool.js";

/**
 * The virtual node's provider on EC2: one instance per Pod, launched idempotently, observed by one
 * tag-filtered, paginated `DescribeInstances` sequence per poll (the exit report rides in the
 * tags), mapped to a truthful Pod status, and acted on only when its launch proves it belongs to
 * the Pod. It implements `@nebula/virtual-node`'s `PodLifecycle`, `InstanceReclaimer`,
 * `NodeHealthSource` and `Runnable`, and nothing else: the virtual node's `PodTeardown` drives
 * every teardown through it, on the same ledger. A façade over one AWS {@link Gateway} and
 * collaborators with one job each (see `compose.ts`).
 *
 * @example
 * ```ts
 * const provider = new Ec2PodProvider({
 *   config, ledger: new ConfigMapPodLedger(kc, { namespace: "nebula-system" }),
 *   livePodUids: () => informer.list().map((p) => p.metadata?.uid ?? ""),
 * });
 * provider.notifyPods(async ({ pod, status }) => writeStatus(pod, status));
 * void provider.run(abort.signal);
 * await provider.createPod(podWithFinalizer);
 * ```
 */
export class Ec2PodProvider implements PodLifecycle, InstanceReclaimer, NodeHealthSource, Runnable {
  /** The parsed configuration. */
  readonly config: ProviderConfig;
  /** The EC2 client in use (add middleware; destroy it at shutdown). */
  readonly client: EC2Client;
  /** The SSM client in use (Pod parameters, `podDelivery: "parameters"`). */
  readonly ssm: SSMClient;
  /** Every AWS call the provider makes goes through it (subscribe with `onCall` for a metric). */
  readonly gateway: Gateway;
  /** The ledger in use. */
  readonly ledger: PodLedger;
  /** The Pods' container logs as the hosts write them (`config.logs`), for `kubectl logs`. */
  readonly containerLogs: CloudWatchContainerLogs | undefined;
  /** The Pods' container usage as the hosts publish it (`config.metrics`), for `/stats/summary`. */
  readonly containerUsage: CloudWatchUsage | undefined;
  readonly #ctx: ProviderContext;
  readonly #admitter: Admitter;
  readonly #launcher: Launcher;
  readonly #parameters: ParameterDelivery;
  readonly #publisher: StatusPublisher;
  readonly #reclaimer: Reclaimer;
  readonly #leaks: LeakCollector;
  readonly #poller: Poller;
  readonly #tokens: PodTokens;
  readonly #doorbells: Doorbells | undefined;
  readonly #pool: WarmPool;
  readonly #timers: { poll?: NodeJS.Timeout | undefined; leaks?: NodeJS.Timeout | undefined } = {};
  #running: { abort: AbortController; doorbells: Promise<void> } | undefined;

  /** @param options - see {@link Ec2PodProviderOptions}. */
  constructor(options: Ec2PodProviderOptions) {
    const parts = composeProvider(options);
    ({ config: this.config, client: this.client, ssm: this.ssm } = parts);
    ({ containerLogs: this.containerLogs, containerUsage: this.containerUsage } = parts);
    this.gateway = parts.ctx.gateway;
    this.ledger = parts.ctx.ledger;
    this.#ctx = parts.ctx;
    this.#admitter = parts.admitter;
    this.#launcher = parts.launcher;
    this.#parameters = parts.parameters;
    this.#publisher = parts.publisher;
    this.#reclaimer = parts.reclaimer;
    this.#leaks = parts.leaks;
    this.#poller = parts.poller;
    this.#tokens = parts.tokens;
    this.#doorbells = parts.doorbells;
    this.#pool = parts.pool;
  }

  /**
   * Starts the Pod's instance, unless the Pod is refused (then `Failed` at once, with the reason
   * and a message naming the field, and a Warning Event), held (a DaemonSet Pod: `Pending` with a
   * reason), terminal in the API (never relaunched) or being deleted. Idempotent: a Pod whose
   * launch the ledger recorded is adopted, not launched again. Capacity, quota, throttling and
   * server errors leave the Pod `Pending` with the reason, retried by the poll with back-off.
   * The status is published in the background: `createPod` never waits for a listener.
   *
   * @throws ProviderError `InvalidPodSpec` for a Pod without a UID, name or containers; an error
   * no retry fixes (configuration, permissions); a ledger failure (retry later).
   */
  async createPod(pod: V1Pod): Promise<void> {
    const facts = podFacts(pod);
    const existing = this.#ctx.records.get(facts.uid);
    if (existing) return this.#admitter.refresh(existing, pod);
    const record = await this.#admitter.load(pod, facts);
    if (record.deleted || record.mode === "terminal") return;
    // Held for a missing ConfigMap or Secret after a launch whose outcome is unknown (a crash):
    // an instance may exist with the parameters written then; adopt it rather than hold the Pod.
    if (
      record.mode === "config" &&
      record.launchRequested &&
      (await this.#launcher.adopt(record))
    ) {
      this.#admitter.leaveConfigHold(record);
    }
    if (record.mode === "launch") {
      try {
        await this.#launcher.start(record);
      } catch (error) {
        // Not retryable (configuration, permissions): the caller reports it; the next call retries.
        this.#ctx.records.delete(facts.uid);
        throw error;
      }
      refreshState(this.#ctx, record);
    }
    this.#publisher
      .publish(record)
      .catch((error: unknown) =>
        this.#ctx.log("warn", `status of pod ${facts.key} not published: ${String(error)}`),
      );
  }

  /** Records the newer Pod object (its deletion, labels, annotations); EC2 is not called. */
  async updatePod(pod: V1Pod): Promise<void> {
    const record = this.#ctx.records.get(podFacts(pod).uid);
    if (!record) return this.createPod(pod);
    this.#admitter.refresh(record, pod);
  }

  /** The Pod's latest status, or `undefined` for a Pod this provider has no observation of. */
  getPodStatus(uid: string): V1PodStatus | undefined {
    const status = this.#ctx.records.get(uid)?.status;
    return status === undefined ? undefined : structuredClone(status);
  }

  /** Copies of every Pod this provider runs, each with its latest status. */
  listPods(): V1Pod[] {
    return [...this.#ctx.records.values()].map(withStatus);
  }

  /**
   * Subscribes to status changes; a change counts as written once the listener's promise
   * resolves (a rejection delivers it again on the next poll). Returns the unsubscribe.
   */
  notifyPods(listener: (change: PodStatusChange) => void | Promise<void>): () => void {
    return this.#publisher.subscribe(async (change) => listener(change));
  }

  /**
   * Forgets a Pod whose teardown completed (its instance terminated or provably never there) and
   * removes its ledger entry; its parameters were released by that teardown.
   */
  async forgetPod(uid: string): Promise<void> {
    this.#ctx.records.delete(uid);
    try {
      await this.ledger.remove(uid);
    } catch (error) {
      this.#ctx.log("warn", `ledger entry of pod ${uid} not removed: ${String(error)}`);
    }
  }

  /** The Pod's instance, proven its; rejects `NotVisibleYet` while EC2 may still hide it. */
  findInstance(podUid: string): Promise<FoundInstance | undefined> {
    return this.#reclaimer.findInstance(podUid);
  }

  /** Stops it (grace tagged first, capped); only an instance proven `options.podUid`'s. */
  stopInstance(id: string, options?: ReclaimOptions): Promise<void> {
    return this.#reclaimer.stopInstance(id, options);
  }

  /** Terminates it; only an instance proven Nebula's (and `options.podUid`'s, when given). */
  terminateInstance(id: string, options?: ReclaimOptions): Promise<void> {
    return this.#reclaimer.terminateInstance(id, options);
  }

  /** The Pod's cloud objects besides its instance: its parameters (`podDelivery: "parameters"`). */
  auxiliariesOf(podUid: string): readonly AuxiliaryObject[] {
    return this.#parameters.auxiliariesOf(podUid);
  }

  /** Releases an object of {@link auxiliariesOf} (deletes the Pod's parameters); idempotent. */
  releaseAuxiliary(object: AuxiliaryObject): Promise<void> {
    return this.#parameters.release(object);
  }

  /** EC2 as the provider last saw it, for the virtual Node's conditions. */
  health(): NodeHealth {
    return this.#ctx.health.current;
  }

  /** Subscribes to changes of {@link health}; returns the unsubscribe. */
  onNodeHealth(listener: (health: NodeHealth) => void): () => void {
    return this.#ctx.health.subscribe(listener);
  }

  /**
   * Milliseconds until the next poll (grows under throttling and failures): the event channel's
   * safety-net interval while its queue answers (`config.events`).
   */
  get pollIntervalMs(): number {
    const safetyNet = this.#doorbells?.healthy
      ? this.config.events?.pollIntervalSeconds
      : undefined;
    return Math.max(this.#ctx.health.intervalMs, (safetyNet ?? 0) * 1000);
  }

  /**
   * Subscribes to Pods' start-ups: the first time a Pod's status turns Ready in this process (from
   * not Ready, no container restarted), its phases from creation to Ready (see
   * `startupBreakdown`); the Pod also gets a `StartupTimes` Event with them in one line.
   * Returns the unsubscribe.
   */
  onStartup(listener: (startup: PodStartup) => void): () => void {
    return this.#publisher.onStartup(listener);
  }

  /**
   * Subscribes to Spot signals of this node's Pods: a Pod first marked `DisruptionTarget` for
   * EC2's interruption of its instance, and EC2's first rebalance recommendation for it (each
   * also an Event on the Pod); returns the unsubscribe.
   */
  onSpotSignal(listener: (signal: SpotSignal) => void): () => void {
    return this.#publisher.onSpotSignal(listener);
  }

  /** Subscribes to every batch the event channel handled (`config.events`); returns the unsubscribe. */
  onDoorbells(listener: (batch: DoorbellBatch) => void): () => void {
    return this.#doorbells?.onBatch(listener) ?? (() => undefined);
  }

  /** Runs the poll loop and the leak collector until `signal` aborts, then {@link stop}s. */
  async run(signal: AbortSignal): Promise<void> {
    this.start();
    if (!signal.aborted) {
      await new Promise<void>((resolve) =>
        signal.addEventListener("abort", () => resolve(), { once: true }),
      );
    }
    await this.stop();
  }

  /**
   * Starts the poll loop, the leak collector (whose first pass follows the first poll) and the
   * event channel's reader (`config.events`).
   */
  start(): void {
    if (this.#running) return;
    const abort = new AbortController();
    this.#running = { abort, doorbells: this.#doorbells?.run(abort.signal) ?? Promise.resolve() };
    const later = (loop: () => Promise<void>, ms: number) =>
      this.#running ? setTimeout(loop, ms) : undefined;
    // Ticks at the poll's own pace and polls when due, so that a channel going quiet (its
    // safety-net interval no longer in force) brings the next poll forward.
    let lastPoll = Number.NEGATIVE_INFINITY;
    const pollLoop = async () => {
      if (performance.now() - lastPoll >= this.pollIntervalMs) {
        lastPoll = performance.now();
        await this.pollOnce();
        await this.#pool.reconcile();
      }
      this.#timers.poll = later(pollLoop, this.#ctx.health.intervalMs);
    };
    const leakLoop = async () => {
      await this.collectLeaks().catch((error: unknown) =>
        this.#ctx.log("warn", `leak collection failed: ${String(error)}`),
      );
      this.#timers.leaks = later(leakLoop, this.config.leakCollection.intervalSeconds * 1000);
    };
    this.#timers.poll = setTimeout(async () => {
      await pollLoop();
      this.#timers.leaks = later(leakLoop, 0);
    }, 0);
  }

  /** Stops the loops and sends whatever stop/terminate requests are queued. */
  async stop(): Promise<void> {
    const running = this.#running;
    this.#running = undefined;
    clearTimeout(this.#timers.poll);
    clearTimeout(this.#timers.leaks);
    running?.abort.abort();
    await Promise.all([this.#poller.idle(), running?.doorbells]);
    await this.#tokens.idle();
    await this.gateway.flush();
  }

  /**
   * One pass of the warm pool (`config.warmPool`) over the latest poll: launches what keeps each
   * entry's prepared hosts at its size, terminates what is broken, shrunk, removed or of an older
   * shape (one at a time). The poll loop runs one after every poll. Never throws.
   */
  reconcileWarmPool(): Promise<void> {
    return this.#pool.reconcile();
  }

  /** The warm pool as its last pass saw it: per entry, its target, hosts by state and hourly cost. */
  warmPoolStatus(): WarmPoolStatus {
    return this.#pool.status();
  }

  /** Subscribes to the warm pool's hits, misses, launches, ready hosts and terminations. */
  onWarmPool(listener: (event: WarmPoolEvent) => void): () => void {
    return this.#pool.onEvent(listener);
  }

  /** One poll cycle (see `Poller`); never throws: a failure is in the result and the health. */
  pollOnce(): Promise<PollResult> {
    return this.#poller.pollOnce();
  }

  /** Subscribes to every finished poll cycle (result, seconds); returns the unsubscribe. */
  onPoll(listener: (result: PollResult, seconds: number) => void): () => void {
    return this.#poller.onPoll(listener);
  }

  /** One leak-collection pass over the latest poll (polling first when there is none). */
  async collectLeaks(): Promise<LeakCollection> {
    if (this.#ctx.listing === undefined) await this.pollOnce();
    return this.#leaks.collect();
  }

  /** Subscribes to the instances the leak collector terminates; returns the unsubscribe. */
  onLeakCollected(listener: (leak: LeakCollected) => void): () => void {
    return this.#leaks.onLeak(listener);
  }

  /** Subscribes to the Pod parameters the leak collector deletes; returns the unsubscribe. */
  onParameterLeakCollected(listener: (leak: CollectedParameterLeak) => void): () => void {
    return this.#leaks.onParameterLeak(listener);
  }

  /**
   * This node's Pods' instances by EC2 state, from the latest poll (`{}` before the first one).
   * Warm-pool hosts no Pod took are not counted: {@link warmPoolStatus} has them.
   */
  instanceCounts(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const { state, podUid, tags } of this.#ctx.listing ?? []) {
      if (podUid === undefined && tags.has(POOL_TAG)) continue;
      counts[state] = (counts[state] ?? 0) + 1;
    }
    return counts;
  }

  /**
   * Where Pod `pod`'s host agent listens (its running instance's private address, the configured
   * `hostAgent.port`, the certificate fingerprint its host reports), or why no `kubectl exec`
   * session can start: `@nebula/virtual-node`'s kubelet API relays to it.
   */
  locateHostAgent(pod: {
    readonly namespace: string;
    readonly name: string;
    readonly uid: string;
  }): Promise<HostAgentLocation> {
    return locateHostAgent(this.#ctx, this.#reclaimer, pod);
  }

  /** The proven instance the latest poll listed for Pod `podUid` (live states), or `undefined`. */
  listedInstance(podUid: string): FoundInstance | undefined {
    const listed = this.#ctx.listing?.find(
      (i) => i.podUid === podUid && disprove(this.#ctx, i, podUid) === undefined,
    );
    return listed && { instanceId: listed.instanceId, state: listed.state };
  }
}
