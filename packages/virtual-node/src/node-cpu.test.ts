import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ContainerUsageSample, PodUsage } from "./kubelet-api.js";
import { NodeCpuCounter } from "./node-cpu.js";

const at = new Date("2026-12-01T05:00:00Z");
const sample = (cpuCoreSeconds: number): ContainerUsageSample => ({
  cpuCoreSeconds,
  cpuCores: undefined,
  memoryWorkingSetBytes: 1,
  timestamp: at,
});
/** A read: `{ "pod-uid": { container: counter } }`. */
const read = (pods: Record<string, Record<string, number>>): PodUsage =>
  new Map(
    Object.entries(pods).map(([uid, cs]) => [
      uid,
      new Map(Object.entries(cs).map(([name, v]) => [name, sample(v)])),
    ]),
  );

describe("NodeCpuCounter", () => {
  it("is the sum of the containers' counters while no run ends", () => {
    const counter = new NodeCpuCounter();
    expect(counter.observe(read({ a: { x: 1, y: 2 } }))).toBe(3);
    expect(counter.observe(read({ a: { x: 4, y: 2 }, b: { x: 1 } }))).toBe(7);
  });

  it("keeps an ended Pod's CPU time, so the counter does not drop when the Pod goes", () => {
    const counter = new NodeCpuCounter();
    counter.observe(read({ a: { x: 10 }, b: { x: 5 } }));
    expect(counter.observe(read({ b: { x: 6 } }))).toBe(16);
    expect(counter.observe(read({ b: { x: 8 } }))).toBe(18);
  });

  it("keeps a restarted container's previous run", () => {
    const counter = new NodeCpuCounter();
    counter.observe(read({ a: { x: 10 } }));
    expect(counter.observe(read({ a: { x: 1 } }))).toBe(11);
  });

  it("counts a run that was missing from one read once when it comes back", () => {
    const counter = new NodeCpuCounter();
    counter.observe(read({ a: { x: 10 }, b: { x: 1 } }));
    expect(counter.observe(read({ b: { x: 2 } }))).toBe(12);
    expect(counter.observe(read({ a: { x: 12 }, b: { x: 3 } }))).toBe(15);
  });

  it("takes a value that is not a finite non-negative number as 0", () => {
    const counter = new NodeCpuCounter();
    expect(counter.observe(read({ a: { x: Number.NaN, y: -3, z: 2 } }))).toBe(2);
  });

  it("never goes down, counts at least the current runs and at most every value seen (property)", () => {
    const reads = fc.array(
      fc.dictionary(
        fc.constantFrom("p1", "p2", "p3"),
        fc.dictionary(fc.constantFrom("a", "b"), fc.double({ min: -1, max: 1e6, noNaN: false })),
      ),
      { minLength: 1, maxLength: 30 },
    );
    fc.assert(
      fc.property(reads, fc.nat(3), (sequence, remembered) => {
        const counter = new NodeCpuCounter(remembered);
        const valid = (v: number) => (Number.isFinite(v) && v > 0 ? v : 0);
        let previous = 0;
        let everySeen = 0;
        for (const r of sequence) {
          const now = counter.observe(read(r));
          const current = Object.values(r)
            .flatMap((cs) => Object.values(cs))
            .reduce((n, v) => n + valid(v), 0);
          everySeen += current;
          expect(now).toBeGreaterThanOrEqual(previous);
          // Counted in whole nanoseconds: each value may round by half of one.
          expect(now).toBeGreaterThanOrEqual(current * (1 - 1e-12) - 1e-6);
          expect(now).toBeLessThanOrEqual(everySeen * (1 + 1e-12) + 1e-6);
          previous = now;
        }
      }),
    );
  });
});
