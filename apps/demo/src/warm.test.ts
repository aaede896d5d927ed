import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { InstanceView, PodView, StartupEventView } from "./model.js";
import { iso, pod, snapshot } from "./testing/fixtures.js";
import {
  COLD_INSTANCE_TYPE,
  parseStartupLine,
  poolCounts,
  poolHostsLeft,
  quantiles,
  ROUND_LABEL,
  START_LABEL,
  type StartSide,
  startSample,
  vnodeToStartedMs,
  WARM_INSTANCE_TYPE,
  WARM_POOL_ENTRY,
  type WarmPlan,
  WarmPoolRun,
  warmBenchRows,
  warmFigures,
  warmPodList,
  warmSummaryLines,
} from "./warm.js";

const WARM_LINE =
  "Ready 4.2 s after creation: scheduled 0.0 s, admitted 0.1 s, StartInstances (warm pool) 0.3 s, host boot 1.2 s, image pull 0.4 s, container start 0.7 s, ready 1.5 s";
const COLD_LINE =
  "Ready 12.0 s after creation: scheduled 0.0 s, admitted 0.2 s, RunInstances 0.6 s, host boot 6.0 s, image pull 2.0 s, container start 1.2 s, ready 2.0 s";

/** A pool host of the demo's entry. */
const host = (id: string, state: string, fields: Partial<InstanceView> = {}): InstanceView => ({
  id,
  state,
  podUid: undefined,
  stateReason: state === "stopped" ? "Client.InstanceInitiatedShutdown" : undefined,
  tags: { "nebula:pool": WARM_POOL_ENTRY },
  ...fields,
});

/** A comparison Pod created at 100 s, its container started and Ready at the given seconds. */
const comparisonPod = (
  side: StartSide,
  round: number,
  i: number,
  started?: number,
  ready?: number,
): PodView =>
  pod(`${side}-${round}-${i}`, {
    labels: { app: "warm-pool", [START_LABEL]: side, [ROUND_LABEL]: String(round) },
    phase: started === undefined ? "Pending" : "Running",
    createdAt: iso(100),
    readySince: ready === undefined ? undefined : iso(ready),
    containers: [
      {
        name: "app",
        init: false,
        ready: ready !== undefined,
        restarts: 0,
        runningSince: started === undefined ? undefined : iso(started),
        startedAt: started === undefined ? undefined : iso(started),
        waiting: undefined,
        terminated: undefined,
        lastExit: undefined,
      },
    ],
  });

const event = (p: PodView, message: string): StartupEventView => ({
  podUid: p.uid,
  podName: p.name,
  message,
});

const PLAN: WarmPlan = {
  rounds: 1,
  perSide: 2,
  readyTimeoutMs: 60_000,
  roundTimeoutMs: 60_000,
  settleTimeoutMs: 20_000,
};

describe("warmPodList", () => {
  it("the same Pods on each side, asking for the pool's type or the other one", () => {
    const list = warmPodList({ namespace: "ns", round: 2, perSide: 3 }) as {
      items: {
        metadata: {
          name: string;
          labels: Record<string, string>;
          annotations: Record<string, string>;
        };
        spec: { containers: { image: string }[]; nodeSelector: Record<string, string> };
      }[];
    };
    expect(list.items.map((p) => p.metadata.name)).toEqual([
      "warm-2-0",
      "warm-2-1",
      "warm-2-2",
      "cold-2-0",
      "cold-2-1",
      "cold-2-2",
    ]);
    const types = list.items.map((p) => p.metadata.annotations["nebula.dev/instance-type"]);
    expect(types).toEqual([
      ...Array(3).fill(WARM_INSTANCE_TYPE),
      ...Array(3).fill(COLD_INSTANCE_TYPE),
    ]);
    for (const p of list.items) {
      expect(p.metadata.labels[ROUND_LABEL]).toBe("2");
      expect(p.spec.containers[0]?.image).toBe("busybox");
      expect(p.spec.nodeSelector).toEqual({ type: "virtual-kubelet" });
    }
  });
});

