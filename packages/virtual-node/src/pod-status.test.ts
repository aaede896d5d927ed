import type { V1ContainerStatus, V1Pod, V1PodStatus } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  canonicalStatus,
  composePodStatus,
  deadlineExceededStatus,
  EPHEMERAL_NOT_SUPPORTED,
  gateReady,
  podStatusChanged,
  podStatusEvents,
  withEphemeralStatuses,
} from "./pod-status.js";

const terminated = (exitCode: number, reason: string, restartCount = 0): V1ContainerStatus => ({
  name: "app",
  image: "busybox",
  imageID: "",
  ready: false,
  restartCount,
  state: { terminated: { exitCode, reason, finishedAt: new Date("2026-11-30T15:00:05Z") } },
});
const running = (restartCount = 0): V1ContainerStatus => ({
  name: "app",
  image: "busybox",
  imageID: "",
  ready: true,
  restartCount,
  state: { running: { startedAt: new Date("2026-11-30T15:00:01Z") } },
});
const scheduled = {
  type: "PodScheduled",
  status: "True",
  lastTransitionTime: new Date("2026-11-30T14:59:59Z"),
};

describe("composePodStatus", () => {
  it("no observation: the stored status as is", () => {
    const stored: V1PodStatus = { phase: "Running", conditions: [scheduled] };
    expect(composePodStatus(stored, undefined)).toBe(stored);
  });

  it("Ready restored after the node controller set it False transitions now, not when it first became True", () => {
    const firstReady = new Date("2026-11-30T15:00:02Z");
    const kcmNotReady = new Date("2026-11-30T15:10:00Z");
    const restored = new Date("2026-11-30T15:12:00Z");
    // What the provider computes: Ready since it first saw the container ready.
    const observed: V1PodStatus = {
      phase: "Running",
      conditions: [{ type: "Ready", status: "True", lastTransitionTime: firstReady }],
      containerStatuses: [running()],
    };
    // The stored status after kube-controller-manager marked the Pod not ready (node NotReady).
    const stored: V1PodStatus = {
      phase: "Running",
      conditions: [{ type: "Ready", status: "False", lastTransitionTime: kcmNotReady }],
      containerStatuses: [running()],
    };
    const ready = (s: V1PodStatus | undefined) => s?.conditions?.find((c) => c.type === "Ready");
    const out = composePodStatus(stored, observed, restored);
    expect(ready(out)).toMatchObject({ status: "True", lastTransitionTime: restored });
    // Unchanged afterwards: the time of the transition stays, with any later clock.
    expect(ready(composePodStatus(out, observed, new Date("2026-11-30T15:20:00Z")))).toMatchObject({
      status: "True",
      lastTransitionTime: restored,
    });
    // An observation that says it changed after the stored change keeps its own time.
    const later = new Date("2026-11-30T15:11:00Z");
    const own = {
      ...observed,
      conditions: [{ type: "Ready", status: "True", lastTransitionTime: later }],
    };
    expect(ready(composePodStatus(stored, own, restored))?.lastTransitionTime).toEqual(later);
  });

  it("over any sequence of Ready flips, a condition's lastTransitionTime never goes back and moves only when its status does", () => {
    const flip = fc.record({ by: fc.constantFrom("provider", "kcm"), ready: fc.boolean() });
    fc.assert(
      fc.property(fc.array(flip, { minLength: 1, maxLength: 12 }), (flips) => {
        let stored: V1PodStatus | undefined;
        let clock = Date.parse("2026-11-30T15:00:00Z");
        const providerSince = new Date(clock);
        for (const { by, ready } of flips) {
          clock += 60_000;
          const now = new Date(clock);
          const condition = { type: "Ready", status: ready ? "True" : "False" };
          let next: V1PodStatus | undefined;
          if (by === "kcm") {
            // The node controller writes the condition directly, timed when it flips it.
            const was = stored?.conditions?.find((c) => c.type === "Ready");
            const since = was?.status === condition.status ? was.lastTransitionTime : now;
            next = {
              ...(stored ?? { phase: "Running" }),
              conditions: [{ ...condition, lastTransitionTime: since ?? now }],
            };
          } else {
            const observed = {
              phase: "Running",
              conditions: [{ ...condition, lastTransitionTime: providerSince }],
            };
            next = composePodStatus(stored, observed, now);
          }
          const before = stored?.conditions?.find((c) => c.type === "Ready");
          const after = next?.conditions?.find((c) => c.type === "Ready");
          if (before?.lastTransitionTime !== undefined && after?.lastTransitionTime !== undefined) {
            const b = new Date(before.lastTransitionTime).getTime();
            const a = new Date(after.lastTransitionTime).getTime();
            if (before.status === after.status) expect(a).toBe(b);
            else expect(a).toBeGreaterThan(b);
          }
          stored = next;
        }
      }),
    );
  });

  it("keeps the conditions the provider does not own and the start time", () => {
    const stored: V1PodStatus = {
      phase: "Pending",
      conditions: [scheduled, { type: "DisruptionTarget", status: "True" }],
      startTime: new Date("2026-11-30T15:00:00Z"),
    };
    const observed: V1PodStatus = {
      phase: "Running",
      conditions: [{ type: "Ready", status: "True" }],
      startTime: new Date("2026-11-30T15:00:09Z"),
      containerStatuses: [running()],
    };
    const status = composePodStatus(stored, observed);
    expect(status?.conditions?.map((c) => c.type)).toEqual([
      "PodScheduled",
      "DisruptionTarget",
      "Ready",
    ]);
    expect(status?.startTime).toEqual(new Date("2026-11-30T15:00:00Z"));
    expect(status?.phase).toBe("Running");
  });

  it("finished stays finished: a restarted provider's Pending never replaces Succeeded", () => {
    const stored: V1PodStatus = {
      phase: "Succeeded",
      containerStatuses: [terminated(0, "Completed")],
    };
    expect(composePodStatus(stored, { phase: "Pending" })).toBe(stored);
    expect(
      composePodStatus(stored, {
        phase: "Failed",
        containerStatuses: [terminated(137, "ContainerStatusUnknown")],
      }),
    ).toBe(stored);
  });

  it("a late report replaces a lost verdict", () => {
    const stored: V1PodStatus = {
      phase: "Failed",
      containerStatuses: [terminated(137, "ContainerStatusUnknown")],
    };
    const late: V1PodStatus = {
      phase: "Succeeded",
      containerStatuses: [terminated(0, "Completed")],
    };
    expect(composePodStatus(stored, late)?.phase).toBe("Succeeded");
  });

  it("never lowers a restart count", () => {
    const stored: V1PodStatus = { phase: "Running", containerStatuses: [running(4)] };
    const status = composePodStatus(stored, { phase: "Running", containerStatuses: [running(1)] });
    expect(status?.containerStatuses?.[0]?.restartCount).toBe(4);
  });

  it("property: total, terminal stays terminal unless lost, restart counts never drop", () => {
    const phase = fc.constantFrom("Pending", "Running", "Succeeded", "Failed", "Unknown");
    const container = fc.record({
      restarts: fc.nat(20),
      exit: fc.option(fc.constantFrom(0, 1, 137), { nil: undefined }),
      lost: fc.boolean(),
    });
    const status = fc.record({ phase, containers: fc.array(container, { maxLength: 1 }) }).map(
      ({ phase, containers }): V1PodStatus => ({
        phase,
        containerStatuses: containers.map((c) =>
          c.exit === undefined
            ? running(c.restarts)
            : terminated(c.exit, c.lost ? "ContainerStatusUnknown" : "Error", c.restarts),
        ),
      }),
    );
    fc.assert(
      fc.property(
        fc.option(status, { nil: undefined }),
        fc.option(status, { nil: undefined }),
        (s, o) => {
          const out = composePodStatus(s, o);
          if (s?.phase === "Succeeded" || s?.phase === "Failed") {
            expect(out?.phase === "Succeeded" || out?.phase === "Failed").toBe(true);
          }
          for (const c of out?.containerStatuses ?? []) {
            const before = s?.containerStatuses?.find((x) => x.name === c.name);
            if (before) expect(c.restartCount).toBeGreaterThanOrEqual(before.restartCount);
          }
          // Composing the result with the same observation again changes nothing.
          expect(canonicalStatus(composePodStatus(out, o))).toBe(canonicalStatus(out));
        },
      ),
    );
  });
});

