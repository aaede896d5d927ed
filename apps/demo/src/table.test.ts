import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Verdict } from "./scenarios.js";
import {
  clock,
  ec2CallsText,
  instanceCounts,
  podCounts,
  progressKey,
  progressLine,
  redraw,
  renderTable,
} from "./table.js";
import { instance, pod, snapshot, workload } from "./testing/fixtures.js";

const SNAPSHOT = snapshot(72, {
  pods: [
    pod("a", { phase: "Running", reason: "CrashLoopBackOff" }),
    pod("b", { phase: "Running", reason: "CrashLoopBackOff" }),
    pod("c", { phase: "Running" }),
    pod("d", { phase: "Failed", reason: "OOMKilled" }),
    pod("e", { phase: "Pending", reason: "ImagePullBackOff", deleting: true }),
  ],
  instances: [
    instance("a", "running"),
    instance("b", "running"),
    instance("d", "terminated"),
    instance("e", "pending"),
  ],
  workloads: [
    workload("Workload", "shop", {
      available: "True",
      reason: "AvailablePlacementFound",
      readyReplicas: 1,
      desiredReplicas: 2,
    }),
    workload("WorkloadDeployment", "shop-crashing", {
      available: "False",
      reason: "InstanceCrashing",
    }),
  ],
  ec2Calls: {
    DescribeInstances: 30,
    RunInstances: 5,
    StopInstances: 1,
    TerminateInstances: 1,
    CreateTags: 0,
  },
});

const VERDICTS: Verdict[] = [
  { id: "prints-and-exits", expected: "e", observed: "2/2 replicas report their exit", ok: true },
  { id: "oom-killed", expected: "e", observed: "Running", ok: false },
];

describe("the live table", () => {
  it("counts Pods by phase and reason, in phase order", () => {
    expect(podCounts(SNAPSHOT)).toEqual([
      { phase: "Pending", reason: "ImagePullBackOff", count: 1, deleting: 1 },
      { phase: "Running", reason: "CrashLoopBackOff", count: 2, deleting: 0 },
      { phase: "Running", reason: "", count: 1, deleting: 0 },
      { phase: "Failed", reason: "OOMKilled", count: 1, deleting: 0 },
    ]);
  });

  it("counts instances by EC2 state, in lifecycle order", () => {
    expect(instanceCounts(SNAPSHOT)).toEqual([
      { state: "pending", count: 1 },
      { state: "running", count: 2 },
      { state: "terminated", count: 1 },
    ]);
  });

  it("sums EC2 calls and names the busiest actions", () => {
    expect(ec2CallsText(SNAPSHOT.ec2Calls)).toBe(
      "37 (DescribeInstances 30, RunInstances 5, StopInstances 1, TerminateInstances 1, …)",
    );
    expect(ec2CallsText({})).toBe("0");
  });

  it("renders every section", () => {
    const text = renderTable({
      snapshot: SNAPSHOT,
      verdicts: VERDICTS,
      stage: "running the scenarios",
    }).join("\n");
    expect(text).toContain("Nebula demo  1:12  running the scenarios");
    expect(text).toContain("EC2 calls by nebula-vnode: 37");
    expect(text).toMatch(/Running\s+CrashLoopBackOff\s+2\s+running\s+2/);
    expect(text).toContain("(1 deleting)");
    expect(text).toMatch(/WorkloadDeployment shop-crashing\s+False\s+0\/1\s+InstanceCrashing/);
    expect(text).toMatch(/ok prints-and-exits\s+2\/2 replicas report their exit/);
    expect(text).toMatch(/\.\. oom-killed\s+Running/);
  });

  it("an empty world renders 'none' rows", () => {
    const text = renderTable({ snapshot: snapshot(0), verdicts: [], stage: "starting" }).join("\n");
    expect(text).toContain("PODS (0)");
    expect(text).toContain("  none");
  });

  it("never draws a line wider than asked", () => {
    fc.assert(
      fc.property(fc.integer({ min: 20, max: 200 }), fc.string(), (width, name) => {
        const snap = snapshot(1, {
          pods: [pod(name, { reason: name })],
          workloads: [workload("Workload", name)],
        });
        for (const line of renderTable({ snapshot: snap, verdicts: VERDICTS, stage: name }, width))
          expect([...line].length).toBeLessThanOrEqual(width);
      }),
    );
  });

  it("redraw moves up over the previous drawing and clears it", () => {
    expect(redraw(0, ["a", "b"])).toBe("\u001b[0Ja\nb\n");
    expect(redraw(3, ["x"])).toBe("\u001b[3F\u001b[0Jx\n");
  });

  it("--ci: the progress key ignores the clock and the EC2 call count", () => {
    const view = { snapshot: SNAPSHOT, verdicts: VERDICTS, stage: "running" };
    const later = {
      ...view,
      snapshot: { ...SNAPSHOT, elapsedMs: 99_000, ec2Calls: { DescribeInstances: 99 } },
    };
    expect(progressKey(later)).toBe(progressKey(view));
    expect(progressKey(view)).toBe(
      "running | pods Pending/ImagePullBackOff=1 Running/CrashLoopBackOff=2 Running=1 Failed/OOMKilled=1 | instances pending=1 running=2 terminated=1 | workloads shop=True/AvailablePlacementFound shop-crashing=False/InstanceCrashing | scenarios ok 1/2",
    );
    expect(progressLine(view)).toMatch(/^\[1:12\] running \| .* \| ec2 calls 37$/);
  });

  it("clock: m:ss", () => {
    expect(clock(0)).toBe("0:00");
    expect(clock(61_999)).toBe("1:01");
    expect(clock(-5)).toBe("0:00");
  });
});