describe("poolCounts", () => {
  it("counts the entry's free hosts: stopped by themselves are ready, the rest on their way", () => {
    const instances = [
      host("i-1", "stopped"),
      host("i-2", "running"),
      host("i-3", "pending"),
      // Stopped by someone else: not prepared.
      host("i-4", "stopped", { stateReason: "Client.UserInitiatedShutdown" }),
      // Taken by a Pod.
      host("i-5", "stopped", { podUid: "u" }),
      // Another entry's, and a Pod's own instance.
      host("i-6", "stopped", { tags: { "nebula:pool": "other" } }),
      { id: "i-7", state: "running", podUid: "p", stateReason: undefined, tags: {} },
      host("i-8", "terminated"),
    ];
    expect(poolCounts(instances)).toEqual({ ready: 1, preparing: 2 });
    expect(poolHostsLeft(instances)).toBe(5);
  });
});

describe("parseStartupLine", () => {
  it("reads the total, the phases and whether the host came from the pool", () => {
    expect(parseStartupLine(WARM_LINE)).toEqual({
      totalSeconds: 4.2,
      warm: true,
      phases: {
        schedule: 0,
        admit: 0.1,
        launch: 0.3,
        boot: 1.2,
        pull: 0.4,
        start: 0.7,
        ready: 1.5,
      },
    });
    expect(parseStartupLine(COLD_LINE)?.warm).toBe(false);
    expect(parseStartupLine("Ready")).toEqual({ totalSeconds: undefined, warm: false, phases: {} });
    expect(parseStartupLine("Launched i-123")).toBeUndefined();
  });

  it("never throws, whatever the text", () => {
    fc.assert(fc.property(fc.string(), (text) => void parseStartupLine(text)));
  });

  it("created → container started is the phases up to the container's start", () => {
    expect(vnodeToStartedMs(parseStartupLine(WARM_LINE))).toBeCloseTo(2700);
    expect(vnodeToStartedMs(parseStartupLine("Ready 3.0 s after creation: ready 3.0 s"))).toBe(
      undefined,
    );
  });
});

describe("quantiles", () => {
  it("nearest rank: p50 the lower middle, p99 the largest below 100 samples", () => {
    expect(quantiles([3000, 1000, 2000])).toEqual({ n: 3, p50Ms: 2000, p99Ms: 3000 });
    expect(quantiles([4, 1, 3, 2])).toEqual({ n: 4, p50Ms: 2, p99Ms: 4 });
    expect(quantiles([undefined, Number.NaN])).toEqual({ n: 0, p50Ms: null, p99Ms: null });
    const hundred = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(quantiles(hundred)).toEqual({ n: 100, p50Ms: 50, p99Ms: 99 });
  });
});

describe("startSample", () => {
  it("measures from the Pod's creation to its container's start and its Ready condition", () => {
    const p = comparisonPod("warm", 1, 0, 104, 106);
    expect(startSample(p, [event(p, WARM_LINE)])).toMatchObject({
      pod: "warm-1-0",
      side: "warm",
      round: 1,
      toRunningMs: 4000,
      toReadyMs: 6000,
      line: { warm: true, totalSeconds: 4.2 },
    });
    expect(startSample(pod("job-completes"), [])).toBeUndefined();
  });
});

