import { encodeReportTags } from "@nebula/state-mapping";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ContainerView, PodView, Snapshot, WorkloadView } from "./model.js";
import { instance, iso, pod, snapshot, workload } from "./testing/fixtures.js";
import {
  deletionDeadline,
  EMPTY_MEMORY,
  podAvailability,
  selects,
  type Violation,
  violationLine,
  type WatchOptions,
  watchSamples,
} from "./watch.js";

const OPTIONS: WatchOptions = {
  stabilityWindowSeconds: 600,
  reactionSeconds: 5,
  pollIntervalSeconds: 2,
  apiHeadroomSeconds: 5,
  sampleSeconds: 1,
  slackSeconds: 10,
};

const CRASHING_LABELS = { app: "shop", placement: "crashing" };
const HEALTHY_LABELS = { app: "shop", placement: "healthy" };

const container = (fields: Partial<ContainerView> = {}): ContainerView => ({
  name: "app",
  init: false,
  ready: true,
  restarts: 0,
  runningSince: iso(0),
  startedAt: iso(0),
  waiting: undefined,
  terminated: undefined,
  lastExit: undefined,
  ...fields,
});

/** A Pod running its container since `since` after `restarts` restarts (the last exit just before). */
const running = (name: string, labels: Record<string, string>, restarts: number, since: number) =>
  pod(name, {
    labels,
    phase: "Running",
    restarts,
    containers: [
      container({
        restarts,
        runningSince: iso(since),
        lastExit:
          restarts === 0 ? undefined : { code: 1, reason: "Error", finishedAt: iso(since - 1) },
      }),
    ],
  });

const deployment = (name: string, labels: Record<string, string>, available: string) =>
  workload("WorkloadDeployment", name, {
    available,
    reason: available === "True" ? "Ready" : "InstanceCrashing",
    readyReplicas: available === "True" ? 1 : 0,
    selector: { matchLabels: labels, matchExpressions: [] },
    workloadRef: "shop",
  });

/** Samples at the given seconds, each built by `at`. */
const samples = (seconds: readonly number[], at: (t: number) => Partial<Snapshot>): Snapshot[] =>
  seconds.map((t) => snapshot(t, at(t)));

