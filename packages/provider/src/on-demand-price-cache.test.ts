import { describe, expect, it, vi } from "vitest";
import { ProviderError } from "./errors.js";
import { ON_DEMAND_PRICE_TTL_MS, OnDemandPriceCache } from "./on-demand-price-cache.js";

/** A cache over a scripted read, a settable clock and a captured log. */
function cache(read: (instanceType: string) => Promise<string | undefined>) {
  const clock = { now: 0 };
  const logs: { level: string; message: string }[] = [];
  const reads: string[] = [];
  const prices = new OnDemandPriceCache({
    read: (instanceType) => {
      reads.push(instanceType);
      return read(instanceType);
    },
    now: () => clock.now,
    log: (level, message) => void logs.push({ level, message }),
    waitMs: 5_000,
  });
  return { prices, clock, logs, reads };
}

describe("OnDemandPriceCache", () => {
  it("reads each type once per cache period", async () => {
    const { prices, clock, reads } = cache(async (type) =>
      type === "m7i.large" ? "0.1008000000" : undefined,
    );
    expect(await prices.price("m7i.large")).toBe("0.1008000000");
    expect(await prices.price("m7i.large")).toBe("0.1008000000");
    // Listed nowhere: known as such for the period too.
    expect(await prices.price("x9.huge")).toBeUndefined();
    expect(await prices.price("x9.huge")).toBeUndefined();
    expect(reads).toEqual(["m7i.large", "x9.huge"]);
    clock.now += ON_DEMAND_PRICE_TTL_MS;
    expect(await prices.price("m7i.large")).toBe("0.1008000000");
    expect(reads).toEqual(["m7i.large", "x9.huge", "m7i.large"]);
  });

  it("a read that answers after the wait fills the cache for the next caller", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      let answer: (price: string) => void = () => {};
      const { prices, clock, reads, logs } = cache(
        () =>
          new Promise<string>((resolve) => {
            answer = resolve;
          }),
      );
      const first = prices.price("m7i.large");
      await vi.advanceTimersByTimeAsync(5_000);
      expect(await first).toBeUndefined();
      expect(logs.map((l) => l.level)).toEqual(["warn"]);
      expect(logs[0]?.message).toContain("no answer within 5000 ms");
      answer("0.1008000000");
      await vi.advanceTimersByTimeAsync(0);
      clock.now += 6_000;
      expect(await prices.price("m7i.large")).toBe("0.1008000000");
      expect(reads).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it("keeps the price it knew through a failed refresh, and says each kind of failure once at warn", async () => {
    let fail = false;
    const { prices, clock, logs, reads } = cache(async () => {
      if (fail) throw new ProviderError("Unauthorized", "AccessDeniedException");
      return "0.1008000000";
    });
    expect(await prices.price("m7i.large")).toBe("0.1008000000");
    fail = true;
    clock.now += ON_DEMAND_PRICE_TTL_MS;
    expect(await prices.price("m7i.large")).toBe("0.1008000000");
    expect(await prices.price("c7i.large")).toBeUndefined();
    expect(reads).toEqual(["m7i.large", "m7i.large", "c7i.large"]);
    expect(logs.map((l) => l.level)).toEqual(["warn", "info"]);
    expect(logs[0]?.message).toMatch(
      /On-Demand price of m7i.large could not be read .*not asked again for 12 h .*pricing:GetProducts/,
    );
    expect(logs[1]?.message).toContain("On-Demand price of c7i.large could not be read");
  });
});
