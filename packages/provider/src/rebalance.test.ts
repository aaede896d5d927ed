import type { ExitReport } from "@nebula/state-mapping";
import type { PodStatusChange } from "@nebula/virtual-node";
import { describe, expect, it } from "vitest";
import { StatusPublisher } from "./publisher.js";
import {
  type EvictPod,
  type PodEvictionOutcome,
  REBALANCE_EVICTION_RETRY_MS,
} from "./rebalance.js";
import { observe, refreshState } from "./record.js";
import {
  addOwnedInstance,
  observed,
  T0,
  tagReport,
  testContext,
  testRecord,
} from "./testing/context.js";
import { testPod } from "./testing/fixtures.js";

const at = (ms: number) => new Date(T0 + ms).toISOString();

/** The host's report: running, with EC2's rebalance recommendation seen at T0 + 10 s. */
const rebalanceReport = (seq: number): ExitReport =>
  ({
    v: 1,
    seq,
    time: at(30_000),
    final: false,
    containers: [{ name: "app", init: false, state: "running", restarts: 0, containerID: "c1" }],
    rebalance: { time: at(10_000) },
  }) as ExitReport;

/**
 * A publisher over a fake context whose eviction answers from `answers` (the last one repeats;
 * an Error is thrown), and a running Spot Pod owned by a ReplicaSet unless `owner` is false.
 */
function world(options: {
  onRebalance?: "report" | "evict";
  answers?: (PodEvictionOutcome | Error)[];
  evict?: boolean;
  owner?: boolean;
}) {
  const t = testContext({
    capacity: { default: "spot", onRebalance: options.onRebalance ?? "evict" },
  });
  const asked: { namespace: string; name: string; uid: string }[] = [];
  const answers = options.answers ?? ["evicted"];
  const evict: EvictPod = async (pod) => {
    asked.push({ ...pod });
    const answer = answers[Math.min(asked.length - 1, answers.length - 1)] ?? "evicted";
    if (answer instanceof Error) throw answer;
    return answer;
  };
  const publisher = new StatusPublisher(t.ctx, options.evict === false ? undefined : evict);
  const changes: PodStatusChange[] = [];
  publisher.subscribe(async (change) => void changes.push(change));
  const pod = testPod("web-1", "uid-web-1");
  if (options.owner !== false) {
    pod.metadata = {
      ...pod.metadata,
      ownerReferences: [
        { apiVersion: "apps/v1", kind: "ReplicaSet", name: "web", uid: "rs-1", controller: true },
      ],
    };
  }
  const instance = addOwnedInstance(t.gateway, "uid-web-1", {
    State: { Name: "running" },
    InstanceType: "m7i.large",
    Placement: { AvailabilityZone: "us-east-1a" },
  });
  const record = testRecord(t.ctx, pod, {
    instanceId: instance.InstanceId,
    launchRequested: true,
    launchedAt: new Date(T0),
  });
  let seq = 0;
  /** The host reports again (the recommendation stays in its report); one publication. */
  const poll = async () => {
    tagReport(instance, rebalanceReport(++seq));
    observe(t.ctx, record, observed(instance));
    refreshState(t.ctx, record);
    await publisher.publish(record);
    // The eviction runs beside the publication; its outcome's Event is published after it.
    await new Promise((resolve) => setTimeout(resolve, 0));
    await publisher.publish(record);
  };
  // The Events of this concern (the Pod's first Ready also has its StartupTimes).
  const events = () =>
    changes.flatMap((c) => c.events ?? []).filter((e) => e.reason.startsWith("Rebalance"));
  return { ...t, publisher, record, instance, asked, poll, events };
}

const recommendation = (events: { reason: string; message: string }[]) =>
  events.find((e) => e.reason === "RebalanceRecommendation")?.message ?? "";