const range = (from: number, to: number): number[] =>
  Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe("rule 1: Available=True while no instance is available", () => {
  it("a crash loop's samples (restart, run, restart) read Available=True: one violation, named, with its moment", () => {
    // Restarts at 10 s and 40 s; the WorkloadDeployment reads Available=True all along.
    const seq = samples(range(0, 60), (t) => {
      const restarts = t < 10 ? 0 : t < 40 ? 1 : 2;
      const since = t < 10 ? 0 : t < 40 ? 10 : 40;
      return {
        pods: [running("shop-crashing-1", CRASHING_LABELS, restarts, since)],
        workloads: [deployment("shop-crashing", CRASHING_LABELS, "True")],
      };
    });
    const violations = watchSamples(seq, OPTIONS);
    expect(violations).toHaveLength(1);
    const v = violations[0] as Violation;
    expect(v).toMatchObject({
      kind: "available-crash-loop",
      object: "WorkloadDeployment shop-crashing",
      sinceSeconds: 10,
      elapsedSeconds: 16,
      at: "2026-11-30T16:00:16.000Z",
      lastSeconds: 60,
      samples: 45,
    });
    expect(v.seen).toContain("Available=True (Ready), 1/1 ready");
    expect(v.seen).toContain(
      'shop-crashing-1: container "app" restarted 6 s before (restarts 1; last exit code 1 Error at 2026-11-30T16:00:09Z), within the 600 s window',
    );
    expect(violationLine(v)).toMatch(
      /^VIOLATION available-crash-loop: WorkloadDeployment shop-crashing at 16 s \(2026-11-30T16:00:16.000Z; since 10 s, last 60 s, 45 samples\): /,
    );
  });

  it("the same crash loop with Available=False is no violation; nor is a flip within the operator's reaction", () => {
    const seq = samples(range(0, 60), (t) => ({
      pods: [running("shop-crashing-1", CRASHING_LABELS, t < 10 ? 0 : 1, t < 10 ? 0 : 10)],
      // The operator turns Available False 5 s after the restart shows.
      workloads: [deployment("shop-crashing", CRASHING_LABELS, t < 15 ? "True" : "False")],
    }));
    expect(watchSamples(seq, OPTIONS)).toEqual([]);
  });

  it("a steady Pod that restarted long ago is available; CrashLoopBackOff never is", () => {
    const steady = running("shop-healthy-1", HEALTHY_LABELS, 3, 0);
    expect(podAvailability(steady, Date.parse(iso(600)), EMPTY_MEMORY, OPTIONS).available).toBe(
      true,
    );
    expect(podAvailability(steady, Date.parse(iso(599)), EMPTY_MEMORY, OPTIONS)).toMatchObject({
      available: false,
      crashing: true,
    });
    const backOff = pod("p", {
      phase: "Running",
      containers: [container({ waiting: "CrashLoopBackOff", restarts: 4, ready: false })],
    });
    expect(podAvailability(backOff, Date.parse(iso(10_000)), EMPTY_MEMORY, OPTIONS)).toEqual({
      available: false,
      crashing: true,
      why: 'container "app" is waiting in CrashLoopBackOff (restarts 4)',
    });
  });

  it("restarts rising count as a restart when the Pod carries no times", () => {
    const seq = samples(range(0, 20), (t) => ({
      pods: [
        pod("shop-crashing-1", {
          labels: CRASHING_LABELS,
          phase: "Running",
          containers: [container({ restarts: t < 5 ? 2 : 3, runningSince: undefined })],
        }),
      ],
      workloads: [deployment("shop-crashing", CRASHING_LABELS, "True")],
    }));
    expect(watchSamples(seq, OPTIONS).map((v) => [v.kind, v.sinceSeconds])).toEqual([
      ["available-crash-loop", 5],
    ]);
  });

  it("partial availability is the roll-up's rule: one ready replica keeps Available=True", () => {
    const seq = samples(range(0, 30), () => ({
      pods: [
        running("a", CRASHING_LABELS, 0, 0),
        running("b", CRASHING_LABELS, 5, 3),
        running("other", HEALTHY_LABELS, 7, 3),
      ],
      workloads: [deployment("shop-crashing", CRASHING_LABELS, "True")],
    }));
    expect(watchSamples(seq, OPTIONS)).toEqual([]);
  });

  it("a Workload's instances are the Pods of its WorkloadDeployments", () => {
    const shop = (available: string): WorkloadView =>
      workload("Workload", "shop", { available, readyReplicas: 1, desiredReplicas: 2 });
    const pods: PodView[] = [
      running("shop-healthy-1", HEALTHY_LABELS, 0, 0),
      running("shop-crashing-1", CRASHING_LABELS, 2, 10),
    ];
    const both = [
      deployment("shop-healthy", HEALTHY_LABELS, "True"),
      deployment("shop-crashing", CRASHING_LABELS, "False"),
      shop("True"),
    ];
    // One placement serves: the Workload is available.
    expect(
      watchSamples(
        samples(range(10, 30), () => ({ pods, workloads: both })),
        OPTIONS,
      ),
    ).toEqual([]);
    // Only the crashing placement is its: Available=True is a violation.
    const onlyCrashing = [deployment("shop-crashing", CRASHING_LABELS, "False"), shop("True")];
    const found = watchSamples(
      samples(range(10, 30), () => ({ pods, workloads: onlyCrashing })),
      OPTIONS,
    );
    expect(found.map((v) => [v.kind, v.object])).toEqual([
      ["available-crash-loop", "Workload shop"],
    ]);
    // Available=True with no instance at all is the same contradiction.
    const empty = watchSamples(
      samples(range(0, 10), () => ({ pods: [], workloads: [shop("True")] })),
      OPTIONS,
    );
    expect(empty.map((v) => [v.kind, v.seen.endsWith("it matches no Pod")])).toEqual([
      ["available-none-ready", true],
    ]);
  });

  it("selectors match as the operator matches; an empty selector matches nothing", () => {
    const sel = (
      matchLabels: Record<string, string>,
      matchExpressions: { key: string; operator: string; values: string[] }[] = [],
    ) => ({ matchLabels, matchExpressions });
    expect(selects(sel({ app: "shop" }), { app: "shop", x: "y" })).toBe(true);
    expect(selects(sel({ app: "shop" }), { app: "other" })).toBe(false);
    expect(selects(sel({}), { app: "shop" })).toBe(false);
    expect(selects(undefined, { app: "shop" })).toBe(false);
    expect(selects(sel({}, [{ key: "tier", operator: "In", values: ["a"] }]), { tier: "a" })).toBe(
      true,
    );
    expect(
      selects(sel({}, [{ key: "tier", operator: "NotIn", values: ["a"] }]), { tier: "a" }),
    ).toBe(false);
    expect(selects(sel({}, [{ key: "tier", operator: "Exists", values: [] }]), {})).toBe(false);
    expect(selects(sel({}, [{ key: "tier", operator: "DoesNotExist", values: [] }]), {})).toBe(
      true,
    );
  });

  it("property: with no reaction allowed, exactly the samples that read Available=True within a restart's window are flagged", () => {
    const window = 60;
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            gap: fc.integer({ min: 1, max: 40 }),
            restart: fc.boolean(),
            available: fc.boolean(),
          }),
          { minLength: 1, maxLength: 60 },
        ),
        (steps) => {
          const options = { ...OPTIONS, stabilityWindowSeconds: window, reactionSeconds: 0 };
          let t = 0;
          let restarts = 0;
          let since = -10_000;
          let expected = 0;
          const seq: Snapshot[] = [];
          for (const step of steps) {
            t += step.gap;
            if (step.restart) {
              restarts += 1;
              since = t;
            }
            if (step.available && restarts > 0 && t - since < window) expected += 1;
            seq.push(
              snapshot(t, {
                pods: [running("p", CRASHING_LABELS, restarts, since)],
                workloads: [deployment("d", CRASHING_LABELS, step.available ? "True" : "False")],
              }),
            );
          }
          const flagged = watchSamples(seq, options).reduce((n, v) => n + v.samples, 0);
          expect(flagged).toBe(expected);
        },
      ),
    );
  });

  it("property: a contradiction becomes one violation exactly when it outlasts the reaction", () => {
    fc.assert(
      fc.property(
        fc.array(fc.boolean(), { minLength: 1, maxLength: 80 }),
        fc.integer({ min: 0, max: 8 }),
        (availableAt, reaction) => {
          // A Pod restarting every second; Available as generated, one sample a second.
          const seq = availableAt.map((available, t) =>
            snapshot(t, {
              pods: [running("p", CRASHING_LABELS, t + 1, t)],
              workloads: [deployment("d", CRASHING_LABELS, available ? "True" : "False")],
            }),
          );
          // Reference: maximal runs of True; a run of n samples lasts n - 1 seconds.
          const runs: { start: number; length: number }[] = [];
          availableAt.forEach((available, t) => {
            const last = runs.at(-1);
            if (!available) return;
            if (last !== undefined && last.start + last.length === t) last.length += 1;
            else runs.push({ start: t, length: 1 });
          });
          const expected = runs
            .filter((r) => (reaction === 0 ? r.length >= 1 : r.length - 1 > reaction))
            .map((r) => ({
              sinceSeconds: r.start,
              elapsedSeconds: reaction === 0 ? r.start : r.start + reaction + 1,
            }));
          const got = watchSamples(seq, { ...OPTIONS, reactionSeconds: reaction }).map((v) => ({
            sinceSeconds: v.sinceSeconds,
            elapsedSeconds: v.elapsedSeconds,
          }));
          expect(got).toEqual(expected);
        },
      ),
    );
  });

  it("property: a steady Pod that restarted before the window is never flagged, whatever Available says", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1000 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 40 }),
        (restarts, availableAt) => {
          const seq = availableAt.map((available, i) =>
            snapshot(700 + i, {
              pods: [running("p", CRASHING_LABELS, restarts, 0)],
              workloads: [deployment("d", CRASHING_LABELS, available ? "True" : "False")],
            }),
          );
          expect(watchSamples(seq, OPTIONS)).toEqual([]);
        },
      ),
    );
  });
});

