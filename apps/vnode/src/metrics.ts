/** The app's Prometheus metrics (`nebula_vnode_*`, listed in the README), from one helper. */
import type { V1Pod } from "@kubernetes/client-node";
import type { DoorbellBatch, Ec2PodProvider } from "@nebula/provider";
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
>;

/**
 * Registers the virtual node's metrics on `registry` and binds them: the virtual node's own
 * (`@nebula/virtual-node`'s), the provider's EC2 calls (counted by its gateway), polls and
 * collected leaks, the event channel's messages (`provider.events`), and instances by state (read
 * at scrape time), and while `node.drain` is on (`drain` given) what the drain waits for. Returns
 * what the Pod controller and the kubelet API report into.
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
    help: "A Pod's start-up by phase: schedule (created to scheduled), admit (to the launch requested), launch (to RunInstances answered), boot (to the host supervisor started), pull (to the last image pulled), start (to the last container started), ready (to the status Ready)",
    buckets: startupBuckets,
    labelNames: ["phase"],
    registers,
  });
  const startups = new Histogram({
    name: name("startup_seconds"),
    help: "A Pod's start-up: from its creation to its status first Ready",
    buckets: startupBuckets,
    registers,
  });
  provider.onStartup(({ breakdown }) => {
    for (const { phase, seconds } of breakdown.phases) startupPhases.observe({ phase }, seconds);
    if (breakdown.totalSeconds !== undefined) startups.observe(breakdown.totalSeconds);
  });
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
