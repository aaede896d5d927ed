import type { ExitReport } from "@nebula/state-mapping";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { STARTUP_PHASES, startupBreakdown, startupLine } from "./startup.js";

const T0 = Date.parse("2026-12-03T05:00:00.000Z");
const iso = (offsetMs: number) => new Date(T0 + offsetMs).toISOString();

/** A report with the host's start-up times (only the fields the breakdown reads). */
function report(fields: {
  supervisor?: number;
  containers?: Array<{ pullFrom?: number; pullTo?: number; started?: number }>;
}): ExitReport {
  return {
    ...(fields.supervisor === undefined ? {} : { supervisorStartedAt: iso(fields.supervisor) }),
    containers: (fields.containers ?? []).map((c, i) => ({
      name: `c${i}`,
      ...(c.pullFrom === undefined ? {} : { pullStartedAt: iso(c.pullFrom) }),
      ...(c.pullTo === undefined ? {} : { pullFinishedAt: iso(c.pullTo) }),
      ...(c.started === undefined ? {} : { firstStartedAt: iso(c.started) }),
    })),
  } as unknown as ExitReport;
}

describe("startupBreakdown", () => {
  it("splits creation → Ready into the seven phases, each from the previous end", () => {
    const b = startupBreakdown({
      createdAt: new Date(T0),
      scheduledAt: iso(100),
      requestedAt: T0 + 400,
      launchedAt: T0 + 1_000,
      report: report({
        supervisor: 31_000,
        containers: [
          { pullFrom: 31_100, pullTo: 40_000, started: 41_000 },
          { pullFrom: 31_100, pullTo: 43_000, started: 44_000 },
        ],
      }),
      readyAt: T0 + 46_000,
    });
    expect(b.phases).toEqual([
      { phase: "schedule", seconds: 0.1 },
      { phase: "admit", seconds: 0.3 },
      { phase: "launch", seconds: 0.6 },
      { phase: "boot", seconds: 30 },
      { phase: "pull", seconds: 12 },
      { phase: "start", seconds: 1 },
      { phase: "ready", seconds: 2 },
    ]);
    expect(b.totalSeconds).toBe(46);
    expect(startupLine(b)).toBe(
      "Ready 46.0 s after creation: scheduled 0.1 s, admitted 0.3 s, RunInstances 0.6 s, host boot 30.0 s, image pull 12.0 s, container start 1.0 s, ready 2.0 s",
    );
  });

  it("leaves out a phase whose end is unknown; the next runs from the last known moment", () => {
    // No pull (the image was there) and no report of the supervisor's start.
    const b = startupBreakdown({
      createdAt: iso(0),
      requestedAt: T0 + 500,
      report: report({ containers: [{ started: 20_000 }] }),
      readyAt: T0 + 21_000,
    });
    expect(b.phases).toEqual([
      { phase: "admit", seconds: 0.5 },
      { phase: "start", seconds: 19.5 },
      { phase: "ready", seconds: 1 },
    ]);
    expect(b.totalSeconds).toBe(21);
  });

  it("never counts a negative phase: a host clock behind the controller's moves nothing", () => {
    const b = startupBreakdown({
      createdAt: iso(0),
      launchedAt: T0 + 5_000,
      report: report({ supervisor: 4_000, containers: [{ started: 6_000 }] }),
      readyAt: T0 + 7_000,
    });
    expect(b.phases).toEqual([
      { phase: "launch", seconds: 5 },
      { phase: "boot", seconds: 0 },
      { phase: "start", seconds: 1 },
      { phase: "ready", seconds: 1 },
    ]);
    expect(b.totalSeconds).toBe(7);
  });

  it("without a creation time: no total, and the first known moment starts the phases", () => {
    const b = startupBreakdown({ requestedAt: T0, launchedAt: T0 + 700, readyAt: T0 + 2_000 });
    expect(b).toEqual({
      phases: [
        { phase: "launch", seconds: 0.7 },
        { phase: "ready", seconds: 1.3 },
      ],
      warm: false,
    });
    expect(startupLine(b)).toBe("Ready: RunInstances 0.7 s, ready 1.3 s");
  });

  it("a warm start names its launch StartInstances", () => {
    const b = startupBreakdown({
      requestedAt: T0,
      launchedAt: T0 + 300,
      readyAt: T0 + 2_000,
      warm: true,
    });
    expect(b.warm).toBe(true);
    expect(startupLine(b)).toBe("Ready: StartInstances (warm pool) 0.3 s, ready 1.7 s");
  });

  it("is total: any input gives phases in order that add up to the total, never negative", () => {
    const moment = fc.option(fc.integer({ min: -10_000_000, max: 10_000_000 }), { nil: undefined });
    const junk = fc.oneof(fc.string(), fc.constant(null), fc.object(), fc.double());
    fc.assert(
      fc.property(
        moment,
        moment,
        moment,
        moment,
        moment,
        fc.array(fc.record({ pullTo: moment, started: moment, pullFrom: moment }), {
          maxLength: 3,
        }),
        fc.integer({ min: -10_000_000, max: 10_000_000 }),
        fc.option(junk, { nil: undefined }),
        (created, scheduled, requested, launched, supervisor, containers, ready, bad) => {
          const b = startupBreakdown({
            createdAt: created === undefined ? (bad as string | undefined) : iso(created),
            scheduledAt: scheduled === undefined ? undefined : iso(scheduled),
            requestedAt: requested === undefined ? undefined : T0 + requested,
            launchedAt: launched === undefined ? undefined : T0 + launched,
            report: report({
              ...(supervisor === undefined ? {} : { supervisor }),
              containers: containers.map((c) =>
                Object.fromEntries(Object.entries(c).filter(([, v]) => v !== undefined)),
              ),
            }),
            readyAt: T0 + ready,
          });
          const order = b.phases.map((p) => STARTUP_PHASES.indexOf(p.phase));
          expect(order).toEqual([...order].sort((x, y) => x - y));
          expect(new Set(order).size).toBe(order.length);
          for (const p of b.phases) expect(p.seconds).toBeGreaterThanOrEqual(0);
          if (b.totalSeconds !== undefined) {
            const sum = b.phases.reduce((s, p) => s + p.seconds, 0);
            expect(sum).toBeCloseTo(b.totalSeconds, 6);
          }
          expect(typeof startupLine(b)).toBe("string");
        },
      ),
    );
  });

  it("answers what it was not typed for without throwing", () => {
    for (const input of [undefined, null, 42, "x", {}, { readyAt: "soon", report: "junk" }]) {
      const b = startupBreakdown(input as never);
      expect(Array.isArray(b.phases)).toBe(true);
      expect(typeof startupLine(b)).toBe("string");
    }
    expect(startupLine(undefined as never)).toBe("Ready");
  });
});