describe("rule 2: ContainerStatusUnknown although the instance reported", () => {
  const report = (final: boolean) =>
    encodeReportTags({
      v: 1,
      seq: 7,
      time: iso(20),
      final,
      containers: [
        {
          name: "app",
          init: false,
          state: "terminated",
          restarts: 0,
          reason: "Error",
          exitCode: 143,
        },
      ],
    });
  const unknownPod = pod("delete-me", {
    phase: "Failed",
    reason: "ContainerStatusUnknown",
    containers: [
      container({ ready: false, runningSince: undefined, terminated: "ContainerStatusUnknown" }),
    ],
  });

  it("is a violation once it outlasts the vnode's next poll (poll + sample + slack)", () => {
    const seq = samples(range(0, 20), () => ({
      pods: [unknownPod],
      instances: [instance("delete-me", "stopped", report(true))],
    }));
    const found = watchSamples(seq, OPTIONS);
    expect(found.map((v) => [v.kind, v.object, v.sinceSeconds, v.elapsedSeconds])).toEqual([
      ["unknown-despite-report", "Pod delete-me", 0, 14],
    ]);
    expect(found[0]?.seen).toBe(
      'container "app" terminated with ContainerStatusUnknown while instance i-delete-me (stopped) carries a final report (seq 7: "app" terminated Error exit 143)',
    );
  });

  it("is no violation without a final report, or when the Pod is corrected in time", () => {
    const notFinal = samples(range(0, 30), () => ({
      pods: [unknownPod],
      instances: [instance("delete-me", "stopped", report(false))],
    }));
    expect(watchSamples(notFinal, OPTIONS)).toEqual([]);
    const noReport = samples(range(0, 30), () => ({
      pods: [unknownPod],
      instances: [instance("delete-me", "stopped", { "nebula:pod-uid": "uid-delete-me" })],
    }));
    expect(watchSamples(noReport, OPTIONS)).toEqual([]);
    const corrected = samples(range(0, 30), (t) => ({
      pods: [
        t < 13
          ? unknownPod
          : pod("delete-me", {
              phase: "Failed",
              containers: [
                container({ ready: false, runningSince: undefined, terminated: "Error" }),
              ],
            }),
      ],
      instances: [instance("delete-me", "stopped", report(true))],
    }));
    expect(watchSamples(corrected, OPTIONS)).toEqual([]);
  });

  it("property: flagged iff the report is final and the contradiction outlasts its allowance", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 30 }),
        fc.integer({ min: 0, max: 30 }),
        fc.boolean(),
        (reportAt, fixedAfter, final) => {
          const seq = samples(range(0, 40), (t) => ({
            pods: [
              t < reportAt + fixedAfter
                ? unknownPod
                : pod("delete-me", {
                    phase: "Failed",
                    containers: [container({ terminated: "Error" })],
                  }),
            ],
            instances: [
              instance(
                "delete-me",
                "stopped",
                t >= reportAt ? report(final) : { "nebula:pod-uid": "uid-delete-me" },
              ),
            ],
          }));
          // The contradiction lasts from reportAt to reportAt + fixedAfter - 1 (sample times).
          const lasts = Math.min(reportAt + fixedAfter - 1, 40) - reportAt;
          const flagged = watchSamples(seq, OPTIONS).length > 0;
          expect(flagged).toBe(final && fixedAfter > 0 && lasts > 2 + 1 + 10);
        },
      ),
    );
  });
});

