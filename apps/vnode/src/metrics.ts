/** The app's Prometheus metrics (`nebula_vnode_*`, listed in the README), from one helper. */
import type { V1Pod } from "@kubernetes/client-node";
import type { DoorbellBatch, Ec2PodProvider, WarmPoolEvent } from "@nebula/provider";
import { INSTANCE_ANNOTATIONS, virtualNodeMetrics } from "@nebula/virtual-node";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/** What a drain waits for (`NodeController`'s `drainProgress`); `undefined`: not observed yet. */
interface DrainLeft {
  readonly pods: number | undefined;
  readonly instances: number | undefined;
}

type Observed = Pick<
  Ec2PodProvider,
  | "gateway"
  | "instanceCounts"
  | "onLeakCollected"
  | "onPoll"
  | "onDoorbells"
  | "onStartup"
  | "onSpotSignal"
  | "onWarmPool"
  | "warmPoolStatus"
>;

/**
 * Registers the virtual node's metrics on `registry` and binds them: the virtual node's own
 * (`@nebula/virtual-node`'s), the provider's EC2 calls (counted by its gateway), polls and
 * collected leaks, the event channel's messages (`provider.events`), instances by state and the
 * warm pool's hosts (read at scrape time), the warm pool's takes, refills and terminations, and
 * while `node.drain` is on (`drain` given) what the drain waits for. Returns what the Pod
 * controller and the kubelet API report into.
 */
