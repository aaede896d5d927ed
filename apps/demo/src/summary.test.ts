import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Verdict } from "./scenarios.js";
import {
  type SummaryInput,
  stats,
  succeeded,
  summaryJson,
  summaryLine,
  summaryLines,
} from "./summary.js";
import type { Violation } from "./watch.js";

const OK: Verdict = {
  id: "prints-and-exits",
  expected: "6/6 exits",
  observed: "6/6 exits",
  ok: true,
};
const BAD: Verdict = { id: "oom-killed", expected: "OOMKilled", observed: "Running", ok: false };

const input = (fields: Partial<SummaryInput> = {}): SummaryInput => ({
  verdicts: [OK],
  latencies: {
    exitToStatus: [3000, 1000, 2000],
    terminalToTerminated: [],
    channel: { on: [], off: [] },
  },
  vnodeLatencies: undefined,
  polledLatencies: undefined,
  warm: undefined,
  instancesLeft: 0,
  podsLeft: [],
  keep: false,
  elapsedMs: 123_456,
  aborted: undefined,
  violations: [],
  watchedSamples: 240,
  ...fields,
});

const VIOLATION: Violation = {
  kind: "available-crash-loop",
  object: "WorkloadDeployment shop-crashing",
  elapsedSeconds: 61.2,
  at: "2026-11-30T16:01:01.200Z",
  sinceSeconds: 55,
  lastSeconds: 90,
  samples: 29,
  seen: 'Available=True (Ready), 1/1 ready, while none of its 1 Pod is available: shop-crashing-x: container "app" restarted 3 s before',
};

describe("stats", () => {
  it("median and max; null without samples", () => {
    expect(stats([3, 1, 2])).toEqual({ n: 3, medianMs: 2, maxMs: 3 });
    expect(stats([4, 1, 2, 3])).toEqual({ n: 4, medianMs: 2.5, maxMs: 4 });
    expect(stats([])).toEqual({ n: 0, medianMs: null, maxMs: null });
    expect(stats([Number.NaN, 5])).toEqual({ n: 1, medianMs: 5, maxMs: 5 });
  });

  it("the median lies between the smallest and the largest sample", () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ noNaN: true, min: 0, max: 1e9 }), { minLength: 1 }),
        (xs) => {
          const s = stats(xs);
          expect(s.medianMs).toBeGreaterThanOrEqual(Math.min(...xs));
          expect(s.medianMs).toBeLessThanOrEqual(s.maxMs as number);
        },
      ),
    );
  });
});

