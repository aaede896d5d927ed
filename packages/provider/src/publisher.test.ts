import type { ExitReport } from "@nebula/state-mapping";
import type { PodStatusChange } from "@nebula/virtual-node";
import { describe, expect, it } from "vitest";
import { ProviderError } from "./errors.js";
import { type PodStartup, type SpotSignal, StatusPublisher } from "./publisher.js";
import { observe, type PodRecord, refreshState } from "./record.js";
import {
  addOwnedInstance,
  observed,
  T0,
  tagReport,
  testContext,
  testRecord,
} from "./testing/context.js";
import type { FakeInstance } from "./testing/fake-gateway.js";
import { testPod } from "./testing/fixtures.js";

function setup(overrides: Parameters<typeof testContext>[0] = {}) {
  const t = testContext(overrides);
  const publisher = new StatusPublisher(t.ctx);
  const changes: PodStatusChange[] = [];
  publisher.subscribe(async (change) => void changes.push(change));
  return { ...t, publisher, changes };
}

/** A launched record whose instance was observed in `state`. */
function launched(t: ReturnType<typeof setup>, uid: string, state = "running") {
  const instance = addOwnedInstance(t.gateway, uid, {
    State: { Name: state },
    InstanceType: "m7i.large",
    Placement: { AvailabilityZone: "us-east-1a" },
  });
  const record = testRecord(t.ctx, testPod(`pod-${uid}`, uid), {
    instanceId: instance.InstanceId,
    launchRequested: true,
    launchedAt: new Date(T0),
  });
  observe(t.ctx, record, observed(instance));
  return { record, instance };
}

