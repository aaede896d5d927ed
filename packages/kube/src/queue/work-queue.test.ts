import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  BucketRateLimiter,
  defaultControllerRateLimiter,
  ExponentialFailureRateLimiter,
  MaxOfRateLimiter,
} from "./rate-limiter.js";
import { type Timers, WorkQueue } from "./work-queue.js";

/** Timers driven by hand: `advance(ms)` fires what is due, in order. */
function manualTimers(): Timers & { advance(ms: number): void; pending(): number } {
  let now = 0;
  let next = 0;
  const timers = new Map<number, { at: number; callback: () => void }>();
  return {
    setTimeout: (callback, ms) => {
      next += 1;
      timers.set(next, { at: now + ms, callback });
      return next;
    },
    clearTimeout: (handle) => {
      timers.delete(handle as number);
    },
    advance(ms) {
      now += ms;
      for (;;) {
        const due = [...timers.entries()]
          .filter(([, t]) => t.at <= now)
          .sort((a, b) => a[1].at - b[1].at)[0];
        if (due === undefined) return;
        timers.delete(due[0]);
        due[1].callback();
      }
    },
    pending: () => timers.size,
    now: () => now,
  };
}

describe("WorkQueue", () => {
  it("hands out keys in order and de-duplicates keys that wait", async () => {
    const queue = new WorkQueue();
    queue.add("a");
    queue.add("b");
    queue.add("a");
    expect(queue.len()).toBe(2);
    expect(await queue.get()).toBe("a");
    expect(await queue.get()).toBe("b");
    expect(queue.len()).toBe(0);
  });

  it("never hands out a key that is in flight; a re-add comes back after done", async () => {
    const queue = new WorkQueue();
    queue.add("a");
    expect(await queue.get()).toBe("a");
    queue.add("a");
    queue.add("a");
    expect(queue.len()).toBe(0); // waits for done, not in the queue
    queue.add("b");
    expect(await queue.get()).toBe("b");
    queue.done("a");
    expect(queue.len()).toBe(1);
    expect(await queue.get()).toBe("a");
  });

  it("wakes a waiting get when a key arrives", async () => {
    const queue = new WorkQueue();
    const pending = queue.get();
    queue.add("x");
    expect(await pending).toBe("x");
  });

  it("addAfter delays a key, the earlier of two delays wins, and shutdown cancels delays", () => {
    const timers = manualTimers();
    const queue = new WorkQueue({ timers });
    queue.addAfter("a", 100);
    queue.addAfter("a", 50);
    queue.addAfter("a", 500);
    expect(timers.pending()).toBe(1);
    timers.advance(49);
    expect(queue.len()).toBe(0);
    timers.advance(1);
    expect(queue.len()).toBe(1);
    queue.addAfter("b", 10);
    queue.shutdown();
    expect(timers.pending()).toBe(0);
    queue.addAfter("c", 0);
    expect(queue.len()).toBe(1); // only "a"; nothing is accepted after shutdown
  });

  it("addRateLimited backs off exponentially per key until forget", () => {
    const timers = manualTimers();
    const queue = new WorkQueue({
      timers,
      rateLimiter: new ExponentialFailureRateLimiter({ baseDelayMs: 10, maxDelayMs: 1000 }),
    });
    queue.addRateLimited("a"); // 10 ms
    timers.advance(9);
    expect(queue.len()).toBe(0);
    timers.advance(1);
    expect(queue.len()).toBe(1);
    expect(queue.numRequeues("a")).toBe(1);
    queue.addRateLimited("a"); // 20 ms (already queued: stays once)
    timers.advance(20);
    expect(queue.len()).toBe(1);
    expect(queue.numRequeues("a")).toBe(2);
    queue.forget("a");
    expect(queue.numRequeues("a")).toBe(0);
  });

  it("after shutdown, queued keys are still handed out, then get returns undefined", async () => {
    const queue = new WorkQueue();
    queue.add("a");
    const idle = new WorkQueue();
    const waiting = idle.get();
    idle.shutdown();
    expect(await waiting).toBeUndefined();
    queue.shutdown();
    expect(await queue.get()).toBe("a");
    expect(await queue.get()).toBeUndefined();
  });

  it("shutDownWithDrain waits until every in-flight key is done", async () => {
    const queue = new WorkQueue();
    queue.add("a");
    queue.add("b");
    const a = await queue.get();
    const b = await queue.get();
    let drained = false;
    const drain = queue.shutDownWithDrain().then(() => {
      drained = true;
    });
    queue.done(a ?? "");
    await Promise.resolve();
    expect(drained).toBe(false);
    queue.done(b ?? "");
    await drain;
    expect(drained).toBe(true);
  });

  it("reports depth, adds and retries to its observer", () => {
    const seen: string[] = [];
    const queue = new WorkQueue({
      timers: manualTimers(),
      observer: {
        depth: (d) => seen.push(`depth=${d}`),
        added: () => seen.push("added"),
        retried: () => seen.push("retried"),
      },
    });
    queue.add("a");
    queue.add("a");
    queue.addRateLimited("b");
    expect(seen).toEqual(["added", "depth=1", "added", "retried"]);
  });
});