describe("acting early on a rebalance recommendation (capacity.onRebalance)", () => {
  it("report (the default): an Event says Nebula does not act, nothing is evicted", async () => {
    const w = world({ onRebalance: "report" });
    await w.poll();
    w.clock.advance(REBALANCE_EVICTION_RETRY_MS * 3);
    await w.poll();
    expect(w.asked).toEqual([]);
    expect(recommendation(w.events())).toContain(
      "does not act on it (capacity.onRebalance: report)",
    );
    expect(w.events().map((e) => e.reason)).toEqual(["RebalanceRecommendation"]);
  });

  it("evict: the Pod is evicted once, at its first recommendation, and both Events say so", async () => {
    const w = world({});
    await w.poll();
    expect(w.asked).toEqual([{ namespace: "default", name: "web-1", uid: "uid-web-1" }]);
    expect(recommendation(w.events())).toContain(
      "evicting the Pod so that its ReplicaSet replaces it",
    );
    expect(w.events().map((e) => e.reason)).toEqual([
      "RebalanceRecommendation",
      "RebalanceEviction",
    ]);
    // Later polls (the recommendation still in the report) ask nothing again.
    w.clock.advance(REBALANCE_EVICTION_RETRY_MS * 3);
    await w.poll();
    await w.poll();
    expect(w.asked).toHaveLength(1);
    expect(w.events()).toHaveLength(2);
  });

  it("evict, refused by a PodDisruptionBudget: one Warning, asked again only every 30 s, until it is taken", async () => {
    const w = world({ answers: ["blocked", "blocked", "evicted"] });
    await w.poll();
    expect(w.asked).toHaveLength(1);
    w.clock.advance(REBALANCE_EVICTION_RETRY_MS - 1_000);
    await w.poll();
    expect(w.asked).toHaveLength(1);
    w.clock.advance(1_000);
    await w.poll();
    expect(w.asked).toHaveLength(2);
    w.clock.advance(REBALANCE_EVICTION_RETRY_MS);
    await w.poll();
    expect(w.asked).toHaveLength(3);
    w.clock.advance(REBALANCE_EVICTION_RETRY_MS);
    await w.poll();
    expect(w.asked).toHaveLength(3);
    expect(w.events().map((e) => e.reason)).toEqual([
      "RebalanceRecommendation",
      "RebalanceEvictionBlocked",
      "RebalanceEviction",
    ]);
  });

  it("evict, the API failing: logged, asked again when due, never thrown", async () => {
    const w = world({ answers: [new Error("connection refused"), "evicted"] });
    await w.poll();
    expect(w.logs.some((l) => l.level === "warn" && l.message.includes("connection refused"))).toBe(
      true,
    );
    w.clock.advance(REBALANCE_EVICTION_RETRY_MS);
    await w.poll();
    expect(w.asked).toHaveLength(2);
    expect(w.events().map((e) => e.reason)).toEqual([
      "RebalanceRecommendation",
      "RebalanceEviction",
    ]);
  });

  it("evict, a Pod no controller owns: not evicted (nothing would replace it), and the Event says why", async () => {
    const w = world({ owner: false });
    await w.poll();
    expect(w.asked).toEqual([]);
    expect(recommendation(w.events())).toContain(
      "not evicted: no controller would replace the Pod",
    );
  });

  it("evict, a Pod deleted (or gone) while refused: asked no more", async () => {
    const w = world({ answers: ["blocked"] });
    await w.poll();
    w.record.deleted = true;
    w.clock.advance(REBALANCE_EVICTION_RETRY_MS * 2);
    await w.poll();
    expect(w.asked).toHaveLength(1);
    const gone = world({ answers: ["gone"] });
    await gone.poll();
    gone.clock.advance(REBALANCE_EVICTION_RETRY_MS * 2);
    await gone.poll();
    expect(gone.asked).toHaveLength(1);
    expect(gone.events().map((e) => e.reason)).toEqual(["RebalanceRecommendation"]);
  });

  it("evict without an eviction given to the provider: the Event says it cannot act", async () => {
    const w = world({ evict: false });
    await w.poll();
    expect(recommendation(w.events())).toContain("given no way to evict");
  });
});