describe("StatusPublisher.publish", () => {
  it("delivers a status change once, with the instance, and again only when something changed", async () => {
    const t = setup();
    const { record, instance } = launched(t, "uid-1", "pending");
    await t.publisher.publish(record);
    await t.publisher.publish(record);
    expect(t.changes).toHaveLength(1);
    const [first] = t.changes;
    expect(first?.pod.metadata?.uid).toBe("uid-1");
    expect(first?.terminal).toBe(false);
    expect(first?.instance).toMatchObject({
      instanceId: instance.InstanceId,
      availabilityZone: "us-east-1a",
      instanceType: "m7i.large",
    });
    expect(first?.pod.status).toEqual(first?.status);

    // The instance now runs: a new observation, a new status.
    t.gateway.setState(instance.InstanceId, "running");
    observe(t.ctx, record, observed(instance));
    refreshState(t.ctx, record);
    await t.publisher.publish(record);
    expect(t.changes).toHaveLength(2);
    expect(t.changes[1]?.status).not.toEqual(first?.status);
    await t.publisher.publish(record);
    expect(t.changes).toHaveLength(2);
  });

  it("delivers an EC2 state change that leaves the status as it was (a teardown waits for it), once", async () => {
    const t = setup();
    const { record, instance } = launched(t, "uid-1", "stopping");
    await t.publisher.publish(record);
    expect(t.changes).toHaveLength(1);
    // Stopping → shutting-down → terminated: the Pod's status stays as it was, and each state
    // is delivered once all the same.
    for (const state of ["shutting-down", "terminated"]) {
      t.gateway.setState(instance.InstanceId, state);
      observe(t.ctx, record, observed(instance));
      refreshState(t.ctx, record);
      const before = t.changes.length;
      await t.publisher.publish(record);
      await t.publisher.publish(record);
      expect(t.changes.length, state).toBe(before + 1);
    }
  });

  it("re-delivers after a listener rejection, and Events once after it succeeded", async () => {
    const t = setup();
    let fail = true;
    const attempts: PodStatusChange[] = [];
    t.publisher.subscribe(async (change) => {
      attempts.push(change);
      if (fail) throw new Error("apiserver conflict");
    });
    const { record } = launched(t, "uid-2");
    record.events.push({ type: "Normal", reason: "Launched", message: "launched" });
    await t.publisher.publish(record);
    expect(attempts).toHaveLength(1);
    expect(t.logs.some((l) => /status of pod default\/pod-uid-2 not written/.test(l.message))).toBe(
      true,
    );
    // Not delivered: kept, Events included, for the next publication.
    expect(record.events).toHaveLength(1);
    fail = false;
    await t.publisher.publish(record);
    expect(attempts).toHaveLength(2);
    expect(attempts[1]?.events).toEqual([
      { type: "Normal", reason: "Launched", message: "launched" },
    ]);
    expect(record.events).toEqual([]);
    await t.publisher.publish(record);
    expect(attempts).toHaveLength(2);
    // The other listener saw both attempts: "delivered" means every listener resolved.
    expect(t.changes).toHaveLength(2);
  });

  it("delivers new Events even when the status did not change, each once", async () => {
    const t = setup();
    const { record } = launched(t, "uid-3");
    await t.publisher.publish(record);
    record.events.push({ type: "Warning", reason: "Noted", message: "once" });
    await t.publisher.publish(record);
    await t.publisher.publish(record);
    expect(t.changes.map((c) => c.events?.map((e) => e.reason))).toEqual([[], ["Noted"]]);
  });

  it("publishes one at a time per Pod: concurrent calls never deliver an Event twice", async () => {
    const t = setup();
    const { record } = launched(t, "uid-4");
    record.events.push({ type: "Normal", reason: "Launched", message: "launched" });
    await Promise.all([
      t.publisher.publish(record),
      t.publisher.publish(record),
      t.publisher.publish(record),
    ]);
    expect(t.changes).toHaveLength(1);
    expect(t.changes.flatMap((c) => c.events ?? [])).toHaveLength(1);
    expect(record.publishing).toBeUndefined();
  });

  it("publishes nothing for a launched Pod whose instance this process has not observed", async () => {
    const t = setup();
    const record = testRecord(t.ctx, testPod("adopted", "uid-5"), {
      instanceId: "i-0123456789abcdef0",
      launchRequested: true,
    });
    await t.publisher.publish(record);
    expect(t.changes).toEqual([]);
    expect(record.status).toBeUndefined();
  });

  it("publishes a held or refused Pod's status as the admitter set it", async () => {
    const t = setup();
    const record = testRecord(t.ctx, testPod("held", "uid-6"), {
      mode: "hold",
      status: { phase: "Pending", reason: "DaemonSetPodNotLaunched" },
      events: [{ type: "Normal", reason: "DaemonSetPodNotLaunched", message: "held" }],
    });
    await t.publisher.publish(record);
    expect(t.changes).toHaveLength(1);
    expect(t.changes[0]?.status).toEqual({ phase: "Pending", reason: "DaemonSetPodNotLaunched" });
    expect(t.changes[0]?.instance).toBeUndefined();
  });

  it("the status carries a launch being retried, and an EC2 outage on Ready", async () => {
    const t = setup({ outageAfterFailures: 1 });
    const pending = testRecord(t.ctx, testPod("waiting", "uid-7"), {
      launchError: new ProviderError("InsufficientCapacity", "no capacity anywhere"),
    });
    expect(t.publisher.computeStatus(pending)).toBe(true);
    expect(pending.status).toMatchObject({ phase: "Pending", reason: "InsufficientCapacity" });
    const { record } = launched(t, "uid-8");
    t.ctx.health.record(new ProviderError("Unavailable", "503"));
    expect(t.publisher.computeStatus(record)).toBe(true);
    const ready = record.status?.conditions?.find((c) => c.type === "Ready");
    expect(ready).toMatchObject({ status: "False", reason: "EC2Unavailable" });
  });
});

describe("StatusPublisher console", () => {
  it("holds a stopped instance without a report, and reads its console after the settle window", async () => {
    const t = setup({ consoleSettleSeconds: 30 });
    const { record } = launched(t, "uid-9", "stopped");
    refreshState(t.ctx, record);
    expect(record.stoppedSince).toBe(T0);
    // No exit report: no status from a guess.
    expect(t.publisher.computeStatus(record)).toBe(false);
    expect(t.publisher.needsConsole(record)).toBe(false);
    t.clock.advance(30_000);
    expect(t.publisher.needsConsole(record)).toBe(true);
    await t.publisher.readConsole(record);
    expect(t.gateway.count("consoleOutput")).toBe(1);
    expect(record.consoleReadAt).toBe(T0 + 30_000);
    expect(record.consoleOutput).toBe("");
    // Read once: not again within five minutes.
    refreshState(t.ctx, record);
    expect(t.publisher.needsConsole(record)).toBe(false);
    expect(t.publisher.computeStatus(record)).toBe(true);
  });

  it("a running instance never needs its console", () => {
    const t = setup({ consoleSettleSeconds: 0 });
    const { record } = launched(t, "uid-10");
    refreshState(t.ctx, record);
    expect(t.publisher.needsConsole(record)).toBe(false);
  });

  it("a failed console read is logged, and retried only after five minutes", async () => {
    const t = setup({ consoleSettleSeconds: 0 });
    const { record } = launched(t, "uid-11", "stopped");
    refreshState(t.ctx, record);
    t.gateway.fail("consoleOutput", new ProviderError("Throttled", "slow down"));
    expect(t.publisher.needsConsole(record)).toBe(true);
    await t.publisher.readConsole(record);
    expect(record.consoleOutput).toBeUndefined();
    expect(t.logs.some((l) => l.level === "warn")).toBe(true);
    expect(t.publisher.needsConsole(record)).toBe(false);
    t.clock.advance(5 * 60_000);
    expect(t.publisher.needsConsole(record)).toBe(true);
  });
});