export function vnodeMetrics(
  registry: Registry,
  pods: { list(): readonly V1Pod[] },
  provider: Observed,
  drain?: () => DrainLeft,
): ReturnType<typeof virtualNodeMetrics> {
  const registers = [registry];
  const name = (suffix: string) => `nebula_vnode_${suffix}`;
  const reported = virtualNodeMetrics(registry, pods);
  if (drain !== undefined) {
    // Only while draining; NaN until observed, so that an unknown count never reads as 0.
    const left = (what: keyof DrainLeft, help: string) =>
      new Gauge({
        name: name(`drain_${what}_left`),
        help,
        registers,
        collect() {
          this.set(drain()[what] ?? Number.NaN);
        },
      });
    left("pods", "While draining: Pods still bound to this node (NaN until the Pod cache synced)");
    left(
      "instances",
      "While draining: this node's instances not terminated (NaN until the first poll)",
    );
  }
  const ec2Calls = new Counter({
    name: name("ec2_calls_total"),
    help: "EC2 API calls by action and outcome",
    labelNames: ["action", "outcome"],
    registers,
  });
  provider.gateway.onCall(({ service, action, outcome }) => {
    if (service === "ec2") ec2Calls.inc({ action, outcome });
  });
  new Gauge({
    name: name("ec2_budget_rate"),
    help: "This node's EC2 budget by action: the calls per second it allows now (the configured share, or less after EC2 throttled)",
    labelNames: ["action"],
    registers,
    collect() {
      for (const { action, rate } of provider.gateway.budgetState()) this.set({ action }, rate);
    },
  });
  new Gauge({
    name: name("ec2_budget_waiting"),
    help: "EC2 calls waiting for their turn in this node's budget, by action",
    labelNames: ["action"],
    registers,
    collect() {
      for (const { action, waiting } of provider.gateway.budgetState()) {
        this.set({ action }, waiting);
      }
    },
  });
  new Gauge({
    name: name("instances"),
    help: "This node's EC2 instances by state, from the latest poll",
    labelNames: ["state"],
    registers,
    collect() {
      this.reset();
      for (const [state, count] of Object.entries(provider.instanceCounts())) {
        this.set({ state }, count);
      }
    },
  });
  const leaks = new Counter({
    name: name("leaks_collected_total"),
    help: "Instances the leak collector terminated (running with no live Pod)",
    registers,
  });
  provider.onLeakCollected(() => leaks.inc());
  const polls = new Histogram({
    name: name("poll_duration_seconds"),
    help: "One poll cycle: DescribeInstances, statuses published, reclaims advanced",
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    labelNames: ["outcome"],
    registers,
  });
  provider.onPoll((result, s) => polls.observe({ outcome: result.ok ? "ok" : "error" }, s));
  const messages = new Counter({
    name: name("event_messages_total"),
    help: "Messages of the event queue by what became of them: read (an instance read), coalesced (into another of the same instance), ignored (no Pod of this node), unreadable",
    labelNames: ["outcome"],
    registers,
  });
  const eventLag = new Histogram({
    name: name("event_to_status_seconds"),
    help: "From the event queue's receipt of a message to its Pod's status published",
    buckets: [0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    registers,
  });
  const stages = new Histogram({
    name: name("event_stage_seconds"),
    help: "The event channel's breakdown: host (a container's exit to the queue's receipt of its doorbell), delivery (the queue's receipt to this node's receive), wait (the batch's first receive to its read), read (the batch's DescribeInstances), publish (the read's end to the Pod's status written)",
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5],
    labelNames: ["stage"],
    registers,
  });
  provider.onDoorbells((batch: DoorbellBatch) => {
    const t = batch.timings;
    for (const s of t.hostSeconds) stages.observe({ stage: "host" }, s);
    for (const s of t.deliverySeconds) stages.observe({ stage: "delivery" }, s);
    if (t.waitSeconds !== undefined) stages.observe({ stage: "wait" }, t.waitSeconds);
    if (t.readSeconds !== undefined) stages.observe({ stage: "read" }, t.readSeconds);
    for (const s of t.publishSeconds) stages.observe({ stage: "publish" }, s);
    const read = batch.messages - batch.coalesced - batch.ignored - batch.unreadable;
    messages.inc({ outcome: "read" }, read);
    messages.inc({ outcome: "coalesced" }, batch.coalesced);
    messages.inc({ outcome: "ignored" }, batch.ignored);
    messages.inc({ outcome: "unreadable" }, batch.unreadable);
    for (const s of batch.lagSeconds) eventLag.observe(s);
  });
  const startupBuckets = [0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
  const startupPhases = new Histogram({
    name: name("startup_phase_seconds"),
    help: "A Pod's start-up by phase and start (warm: on a warm-pool host; cold: a new instance): schedule (created to scheduled), admit (to the launch requested, or the warm-pool host taken), launch (to RunInstances answered, or StartInstances when warm), boot (to the host supervisor started), pull (to the last image pulled), start (to the last container started), ready (to the status Ready)",
    buckets: startupBuckets,
    labelNames: ["phase", "start"],
    registers,
  });
  const startups = new Histogram({
    name: name("startup_seconds"),
    help: "A Pod's start-up: from its creation to its status first Ready, by start (warm: on a warm-pool host; cold: a new instance)",
    buckets: startupBuckets,
    labelNames: ["start"],
    registers,
  });
  provider.onStartup(({ breakdown }) => {
    const start = breakdown.warm ? "warm" : "cold";
    for (const { phase, seconds } of breakdown.phases) {
      startupPhases.observe({ phase, start }, seconds);
    }
    if (breakdown.totalSeconds !== undefined) startups.observe({ start }, breakdown.totalSeconds);
  });
  warmPoolMetrics(registry, provider);
  /** The live (not terminal) Pods' prices at launch from `annotation`, summed by `labelsOf`. */
  const costs = (annotation: string, labelsOf: (pod: V1Pod) => Record<string, string>) => {
    const sums = new Map<string, { labels: Record<string, string>; cost: number }>();
    for (const pod of pods.list()) {
      const phase = pod.status?.phase;
      if (phase === "Succeeded" || phase === "Failed") continue;
      const text = pod.metadata?.annotations?.[annotation];
      const price = text === undefined ? Number.NaN : Number(text);
      if (!Number.isFinite(price) || price < 0) continue;
      const labels = labelsOf(pod);
      const key = JSON.stringify(labels);
      const sum = sums.get(key) ?? { labels, cost: 0 };
      sum.cost += price;
      sums.set(key, sum);
    }
    return sums.values();
  };
  new Gauge({
    name: name("spot_hourly_cost_usd"),
    help: "Estimated hourly cost of this node's live Spot Pods by namespace: the sum of each Pod's Spot price at launch (annotation nebula.dev/spot-price-usd-per-hour); On-Demand Pods are in nebula_vnode_hourly_cost_usd",
    labelNames: ["namespace"],
    registers,
    collect() {
      this.reset();
      const byNamespace = costs(INSTANCE_ANNOTATIONS.spotPrice, (pod) => ({
        namespace: pod.metadata?.namespace ?? "",
      }));
      for (const { labels, cost } of byNamespace) this.set(labels, cost);
    },
  });
  new Gauge({
    name: name("hourly_cost_usd"),
    help: "Estimated hourly cost of this node's live Pods by namespace and capacity type (spot, on-demand): the sum of each Pod's price at launch (annotation nebula.dev/price-usd-per-hour: the Spot price, or the On-Demand price of the AWS Price List); a Pod whose price could not be read is not counted",
    labelNames: ["namespace", "capacity_type"],
    registers,
    collect() {
      this.reset();
      const byNamespaceAndType = costs(INSTANCE_ANNOTATIONS.price, (pod) => ({
        namespace: pod.metadata?.namespace ?? "",
        capacity_type: pod.metadata?.annotations?.[INSTANCE_ANNOTATIONS.capacityType] ?? "unknown",
      }));
      for (const { labels, cost } of byNamespaceAndType) this.set(labels, cost);
    },
  });
  const spotSignals = new Counter({
    name: name("spot_signals_total"),
    help: "EC2's Spot signals about this node's Pods, by kind (interruption: a Pod marked DisruptionTarget because EC2 is reclaiming its instance; rebalance: EC2 recommends moving off the instance; the Pod is evicted only with capacity.onRebalance evict) and namespace",
    labelNames: ["kind", "namespace"],
    registers,
  });
  const noticeToMark = new Histogram({
    name: name("spot_notice_to_mark_seconds"),
    help: "From the host supervisor seeing a Spot interruption notice to the Pod's DisruptionTarget status published (whole seconds on the host's side)",
    buckets: [0.25, 0.5, 1, 2, 5, 10, 30],
    registers,
  });
  provider.onSpotSignal(({ kind, namespace, noticeToMarkSeconds }) => {
    spotSignals.inc({ kind, namespace });
    if (noticeToMarkSeconds !== undefined) noticeToMark.observe(noticeToMarkSeconds);
  });
  return reported;
}

/** The hosts of each state `warmPoolStatus()` counts, as the `state` label's values. */
const POOL_STATES = ["preparing", "ready", "stale", "broken"] as const;

/**
 * The warm pool's metrics (`provider.warmPool`): its hosts by state, target and hourly cost per
 * entry (read from the pool's last pass at scrape time, so a removed entry leaves them), and
 * counters and a histogram fed by its events. Registered whether or not an entry is configured:
 * with none, the gauges have no series and the counters never move.
 */
function warmPoolMetrics(
  registry: Registry,
  provider: Pick<Observed, "onWarmPool" | "warmPoolStatus">,
): void {
  const registers = [registry];
  const name = (suffix: string) => `nebula_vnode_warm_pool_${suffix}`;
  const perEntry = (
    suffix: string,
    help: string,
    value: (e: ReturnType<Observed["warmPoolStatus"]>["entries"][number]) => number,
  ) =>
    new Gauge({
      name: name(suffix),
      help,
      labelNames: ["entry"],
      registers,
      collect() {
        this.reset();
        for (const e of provider.warmPoolStatus().entries) this.set({ entry: e.entry }, value(e));
      },
    });
  new Gauge({
    name: name("hosts"),
    help: "The warm pool's hosts by entry and state, as its last pass saw them: preparing (booting, pulling its images), ready (prepared and stopped: a Pod may take it), stale (of an older shape of its entry: rolled), broken (stopped before it prepared or past prepareSeconds: terminated); hosts Pods took are not counted",
    labelNames: ["entry", "state"],
    registers,
    collect() {
      this.reset();
      for (const e of provider.warmPoolStatus().entries) {
        for (const state of POOL_STATES) this.set({ entry: e.entry, state }, e[state]);
      }
    },
  });
  perEntry(
    "target",
    "The ready hosts each warm-pool entry keeps: its size, fewer under its maxHourlyCostUsd",
    (e) => e.target,
  );
  perEntry(
    "hourly_cost_usd",
    "Estimated hourly cost of each warm-pool entry's stopped hosts: their root volumes (volumeGiB × volumeUsdPerGiBMonth; EC2 bills no instance hours while stopped)",
    (e) => e.hourlyCostUsd,
  );
  new Gauge({
    name: name("assigning"),
    help: "Warm-pool hosts Pods took whose StartInstances has not been answered yet",
    registers,
    collect() {
      this.set(provider.warmPoolStatus().assigning);
    },
  });
  const takes = new Counter({
    name: name("takes_total"),
    help: "New Pods that fit a warm-pool entry, by entry and result: hit (took a ready host) or miss (none ready, or the take could not be recorded: launched cold)",
    labelNames: ["entry", "result"],
    registers,
  });
  const launched = new Counter({
    name: name("launched_total"),
    help: "Hosts the warm pool launched, by entry",
    labelNames: ["entry"],
    registers,
  });
  const refill = new Histogram({
    name: name("refill_seconds"),
    help: "A warm-pool host's launch to ready (booted, images pulled, stopped by itself), for hosts this process saw preparing",
    buckets: [10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900],
    labelNames: ["entry"],
    registers,
  });
  const terminated = new Counter({
    name: name("terminated_total"),
    help: "Warm-pool hosts the pool terminated, by entry and reason: removed (entry no longer configured), replaced (an older shape of its entry), broken, shrunk (beyond the target); hosts Pods took are terminated with their Pods and not counted here",
    labelNames: ["entry", "reason"],
    registers,
  });
  provider.onWarmPool((event: WarmPoolEvent) => {
    switch (event.kind) {
      case "hit":
      case "miss":
        takes.inc({ entry: event.entry, result: event.kind });
        break;
      case "launched":
        launched.inc({ entry: event.entry });
        break;
      case "ready":
        refill.observe({ entry: event.entry }, event.seconds);
        break;
      case "terminated":
        terminated.inc({ entry: event.entry, reason: event.reason });
        break;
    }
  });
}
