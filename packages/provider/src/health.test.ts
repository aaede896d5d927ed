import type { NodeHealth } from "@nebula/virtual-node";
import { describe, expect, it } from "vitest";
import { parseProviderConfig } from "./config.js";
import { ProviderError } from "./errors.js";
import { HealthTracker } from "./health.js";
import { testConfig } from "./testing/fixtures.js";

const unavailable = new ProviderError("Unavailable", "EC2 answered 503");
const throttled = new ProviderError("Throttled", "RequestLimitExceeded");

function tracker(overrides: Parameters<typeof testConfig>[0] = {}) {
  const health = new HealthTracker(parseProviderConfig(testConfig(overrides)));
  const seen: NodeHealth[] = [];
  health.subscribe((h) => void seen.push(h));
  return { health, seen };
}

describe("HealthTracker", () => {
  it("starts ready (EC2Reachable) at the configured poll interval", () => {
    const { health } = tracker({ pollIntervalSeconds: 7 });
    expect(health.current).toMatchObject({ ready: true, reason: "EC2Reachable" });
    expect(health.intervalMs).toBe(7000);
  });

  it("flips to EC2Unavailable after outageAfterFailures failed polls in a row, and back on a success", () => {
    const { health, seen } = tracker({ outageAfterFailures: 3 });
    expect(health.record(unavailable)).toBe(false);
    expect(health.record(unavailable)).toBe(false);
    expect(health.current.ready).toBe(true);
    // The third failure in a row is the outage: readiness flips, and the caller is told so.
    expect(health.record(unavailable)).toBe(true);
    expect(health.current).toMatchObject({ ready: false, reason: "EC2Unavailable" });
    expect(health.current.message).toMatch(/us-east-1 has failed 3 polls in a row \(Unavailable\)/);
    // A fourth failure changes the message (the count), not readiness.
    expect(health.record(unavailable)).toBe(false);
    expect(health.current.message).toMatch(/failed 4 polls/);
    // One poll that reaches EC2 ends it.
    expect(health.record(undefined)).toBe(true);
    expect(health.current).toMatchObject({ ready: true, reason: "EC2Reachable" });
    expect(seen.map((h) => h.reason)).toEqual(["EC2Unavailable", "EC2Unavailable", "EC2Reachable"]);
  });

  it("a success between failures resets the count: no outage from scattered failures", () => {
    const { health } = tracker({ outageAfterFailures: 2 });
    for (let i = 0; i < 5; i++) {
      expect(health.record(unavailable)).toBe(false);
      expect(health.record(undefined)).toBe(false);
    }
    expect(health.current.ready).toBe(true);
  });

  it("throttling slows the poll and says so, but keeps the Node ready however long it lasts", () => {
    const { health, seen } = tracker({
      pollIntervalSeconds: 10,
      maxPollIntervalSeconds: 60,
      outageAfterFailures: 1,
    });
    expect(health.record(throttled)).toBe(false);
    expect(health.current).toMatchObject({ ready: true, reason: "EC2Throttled" });
    expect(health.intervalMs).toBe(20_000);
    for (let i = 0; i < 10; i++) health.record(throttled);
    expect(health.current.ready).toBe(true);
    expect(health.intervalMs).toBe(60_000);
    // Back to reachable; the interval halves back towards the base.
    expect(health.record(undefined)).toBe(false);
    expect(health.current.reason).toBe("EC2Reachable");
    expect(health.intervalMs).toBe(30_000);
    expect(seen.every((h) => h.ready)).toBe(true);
  });

  it("throttling during an outage keeps the outage", () => {
    const { health } = tracker({ outageAfterFailures: 1 });
    expect(health.record(unavailable)).toBe(true);
    expect(health.record(throttled)).toBe(false);
    expect(health.current).toMatchObject({ ready: false, reason: "EC2Unavailable" });
  });

  it("notifies only on change; a listener's throw stops neither the others nor the tracker", () => {
    const health = new HealthTracker(parseProviderConfig(testConfig({ outageAfterFailures: 1 })));
    const seen: string[] = [];
    health.subscribe(() => {
      throw new Error("listener bug");
    });
    const unsubscribe = health.subscribe((h) => void seen.push(h.reason));
    health.record(undefined);
    health.record(undefined); // same health: no notification
    expect(health.record(unavailable)).toBe(true);
    unsubscribe();
    health.record(undefined);
    expect(seen).toEqual(["EC2Reachable", "EC2Unavailable"]);
    expect(health.current.reason).toBe("EC2Reachable");
  });
});
