import { toInstanceReason } from "@nebula/state-mapping";
import { describe, expect, it } from "vitest";
import { findCondition } from "./condition.js";
import { type InstanceInput, rollupWorkloadDeployment } from "./deployment.js";
import { rollupWorkload } from "./workload.js";

// The whole upward path of a crash loop with the real reverse mapping from @nebula/state-mapping:
// Pod status → instance reason → WorkloadDeployment → Workload.

const now = new Date("2026-11-30T05:00:00Z");

/** A Pod whose only container exits on startup: the kubelet keeps the phase Running. */
const crashLoopingPod = {
  phase: "Running",
  containerStatuses: [
    {
      name: "app",
      image: "registry.example/app:1",
      ready: false,
      restartCount: 3,
      state: { waiting: { reason: "CrashLoopBackOff", message: "back-off 40s" } },
      lastState: { terminated: { exitCode: 1, reason: "Error" } },
    },
  ],
};

function instanceFrom(name: string, podStatus: unknown): InstanceInput {
  const { reason, ready, message } = toInstanceReason(podStatus);
  return { name, ready, reason, message };
}

describe("Pod → WorkloadDeployment → Workload", () => {
  it("carries the crash up to the Workload, with its count and last exit code", () => {
    const deployment = rollupWorkloadDeployment(
      { desiredReplicas: 1, generation: 2, instances: [instanceFrom("web-0", crashLoopingPod)] },
      { now },
    );
    const workload = rollupWorkload(
      { generation: 9, placements: [{ ...deployment, name: "eu" }] },
      { now },
    );
    const expected = [
      "False",
      "InstanceCrashing",
      '1 of 1 instances is repeatedly exiting and restarting: container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.',
    ];
    for (const conditions of [deployment.conditions, workload.conditions]) {
      const available = findCondition(conditions, "Available");
      expect([available?.status, available?.reason, available?.message]).toEqual(expected);
    }
  });

  it("carries an image pull failure up instead of 'being provisioned'", () => {
    const pod = {
      phase: "Pending",
      containerStatuses: [
        {
          name: "app",
          image: "registry.example/app:missing",
          ready: false,
          restartCount: 0,
          state: { waiting: { reason: "ImagePullBackOff", message: "manifest unknown" } },
        },
      ],
    };
    const deployment = rollupWorkloadDeployment(
      { desiredReplicas: 1, generation: 1, instances: [instanceFrom("web-0", pod)] },
      { now },
    );
    const available = findCondition(deployment.conditions, "Available");
    expect(available?.reason).toBe("ImageUnavailable");
    expect(available?.message.startsWith("1 of 1 instances could not pull its image")).toBe(true);
  });

  it("carries an unreadable report up as an unknown state, not 'starting'", () => {
    const pod = {
      phase: "Unknown",
      reason: "ReportUnreadable",
      message:
        "the exit report of instance i-0abc could not be read: report chunk 2 of 3 is missing",
      containerStatuses: [
        {
          name: "app",
          image: "registry.example/app:1",
          ready: false,
          restartCount: 0,
          state: { waiting: { reason: "ReportUnreadable" } },
        },
      ],
    };
    const deployment = rollupWorkloadDeployment(
      { desiredReplicas: 1, generation: 1, instances: [instanceFrom("web-0", pod)] },
      { now },
    );
    const available = findCondition(deployment.conditions, "Available");
    expect([available?.status, available?.reason, available?.message]).toEqual([
      "False",
      "Unknown",
      "1 of 1 instances is in an unknown state: the exit report of instance i-0abc could not be read: report chunk 2 of 3 is missing.",
    ]);
  });
});
