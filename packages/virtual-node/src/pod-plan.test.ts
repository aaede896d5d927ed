import type { V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { activeDeadlineLeftMs, graceSeconds, planPod } from "./pod-plan.js";

const finalizer = "nebula.dev/instance-reclaim";
const pod = (over: {
  finalizers?: string[];
  deleting?: boolean;
  phase?: string;
  deletionGrace?: number;
  specGrace?: number;
}): V1Pod => ({
  metadata: {
    name: "p",
    namespace: "default",
    uid: "u",
    ...(over.finalizers ? { finalizers: over.finalizers } : {}),
    ...(over.deleting ? { deletionTimestamp: new Date("2026-11-30T15:00:00Z") } : {}),
    ...(over.deletionGrace !== undefined ? { deletionGracePeriodSeconds: over.deletionGrace } : {}),
  },
  spec: {
    containers: [{ name: "c" }],
    ...(over.specGrace !== undefined ? { terminationGracePeriodSeconds: over.specGrace } : {}),
  },
  ...(over.phase ? { status: { phase: over.phase } } : {}),
});

describe("planPod", () => {
  it("adds the finalizer before anything runs", () => {
    expect(planPod(pod({}), { finalizer })).toEqual({ kind: "AddFinalizer" });
    expect(planPod(pod({ finalizers: [finalizer], phase: "Pending" }), { finalizer })).toEqual({
      kind: "Run",
    });
  });

  it("tears a finished Pod down and never runs it again", () => {
    for (const phase of ["Succeeded", "Failed"]) {
      expect(planPod(pod({ finalizers: [finalizer], phase }), { finalizer })).toEqual({
        kind: "Teardown",
        deleting: false,
        graceSeconds: 30,
      });
      expect(planPod(pod({ phase }), { finalizer })).toEqual({ kind: "Done" });
    }
  });

  it("deletion: teardown with the deletion's grace; unlaunched Pods go at once", () => {
    expect(
      planPod(pod({ finalizers: [finalizer], deleting: true, deletionGrace: 5, specGrace: 60 }), {
        finalizer,
      }),
    ).toEqual({ kind: "Teardown", deleting: true, graceSeconds: 5 });
    expect(planPod(pod({ deleting: true }), { finalizer })).toEqual({ kind: "DeleteUnlaunched" });
  });

  it("property: a terminal or deleted Pod is never Run and never gets a new finalizer", () => {
    fc.assert(
      fc.property(
        fc.boolean(),
        fc.constantFrom("Pending", "Running", "Succeeded", "Failed", "Unknown", undefined),
        fc.boolean(),
        (held, phase, deleting) => {
          const step = planPod(
            pod({
              ...(held ? { finalizers: [finalizer] } : {}),
              ...(phase ? { phase } : {}),
              deleting,
            }),
            { finalizer },
          );
          if (deleting || phase === "Succeeded" || phase === "Failed") {
            expect(["Teardown", "DeleteUnlaunched", "Done"]).toContain(step.kind);
          }
          if (step.kind === "Teardown") expect(held).toBe(true);
        },
      ),
    );
  });
});

describe("graceSeconds", () => {
  it("the deletion's grace wins over the spec's; default 30; never negative", () => {
    expect(graceSeconds(pod({ deletionGrace: 5, specGrace: 60 }))).toBe(5);
    expect(graceSeconds(pod({ deletionGrace: 0, specGrace: 60 }))).toBe(0);
    expect(graceSeconds(pod({ specGrace: 60 }))).toBe(60);
    expect(graceSeconds(pod({}))).toBe(30);
    expect(graceSeconds(pod({ specGrace: -3 }))).toBe(0);
  });
});

describe("activeDeadlineLeftMs", () => {
  const t0 = Date.parse("2026-12-03T08:00:00Z");
  const withDeadline = (deadline: unknown, startTime: unknown, phase = "Running"): V1Pod =>
    ({
      spec: { activeDeadlineSeconds: deadline, containers: [] },
      status: { phase, startTime },
    }) as V1Pod;

  it("counts from status.startTime, a Date or the API's string", () => {
    expect(activeDeadlineLeftMs(withDeadline(30, new Date(t0)), t0 + 10_000)).toBe(20_000);
    expect(activeDeadlineLeftMs(withDeadline(30, "2026-12-03T08:00:00Z"), t0 + 31_000)).toBe(
      -1_000,
    );
  });

  it("nothing to count: no deadline, no start time, a finished Pod", () => {
    expect(activeDeadlineLeftMs(withDeadline(undefined, new Date(t0)), t0)).toBeUndefined();
    expect(activeDeadlineLeftMs(withDeadline(30, undefined), t0)).toBeUndefined();
    expect(activeDeadlineLeftMs(withDeadline(30, new Date(t0), "Failed"), t0 + 60_000)).toBe(
      undefined,
    );
  });

  it("is total: any deadline and start time answer a number or undefined, never throw", () => {
    fc.assert(
      fc.property(fc.anything(), fc.anything(), fc.integer(), (deadline, start, now) => {
        const left = activeDeadlineLeftMs(withDeadline(deadline, start), now);
        expect(left === undefined || Number.isFinite(left)).toBe(true);
      }),
    );
  });
});