describe("WarmPoolRun", () => {
  it("waits for the pool and two of the vnode's polls, creates, measures, deletes, judges", () => {
    const run = new WarmPoolRun(PLAN);
    run.observe(snapshot(10, { instances: [host("i-1", "stopped"), host("i-2", "running")] }));
    expect(run.next("ns")).toBeUndefined();
    expect(run.judge()).toEqual({ observed: "round 1: waiting for the pool", ok: false });
    const ready = [host("i-1", "stopped"), host("i-2", "stopped")];
    run.observe(snapshot(11, { instances: ready, vnodePolls: 5 }));
    run.observe(snapshot(12, { instances: ready, vnodePolls: 6 }));
    // One poll since: the vnode may have listed the hosts before they stopped.
    expect(run.next("ns")).toBeUndefined();
    run.observe(snapshot(20, { instances: ready, vnodePolls: 7 }));
    const action = run.next("ns");
    expect(action).toMatchObject({ kind: "create", round: 1 });
    // Until the caller says the Pods were created, the action stays.
    expect(run.next("ns")?.kind).toBe("create");
    run.created();
    expect(run.next("ns")).toBeUndefined();

    const warm = [comparisonPod("warm", 1, 0, 103, 104), comparisonPod("warm", 1, 1, 103, 105)];
    const cold = [comparisonPod("cold", 1, 0, 110, 112), comparisonPod("cold", 1, 1)];
    const events = [...warm.map((p) => event(p, WARM_LINE)), event(cold[0] as PodView, COLD_LINE)];
    run.observe(snapshot(30, { pods: [...warm, ...cold], startupEvents: events }));
    expect(run.next("ns")).toBeUndefined();
    const done = [comparisonPod("cold", 1, 1, 114, 116)];
    run.observe(
      snapshot(31, {
        pods: [...warm, cold[0] as PodView, ...done],
        startupEvents: [...events, event(done[0] as PodView, COLD_LINE)],
      }),
    );
    expect(run.next("ns")).toEqual({ kind: "delete", round: 1 });
    expect(run.next("ns")).toBeUndefined();
    const verdict = run.judge();
    expect(verdict.ok).toBe(true);
    expect(verdict.observed).toBe(
      "2 Pods took a warm-pool host (StartInstances), 2 launched cold (RunInstances); created → container running p50 warm 3 s, cold 10 s",
    );
    const f = run.figures();
    expect(f.toRunning).toEqual({
      warm: { n: 2, p50Ms: 3000, p99Ms: 3000 },
      cold: { n: 2, p50Ms: 10_000, p99Ms: 14_000 },
      coldOverWarm: 3.33,
    });
    expect(f.phases.warm.boot).toBeCloseTo(1.2);
    expect(f.phases.cold.boot).toBeCloseTo(6);
    const notes = run.takeNotes();
    expect(notes[0]).toContain("1/2 hosts ready, 1 preparing");
    expect(notes.some((n) => n.includes("4/4 Pods running, Ready and broken down"))).toBe(true);
    expect(run.takeNotes()).toEqual([]);
  });

  it("waits for the other Pods' start-up to settle, at most settleTimeoutMs", () => {
    const run = new WarmPoolRun(PLAN);
    const ready = [host("i-1", "stopped"), host("i-2", "stopped")];
    const starting = pod("job-completes", { reason: "ContainerCreating" });
    const stuck = pod("image-unavailable", { reason: "ImagePullBackOff" });
    run.observe(snapshot(0, { instances: ready, vnodePolls: 0, pods: [starting, stuck] }));
    run.observe(snapshot(1, { instances: ready, vnodePolls: 2, pods: [starting, stuck] }));
    expect(run.next("ns")).toBeUndefined();
    // The image-unavailable Pod never starts: it does not hold the comparison back.
    run.observe(snapshot(2, { instances: ready, vnodePolls: 2, pods: [stuck] }));
    expect(run.next("ns")?.kind).toBe("create");

    const impatient = new WarmPoolRun(PLAN);
    impatient.observe(snapshot(0, { instances: ready, vnodePolls: 0, pods: [starting] }));
    impatient.observe(snapshot(10, { instances: ready, vnodePolls: 2, pods: [starting] }));
    expect(impatient.next("ns")).toBeUndefined();
    impatient.observe(snapshot(21, { instances: ready, vnodePolls: 3, pods: [starting] }));
    expect(impatient.next("ns")?.kind).toBe("create");
  });

  it("a Pod meant for the pool that launched cold is a miss: reported, left out, not ok", () => {
    const run = new WarmPoolRun({ ...PLAN, perSide: 1 });
    const ready = [host("i-1", "stopped")];
    run.observe(snapshot(0, { instances: ready, vnodePolls: 0 }));
    run.observe(snapshot(1, { instances: ready, vnodePolls: 2 }));
    run.next("ns");
    run.created();
    const warm = comparisonPod("warm", 1, 0, 110, 112);
    const cold = comparisonPod("cold", 1, 0, 110, 112);
    run.observe(
      snapshot(20, {
        pods: [warm, cold],
        startupEvents: [event(warm, COLD_LINE), event(cold, COLD_LINE)],
      }),
    );
    run.next("ns");
    const verdict = run.judge();
    expect(verdict.ok).toBe(false);
    expect(verdict.observed).toContain("1 Pod meant for the pool launched cold");
    expect(run.figures()).toMatchObject({ misses: 1, toRunning: { warm: { n: 0 } } });
  });

  it("fails with what it saw when the pool is not ready in time, or a round does not start", () => {
    const slow = new WarmPoolRun(PLAN);
    slow.observe(snapshot(0, { instances: [host("i-1", "running")] }));
    slow.observe(snapshot(61, { instances: [host("i-1", "stopped")] }));
    expect(slow.judge()).toEqual({
      observed: "round 1: the pool had 1/2 hosts ready (0 preparing) after 61 s",
      ok: false,
    });
    expect(slow.takeNotes().at(-1)).toContain("warm pool comparison: round 1: the pool had");

    const stalled = new WarmPoolRun({ ...PLAN, perSide: 1 });
    const ready = [host("i-1", "stopped")];
    stalled.observe(snapshot(0, { instances: ready, vnodePolls: 0 }));
    stalled.observe(snapshot(1, { instances: ready, vnodePolls: 2 }));
    stalled.next("ns");
    stalled.created();
    stalled.observe(snapshot(62, { pods: [comparisonPod("warm", 1, 0)] }));
    expect(stalled.judge().observed).toBe(
      "round 1: after 61 s, 0/2 Pods were running, Ready and broken down (1 seen)",
    );
    const failing = new WarmPoolRun(PLAN);
    failing.fail("kubectl apply of round 1 failed: boom");
    expect(failing.judge()).toEqual({
      observed: "kubectl apply of round 1 failed: boom",
      ok: false,
    });
  });

  it("runs its rounds one after the other, the next waiting for the pool again", () => {
    const run = new WarmPoolRun({ ...PLAN, rounds: 2, perSide: 1 });
    const ready = [host("i-1", "stopped")];
    for (const round of [1, 2]) {
      const t = round * 100;
      run.observe(snapshot(t, { instances: ready, vnodePolls: t }));
      run.observe(snapshot(t + 1, { instances: ready, vnodePolls: t + 2 }));
      expect(run.next("ns")).toMatchObject({ kind: "create", round });
      run.created();
      const pods = (["warm", "cold"] as const).map((side) =>
        comparisonPod(side, round, 0, 105, 106),
      );
      run.observe(
        snapshot(t + 10, {
          pods,
          startupEvents: pods.map((p) =>
            event(p, p.name.startsWith("warm") ? WARM_LINE : COLD_LINE),
          ),
        }),
      );
      expect(run.next("ns")).toEqual({ kind: "delete", round });
    }
    expect(run.judge().ok).toBe(true);
    expect(run.figures().toRunning.warm.n).toBe(2);
  });
});

