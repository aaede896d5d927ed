import type { V1PodStatus } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type InstanceState,
  isSpotInterruptionMarked,
  toInstanceState,
  toPodStatus,
} from "./index.js";
import { b64, crashLooping, ec2, exited, NOW, pod, report, running } from "./test-fixtures.js";

const live = (rep: ReturnType<typeof report>) =>
  toInstanceState(ec2("running", { report: rep }), { now: NOW });
const condition = (status: V1PodStatus, type: string) =>
  status.conditions?.find((c) => c.type === type);

describe("toPodStatus", () => {
  it("takes started and ready from a report of probed containers, and keeps older reports ready while running", () => {
    const probed = (started: boolean, ready: boolean) =>
      toPodStatus(pod(), live(report(1, false, [{ ...running(), started, ready }])), { now: NOW });
    const starting = probed(false, false);
    expect(starting.containerStatuses?.[0]).toMatchObject({ started: false, ready: false });
    expect(condition(starting, "ContainersReady")?.status).toBe("False");
    expect(condition(starting, "Ready")?.status).toBe("False");
    const unready = probed(true, false);
    expect(unready.containerStatuses?.[0]).toMatchObject({ started: true, ready: false });
    expect(condition(unready, "Ready")).toMatchObject({
      status: "False",
      reason: "ContainersNotReady",
      message: "containers with unready status: [app]",
    });
    const ready = probed(true, true);
    expect(ready.containerStatuses?.[0]).toMatchObject({ started: true, ready: true });
    expect(condition(ready, "ContainersReady")?.status).toBe("True");
    expect(condition(ready, "Ready")?.status).toBe("True");
    // A report without the fields: running is started and ready, as before.
    const old = toPodStatus(pod(), live(report(1, false, [running()])), { now: NOW });
    expect(old.containerStatuses?.[0]).toMatchObject({ started: true, ready: true });
    expect(condition(old, "Ready")?.status).toBe("True");
  });

  it("shows a running, ready container with addresses, IDs and start time", () => {
    const status = toPodStatus(pod(), live(report(1, false, [running()])), { now: NOW });
    expect(status).toMatchObject({
      phase: "Running",
      hostIP: "10.0.1.23",
      hostIPs: [{ ip: "10.0.1.23" }],
      podIP: "10.0.1.23",
      podIPs: [{ ip: "10.0.1.23" }],
      startTime: new Date("2026-11-30T05:50:00Z"),
      qosClass: "BestEffort",
    });
    expect(status.containerStatuses).toEqual([
      {
        name: "app",
        image: "registry.example/app:1",
        imageID: "sha256:feed",
        containerID: "docker://abc123",
        restartCount: 0,
        ready: true,
        started: true,
        state: { running: { startedAt: new Date("2026-11-30T05:55:00Z") } },
      },
    ]);
    expect(status.conditions?.map((c) => [c.type, c.status, c.reason])).toEqual([
      ["PodScheduled", "True", undefined],
      ["PodReadyToStartContainers", "True", undefined],
      ["Initialized", "True", undefined],
      ["ContainersReady", "True", undefined],
      ["Ready", "True", undefined],
      // The durable record of the report the status was built from (see toPodStatus).
      ["nebula.dev/ExitReport", "True", "ExitReport"],
    ]);
    expect(condition(status, "nebula.dev/ExitReport")?.message).toBe("seq=1");
  });

  it("keeps a crash-looping Pod in phase Running, with the container waiting and not ready", () => {
    const status = toPodStatus(pod("Always"), live(report(4, false, [crashLooping(3)])), {
      now: NOW,
    });
    expect(status.phase).toBe("Running");
    expect(status.containerStatuses?.[0]).toMatchObject({
      ready: false,
      started: false,
      restartCount: 3,
      state: {
        waiting: {
          reason: "CrashLoopBackOff",
          message: "back-off 40s restarting failed container=app",
        },
      },
      lastState: { terminated: { exitCode: 1, reason: "Error" } },
    });
    expect(condition(status, "Ready")).toMatchObject({
      status: "False",
      reason: "ContainersNotReady",
      message: "containers with unready status: [app]",
    });
  });

  it.each([
    // restartPolicy, final report's exits, phase
    ["Always", [0], "Succeeded"],
    ["Always", [1], "Failed"],
    ["OnFailure", [0], "Succeeded"],
    ["OnFailure", [0, 2], "Failed"],
    ["Never", [0, 0], "Succeeded"],
    ["Never", [0, 1], "Failed"],
  ] as const)("restartPolicy %s, final exits %j → %s", (policy, codes, phase) => {
    const names = codes.map((_, i) => `c${i}`);
    const rep = report(
      5,
      true,
      codes.map((code, i) => exited(code, names[i])),
    );
    const status = toPodStatus(
      pod(
        policy,
        names.map((name) => ({ name })),
      ),
      live(rep),
      { now: NOW },
    );
    expect(status.phase).toBe(phase);
  });

  it.each([
    // restartPolicy, live (non-final) report's exits, phase: the kubelet's rules while restarts are possible
    ["Always", [0], "Running"],
    ["OnFailure", [0], "Succeeded"],
    ["OnFailure", [1], "Running"],
    ["Never", [1], "Failed"],
    ["Never", [0], "Succeeded"],
  ] as const)("restartPolicy %s, live exits %j → %s", (policy, codes, phase) => {
    const rep = report(
      5,
      false,
      codes.map((code) => exited(code)),
    );
    expect(toPodStatus(pod(policy), live(rep), { now: NOW }).phase).toBe(phase);
  });

  it("marks a finished Pod's conditions PodCompleted and copies the termination message", () => {
    const rep = report(6, true, [exited(0, "app", { messageB64: b64("all 42 rows exported\n") })]);
    const status = toPodStatus(pod("Never"), live(rep), { now: NOW });
    expect(status.phase).toBe("Succeeded");
    expect(status.containerStatuses?.[0]?.state?.terminated).toEqual({
      exitCode: 0,
      reason: "Completed",
      message: "all 42 rows exported\n",
      startedAt: new Date("2026-11-30T05:55:00Z"),
      finishedAt: new Date("2026-11-30T05:58:00Z"),
    });
    for (const type of ["ContainersReady", "Ready"]) {
      expect(condition(status, type)).toMatchObject({ status: "False", reason: "PodCompleted" });
    }
    expect(condition(status, "Initialized")).toMatchObject({
      status: "True",
      reason: "PodCompleted",
    });
  });

  it("shows a crash loop the supervisor gave up on as the last exit, not a back-off", () => {
    const rep = report(9, true, [crashLooping(5)]);
    const status = toPodStatus(pod("Always"), live(rep), { now: NOW });
    expect(status.phase).toBe("Failed");
    expect(status.containerStatuses?.[0]).toMatchObject({
      restartCount: 5,
      state: { terminated: { exitCode: 1, reason: "Error" } },
    });
    expect(status.containerStatuses?.[0]?.lastState).toBeUndefined();
  });

  it("keeps a final report's never-started container waiting with its reason, in a Failed Pod", () => {
    const rep = report(9, true, [
      {
        name: "app",
        init: false,
        state: "waiting",
        restarts: 0,
        reason: "ImagePullBackOff",
        messageB64: b64('failed to pull image "registry.example/app:1": not found'),
      },
    ]);
    const status = toPodStatus(pod("Always"), live(rep), { now: NOW });
    expect(status.phase).toBe("Failed");
    expect(status.containerStatuses?.[0]?.state).toEqual({
      waiting: {
        reason: "ImagePullBackOff",
        message: 'failed to pull image "registry.example/app:1": not found',
      },
    });
  });

  it("reports an OOM kill and a signal as the host saw them", () => {
    const rep = report(2, true, [
      exited(137, "app", { reason: "OOMKilled" }),
      exited(143, "side", { signal: 15 }),
    ]);
    const status = toPodStatus(pod("Never", [{ name: "app" }, { name: "side" }]), live(rep), {
      now: NOW,
    });
    expect(status.phase).toBe("Failed");
    expect(status.containerStatuses?.map((c) => c.state?.terminated)).toMatchObject([
      { exitCode: 137, reason: "OOMKilled" },
      { exitCode: 143, reason: "Error", signal: 15 },
    ]);
  });

  it("turns an instance lost without a report into Failed / ContainerStatusUnknown / 137", () => {
    const state = toInstanceState(ec2("terminated", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    const status = toPodStatus(pod("OnFailure"), state, { now: NOW });
    expect(status.phase).toBe("Failed");
    expect(status.reason).toBe("SpotInterruption");
    expect(status.message).toContain("vanished without reporting");
    expect(status.containerStatuses?.[0]?.state).toEqual({
      terminated: {
        exitCode: 137,
        reason: "ContainerStatusUnknown",
        message:
          "The instance vanished without reporting this container's exit: instance i-0abc was reclaimed by a Spot interruption (Server.SpotInstanceTermination: detail) and vanished without reporting its final container state.",
      },
    });
  });

  it("marks a Pod Spot took as a disruption target (not its own failure), once, and keeps the mark's time", () => {
    const lost = toInstanceState(ec2("terminated", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    const status = toPodStatus(pod("OnFailure"), lost, { now: NOW });
    expect(condition(status, "DisruptionTarget")).toEqual({
      type: "DisruptionTarget",
      status: "True",
      lastTransitionTime: NOW,
      reason: "SpotInterruption",
      message: "EC2 reclaimed the Spot instance: the Pod was interrupted, it did not fail",
    });
    // Stopped by Spot after the host's final report (the containers' exits kept): marked too.
    const rep = { ...report(4, true, [exited(143, "app")]), stopRequested: true };
    const stopped = toInstanceState(
      ec2("stopped", { code: "Server.SpotInstanceShutdown", report: rep }),
      { now: NOW },
    );
    const stoppedStatus = toPodStatus(pod("Never"), stopped, { now: NOW });
    expect(stoppedStatus.reason).toBe("SpotInterruption");
    expect(condition(stoppedStatus, "DisruptionTarget")?.status).toBe("True");
    // Later mappings, after a JSON round trip through the API server, keep one mark and its time.
    const stored = { ...pod("OnFailure"), status: JSON.parse(JSON.stringify(status)) };
    const later = new Date(NOW.getTime() + 60_000);
    const again = toPodStatus(stored, lost, { now: later });
    expect(again.conditions?.filter((c) => c.type === "DisruptionTarget")).toHaveLength(1);
    expect(new Date(condition(again, "DisruptionTarget")?.lastTransitionTime ?? 0)).toEqual(NOW);
    // A DisruptionTarget another component wrote (an eviction) is kept as it is.
    const evicted = {
      type: "DisruptionTarget",
      status: "True",
      reason: "EvictionByEvictionAPI",
      lastTransitionTime: NOW.toISOString(),
    };
    const running1 = live(report(1, false, [running()]));
    // As read back from the API server (the time a JSON string).
    const withEviction = JSON.parse(
      JSON.stringify({ ...pod("OnFailure"), status: { phase: "Running", conditions: [evicted] } }),
    );
    expect(
      condition(toPodStatus(withEviction, running1, { now: NOW }), "DisruptionTarget"),
    ).toEqual(evicted);
    // Another loss, or a crash, is no disruption target.
    const internal = toInstanceState(ec2("stopped", { code: "Server.InternalError" }), {
      now: NOW,
    });
    expect(
      condition(toPodStatus(pod("OnFailure"), internal, { now: NOW }), "DisruptionTarget"),
    ).toBeUndefined();
    const crashed = toPodStatus(pod("Never"), live(report(2, true, [exited(1, "app")])), {
      now: NOW,
    });
    expect(condition(crashed, "DisruptionTarget")).toBeUndefined();
  });

  it("isSpotInterruptionMarked answers for the mark toPodStatus writes, and for nothing else", () => {
    const lost = toInstanceState(ec2("terminated", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    const status = toPodStatus(pod("OnFailure"), lost, { now: NOW });
    expect(isSpotInterruptionMarked(status)).toBe(true);
    // As read back from the API server.
    expect(isSpotInterruptionMarked(JSON.parse(JSON.stringify(status)))).toBe(true);
    // Not ours (an eviction's), not true, another condition, not a status: false.
    const cond = (c: object) => ({ phase: "Running", conditions: [c] });
    expect(
      isSpotInterruptionMarked(
        cond({ type: "DisruptionTarget", status: "True", reason: "EvictionByEvictionAPI" }),
      ),
    ).toBe(false);
    expect(
      isSpotInterruptionMarked(
        cond({ type: "DisruptionTarget", status: "False", reason: "SpotInterruption" }),
      ),
    ).toBe(false);
    expect(
      isSpotInterruptionMarked(cond({ type: "Ready", status: "True", reason: "SpotInterruption" })),
    ).toBe(false);
    expect(
      isSpotInterruptionMarked(
        toPodStatus(pod("Never"), live(report(1, false, [running()])), { now: NOW }),
      ),
    ).toBe(false);
    for (const junk of [
      undefined,
      null,
      7,
      "x",
      [],
      { conditions: "no" },
      { conditions: [null, 3] },
    ]) {
      expect(isSpotInterruptionMarked(junk)).toBe(false);
    }
    fc.assert(fc.property(fc.anything(), (x) => typeof isSpotInterruptionMarked(x) === "boolean"));
  });

  it("over any run of observations, DisruptionTarget is there exactly while Spot is the Pod's reason, once, its time fixed (property)", () => {
    const step = fc.oneof(
      fc
        .nat({ max: 20 })
        .map((seq) => ({ state: "running", report: report(seq, false, [running()]) })),
      fc
        .nat({ max: 20 })
        .map((seq) => ({ state: "stopped", report: report(seq, true, [exited(0)]) })),
      fc.constantFrom(
        { state: "terminated", code: "Server.SpotInstanceTermination" },
        { state: "stopped", code: "Server.SpotInstanceShutdown" },
        { state: "stopped", code: "Server.InternalError" },
        { state: "terminated", code: "Client.UserInitiatedShutdown" },
      ),
    );
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 10 }), (steps) => {
        let stored = pod("OnFailure");
        let state: InstanceState | undefined;
        let markedAt: string | undefined;
        steps.forEach((s, i) => {
          const now = new Date(NOW.getTime() + i * 1000);
          state = toInstanceState(ec2(s.state, s), { now, ...(state ? { previous: state } : {}) });
          // Stored and read back as the API server would.
          const status = JSON.parse(JSON.stringify(toPodStatus(stored, state, { now })));
          stored = { ...stored, status };
          const marks = (status.conditions ?? []).filter(
            (c: { type: string }) => c.type === "DisruptionTarget",
          );
          expect(marks.length).toBe(status.reason === "SpotInterruption" ? 1 : 0);
          if (markedAt !== undefined && marks.length > 0) {
            expect(marks[0]?.lastTransitionTime).toBe(markedAt);
          }
          markedAt = marks[0]?.lastTransitionTime;
        });
      }),
    );
  });

  it("marks a Pod at the Spot notice, while its containers still run: DisruptionTarget, not Ready, then Failed / SpotInterruption", () => {
    const notice = {
      ...report(5, false, [running()]),
      stopRequested: true,
      stopRequestedAt: "2026-11-30T06:00:00.000Z",
      interruption: { kind: "spot" as const, action: "terminate", time: "2026-11-30T06:02:00Z" },
    };
    const marked = toPodStatus(pod("Always"), live(notice), { now: NOW });
    expect(marked.phase).toBe("Running");
    expect(marked.reason).toBeUndefined();
    expect(condition(marked, "DisruptionTarget")).toEqual({
      type: "DisruptionTarget",
      status: "True",
      lastTransitionTime: NOW,
      reason: "SpotInterruption",
      message:
        "EC2 is reclaiming the Spot instance at 2026-11-30T06:02:00Z: its host supervisor is stopping the containers within the two-minute warning",
    });
    expect(condition(marked, "Ready")).toMatchObject({
      status: "False",
      reason: "SpotInterruption",
    });
    // The containers' own readiness is theirs.
    expect(condition(marked, "ContainersReady")?.status).toBe("True");
    expect(marked.containerStatuses?.[0]?.state?.running).toBeDefined();
    // EC2 already shows the instance going for Spot, before any report of the notice: marked too.
    const going = toInstanceState(
      ec2("shutting-down", {
        code: "Server.SpotInstanceTermination",
        report: report(5, false, [running()]),
      }),
      { now: NOW },
    );
    expect(
      condition(toPodStatus(pod("Always"), going, { now: NOW }), "DisruptionTarget")?.status,
    ).toBe("True");
    // The final report: Failed / SpotInterruption, the mark's time kept.
    const stored = { ...pod("Always"), status: JSON.parse(JSON.stringify(marked)) };
    const later = new Date(NOW.getTime() + 30_000);
    const final = {
      ...notice,
      seq: 6,
      final: true,
      containers: [{ ...exited(143, "app"), stoppedBecause: "SpotInterruption" as const }],
    };
    const ended = toPodStatus(
      stored,
      toInstanceState(ec2("running", { report: final }), { now: later }),
      {
        now: later,
      },
    );
    expect(ended).toMatchObject({ phase: "Failed", reason: "SpotInterruption" });
    expect(new Date(condition(ended, "DisruptionTarget")?.lastTransitionTime ?? 0)).toEqual(NOW);
    expect(ended.conditions?.filter((c) => c.type === "DisruptionTarget")).toHaveLength(1);
    // A restarted controller that reads an older report than the one stored: the mark stays.
    const older = toPodStatus(stored, live(report(4, false, [running()])), { now: later });
    expect(condition(older, "DisruptionTarget")?.status).toBe("True");
    expect(condition(older, "Ready")?.status).toBe("False");
  });

  it("fails a Pod stopped from outside even when its containers ended their SIGTERM with 0: interrupted, not done", () => {
    for (const [code, cause] of [
      ["running", undefined],
      ["stopped", "Client.UserInitiatedShutdown"],
    ] as const) {
      const final = {
        ...report(7, true, [exited(0, "app")]),
        stopRequested: true,
        ...(cause === undefined
          ? { interruption: { kind: "spot" as const, action: "terminate" } }
          : {}),
      };
      const state = toInstanceState(
        ec2(code, { report: final, ...(cause === undefined ? {} : { code: cause }) }),
        { now: NOW },
      );
      const status = toPodStatus(pod("Always"), state, { now: NOW });
      expect(status.phase, code).toBe("Failed");
      expect(status.reason, code).toBe(cause === undefined ? "SpotInterruption" : "InstanceLost");
      expect(status.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(0);
    }
    // Ended on its own with 0 (no stop from outside): Succeeded, as before.
    const done = toInstanceState(ec2("stopped", { report: report(7, true, [exited(0, "app")]) }), {
      now: NOW,
    });
    expect(toPodStatus(pod("OnFailure"), done, { now: NOW }).phase).toBe("Succeeded");
  });

  it("over any run of observations with Spot notices, the mark comes with the first notice, stays until the end, once, its time fixed (property)", () => {
    const notice = (seq: number, final: boolean) => ({
      ...report(seq, final, [final ? exited(143) : running()]),
      stopRequested: true,
      interruption: { kind: "spot" as const, action: "terminate" },
    });
    const step = fc.oneof(
      fc
        .nat({ max: 20 })
        .map((seq) => ({ state: "running", report: report(seq, false, [running()]) })),
      fc.nat({ max: 20 }).map((seq) => ({ state: "running", report: notice(seq, false) })),
      fc.nat({ max: 20 }).map((seq) => ({ state: "running", report: notice(seq, true) })),
      fc
        .nat({ max: 20 })
        .map((seq) => ({ state: "stopped", report: report(seq, true, [exited(0)]) })),
      fc.constantFrom(
        { state: "shutting-down", code: "Server.SpotInstanceTermination" },
        { state: "terminated", code: "Server.SpotInstanceTermination" },
        { state: "stopped", code: "Server.InternalError" },
        { state: "terminated", code: "Client.UserInitiatedShutdown" },
      ),
    );
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 12 }), (steps) => {
        let stored = pod("Always");
        let state: InstanceState | undefined;
        let markedAt: string | undefined;
        let wasMarkedLive = false;
        steps.forEach((s, i) => {
          const now = new Date(NOW.getTime() + i * 1000);
          state = toInstanceState(ec2(s.state, s), { now, ...(state ? { previous: state } : {}) });
          const status = JSON.parse(JSON.stringify(toPodStatus(stored, state, { now })));
          stored = { ...stored, status };
          const marks = (status.conditions ?? []).filter(
            (c: { type: string }) => c.type === "DisruptionTarget",
          );
          const ended = status.phase === "Succeeded" || status.phase === "Failed";
          const noticed = state.report?.interruption !== undefined;
          if (ended) expect(marks.length).toBe(status.reason === "SpotInterruption" ? 1 : 0);
          else if (noticed || wasMarkedLive) {
            expect(marks.length).toBe(1);
            const ready = status.conditions.find((c: { type: string }) => c.type === "Ready");
            expect(ready).toMatchObject({ status: "False", reason: "SpotInterruption" });
          }
          expect(marks.length).toBeLessThanOrEqual(1);
          if (!ended && marks.length > 0) wasMarkedLive = true;
          if (markedAt !== undefined && marks.length > 0) {
            expect(marks[0]?.lastTransitionTime).toBe(markedAt);
          }
          markedAt = marks[0]?.lastTransitionTime;
        });
      }),
    );
  });

  it("keeps what a lost instance had already reported, and marks only the rest unknown", () => {
    const rep = report(3, false, [exited(0, "first"), running("second")]);
    const state = toInstanceState(ec2("stopped", { code: "Server.InternalError", report: rep }), {
      now: NOW,
    });
    const status = toPodStatus(pod("Never", [{ name: "first" }, { name: "second" }]), state, {
      now: NOW,
    });
    expect(status.phase).toBe("Failed");
    expect(status.reason).toBe("InstanceLost");
    expect(status.containerStatuses?.map((c) => c.state?.terminated?.reason)).toEqual([
      "Completed",
      "ContainerStatusUnknown",
    ]);
  });

  it("does not trust a final report that leaves a container out or running", () => {
    const rep = report(3, true, [running("first")]);
    const status = toPodStatus(pod("Never", [{ name: "first" }, { name: "second" }]), live(rep), {
      now: NOW,
    });
    expect(status.phase).toBe("Failed");
    expect(status.containerStatuses?.map((c) => c.state?.terminated)).toMatchObject([
      {
        exitCode: 137,
        reason: "ContainerStatusUnknown",
        message: expect.stringContaining("still running"),
      },
      {
        exitCode: 137,
        reason: "ContainerStatusUnknown",
        message: expect.stringContaining("does not include"),
      },
    ]);
  });

  it("waits for init containers: Pending, PodInitializing, ContainersNotInitialized", () => {
    const rep = report(1, false, [{ ...running("migrate"), init: true }]);
    const status = toPodStatus(pod("Always", [{ name: "app" }], [{ name: "migrate" }]), live(rep), {
      now: NOW,
    });
    expect(status.phase).toBe("Pending");
    expect(status.initContainerStatuses?.[0]?.state?.running).toBeDefined();
    expect(status.containerStatuses?.[0]?.state).toEqual({
      waiting: { reason: "PodInitializing" },
    });
    expect(condition(status, "Initialized")).toMatchObject({
      status: "False",
      reason: "ContainersNotInitialized",
      message: "containers with incomplete status: [migrate]",
    });
  });

  it("fails a restartPolicy Never Pod whose init container failed", () => {
    const rep = report(2, true, [{ ...exited(3, "migrate"), init: true }]);
    const status = toPodStatus(pod("Never", [{ name: "app" }], [{ name: "migrate" }]), live(rep), {
      now: NOW,
    });
    expect(status.phase).toBe("Failed");
    expect(status.initContainerStatuses?.[0]?.state?.terminated?.exitCode).toBe(3);
  });

  it("treats an init container with restartPolicy Always as a sidecar", () => {
    const rep = report(2, false, [{ ...running("proxy"), init: true }, running("app")]);
    const status = toPodStatus(
      pod("Always", [{ name: "app" }], [{ name: "proxy", restartPolicy: "Always" }]),
      live(rep),
      { now: NOW },
    );
    expect(status.phase).toBe("Running");
    expect(condition(status, "Initialized")?.status).toBe("True");
    expect(condition(status, "Ready")?.status).toBe("True");
  });

  it("moves lastTransitionTime only when a condition flips, and keeps conditions it does not own", () => {
    const first = toPodStatus(pod(), live(report(1, false, [running()])), { now: NOW });
    const later = new Date(NOW.getTime() + 60_000);
    const withOthers: V1PodStatus = {
      ...first,
      conditions: [
        ...(first.conditions ?? []),
        { type: "DisruptionTarget", status: "True", reason: "PreemptionByScheduler" },
      ],
    };
    const second = toPodStatus(
      { ...pod(), status: withOthers },
      live(report(2, false, [crashLooping(1)])),
      {
        now: later,
      },
    );
    expect(condition(second, "PodScheduled")?.lastTransitionTime).toEqual(NOW);
    expect(condition(second, "Ready")?.lastTransitionTime).toEqual(later);
    expect(condition(second, "DisruptionTarget")).toMatchObject({ status: "True" });
    expect(second.startTime).toEqual(first.startTime);
  });

  it("shows an unreadable report as phase Unknown with the last known containers, not ready", () => {
    const previous = live(report(1, false, [running()]));
    const state = toInstanceState(
      ec2("running", { tags: { "nebula:report": "v7 seq=2 chunks=1 sha256=0000000000000000" } }),
      { now: NOW, previous },
    );
    const status = toPodStatus(pod(), state, { now: NOW });
    expect(status).toMatchObject({ phase: "Unknown", reason: "ReportUnreadable" });
    expect(status.message).toContain("v7");
    expect(status.containerStatuses?.[0]).toMatchObject({ ready: false, state: { running: {} } });
    expect(condition(status, "Ready")).toMatchObject({
      status: "False",
      reason: "ReportUnreadable",
    });
  });

  it("shows a booting instance as Pending with containers being created", () => {
    const status = toPodStatus(pod(), toInstanceState(ec2("running"), { now: NOW }), { now: NOW });
    expect(status.phase).toBe("Pending");
    expect(status.containerStatuses?.[0]?.state).toEqual({
      waiting: { reason: "ContainerCreating" },
    });
    expect(condition(status, "PodReadyToStartContainers")?.status).toBe("False");
  });

  it("says so when the report left a container out to fit its tag budget", () => {
    const rep = { ...report(2, false, [running("first")]), containersOmitted: 1 };
    const status = toPodStatus(pod("Always", [{ name: "first" }, { name: "second" }]), live(rep), {
      now: NOW,
    });
    expect(status.containerStatuses?.[1]?.state).toEqual({
      waiting: {
        reason: "ContainerStatusUnknown",
        message: "the instance's report left out 1 container(s) to fit its tag budget",
      },
    });
  });

  it("writes nothing new when nothing changed: mapping its own output again is a fixed point", () => {
    const states = [
      live(report(1, false, [running()])),
      live(report(4, false, [crashLooping(3)])),
      live(report(6, true, [exited(1)])),
      toInstanceState(ec2("running"), { now: NOW }),
      toInstanceState(ec2("stopped", { code: "Server.InternalError" }), { now: NOW }),
      toInstanceState(undefined, { now: NOW }),
      toInstanceState(ec2("running", { tags: { "nebula:report": "garbage" } }), { now: NOW }),
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...states),
        fc.constantFrom("Always" as const, "OnFailure" as const, "Never" as const),
        fc.integer({ min: 1, max: 10 ** 9 }),
        (state, policy, ms) => {
          const p = pod(policy, [{ name: "app" }], [{ name: "init" }]);
          const first = toPodStatus(p, state, { now: NOW });
          const again = toPodStatus({ ...p, status: first }, state, {
            now: new Date(NOW.getTime() + ms),
          });
          expect(again).toEqual(first);
        },
      ),
    );
  });

  it("is total on a malformed Pod", () => {
    const state: InstanceState = live(report(1, false, [running()]));
    fc.assert(
      fc.property(fc.jsonValue(), (junk) => {
        // biome-ignore lint/suspicious/noExplicitAny: the point is a Pod that is not a V1Pod.
        const status = toPodStatus(junk as any, state, { now: NOW });
        expect(status.phase).toBeTypeOf("string");
        // biome-ignore lint/suspicious/noExplicitAny: ditto, with junk inside a Pod.
        toPodStatus({ spec: junk, status: junk } as any, state, { now: NOW });
      }),
    );
  });
});