describe("the summary", () => {
  it("succeeds only with every scenario ok, 0 instances left and no early stop", () => {
    expect(succeeded(input())).toBe(true);
    expect(succeeded(input({ verdicts: [OK, BAD] }))).toBe(false);
    expect(succeeded(input({ instancesLeft: 1 }))).toBe(false);
    expect(succeeded(input({ instancesLeft: undefined }))).toBe(false);
    expect(succeeded(input({ aborted: "timeout: ..." }))).toBe(false);
    expect(succeeded(input({ verdicts: [] }))).toBe(false);
    expect(succeeded(input({ violations: [VIOLATION] }))).toBe(false);
    // Pods whose removal lags are reported, not judged (the watch judges them by their deadline).
    expect(succeeded(input({ podsLeft: ["job (Succeeded)"] }))).toBe(true);
  });

  it("the SUMMARY line is the JSON with expected, observed, ok per scenario and instancesLeft", () => {
    const line = summaryLine(input({ verdicts: [OK, BAD], instancesLeft: 2 }));
    expect(line.startsWith("SUMMARY {")).toBe(true);
    const json = JSON.parse(line.slice("SUMMARY ".length));
    expect(json).toMatchObject({
      ok: false,
      instancesLeft: 2,
      scenarios: {
        "prints-and-exits": { expected: "6/6 exits", observed: "6/6 exits", ok: true },
        "oom-killed": { expected: "OOMKilled", observed: "Running", ok: false },
      },
      latencies: { exitToStatus: { n: 3, medianMs: 2000, maxMs: 3000 } },
      elapsedSeconds: 123.5,
      aborted: null,
    });
    expect(summaryJson(input({ instancesLeft: undefined })).instancesLeft).toBeNull();
  });

  it("lists the watch's violations: object, kind, moment (elapsed and wall time), what was seen", () => {
    const json = JSON.parse(
      summaryLine(input({ violations: [VIOLATION] })).slice("SUMMARY ".length),
    );
    expect(json.ok).toBe(false);
    expect(json.violations).toEqual([VIOLATION]);
    expect(json.watchedSamples).toBe(240);
    const text = summaryLines(input({ violations: [VIOLATION] })).join("\n");
    expect(text).toContain("SUMMARY  NOT OK");
    expect(text).toContain("watch: 240 samples, 1 violation:");
    expect(text).toContain(
      "VIOLATION available-crash-loop: WorkloadDeployment shop-crashing at 61.2 s (2026-11-30T16:01:01.200Z; since 55 s, last 90 s, 29 samples): Available=True",
    );
    expect(summaryLines(input()).join("\n")).toContain("watch: 240 samples, no contradiction");
  });

  it("the human summary shows each scenario, the latencies and the instances left", () => {
    const text = summaryLines(
      input({
        verdicts: [OK, BAD],
        vnodeLatencies: {
          exitToStatus: { count: 4, meanSeconds: 1.5 },
          terminalToTerminated: { count: 0, meanSeconds: null },
          terminalToTerminate: { count: 0, meanSeconds: null },
          eventToStatus: { count: 0, meanSeconds: null },
          stages: {},
          startup: { count: 2, meanSeconds: 20 },
          startupPhases: {
            boot: { count: 2, meanSeconds: 5 },
            pull: { count: 0, meanSeconds: null },
          },
          startupByStart: {
            warm: { count: 1, meanSeconds: 4 },
            cold: { count: 1, meanSeconds: 36 },
          },
        },
        podsLeft: ["job-completes (Succeeded)"],
      }),
    ).join("\n");
    expect(text).toContain("SUMMARY  NOT OK");
    expect(text).toMatch(
      /ok {3}prints-and-exits\n {7}expected: 6\/6 exits\n {7}observed: 6\/6 exits/,
    );
    expect(text).toMatch(/FAIL oom-killed/);
    expect(text).toContain("median 2.0 s, max 3.0 s (n=3)");
    expect(text).toContain("mean 1.5 s (n=4)");
    expect(text).toContain("Pod created -> Ready (start-up):             mean 20.0 s (n=2)");
    expect(text).toContain("by phase (means): boot 5.0 s, pull -");
    expect(text).toContain("by start: warm mean 4.0 s (n=1); cold mean 36.0 s (n=1)");
    expect(text).toContain("instances left running: 0");
    expect(text).toContain("job-completes (Succeeded)");
  });

  it("the event channel's comparison: the same Pods on and off side by side, in the text and the JSON", () => {
    const mean = (count: number, meanSeconds: number | null) => ({ count, meanSeconds });
    const none = mean(0, null);
    const on = {
      exitToStatus: mean(12, 0.9),
      terminalToTerminated: mean(6, 3),
      terminalToTerminate: mean(6, 2.5),
      eventToStatus: mean(30, 0.6),
      stages: {
        delivery: mean(30, 0.2),
        wait: mean(20, 0.15),
        read: mean(20, 0.2),
        publish: mean(25, 0.1),
      },
      startup: none,
      startupPhases: {},
      startupByStart: { warm: none, cold: none },
    };
    const off = {
      ...on,
      exitToStatus: mean(5, 6.5),
      terminalToTerminate: mean(5, 0.8),
      eventToStatus: none,
      stages: { delivery: none, wait: none, read: none, publish: none },
    };
    const given = input({
      latencies: {
        exitToStatus: [1000, 7000],
        terminalToTerminated: [],
        channel: { on: [1000, 2000, 1000], off: [7000, 9000, 5000] },
      },
      vnodeLatencies: on,
      polledLatencies: off,
    });
    const text = summaryLines(given).join("\n");
    expect(text).toContain(
      "exit -> status, observed by the demo:   on median 1.0 s, max 2.0 s (n=3); off median 7.0 s, max 9.0 s (n=3)",
    );
    expect(text).toContain(
      "exit -> status written (vnode):         on mean 0.90 s (n=12); off mean 6.50 s (n=5)",
    );
    expect(text).toContain(
      "terminal -> TerminateInstances (vnode): on mean 2.50 s (n=6); off mean 0.80 s (n=5)",
    );
    expect(text).toContain(
      "its stages (means): delivery 0.200 s, wait 0.150 s, read 0.200 s, publish 0.100 s",
    );
    const json = summaryJson(given);
    expect(json.latencies.channel.on.exitToStatus).toEqual({ n: 3, medianMs: 1000, maxMs: 2000 });
    expect(json.latencies.channel.off.vnode?.exitToStatus).toEqual(mean(5, 6.5));
    // Without the comparison (its node unusable, no Pods seen) there is no such block.
    expect(summaryLines(input()).join("\n")).not.toContain("the event channel");
  });

  it("says why the instances were not counted", () => {
    expect(summaryLines(input({ instancesLeft: undefined, keep: true })).join("\n")).toContain(
      "not reclaimed (--keep)",
    );
    expect(
      summaryLines(input({ instancesLeft: undefined, aborted: "interrupted (SIGINT)" })).join("\n"),
    ).toContain("stopped early: interrupted (SIGINT)");
  });
});