describe("a Pod failed past its activeDeadlineSeconds", () => {
  const now = new Date("2026-12-03T08:00:30Z");
  const readySince = new Date("2026-12-03T08:00:02Z");
  const runningStatus: V1PodStatus = {
    phase: "Running",
    startTime: new Date("2026-12-03T08:00:00Z"),
    conditions: [
      scheduled,
      { type: "ContainersReady", status: "True", lastTransitionTime: readySince },
      { type: "Ready", status: "True", lastTransitionTime: readySince },
    ],
    containerStatuses: [running()],
  };

  it("is written as the kubelet writes it: Failed, DeadlineExceeded, not ready, containers as they are", () => {
    const failed = deadlineExceededStatus(runningStatus, now);
    expect(failed).toMatchObject({
      phase: "Failed",
      reason: "DeadlineExceeded",
      message: "Pod was active on the node longer than the specified deadline",
      startTime: runningStatus.startTime,
    });
    for (const type of ["Ready", "ContainersReady"]) {
      expect(failed.conditions?.find((c) => c.type === type)).toEqual({
        type,
        status: "False",
        reason: "PodCompleted",
        lastTransitionTime: now,
      });
    }
    expect(failed.conditions?.find((c) => c.type === "PodScheduled")).toEqual(scheduled);
    expect(failed.containerStatuses?.[0]).toMatchObject({
      ready: false,
      state: { running: {} },
    });
    expect(deadlineExceededStatus(undefined, now).phase).toBe("Failed");
  });

  it("over any later observations: phase, reason and conditions stay; a running container takes its end (a lost one, its reported end), then never changes", () => {
    const failed = deadlineExceededStatus(runningStatus, now);
    const observation = fc.oneof(
      fc.constant<V1PodStatus>({ phase: "Running", containerStatuses: [running(0)] }),
      fc.constant<V1PodStatus>({ phase: "Running", containerStatuses: [running(2)] }),
      fc.constant<V1PodStatus>({ phase: "Failed", containerStatuses: [terminated(143, "Error")] }),
      fc.constant<V1PodStatus>({
        phase: "Failed",
        containerStatuses: [terminated(137, "ContainerStatusUnknown")],
      }),
      fc.constant<V1PodStatus>({
        phase: "Succeeded",
        containerStatuses: [terminated(0, "Completed")],
      }),
    );
    fc.assert(
      fc.property(fc.array(observation, { maxLength: 8 }), (seen) => {
        let stored = failed;
        let end: V1ContainerStatus | undefined;
        for (const o of seen) {
          const next = composePodStatus(stored, o, now) as V1PodStatus;
          expect(next.phase).toBe("Failed");
          expect(next.reason).toBe("DeadlineExceeded");
          expect(next.conditions).toEqual(failed.conditions);
          const c = next.containerStatuses?.[0];
          expect(c?.ready).toBe(false);
          const seenEnd = o.containerStatuses?.[0]?.state?.terminated;
          const lost = (t: { reason?: string } | undefined) =>
            t?.reason === "ContainerStatusUnknown";
          if (end !== undefined && !(lost(end.state?.terminated) && seenEnd && !lost(seenEnd))) {
            expect(c).toEqual(end);
          } else if (seenEnd !== undefined) {
            expect(c?.state?.terminated).toEqual(seenEnd);
            end = c;
          } else expect(c?.state?.running).toBeDefined();
          stored = next;
        }
      }),
    );
  });
});

