import { describe, expect, it } from "vitest";
import { bootTimeline } from "./boot-timeline.js";
import { RESTART_LIMIT_REASON, toPodStatus } from "./pod-status.js";
import { type ExitReport, encodeConsoleLine, encodeReportTags } from "./report.js";
import { needsConsoleOutput, toInstanceState } from "./state.js";

const now = new Date("2026-11-30T06:00:00Z");
const tags = (report: ExitReport) =>
  Object.entries(encodeReportTags(report)).map(([Key, Value]) => ({ Key, Value }));
const instance = (report: ExitReport, state = "running") => ({
  InstanceId: "i-0abc",
  State: { Name: state },
  LaunchTime: "2026-11-30T05:50:00Z",
  Tags: tags(report),
});
const final: ExitReport = {
  v: 1,
  seq: 9,
  time: "2026-11-30T05:59:00Z",
  final: true,
  containers: [
    {
      name: "app",
      init: false,
      state: "terminated",
      restarts: 3,
      exitCode: 1,
      reason: "Error",
      restartLimitReached: true,
    },
    {
      name: "sidecar",
      init: false,
      state: "terminated",
      restarts: 0,
      exitCode: 143,
      signal: 15,
      reason: "StoppedByRestartLimit",
      stoppedBecause: "RestartLimit",
    },
  ],
  restartLimit: { container: "app", limit: 3 },
};

describe("report fields the instance state reads", () => {
  it("a final report written on a Spot notice is a Spot stop, while EC2 still says running", () => {
    const spot: ExitReport = {
      ...final,
      restartLimit: undefined,
      stopRequested: true,
      stopRequestedAt: "2026-11-30T05:58:00.000Z",
      interruption: { kind: "spot", action: "terminate", time: "2026-11-30T06:00:00Z" },
    } as ExitReport;
    delete (spot as { restartLimit?: unknown }).restartLimit;
    const state = toInstanceState(instance(spot), { now });
    expect(state).toMatchObject({
      kind: "Terminal",
      stopped: {
        cause: "SpotInterruption",
        message: expect.stringContaining("Spot interruption notice: terminate"),
      },
    });
  });

  it("names the restart limit and its annotation", () => {
    const state = toInstanceState(instance(final), { now });
    expect(state.kind).toBe("Terminal");
    if (state.kind !== "Terminal") return;
    expect(state.restartLimit).toEqual({
      container: "app",
      limit: 3,
      message:
        'container "app" reached the restart limit of 3 restarts after its last exit (code 1, Error), so the Pod was ended and its instance released; the limit is set by the Pod annotation nebula.dev/restart-limit',
    });
  });

  it("the Pod's status names the restart limit and its annotation; the containers keep their exits", () => {
    const pod = {
      metadata: { name: "p", namespace: "default", uid: "u-1" },
      spec: {
        containers: [
          { name: "app", image: "x" },
          { name: "sidecar", image: "y" },
        ],
      },
    };
    const status = toPodStatus(pod, toInstanceState(instance(final, "stopped"), { now }), { now });
    expect(status.phase).toBe("Failed");
    expect(status.reason).toBe(RESTART_LIMIT_REASON);
    expect(status.message).toBe(
      'container "app" reached the restart limit of 3 restarts after its last exit (code 1, Error), so the Pod was ended and its instance released; the limit is set by the Pod annotation nebula.dev/restart-limit',
    );
    const app = status.containerStatuses?.find((c) => c.name === "app");
    expect(app?.state?.terminated).toMatchObject({ exitCode: 1, reason: "Error" });
  });

  it("asks for the console when the final tag report was cut, and not once it was read", () => {
    const long: ExitReport = {
      ...final,
      containers: [
        {
          name: "app",
          init: false,
          state: "terminated",
          restarts: 0,
          exitCode: 1,
          reason: "Error",
          messageB64: Buffer.from("e".repeat(3000)).toString("base64"),
        },
      ],
    };
    const fromTags = toInstanceState(instance(long, "stopped"), { now });
    expect(fromTags).toMatchObject({ kind: "Terminal", report: { cut: true } });
    expect(needsConsoleOutput(fromTags)).toBe(true);
    const withConsole = toInstanceState(instance(long, "stopped"), {
      now,
      previous: fromTags,
      consoleOutput: `boot\n${encodeConsoleLine(long)}\n`,
    });
    expect(withConsole.report?.containers[0]?.messageB64).toBe(long.containers[0]?.messageB64);
    expect(needsConsoleOutput(withConsole)).toBe(false);
    expect(needsConsoleOutput(toInstanceState(instance(final, "stopped"), { now }))).toBe(false);
  });
});

describe("bootTimeline", () => {
  it("splits start-up into the supervisor, each pull and each first start", () => {
    const report: ExitReport = {
      ...final,
      supervisorStartedAt: "2026-11-30T05:50:40.000Z",
      containers: [
        {
          name: "app",
          init: false,
          state: "running",
          restarts: 0,
          pullStartedAt: "2026-11-30T05:50:41.000Z",
          pullFinishedAt: "2026-11-30T05:50:51.500Z",
          firstStartedAt: "2026-11-30T05:50:52.000Z",
        },
      ],
    };
    const timeline = bootTimeline(report, new Date("2026-11-30T05:50:00Z"));
    expect(timeline.steps.map((s) => [s.step, s.container, s.ms])).toEqual([
      ["supervisor", undefined, 40_000],
      ["pull", "app", 10_500],
      ["start", "app", 500],
    ]);
    expect(timeline.toFirstContainerMs).toBe(52_000);
    expect(bootTimeline({ ...final }).steps).toEqual([]);
  });
});
