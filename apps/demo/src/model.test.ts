import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { podView, workloadView } from "./model.js";

describe("podView", () => {
  it("reads phase, the container's reason, restarts and both exits", () => {
    const view = podView({
      metadata: { name: "a", uid: "u", labels: { app: "x" } },
      status: {
        phase: "Running",
        containerStatuses: [
          {
            name: "app",
            image: "busybox",
            imageID: "",
            ready: false,
            restartCount: 2,
            state: { waiting: { reason: "CrashLoopBackOff" } },
            lastState: {
              terminated: {
                exitCode: 0,
                reason: "Completed",
                finishedAt: new Date("2026-11-30T16:00:08Z"),
              },
            },
          },
        ],
      },
    });
    expect(view).toEqual({
      name: "a",
      uid: "u",
      labels: { app: "x" },
      phase: "Running",
      reason: "CrashLoopBackOff",
      restarts: 2,
      exit: undefined,
      lastExit: { code: 0, reason: "Completed", finishedAt: "2026-11-30T16:00:08.000Z" },
      deleting: false,
      deletionTimestamp: undefined,
      deletionGracePeriodSeconds: undefined,
      containers: [
        {
          name: "app",
          init: false,
          ready: false,
          restarts: 2,
          runningSince: undefined,
          startedAt: undefined,
          waiting: "CrashLoopBackOff",
          terminated: undefined,
          lastExit: { code: 0, reason: "Completed", finishedAt: "2026-11-30T16:00:08.000Z" },
        },
      ],
      createdAt: undefined,
      readySince: undefined,
    });
  });

  it("reads every container (init containers last) and the deletion's time and grace", () => {
    const view = podView({
      metadata: {
        name: "c",
        deletionTimestamp: new Date("2026-11-30T16:01:00Z"),
        deletionGracePeriodSeconds: 5,
      },
      status: {
        phase: "Running",
        initContainerStatuses: [
          {
            name: "sidecar",
            image: "busybox",
            imageID: "",
            ready: true,
            restartCount: 0,
            state: { running: { startedAt: new Date("2026-11-30T16:00:00Z") } },
          },
        ],
        containerStatuses: [
          {
            name: "app",
            image: "busybox",
            imageID: "",
            ready: false,
            restartCount: 0,
            state: { terminated: { exitCode: 137, reason: "ContainerStatusUnknown" } },
          },
        ],
      },
    });
    expect(view.deletionTimestamp).toBe("2026-11-30T16:01:00.000Z");
    expect(view.deletionGracePeriodSeconds).toBe(5);
    expect(
      view.containers.map((c) => [c.name, c.init, c.ready, c.runningSince, c.terminated]),
    ).toEqual([
      ["app", false, false, undefined, "ContainerStatusUnknown"],
      ["sidecar", true, true, "2026-11-30T16:00:00.000Z", undefined],
    ]);
  });

  it("reads the creation time, the Ready condition's time and when each container started", () => {
    const view = podView({
      metadata: { name: "w", creationTimestamp: new Date("2026-11-30T16:00:00Z") },
      status: {
        phase: "Running",
        conditions: [
          { type: "Ready", status: "True", lastTransitionTime: new Date("2026-11-30T16:00:09Z") },
        ],
        containerStatuses: [
          {
            name: "app",
            image: "busybox",
            imageID: "",
            ready: true,
            restartCount: 0,
            state: { running: { startedAt: new Date("2026-11-30T16:00:07Z") } },
          },
          {
            name: "done",
            image: "busybox",
            imageID: "",
            ready: false,
            restartCount: 0,
            state: {
              terminated: { exitCode: 0, startedAt: new Date("2026-11-30T16:00:08Z") },
            },
          },
        ],
      },
    });
    expect(view.createdAt).toBe("2026-11-30T16:00:00.000Z");
    expect(view.readySince).toBe("2026-11-30T16:00:09.000Z");
    expect(view.containers.map((c) => c.startedAt)).toEqual([
      "2026-11-30T16:00:07.000Z",
      "2026-11-30T16:00:08.000Z",
    ]);
    // Not Ready: no time.
    expect(
      podView({ status: { conditions: [{ type: "Ready", status: "False" }] } }).readySince,
    ).toBeUndefined();
  });

  it("a Pod without status is Pending with no reason; a deleting one says so", () => {
    expect(podView({ metadata: { name: "b", deletionTimestamp: new Date() } })).toMatchObject({
      phase: "Pending",
      reason: undefined,
      deleting: true,
    });
  });
});

describe("workloadView", () => {
  it("reads the Available condition, counts and reasons", () => {
    expect(
      workloadView("Workload", {
        metadata: { name: "shop" },
        status: {
          readyReplicas: 1,
          desiredReplicas: 2,
          reasons: [{ reason: "InstanceCrashing", count: 1 }],
          conditions: [
            { type: "Ready", status: "False" },
            { type: "Available", status: "True", reason: "AvailablePlacementFound", message: "m" },
          ],
        },
      }),
    ).toEqual({
      kind: "Workload",
      name: "shop",
      available: "True",
      reason: "AvailablePlacementFound",
      message: "m",
      readyReplicas: 1,
      desiredReplicas: 2,
      reasons: ["InstanceCrashing"],
      selector: undefined,
      workloadRef: undefined,
    });
  });

  it("reads a WorkloadDeployment's selector and workloadRef, leaving out what is not a string", () => {
    const view = workloadView("WorkloadDeployment", {
      metadata: { name: "shop-crashing" },
      spec: {
        workloadRef: { name: "shop" },
        selector: {
          matchLabels: { app: "shop", bad: 1 },
          matchExpressions: [{ key: "tier", operator: "In", values: ["a", 2] }, "junk"],
        },
      },
    });
    expect(view.workloadRef).toBe("shop");
    expect(view.selector).toEqual({
      matchLabels: { app: "shop" },
      matchExpressions: [{ key: "tier", operator: "In", values: ["a"] }],
    });
    expect(workloadView("WorkloadDeployment", {}).selector).toEqual({
      matchLabels: {},
      matchExpressions: [],
    });
  });

  it("is total: any value gives a view, '-' without an Available condition", () => {
    fc.assert(
      fc.property(fc.anything(), (value) => {
        const view = workloadView("WorkloadDeployment", value);
        expect(typeof view.available).toBe("string");
      }),
    );
    expect(workloadView("Workload", null).available).toBe("-");
  });
});