describe("ephemeral containers (kubectl debug)", () => {
  it("each gets a waiting status that says why it never starts and what to do; once, then kept", () => {
    const status: V1PodStatus = { phase: "Running", containerStatuses: [running()] };
    const spec = [{ name: "debugger", image: "busybox:1" }];
    const out = withEphemeralStatuses(spec, status);
    expect(out.ephemeralContainerStatuses).toEqual([
      {
        name: "debugger",
        image: "busybox:1",
        imageID: "",
        ready: false,
        restartCount: 0,
        state: { waiting: { ...EPHEMERAL_NOT_SUPPORTED } },
      },
    ]);
    expect(EPHEMERAL_NOT_SUPPORTED.message).toContain("kubectl debug --copy-to");
    // Composed again: nothing added twice, and the status object is the same one.
    expect(withEphemeralStatuses(spec, out)).toBe(out);
    expect(withEphemeralStatuses(undefined, status)).toBe(status);
    // One Warning Event when it first appears, none after.
    const pod: V1Pod = { spec: { containers: [] } };
    expect(podStatusEvents(pod, status, out)).toEqual([
      {
        type: "Warning",
        reason: "EphemeralContainersNotSupported",
        note: `Ephemeral container debugger: ${EPHEMERAL_NOT_SUPPORTED.message}`,
      },
    ]);
    expect(podStatusEvents(pod, out, out)).toEqual([]);
  });

  it("is total over any ephemeral list", () => {
    fc.assert(
      fc.property(fc.array(fc.anything()), (list) => {
        const out = withEphemeralStatuses(list as Parameters<typeof withEphemeralStatuses>[0], {
          phase: "Running",
        });
        expect(out.phase).toBe("Running");
      }),
    );
  });
});