describe("StatusPublisher start-up", () => {
  const at = (ms: number) => new Date(T0 + ms).toISOString();
  /** The host's report of a running container, with its start-up times; restarts as given. */
  function running(seq: number, restarts = 0): ExitReport {
    return {
      v: 1,
      seq,
      time: at(30_000),
      final: false,
      supervisorStartedAt: at(20_000),
      containers: [
        {
          name: "app",
          init: false,
          state: "running",
          restarts,
          startedAt: at(26_000),
          containerID: "abc123",
          pullStartedAt: at(20_100),
          pullFinishedAt: at(25_000),
          firstStartedAt: at(26_000),
        },
      ],
    } as ExitReport;
  }
  function report(t: ReturnType<typeof setup>, instance: FakeInstance, r: ExitReport) {
    tagReport(instance, r);
    t.gateway.setState(instance.InstanceId, "running");
  }
  function start(t: ReturnType<typeof setup>, uid: string) {
    const { record, instance } = launched(t, uid, "pending");
    record.pod.metadata = { ...record.pod.metadata, creationTimestamp: new Date(T0 - 2_000) };
    record.pod.status = {
      phase: "Pending",
      conditions: [
        { type: "PodScheduled", status: "True", lastTransitionTime: new Date(T0 - 1_500) },
      ],
    };
    record.requestedAt = T0 - 1_000;
    const startups: PodStartup[] = [];
    t.publisher.onStartup((s) => startups.push(s));
    return { record, instance, startups };
  }
  async function observeAndPublish(
    t: ReturnType<typeof setup>,
    record: PodRecord,
    instance: FakeInstance,
  ) {
    observe(t.ctx, record, observed(instance));
    refreshState(t.ctx, record);
    await t.publisher.publish(record);
  }

  it("breaks the first Ready down once: an Event in one line and the listeners", async () => {
    const t = setup();
    const { record, instance, startups } = start(t, "uid-s1");
    await t.publisher.publish(record);
    expect(startups).toEqual([]);
    report(t, instance, running(1));
    t.clock.now = T0 + 31_000;
    await observeAndPublish(t, record, instance);
    expect(startups).toHaveLength(1);
    expect(startups[0]?.pod).toBe("default/pod-uid-s1");
    expect(startups[0]?.breakdown.phases.map((p) => [p.phase, p.seconds])).toEqual([
      ["schedule", 0.5],
      ["admit", 0.5],
      ["launch", 1],
      ["boot", 20],
      ["pull", 5],
      ["start", 1],
      ["ready", 5],
    ]);
    const events = t.changes.flatMap((c) => c.events ?? []);
    expect(events.filter((e) => e.reason === "StartupTimes")).toEqual([
      {
        type: "Normal",
        reason: "StartupTimes",
        message:
          "Ready 33.0 s after creation: scheduled 0.5 s, admitted 0.5 s, RunInstances 1.0 s, host boot 20.0 s, image pull 5.0 s, container start 1.0 s, ready 5.0 s",
      },
    ]);
    // Ready again on a later report: no second start-up.
    report(t, instance, running(2));
    await observeAndPublish(t, record, instance);
    expect(startups).toHaveLength(1);
  });

  it("no start-up for a Pod Ready before this process saw it (a vnode restart), nor after a restart", async () => {
    const t = setup();
    const adopted = start(t, "uid-s2");
    adopted.record.pod.status = {
      phase: "Running",
      conditions: [{ type: "Ready", status: "True" }],
    };
    report(t, adopted.instance, running(3));
    await observeAndPublish(t, adopted.record, adopted.instance);
    const restarted = start(t, "uid-s3");
    report(t, restarted.instance, running(4, 1));
    await observeAndPublish(t, restarted.record, restarted.instance);
    // Both Ready: what holds the start-up back is that it is none.
    for (const uid of ["uid-s2", "uid-s3"]) {
      const last = t.changes.filter((c) => c.pod.metadata?.uid === uid).at(-1);
      expect(last?.status.conditions?.find((c) => c.type === "Ready")?.status, uid).toBe("True");
    }
    expect([...adopted.startups, ...restarted.startups]).toEqual([]);
    expect(t.changes.flatMap((c) => c.events ?? []).map((e) => e.reason)).not.toContain(
      "StartupTimes",
    );
  });
});