describe("WorkQueue properties", () => {
  type Op =
    | { kind: "add"; key: string }
    | { kind: "get"; worker: number }
    | { kind: "done"; worker: number };
  const keys = fc.constantFrom("a", "b", "c", "d");
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ kind: fc.constant("add" as const), key: keys }),
    fc.record({ kind: fc.constant("get" as const), worker: fc.integer({ min: 0, max: 2 }) }),
    fc.record({ kind: fc.constant("done" as const), worker: fc.integer({ min: 0, max: 2 }) }),
  );

  it("no key is held by two workers, no add is lost, and nothing waits twice", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 80 }), async (ops) => {
        const queue = new WorkQueue();
        const held: Array<string | undefined> = [undefined, undefined, undefined];
        let step = 0;
        const lastAdd = new Map<string, number>();
        const lastStart = new Map<string, number>();
        const take = async (worker: number): Promise<void> => {
          const key = await queue.get();
          if (key === undefined) return;
          expect(held.includes(key)).toBe(false);
          held[worker] = key;
          lastStart.set(key, step);
        };
        for (const o of ops) {
          step += 1;
          if (o.kind === "add") {
            queue.add(o.key);
            lastAdd.set(o.key, step);
          } else if (o.kind === "get") {
            if (held[o.worker] === undefined && queue.len() > 0) await take(o.worker);
          } else {
            const key = held[o.worker];
            if (key !== undefined) {
              queue.done(key);
              held[o.worker] = undefined;
            }
          }
          // The queue holds each key at most once.
          expect(queue.len()).toBeLessThanOrEqual(4);
        }
        // Drain: finish what is held, then process everything left.
        for (let w = 0; w < held.length; w += 1) {
          const key = held[w];
          if (key !== undefined) queue.done(key);
          held[w] = undefined;
        }
        step += 1;
        while (queue.len() > 0) {
          await take(0);
          const key = held[0];
          if (key !== undefined) queue.done(key);
          held[0] = undefined;
        }
        // Every add was followed by a start of that key.
        for (const [key, added] of lastAdd) {
          expect(lastStart.get(key) ?? -1).toBeGreaterThanOrEqual(added);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("with concurrent async workers, a key is never reconciled concurrently and every add is seen", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(keys, fc.integer({ min: 0, max: 3 })), { minLength: 1, maxLength: 40 }),
        fc.integer({ min: 1, max: 4 }),
        async (adds, workers) => {
          const queue = new WorkQueue();
          const active = new Set<string>();
          const addedAt = new Map<string, number>();
          const startedAt = new Map<string, number>();
          let tick = 0;
          let overlap = false;
          const tickOnce = () => new Promise<void>((resolve) => setImmediate(resolve));
          const worker = async (): Promise<void> => {
            for (let key = await queue.get(); key !== undefined; key = await queue.get()) {
              if (active.has(key)) overlap = true;
              active.add(key);
              startedAt.set(key, tick);
              await tickOnce();
              await tickOnce();
              active.delete(key);
              queue.done(key);
            }
          };
          const running = Array.from({ length: workers }, worker);
          for (const [key, pause] of adds) {
            tick += 1;
            addedAt.set(key, tick);
            queue.add(key);
            for (let i = 0; i < pause; i += 1) await tickOnce();
          }
          await queue.shutDownWithDrain();
          // Keys re-added while in flight are queued again at done(); let the workers finish them.
          queue.shutdown();
          await Promise.all(running);
          expect(overlap).toBe(false);
          for (const [key, added] of addedAt) {
            expect(startedAt.get(key) ?? -1).toBeGreaterThanOrEqual(added);
          }
        },
      ),
      { numRuns: 100 },
    );
  });
});

describe("rate limiters", () => {
  it("exponential: 5 ms doubling to 1000 s by default, per key, reset by forget", () => {
    const limiter = new ExponentialFailureRateLimiter();
    const delays = Array.from({ length: 30 }, () => limiter.when("k"));
    expect(delays.slice(0, 4)).toEqual([5, 10, 20, 40]);
    expect(Math.max(...delays)).toBe(1_000_000);
    expect(delays.at(-1)).toBe(1_000_000);
    expect(limiter.when("other")).toBe(5);
    expect(limiter.numRequeues("k")).toBe(30);
    limiter.forget("k");
    expect(limiter.when("k")).toBe(5);
  });

  it("exponential delays never decrease and never pass the cap", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1000, max: 10_000_000 }),
        fc.integer({ min: 1, max: 100 }),
        (base, max, n) => {
          const limiter = new ExponentialFailureRateLimiter({ baseDelayMs: base, maxDelayMs: max });
          let previous = 0;
          for (let i = 0; i < n; i += 1) {
            const delay = limiter.when("k");
            expect(delay).toBeGreaterThanOrEqual(previous);
            expect(delay).toBeLessThanOrEqual(max);
            previous = delay;
          }
        },
      ),
    );
  });

  it("token bucket: a burst goes at once, then one token per 1/qps", () => {
    let now = 0;
    const bucket = new BucketRateLimiter({ qps: 10, burst: 3, now: () => now });
    expect([bucket.when("a"), bucket.when("b"), bucket.when("c")]).toEqual([0, 0, 0]);
    expect(bucket.when("d")).toBe(100);
    expect(bucket.when("e")).toBe(200);
    now = 1000; // refilled (capped at the burst)
    expect(bucket.when("f")).toBe(0);
  });

  it("max-of takes the largest delay; the default combines 5 ms back-off and 10 qps / 100 burst", () => {
    const now = 0;
    const limiter = new MaxOfRateLimiter(
      new ExponentialFailureRateLimiter({ baseDelayMs: 1 }),
      new BucketRateLimiter({ qps: 1, burst: 1, now: () => now }),
    );
    expect(limiter.when("a")).toBe(1);
    expect(limiter.when("a")).toBe(1000);
    const fallback = defaultControllerRateLimiter({ now: () => now });
    const first = Array.from({ length: 100 }, (_, i) => fallback.when(`k${i}`));
    expect(new Set(first)).toEqual(new Set([5]));
    expect(fallback.when("k100")).toBe(100);
  });
});