describe("readiness gates", () => {
  const gate = "example.com/lb-registered";
  const containersReady = (ready: boolean) => ({
    phase: "Running",
    containerStatuses: [running()],
    conditions: [
      { type: "ContainersReady", status: ready ? "True" : "False" },
      { type: "Ready", status: ready ? "True" : "False" },
    ],
  });
  const find = (s: V1PodStatus | undefined, type: string) =>
    s?.conditions?.find((c) => c.type === type);

  it("holds Ready back, as the kubelet does, until every gate's condition is True", () => {
    const gates = [{ conditionType: gate }, { conditionType: "example.com/mesh" }];
    const missing = composePodStatus(undefined, containersReady(true), undefined, gates);
    expect(find(missing, "Ready")).toEqual({
      type: "Ready",
      status: "False",
      reason: "ReadinessGatesNotReady",
      message: `corresponding condition of pod readiness gate "${gate}" does not exist., corresponding condition of pod readiness gate "example.com/mesh" does not exist.`,
    });
    expect(find(missing, "ContainersReady")?.status).toBe("True");

    // The gates' owner writes their conditions; Nebula keeps them and reads them.
    const stored: V1PodStatus = {
      ...missing,
      conditions: [
        ...(missing?.conditions ?? []),
        { type: gate, status: "False" },
        { type: "example.com/mesh", status: "True" },
      ],
    };
    const oneFalse = composePodStatus(stored, containersReady(true), undefined, gates);
    expect(find(oneFalse, "Ready")?.message).toBe(
      `the status of pod readiness gate "${gate}" is not "True", but False`,
    );
    expect(find(oneFalse, gate)?.status).toBe("False");

    const open: V1PodStatus = {
      ...stored,
      conditions: (stored.conditions ?? []).map((c) =>
        c.type === gate ? { ...c, status: "True" } : c,
      ),
    };
    expect(find(composePodStatus(open, containersReady(true), undefined, gates), "Ready")).toEqual({
      type: "Ready",
      status: "True",
    });
  });

  it("leaves a Ready that is False for its containers as it is", () => {
    const out = composePodStatus(undefined, containersReady(false), undefined, [
      { conditionType: gate },
    ]);
    expect(find(out, "Ready")).toEqual({ type: "Ready", status: "False" });
  });

  it("is total: gates of any shape never throw", () => {
    fc.assert(
      fc.property(fc.array(fc.anything()), (gates) => {
        const out = gateReady(
          [{ type: "Ready", status: "True" }],
          gates as Parameters<typeof gateReady>[1],
        );
        expect(out).toHaveLength(1);
      }),
    );
  });

  it("over any sequence of container readiness and gate changes, Ready is True exactly when both are, and its lastTransitionTime moves only with it", () => {
    const gateState = fc.constantFrom<"absent" | "True" | "False" | "Unknown">(
      "absent",
      "True",
      "False",
      "Unknown",
    );
    fc.assert(
      fc.property(
        fc.array(fc.record({ ready: fc.boolean(), gate: gateState }), {
          minLength: 1,
          maxLength: 12,
        }),
        (steps) => {
          let stored: V1PodStatus | undefined;
          let t = Date.parse("2026-12-03T08:00:00Z");
          for (const step of steps) {
            t += 1000;
            // The gate's owner writes (or removes) its condition between the node's writes.
            const others = (stored?.conditions ?? []).filter((c) => c.type !== gate);
            const withGate: V1PodStatus = {
              ...stored,
              conditions:
                step.gate === "absent"
                  ? others
                  : [...others, { type: gate, status: step.gate, lastTransitionTime: new Date(t) }],
            };
            const before = find(stored, "Ready");
            const next = composePodStatus(withGate, containersReady(step.ready), new Date(t), [
              { conditionType: gate },
            ]);
            const ready = find(next, "Ready");
            expect(ready?.status).toBe(step.ready && step.gate === "True" ? "True" : "False");
            expect(find(next, "ContainersReady")?.status).toBe(step.ready ? "True" : "False");
            if (step.gate !== "absent") expect(find(next, gate)?.status).toBe(step.gate);
            if (before?.lastTransitionTime !== undefined) {
              if (before.status === ready?.status) {
                expect(ready?.lastTransitionTime).toEqual(before.lastTransitionTime);
              } else {
                expect(ready?.lastTransitionTime).toEqual(new Date(t));
              }
            }
            stored = next;
          }
        },
      ),
    );
  });
});

