import { describe, expect, it } from "vitest";
import { CHANNEL_PODS } from "./channel.js";
import {
  DELETE_POD,
  LOGS_EXPECTED,
  LOGS_POD,
  SCENARIO_IDS,
  Tracker,
  type Verdict,
} from "./scenarios.js";
import { instance, iso, pod, snapshot, workload } from "./testing/fixtures.js";

const byId = (verdicts: Verdict[]) => new Map(verdicts.map((v) => [v.id, v]));

describe("Tracker", () => {
  it("before any snapshot every scenario is 'not started' and not ok", () => {
    const verdicts = new Tracker(2).verdicts();
    expect(verdicts.map((v) => v.id)).toEqual([...SCENARIO_IDS]);
    expect(verdicts.every((v) => !v.ok && v.observed === "not started")).toBe(true);
  });

  it("prints-and-exits: ok once every replica reports an exit 0 Completed, and stays ok", () => {
    const tracker = new Tracker(2);
    const labels = { app: "prints-and-exits" };
    const exited = { code: 0, reason: "Completed", finishedAt: iso(8) };
    tracker.observe(
      snapshot(10, {
        pods: [
          pod("prints-and-exits-a", {
            labels,
            phase: "Running",
            restarts: 1,
            lastExit: exited,
            reason: "CrashLoopBackOff",
          }),
          pod("prints-and-exits-b", { labels, phase: "Running" }),
        ],
      }),
    );
    let verdict = byId(tracker.verdicts()).get("prints-and-exits");
    expect(verdict?.ok).toBe(false);
    expect(verdict?.observed).toContain("1/2 replicas report their exit (exit 0, Completed)");
    tracker.observe(
      snapshot(12, {
        pods: [
          pod("prints-and-exits-a", { labels, phase: "Running", restarts: 1, lastExit: exited }),
          pod("prints-and-exits-b", {
            labels,
            phase: "Running",
            exit: { ...exited, finishedAt: iso(11) },
          }),
        ],
      }),
    );
    verdict = byId(tracker.verdicts()).get("prints-and-exits");
    expect(verdict?.ok).toBe(true);
    // The Pods go away during the clean-up: the verdict keeps what was shown.
    tracker.observe(snapshot(30));
    expect(byId(tracker.verdicts()).get("prints-and-exits")?.ok).toBe(true);
    // Exits seen 2 s (a) and 1 s (b) after they happened.
    expect([...tracker.latencies().exitToStatus].sort()).toEqual([1000, 2000]);
  });

  it("prints-and-exits: an exit other than 0 is not what the sample shows", () => {
    const tracker = new Tracker(1);
    tracker.observe(
      snapshot(5, {
        pods: [
          pod("prints-and-exits-a", {
            labels: { app: "prints-and-exits" },
            lastExit: { code: 1, reason: "Error", finishedAt: iso(4) },
          }),
        ],
      }),
    );
    expect(byId(tracker.verdicts()).get("prints-and-exits")?.ok).toBe(false);
  });

  it("workloads: each judged on its Available condition and reasons", () => {
    const tracker = new Tracker(1);
    tracker.observe(
      snapshot(5, {
        workloads: [
          workload("Workload", "shop", {
            available: "True",
            reason: "AvailablePlacementFound",
            reasons: ["InstanceCrashing"],
          }),
          workload("WorkloadDeployment", "shop-healthy", { available: "True", readyReplicas: 1 }),
          workload("WorkloadDeployment", "shop-crashing", {
            available: "False",
            reason: "Provisioning",
          }),
        ],
      }),
    );
    const verdicts = byId(tracker.verdicts());
    expect(verdicts.get("workload")?.ok).toBe(true);
    expect(verdicts.get("workload-healthy")?.ok).toBe(true);
    expect(verdicts.get("workload-crashing")?.ok).toBe(false);
    expect(verdicts.get("workload-crashing")?.observed).toBe(
      "Available=False, Provisioning (0/1 ready)",
    );
  });

  it("a Workload without a status yet is not ok", () => {
    const tracker = new Tracker(1);
    tracker.observe(snapshot(1, { workloads: [workload("Workload", "shop")] }));
    expect(byId(tracker.verdicts()).get("workload")?.observed).toBe("no status yet");
  });

  it("image: Pending with an image pull reason", () => {
    const tracker = new Tracker(1);
    tracker.observe(
      snapshot(1, { pods: [pod("image-unavailable", { reason: "ContainerCreating" })] }),
    );
    expect(byId(tracker.verdicts()).get("image-unavailable")?.ok).toBe(false);
    tracker.observe(
      snapshot(2, { pods: [pod("image-unavailable", { reason: "ImagePullBackOff" })] }),
    );
    expect(byId(tracker.verdicts()).get("image-unavailable")).toMatchObject({
      ok: true,
      observed: "Pending, waiting ImagePullBackOff",
    });
  });

  it("job and OOM: ok only once the Pod is terminal as expected and its instance terminated", () => {
    const tracker = new Tracker(1);
    const job = pod("job-completes", {
      phase: "Succeeded",
      exit: { code: 0, reason: "Completed", finishedAt: iso(9) },
    });
    const oom = pod("oom-killed", {
      phase: "Failed",
      exit: { code: 137, reason: "OOMKilled", finishedAt: iso(9) },
    });
    tracker.observe(
      snapshot(10, {
        pods: [job, oom],
        instances: [instance("job-completes", "stopping"), instance("oom-killed", "running")],
      }),
    );
    let verdicts = byId(tracker.verdicts());
    expect(verdicts.get("job-completes")?.ok).toBe(false);
    expect(verdicts.get("job-completes")?.observed).toContain("instance not terminated yet");
    tracker.observe(
      snapshot(14, {
        pods: [job, oom],
        instances: [instance("job-completes", "terminated"), instance("oom-killed", "terminated")],
      }),
    );
    verdicts = byId(tracker.verdicts());
    expect(verdicts.get("job-completes")).toMatchObject({
      ok: true,
      observed: "Succeeded (exit 0 Completed); instance terminated 4.0 s after",
    });
    expect(verdicts.get("oom-killed")?.ok).toBe(true);
    expect(tracker.latencies().terminalToTerminated).toEqual([4000, 4000]);
  });

  it("logs: read only once the instance is terminated, ok when kubectl logs printed the container's output", () => {
    const tracker = new Tracker(1);
    const job = pod(LOGS_POD, {
      phase: "Succeeded",
      exit: { code: 0, reason: "Completed", finishedAt: iso(9) },
    });
    tracker.observe(snapshot(10, { pods: [job], instances: [instance(LOGS_POD, "stopping")] }));
    expect(tracker.logsWanted()).toBe(false);
    expect(byId(tracker.verdicts()).get("logs-after-terminated")).toMatchObject({
      ok: false,
      observed: "waiting for its instance to be terminated (Succeeded)",
    });
    tracker.observe(snapshot(12, { pods: [job], instances: [instance(LOGS_POD, "terminated")] }));
    expect(tracker.logsWanted()).toBe(true);
    // Lines still on their way: not ok, and asked again.
    tracker.markLogs("working\n");
    expect(byId(tracker.verdicts()).get("logs-after-terminated")?.ok).toBe(false);
    expect(tracker.logsWanted()).toBe(true);
    tracker.markLogs(LOGS_EXPECTED);
    expect(tracker.logsWanted()).toBe(false);
    expect(byId(tracker.verdicts()).get("logs-after-terminated")).toMatchObject({
      ok: true,
      observed: 'kubectl logs printed "working\\ndone\\n" after the instance was terminated',
    });
  });

  it("a Pod that failed with another reason is not an OOM kill", () => {
    const tracker = new Tracker(1);
    tracker.observe(
      snapshot(10, {
        pods: [
          pod("oom-killed", {
            phase: "Failed",
            exit: { code: 1, reason: "Error", finishedAt: iso(9) },
          }),
        ],
        instances: [instance("oom-killed", "terminated")],
      }),
    );
    expect(byId(tracker.verdicts()).get("oom-killed")?.ok).toBe(false);
  });

  it("kubectl delete: ok when the instance is terminated no later than the Pod disappears", () => {
    const tracker = new Tracker(1);
    const running = pod(DELETE_POD, { phase: "Running" });
    tracker.observe(snapshot(1, { pods: [running], instances: [instance(DELETE_POD, "running")] }));
    expect(byId(tracker.verdicts()).get("kubectl-delete")?.observed).toBe(
      "waiting for it to run (Running)",
    );
    tracker.markDeleteRequested(snapshot(2).at, running.uid);
    expect(tracker.deleteRequested).toBe(true);
    tracker.observe(
      snapshot(5, {
        pods: [{ ...running, deleting: true }],
        instances: [instance(DELETE_POD, "terminated")],
      }),
    );
    expect(byId(tracker.verdicts()).get("kubectl-delete")?.ok).toBe(false);
    tracker.observe(snapshot(7, { instances: [instance(DELETE_POD, "terminated")] }));
    expect(byId(tracker.verdicts()).get("kubectl-delete")).toMatchObject({
      ok: true,
      observed: "deleted with kubectl; instance terminated after 3.0 s; Pod gone after 5.0 s",
    });
  });

  it("kubectl delete: a Pod gone before its instance is terminated is not ok", () => {
    const tracker = new Tracker(1);
    const running = pod(DELETE_POD, { phase: "Running" });
    tracker.observe(snapshot(1, { pods: [running], instances: [instance(DELETE_POD, "running")] }));
    tracker.markDeleteRequested(snapshot(1).at, running.uid);
    tracker.observe(snapshot(3, { instances: [instance(DELETE_POD, "running")] }));
    const verdict = byId(tracker.verdicts()).get("kubectl-delete");
    expect(verdict?.ok).toBe(false);
    expect(verdict?.observed).toContain("the Pod went before its instance");
  });

  it("event-channel: ok once every comparison Pod on both nodes Succeeded; each side's exit → shown apart", () => {
    const tracker = new Tracker(1);
    const done = (name: string, finished: number) =>
      pod(name, {
        phase: "Succeeded",
        exit: { code: 0, reason: "Completed", finishedAt: iso(finished) },
      });
    const running = (name: string) => pod(name, { phase: "Running" });
    const names = (side: string) =>
      Array.from({ length: CHANNEL_PODS }, (_, i) => `channel-${side}-${i}`);
    // At 20 s the "on" side shows every exit (1 s after each); "off" shows none yet.
    tracker.observe(
      snapshot(20, {
        pods: [...names("on").map((n) => done(n, 19)), ...names("off").map(running)],
      }),
    );
    let verdict = byId(tracker.verdicts()).get("event-channel");
    expect(verdict?.ok).toBe(false);
    expect(verdict?.observed).toBe(
      `on: ${CHANNEL_PODS}/${CHANNEL_PODS} Succeeded, exit → shown median 1.0 s, max 1.0 s; off: 0/${CHANNEL_PODS} Succeeded`,
    );
    // At 27 s "off" shows them, 8 s after the exits; the other Pods of the demo are neither side.
    tracker.observe(
      snapshot(27, {
        pods: [
          ...names("on").map((n) => done(n, 19)),
          ...names("off").map((n) => done(n, 19)),
          done("job-completes", 20),
        ],
      }),
    );
    verdict = byId(tracker.verdicts()).get("event-channel");
    expect(verdict?.ok).toBe(true);
    expect(tracker.latencies().channel).toEqual({
      on: names("on").map(() => 1000),
      off: names("off").map(() => 8000),
    });
    // A failed Pod on one side is not ok.
    const failing = new Tracker(1);
    failing.observe(
      snapshot(30, {
        pods: [
          ...names("on").map((n) => done(n, 19)),
          ...names("off").map((n, i) =>
            i === 0
              ? pod(n, { phase: "Failed", exit: { code: 1, reason: "Error", finishedAt: iso(19) } })
              : done(n, 19),
          ),
        ],
      }),
    );
    expect(byId(failing.verdicts()).get("event-channel")?.ok).toBe(false);
  });

  it("event-channel counts only the planned exit (code 0), not a kill by the clean-up", () => {
    const tracker = new Tracker(1);
    tracker.observe(
      snapshot(40, {
        pods: [
          pod("channel-on-0", {
            phase: "Failed",
            exit: { code: 137, reason: "Error", finishedAt: iso(39) },
          }),
          pod("channel-off-0", {
            phase: "Succeeded",
            exit: { code: 0, reason: "Completed", finishedAt: iso(30) },
          }),
        ],
      }),
    );
    expect(tracker.latencies().channel).toEqual({ on: [], off: [10_000] });
  });

  it("once the time runs out, a scenario not there is reported as it stood then, and can still get there", () => {
    const tracker = new Tracker(1);
    const names = (side: string) =>
      Array.from({ length: CHANNEL_PODS }, (_, i) => `channel-${side}-${i}`);
    const done = (name: string) =>
      pod(name, {
        phase: "Succeeded",
        exit: { code: 0, reason: "Completed", finishedAt: iso(19) },
      });
    tracker.observe(
      snapshot(20, {
        pods: [...names("on").map(done), ...names("off").map((n) => pod(n, { phase: "Running" }))],
      }),
    );
    tracker.close();
    // The clean-up deletes every Pod: the report keeps what the deadline saw.
    tracker.observe(
      snapshot(25, {
        pods: [...names("on"), ...names("off")].map((n) =>
          pod(n, { phase: "Running", deleting: true }),
        ),
      }),
    );
    const verdict = byId(tracker.verdicts()).get("event-channel");
    expect(verdict?.ok).toBe(false);
    expect(verdict?.observed).toMatch(
      new RegExp(
        `^on: ${CHANNEL_PODS}/${CHANNEL_PODS} Succeeded.*; off: 0/${CHANNEL_PODS} Succeeded$`,
      ),
    );
    // A scenario that gets there during the clean-up is ok.
    tracker.observe(snapshot(30, { pods: [...names("on"), ...names("off")].map(done) }));
    expect(byId(tracker.verdicts()).get("event-channel")?.ok).toBe(true);
  });

  it("a blocked scenario says why and is never ok", () => {
    const tracker = new Tracker(1);
    tracker.block("workload", "nebula-operator is not usable: exited with code 1");
    tracker.block("workload", "a second reason is ignored");
    tracker.observe(
      snapshot(1, {
        workloads: [
          workload("Workload", "shop", { available: "True", reasons: ["InstanceCrashing"] }),
        ],
      }),
    );
    expect(byId(tracker.verdicts()).get("workload")).toMatchObject({
      ok: false,
      observed: "could not run: nebula-operator is not usable: exited with code 1",
    });
    expect(tracker.allOk()).toBe(false);
    // Nothing is waited for on its behalf.
    expect(tracker.pending()).not.toContain("workload");
    expect(tracker.pending()).toContain("prints-and-exits");
  });

  it("runs only the scenarios it is given; warm-pool is judged by its comparison", () => {
    const tracker = new Tracker(1, {
      scenarios: ["warm-pool", "job-completes"],
      warm: {
        rounds: 1,
        perSide: 3,
        readyTimeoutMs: 60_000,
        roundTimeoutMs: 60_000,
        settleTimeoutMs: 10_000,
      },
    });
    expect(tracker.scenarios).toEqual(["job-completes", "warm-pool"]);
    tracker.observe(snapshot(1));
    const verdicts = tracker.verdicts();
    expect(verdicts.map((v) => v.id)).toEqual(["job-completes", "warm-pool"]);
    expect(byId(verdicts).get("warm-pool")).toMatchObject({
      ok: false,
      observed: "round 1: waiting for the pool",
    });
    expect(byId(verdicts).get("warm-pool")?.expected).toContain(
      "3 Pods on t3.small take a ready warm-pool host (StartInstances) and 3 on t3.micro",
    );
    expect(tracker.warm).toBeDefined();
    expect(tracker.pending()).toEqual(["job-completes", "warm-pool"]);
    // Without the scenario there is no comparison.
    expect(new Tracker(1, { scenarios: ["job-completes"] }).warm).toBeUndefined();
  });
});