describe("StatusPublisher Spot signals", () => {
  const at = (ms: number) => new Date(T0 + ms).toISOString();
  function hostReport(seq: number, extra: Partial<ExitReport> = {}): ExitReport {
    return {
      v: 1,
      seq,
      time: at(30_000),
      final: false,
      containers: [
        { name: "app", init: false, state: "running", restarts: 0, containerID: "abc123" },
      ],
      ...extra,
    } as ExitReport;
  }
  async function step(
    t: ReturnType<typeof setup>,
    record: PodRecord,
    instance: FakeInstance,
    r: ExitReport,
  ) {
    tagReport(instance, r);
    observe(t.ctx, record, observed(instance));
    refreshState(t.ctx, record);
    await t.publisher.publish(record);
  }

  it("says the first Spot notice once: a Warning Event with the mark's message, and the listeners with the delay from the host's sight", async () => {
    const t = setup();
    const { record, instance } = launched(t, "uid-spot");
    const signals: SpotSignal[] = [];
    t.publisher.onSpotSignal((s) => signals.push(s));
    await step(t, record, instance, hostReport(1));
    expect(signals).toEqual([]);
    const notice = hostReport(2, {
      stopRequested: true,
      stopRequestedAt: at(40_000),
      interruption: { kind: "spot", action: "terminate", time: at(160_000) },
    });
    t.clock.now = T0 + 40_750;
    await step(t, record, instance, notice);
    await step(t, record, instance, { ...notice, seq: 3 });
    expect(signals).toEqual([
      {
        podUid: "uid-spot",
        pod: "default/pod-uid-spot",
        namespace: "default",
        kind: "interruption",
        noticeToMarkSeconds: 0.75,
      },
    ]);
    const events = t.changes.flatMap((c) => c.events ?? []);
    expect(events.filter((e) => e.reason === "SpotInterruption")).toEqual([
      {
        type: "Warning",
        reason: "SpotInterruption",
        message: `EC2 is reclaiming the Spot instance at ${at(160_000)}: its host supervisor is stopping the containers within the two-minute warning`,
      },
    ]);
    const last = t.changes.at(-1)?.status;
    expect(last?.conditions?.find((c) => c.type === "DisruptionTarget")?.status).toBe("True");
  });

  it("does not say it again for a Pod whose stored status already carries the mark (a restarted vnode)", async () => {
    const t = setup();
    const { record, instance } = launched(t, "uid-spot2");
    record.pod.status = {
      phase: "Running",
      conditions: [
        {
          type: "DisruptionTarget",
          status: "True",
          reason: "SpotInterruption",
          lastTransitionTime: new Date(T0),
        },
      ],
    };
    const signals: SpotSignal[] = [];
    t.publisher.onSpotSignal((s) => signals.push(s));
    await step(
      t,
      record,
      instance,
      hostReport(2, { stopRequested: true, interruption: { kind: "spot", action: "terminate" } }),
    );
    expect(signals).toEqual([]);
    expect(t.changes.flatMap((c) => c.events ?? []).map((e) => e.reason)).not.toContain(
      "SpotInterruption",
    );
  });

  it("says a rebalance recommendation once, as a Normal Event and to the listeners, and leaves the Pod as it is", async () => {
    const t = setup();
    const { record, instance } = launched(t, "uid-rebalance");
    const signals: SpotSignal[] = [];
    t.publisher.onSpotSignal((s) => signals.push(s));
    await step(t, record, instance, hostReport(1, { rebalance: { time: at(10_000) } }));
    await step(t, record, instance, hostReport(2, { rebalance: { time: at(10_000) } }));
    expect(signals.map((s) => s.kind)).toEqual(["rebalance"]);
    const events = t.changes.flatMap((c) => c.events ?? []);
    expect(events.filter((e) => e.reason === "RebalanceRecommendation")).toHaveLength(1);
    expect(events.find((e) => e.reason === "RebalanceRecommendation")?.message).toContain(
      instance.InstanceId,
    );
    const status = t.changes.at(-1)?.status;
    expect(status?.phase).toBe("Running");
    expect(status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
    expect(status?.conditions?.some((c) => c.type === "DisruptionTarget")).toBe(false);
  });
});
