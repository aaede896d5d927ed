import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  apiClass,
  type BudgetBucket,
  type BudgetLimit,
  fullBucket,
  MIN_RATE_SHARE,
  reserve,
  succeeded,
  throttled,
} from "./budget.js";

const limitArb = fc.record({
  perSecond: fc.double({ min: 0.1, max: 50, noNaN: true }),
  burst: fc.integer({ min: 1, max: 50 }),
});

/** Reserves at each time in order; returns when each call is sent. */
function sendTimes(limit: BudgetLimit, times: readonly number[]): number[] {
  let bucket: BudgetBucket = fullBucket(limit, 0);
  return times.map((t) => {
    const r = reserve(bucket, limit, t);
    bucket = r.bucket;
    return t + r.waitMs;
  });
}

describe("the EC2 budget", () => {
  it("never sends more than burst + rate × T calls in any window of T ms", () => {
    fc.assert(
      fc.property(
        limitArb,
        fc.array(fc.integer({ min: 0, max: 2000 }), { minLength: 1, maxLength: 200 }),
        (limit, gaps) => {
          let t = 0;
          const times = gaps.map((g) => (t += g));
          const sent = sendTimes(limit, times);
          for (let i = 0; i < sent.length; i++) {
            for (let j = i; j < sent.length; j++) {
              const window = (sent[j] as number) - (sent[i] as number);
              // +1 ms of slack per window for the rounding of waits up to whole milliseconds.
              expect(j - i + 1).toBeLessThanOrEqual(
                limit.burst + (limit.perSecond * (window + 1)) / 1000 + 1e-9,
              );
            }
          }
        },
      ),
    );
  });

  it("serves reservations in order and lets a burst through at once", () => {
    fc.assert(
      fc.property(
        limitArb,
        fc.array(fc.integer({ min: 0, max: 500 }), { maxLength: 100 }),
        (limit, gaps) => {
          let t = 0;
          const sent = sendTimes(
            limit,
            gaps.map((g) => (t += g)),
          );
          for (let i = 1; i < sent.length; i++) {
            expect(sent[i]).toBeGreaterThanOrEqual(sent[i - 1] as number);
          }
        },
      ),
    );
    const limit = { perSecond: 2, burst: 5 };
    expect(sendTimes(limit, [0, 0, 0, 0, 0, 0, 0])).toEqual([0, 0, 0, 0, 0, 500, 1000]);
  });

  it("halves its rate when throttled, down to a floor, and climbs back to the share", () => {
    fc.assert(
      fc.property(limitArb, fc.array(fc.boolean(), { maxLength: 100 }), (limit, outcomes) => {
        let bucket = fullBucket(limit, 0);
        let now = 0;
        for (const ok of outcomes) {
          now += 100;
          const before = bucket.rate;
          bucket = ok ? succeeded(bucket, limit, now) : throttled(bucket, limit, now);
          expect(bucket.rate).toBeLessThanOrEqual(limit.perSecond + 1e-9);
          expect(bucket.rate).toBeGreaterThanOrEqual(limit.perSecond * MIN_RATE_SHARE - 1e-9);
          if (!ok) {
            expect(bucket.rate).toBeLessThanOrEqual(before);
            expect(bucket.tokens).toBeLessThanOrEqual(0);
          }
        }
        for (let i = 0; i < 10; i++) {
          now += 100;
          bucket = succeeded(bucket, limit, now);
        }
        expect(bucket.rate).toBeCloseTo(limit.perSecond, 9);
      }),
    );
  });

  it("spaces calls at the lower rate after throttling", () => {
    const limit = { perSecond: 4, burst: 1 };
    let bucket = fullBucket(limit, 0);
    bucket = reserve(bucket, limit, 0).bucket;
    bucket = throttled(bucket, limit, 0);
    expect(bucket.rate).toBe(2);
    expect(reserve(bucket, limit, 0).waitMs).toBe(500);
  });

  it("adds nothing for time going backwards, and never fills past the burst", () => {
    const limit = { perSecond: 10, burst: 3 };
    const bucket = reserve(fullBucket(limit, 1000), limit, 1000).bucket;
    expect(reserve(bucket, limit, 0).bucket.tokens).toBe(1);
    expect(reserve(bucket, limit, 1_000_000).bucket.tokens).toBe(2);
  });

  it("classes EC2 APIs as reads or writes", () => {
    expect(apiClass("DescribeInstances")).toBe("read");
    expect(apiClass("GetConsoleOutput")).toBe("read");
    expect(apiClass("CreateTags")).toBe("write");
    expect(apiClass("RunInstances")).toBe("write");
    expect(apiClass("TerminateInstances")).toBe("write");
  });
});
