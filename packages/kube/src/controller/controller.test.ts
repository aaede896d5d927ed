import { describe, expect, it } from "vitest";
import { ExponentialFailureRateLimiter } from "../queue/rate-limiter.js";
import { Controller } from "./controller.js";

const until = async (condition: () => boolean, timeoutMs = 5000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met before the deadline");
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
};

describe("Controller", () => {
  it("retries a failing key with back-off, then forgets it on success", async () => {
    const attempts: string[] = [];
    const controller = new Controller({
      name: "t",
      rateLimiter: new ExponentialFailureRateLimiter({ baseDelayMs: 1, maxDelayMs: 10 }),
      reconcile: (key) => {
        attempts.push(key);
        if (attempts.length < 3) throw new Error("not yet");
        return undefined;
      },
    });
    const stop = new AbortController();
    const run = controller.run({ signal: stop.signal });
    controller.enqueue("ns/a");
    await until(() => attempts.length === 3);
    expect(controller.queue.numRequeues("ns/a")).toBe(0);
    stop.abort();
    await run;
    expect(attempts).toEqual(["ns/a", "ns/a", "ns/a"]);
  });

  it("requeueAfter reconciles the key again later", async () => {
    let count = 0;
    const controller = new Controller({
      name: "t",
      reconcile: () => {
        count += 1;
        return count < 3 ? { requeueAfter: 5 } : undefined;
      },
    });
    const stop = new AbortController();
    const run = controller.run({ signal: stop.signal });
    controller.enqueue("k");
    await until(() => count === 3);
    stop.abort();
    await run;
    expect(count).toBe(3);
  });

  it("requeueAfter: 0 reconciles the key again at once, without waiting for an event", async () => {
    let count = 0;
    const controller = new Controller({
      name: "t",
      reconcile: () => {
        count += 1;
        return count < 4 ? { requeueAfter: 0 } : undefined;
      },
    });
    const stop = new AbortController();
    const run = controller.run({ signal: stop.signal });
    controller.enqueue("k");
    // Nothing enqueues "k" again: only the zero requeue can bring it back.
    await until(() => count === 4, 2000);
    await new Promise((resolve) => setTimeout(resolve, 20));
    stop.abort();
    await run;
    expect(count).toBe(4);
  });

  it("runs N workers but never one key twice at once", async () => {
    const active = new Set<string>();
    let overlap = false;
    let maxParallel = 0;
    let done = 0;
    const controller = new Controller({
      name: "t",
      workers: 4,
      reconcile: async (key) => {
        if (active.has(key)) overlap = true;
        active.add(key);
        maxParallel = Math.max(maxParallel, active.size);
        await new Promise((resolve) => setTimeout(resolve, 3));
        active.delete(key);
        done += 1;
      },
    });
    const stop = new AbortController();
    const run = controller.run({ signal: stop.signal });
    for (let round = 0; round < 5; round += 1) {
      for (const key of ["a", "b", "c", "d", "e", "f"]) controller.enqueue(key);
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    await until(() => controller.queue.len() === 0 && controller.queue.inFlight() === 0);
    stop.abort();
    await run;
    expect(overlap).toBe(false);
    expect(maxParallel).toBeGreaterThan(1);
    expect(maxParallel).toBeLessThanOrEqual(4);
    expect(done).toBeGreaterThanOrEqual(6);
  });

  it("a graceful stop lets the in-flight reconcile finish and starts no queued key", async () => {
    let release: () => void = () => {};
    const started: string[] = [];
    let sawAbort = false;
    const controller = new Controller({
      name: "t",
      reconcile: async (key, signal) => {
        started.push(key);
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        sawAbort = signal.aborted;
      },
    });
    const stop = new AbortController();
    let finished = false;
    const run = controller.run({ signal: stop.signal }).then(() => {
      finished = true;
    });
    controller.enqueue("first");
    await until(() => started.length === 1);
    controller.enqueue("second");
    stop.abort();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(finished).toBe(false);
    release();
    await run;
    expect(started).toEqual(["first"]);
    expect(sawAbort).toBe(false);
  });

  it("a hard stop aborts the in-flight reconcile's signal", async () => {
    const controller = new Controller({
      name: "t",
      reconcile: (_key, signal) =>
        new Promise<undefined>((resolve) =>
          signal.addEventListener("abort", () => resolve(undefined)),
        ),
    });
    const stop = new AbortController();
    const hard = new AbortController();
    const run = controller.run({ signal: stop.signal, hardStop: hard.signal });
    controller.enqueue("k");
    await until(() => controller.queue.inFlight() === 1);
    stop.abort();
    hard.abort();
    await run;
    expect(controller.queue.inFlight()).toBe(0);
  });

  it("the drain deadline aborts a reconcile that does not finish", async () => {
    const controller = new Controller({
      name: "t",
      drainTimeoutMs: 20,
      reconcile: (_key, signal) =>
        new Promise<undefined>((resolve) =>
          signal.addEventListener("abort", () => resolve(undefined)),
        ),
    });
    const stop = new AbortController();
    const run = controller.run({ signal: stop.signal });
    controller.enqueue("k");
    await until(() => controller.queue.inFlight() === 1);
    stop.abort();
    await run;
    expect(controller.queue.inFlight()).toBe(0);
  });
});
