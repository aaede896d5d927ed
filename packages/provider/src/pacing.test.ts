import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { initialPacing, isOutage, nextPacing, type PollOutcome } from "./pacing.js";

const bounds = { baseMs: 10_000, maxMs: 120_000, outageAfterFailures: 3 };

describe("pacing", () => {
  it("slows down under throttling and recovers", () => {
    let p = initialPacing(bounds);
    p = nextPacing(p, "Throttled", bounds);
    p = nextPacing(p, "Throttled", bounds);
    expect(p.intervalMs).toBe(40_000);
    expect(isOutage(p, bounds)).toBe(false);
    for (let i = 0; i < 10; i++) p = nextPacing(p, "Throttled", bounds);
    expect(p.intervalMs).toBe(120_000);
    p = nextPacing(p, "ok", bounds);
    expect(p.intervalMs).toBe(60_000);
    for (let i = 0; i < 10; i++) p = nextPacing(p, "ok", bounds);
    expect(p.intervalMs).toBe(10_000);
  });

  it("reports an outage after consecutive failures, not after throttling", () => {
    let p = initialPacing(bounds);
    p = nextPacing(p, "Unavailable", bounds);
    p = nextPacing(p, "Unavailable", bounds);
    expect(isOutage(p, bounds)).toBe(false);
    p = nextPacing(p, "Unavailable", bounds);
    expect(isOutage(p, bounds)).toBe(true);
    p = nextPacing(p, "ok", bounds);
    expect(isOutage(p, bounds)).toBe(false);
  });

  it("always stays within bounds", () => {
    const outcome = fc.constantFrom<PollOutcome>("ok", "Throttled", "Unavailable", "Unknown");
    fc.assert(
      fc.property(fc.array(outcome, { maxLength: 50 }), (outcomes) => {
        let p = initialPacing(bounds);
        for (const o of outcomes) {
          p = nextPacing(p, o, bounds);
          expect(p.intervalMs).toBeGreaterThanOrEqual(bounds.baseMs);
          expect(p.intervalMs).toBeLessThanOrEqual(bounds.maxMs);
        }
      }),
    );
  });
});