describe("the comparison's figures", () => {
  const samples = [
    {
      pod: "warm-1-0",
      side: "warm",
      round: 1,
      toRunningMs: 2000,
      toReadyMs: 3000,
      line: parseStartupLine(WARM_LINE),
    },
    {
      pod: "cold-1-0",
      side: "cold",
      round: 1,
      toRunningMs: 9000,
      toReadyMs: 10_000,
      line: parseStartupLine(COLD_LINE),
    },
  ] as const;

  it("side by side in the summary, with the ratio of the p50s", () => {
    const text = warmSummaryLines(warmFigures(samples, 1, 1)).join("\n");
    expect(text).toContain("1 round of 1 + 1");
    expect(text).toContain(
      "Pod created -> container running (status):   warm p50 2 s, p99 2 s (n=1); cold p50 9 s, p99 9 s (n=1); cold/warm 4.5×",
    );
    expect(text).toContain("created -> Ready (vnode's StartupTimes):     warm p50 4.2 s");
    expect(text).toContain(
      "by phase (means, s): warm schedule 0.0, admit 0.1, launch 0.3, boot 1.2",
    );
  });

  it("as bench rows: warm against cold of the same run, ratio warm / cold", () => {
    const rows = warmBenchRows(warmFigures(samples, 1, 1));
    expect(rows.map((r) => r.figure)).toEqual([
      "Pod created → container running (status, whole s), p50, warm pool (n=1; the local world)",
      "Pod created → container running (status, whole s), p99, warm pool (n=1; the local world)",
      "Pod created → Ready (vnode's StartupTimes), p50, warm pool (n=1; the local world)",
      "Pod created → Ready (vnode's StartupTimes), p99, warm pool (n=1; the local world)",
    ]);
    expect(rows[0]).toMatchObject({
      package: "@nebula/demo-app",
      value: 2,
      unit: "s",
      baseline: 9,
      ratio: 0.22,
      goal: "≤ 0.33× (the warm path ≥ 3× faster)",
    });
    expect(warmBenchRows(warmFigures([], 3, 1))).toEqual([]);
  });
});
