import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { TokenBucket } from "./token-bucket.js";

describe("TokenBucket", () => {
  it("starts full, empties, and refills at its rate", () => {
    const bucket = new TokenBucket({ burst: 2, perSecond: 1 }, 0);
    expect([bucket.take(0), bucket.take(0), bucket.take(0)]).toEqual([true, true, false]);
    expect(bucket.waitMs(0)).toBe(1000);
    expect(bucket.take(999)).toBe(false);
    expect(bucket.take(1000)).toBe(true);
    expect(bucket.full(10_000)).toBe(true);
  });

  it("never refills with a rate of 0", () => {
    const bucket = new TokenBucket({ burst: 1, perSecond: 0 }, 0);
    expect(bucket.take(0)).toBe(true);
    expect(bucket.take(1e12)).toBe(false);
    expect(bucket.waitMs(1e12)).toBe(Number.POSITIVE_INFINITY);
  });

  it("ignores a clock that goes backwards", () => {
    const bucket = new TokenBucket({ burst: 1, perSecond: 1 }, 5000);
    expect(bucket.take(5000)).toBe(true);
    expect(bucket.take(0)).toBe(false);
    expect(bucket.take(6000)).toBe(true);
  });

  it("grants at most burst + rate × elapsed tokens over any schedule (property)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 30 }),
        fc.double({ min: 0, max: 20, noNaN: true }),
        fc.array(fc.integer({ min: 0, max: 2000 }), { maxLength: 200 }),
        (burst, perSecond, gaps) => {
          const bucket = new TokenBucket({ burst, perSecond }, 0);
          let now = 0;
          let granted = 0;
          for (const gap of gaps) {
            now += gap;
            if (bucket.take(now)) granted += 1;
          }
          expect(granted).toBeLessThanOrEqual(burst + (perSecond * now) / 1000 + 1e-9);
        },
      ),
    );
  });
});
