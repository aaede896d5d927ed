import { describe, expect, it, vi } from "vitest";
import { settlesWithin } from "./settles.js";

describe("settlesWithin", () => {
  it("answers true for a promise that settles first, false once the time is up", async () => {
    vi.useFakeTimers();
    try {
      expect(await settlesWithin(Promise.resolve(), 1_000)).toBe(true);
      const never = new Promise<void>(() => {});
      const answer = settlesWithin(never, 1_000);
      await vi.advanceTimersByTimeAsync(999);
      let done = false;
      void answer.then(() => {
        done = true;
      });
      await Promise.resolve();
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(await answer).toBe(false);
      // Its timer is cleared once the promise settled: none is left pending.
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});