describe("rule 3: a deleted Pod still present past its deadline", () => {
  const deleted = (deletedAt: number, grace: number) =>
    pod("delete-me", {
      phase: "Running",
      deleting: true,
      deletionTimestamp: iso(deletedAt),
      deletionGracePeriodSeconds: grace,
    });

  it("the deadline: deletionTimestamp + grace + headroom + 2 polls + one sample + slack", () => {
    expect(deletionDeadline(deleted(100, 5), OPTIONS)).toBe(
      Date.parse(iso(100)) + (5 + 5 + 2 * 2 + 1 + 10) * 1000,
    );
    expect(deletionDeadline(pod("alive"), OPTIONS)).toBeUndefined();
  });

  it("is flagged only after its deadline, once, at the first sample past it", () => {
    const seq = samples(range(100, 140), () => ({ pods: [deleted(100, 5)] }));
    const found = watchSamples(seq, OPTIONS);
    expect(found.map((v) => [v.kind, v.object, v.elapsedSeconds, v.samples])).toEqual([
      ["deleted-pod-lingers", "Pod delete-me", 126, 15],
    ]);
    expect(found[0]?.seen).toContain(
      "deletionTimestamp 2026-11-30T16:01:40Z + grace 5 s + headroom 5 s + 2 polls of 2 s + sample 1 s + slack 10 s",
    );
    // Gone at its deadline: nothing.
    const gone = samples(range(100, 140), (t) => ({ pods: t <= 125 ? [deleted(100, 5)] : [] }));
    expect(watchSamples(gone, OPTIONS)).toEqual([]);
  });

  it("property: flagged iff a sample still shows it after its deadline, first at that sample", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 0, max: 60 }),
        fc.integer({ min: 0, max: 120 }),
        (deletedAt, grace, goneAt) => {
          const seq = samples(range(0, 120), (t) => ({
            pods: t < goneAt ? [deleted(deletedAt, grace)] : [],
          }));
          const deadline = deletedAt + grace + 5 + 4 + 1 + 10;
          const firstLate = deadline + 1;
          const found = watchSamples(seq, OPTIONS);
          if (goneAt > firstLate) expect(found.map((v) => v.elapsedSeconds)).toEqual([firstLate]);
          else expect(found).toEqual([]);
        },
      ),
    );
  });
});