describe("podStatusChanged", () => {
  it("sees through the API server's precision and key order", () => {
    const written: V1PodStatus = {
      phase: "Running",
      startTime: new Date("2026-11-30T15:00:00.640Z"),
      conditions: [],
    };
    const stored = JSON.parse(
      JSON.stringify({ startTime: "2026-11-30T15:00:00Z", phase: "Running" }),
    ) as V1PodStatus;
    expect(podStatusChanged(stored, written)).toBe(false);
    expect(podStatusChanged(stored, { ...written, phase: "Succeeded" })).toBe(true);
    expect(podStatusChanged(stored, undefined)).toBe(false);
  });
});

describe("podStatusEvents", () => {
  const pod = (restartPolicy: string): V1Pod => ({
    metadata: { name: "p" },
    spec: { restartPolicy, containers: [{ name: "app" }] },
  });

  it("exit, back-off, restart limit", () => {
    const run: V1PodStatus = { phase: "Running", containerStatuses: [running()] };
    const exited: V1PodStatus = { phase: "Failed", containerStatuses: [terminated(1, "Error")] };
    expect(podStatusEvents(pod("Never"), run, exited)).toEqual([
      {
        type: "Warning",
        reason: "ContainerExited",
        note: "Container app exited with code 1 (Error)",
      },
    ]);
    const backoff: V1PodStatus = {
      phase: "Running",
      containerStatuses: [
        {
          ...running(1),
          state: { waiting: { reason: "CrashLoopBackOff", message: "back-off 10s" } },
          lastState: terminated(0, "Completed").state ?? {},
        },
      ],
    };
    const events = podStatusEvents(pod("Always"), run, backoff);
    expect(events.map((e) => e.reason)).toEqual(["ContainerExited", "BackOff"]);
    expect(podStatusEvents(pod("Always"), backoff, backoff)).toEqual([]);
    const limit: V1PodStatus = {
      phase: "Failed",
      containerStatuses: [terminated(0, "Completed", 5)],
    };
    expect(podStatusEvents(pod("Always"), backoff, limit).map((e) => e.reason)).toEqual([
      "ContainerExited",
      "RestartLimitReached",
    ]);
    // Every run exited 0: under Always the limit ends the Pod Succeeded, still a limit.
    const done: V1PodStatus = {
      phase: "Succeeded",
      containerStatuses: [terminated(0, "Completed", 2)],
    };
    expect(podStatusEvents(pod("Always"), backoff, done).map((e) => e.reason)).toContain(
      "RestartLimitReached",
    );
    // Under OnFailure a success after restarts is no limit.
    expect(podStatusEvents(pod("OnFailure"), backoff, done).map((e) => e.reason)).not.toContain(
      "RestartLimitReached",
    );
  });
});
