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
    });
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