describe("invariants over arbitrary reports", () => {
  const names = ["app", "side", "init"] as const;
  const termination = fc.record({
    exitCode: fc.integer({ min: -1, max: 255 }),
    reason: fc.constantFrom("Completed", "Error", "OOMKilled", "ContainerCannotRun"),
  });
  const container = fc.record(
    {
      name: fc.constantFrom(...names, "stranger"),
      init: fc.boolean(),
      state: fc.constantFrom("waiting" as const, "running" as const, "terminated" as const),
      restarts: fc.nat({ max: 50 }),
      reason: fc.constantFrom(
        "CrashLoopBackOff",
        "ErrImagePull",
        "Completed",
        "Error",
        "OOMKilled",
      ),
      exitCode: fc.integer({ min: -1, max: 255 }),
      last: termination,
    },
    { requiredKeys: ["name", "init", "state", "restarts"] },
  );
  const anyReport = fc.record({
    seq: fc.nat(),
    final: fc.boolean(),
    containers: fc.array(container, { maxLength: 5 }),
  });

  it("gives every spec container exactly one status with exactly one state, and a valid phase", () => {
    fc.assert(
      fc.property(
        anyReport,
        fc.constantFrom("pending", "running", "stopping", "stopped", "terminated", "absent"),
        fc.constantFrom("Always" as const, "OnFailure" as const, "Never" as const),
        fc.boolean(),
        (r, ec2State, policy, withInit) => {
          const rep = report(r.seq, r.final, r.containers);
          const state =
            ec2State === "absent"
              ? toInstanceState(undefined, { now: NOW, previous: { report: rep, instance: {} } })
              : toInstanceState(ec2(ec2State, { report: rep }), { now: NOW });
          const p = pod(
            policy,
            [{ name: "app" }, { name: "side" }],
            withInit ? [{ name: "init" }] : [],
          );
          const status = toPodStatus(p, state, { now: NOW });
          expect(["Pending", "Running", "Succeeded", "Failed", "Unknown"]).toContain(status.phase);
          expect(status.containerStatuses?.map((c) => c.name)).toEqual(["app", "side"]);
          expect(status.initContainerStatuses?.map((c) => c.name)).toEqual(
            withInit ? ["init"] : undefined,
          );
          for (const c of [
            ...(status.containerStatuses ?? []),
            ...(status.initContainerStatuses ?? []),
          ]) {
            expect(Object.keys(c.state ?? {})).toHaveLength(1);
            if (c.ready) expect(c.state?.running).toBeDefined();
            expect(c.restartCount).toBeGreaterThanOrEqual(0);
          }
          const types = status.conditions?.map((c) => c.type) ?? [];
          expect(new Set(types).size).toBe(types.length);
          if (status.phase === "Succeeded") {
            for (const c of status.containerStatuses ?? [])
              expect(c.state?.terminated?.exitCode).toBe(0);
          }
          if (state.kind === "Terminal" || state.kind === "Lost") {
            expect(["Succeeded", "Failed"]).toContain(status.phase);
          }
          expect(status.hostIPs?.[0]?.ip).toBe(status.hostIP);
          expect(status.podIPs?.[0]?.ip).toBe(status.podIP);
        },
      ),
      { numRuns: 500 },
    );
  });
});
