import { describe, expect, it } from "vitest";
import { z } from "zod";
import { type TeardownEvent, TeardownExecutor } from "./executor.js";
import { defineTeardown } from "./machine.js";
import { decodeRecord, encodeRecord } from "./record.js";
import { applyMergePatch, MemoryStore, type TeardownStore } from "./store.js";

type Effect = { readonly kind: "Ping"; readonly n: number } | { readonly kind: "Pong" };

const oneShot = defineTeardown<{ done: boolean }, Effect, { n: number }>({
  name: "test.dev/one-shot",
  params: z.strictObject({ n: z.number() }),
  phases: [
    {
      name: "pinging",
      waitsFor: "the ping to land",
      action: ({ params }) => [{ kind: "Ping", n: params.n }, { kind: "Pong" }],
      isDone: (o) => o.done,
    },
  ],
});

const KEY = "ns/obj";

function setup(
  overrides: {
    ping?: () => void;
    store?: TeardownStore;
    done?: () => boolean;
    now?: () => number;
  } = {},
) {
  const store = new MemoryStore();
  store.put(KEY, { spec: {} }, "uid-a");
  const events: TeardownEvent[] = [];
  const effects: string[] = [];
  const executor = new TeardownExecutor({
    teardown: oneShot,
    store: overrides.store ?? store,
    handlers: {
      Ping: (e) => {
        effects.push(`Ping ${e.n}`);
        overrides.ping?.();
      },
      Pong: () => {
        effects.push("Pong");
      },
    },
    observe: () => ({ done: overrides.done?.() ?? true }),
    now: overrides.now ?? (() => 1_000),
    onEvent: (e) => events.push(e),
  });
  return { store, events, effects, executor };
}

describe("TeardownExecutor", () => {
  it("writes the intent before running effects, then confirms them", async () => {
    const { store, effects, executor } = setup();
    const result = await executor.request(KEY, { params: { n: 7 }, cause: "Test" });
    expect(result.status).toBe("progressed");
    expect(effects).toEqual(["Ping 7", "Pong"]);
    const writes = store.history.map((h) => (h.record ? decodeRecord(h.record) : null));
    expect(writes.map((w) => (w?.ok ? w.record.issuedAt : "x"))).toEqual([undefined, 1_000]);
    expect(await executor.tick(KEY)).toMatchObject({ status: "complete" });
    expect(store.get(KEY)?.record).toBeUndefined();
    expect(await executor.tick(KEY)).toEqual({ status: "idle" });
  });

  it("a second request resumes instead of restarting", async () => {
    const { store, executor } = setup({ done: () => false });
    await executor.request(KEY, { params: { n: 1 }, cause: "Test" });
    const before = store.get(KEY)?.record;
    const again = await executor.request(KEY, { params: { n: 2 }, cause: "Test" });
    expect(again.status).toBe("waiting");
    expect(store.get(KEY)?.record).toBe(before);
  });

  it("leaves a failed action unconfirmed, reports it, runs the phase's other effects, and retries", async () => {
    let fail = true;
    let now = 1_000;
    const { store, events, effects, executor } = setup({
      ping: () => {
        if (fail) throw new Error("throttled");
      },
      now: () => now,
    });
    const result = await executor.request(KEY, { params: { n: 1 }, cause: "Test" });
    expect(result).toMatchObject({ status: "error", error: { code: "EffectFailed" } });
    expect(effects).toEqual(["Ping 1", "Pong"]);
    expect(events.filter((e) => e.type === "error")).toHaveLength(1);
    const stored = decodeRecord(store.get(KEY)?.record);
    expect(stored.ok && stored.record.issuedAt).toBeUndefined();
    // Not again before the back-off (1 s after the first claim): no write, no effect.
    const writes = store.history.length;
    now = 1_999;
    expect((await executor.tick(KEY)).status).toBe("waiting");
    expect(store.history.length).toBe(writes);
    expect(effects).toEqual(["Ping 1", "Pong"]);
    fail = false;
    now = 2_000;
    expect((await executor.tick(KEY)).status).toBe("progressed");
    const confirmed = decodeRecord(store.get(KEY)?.record);
    expect(confirmed.ok && confirmed.record).toMatchObject({ attempt: 2, issuedAt: 2_000 });
  });

  it("runs nothing after a lost compare-and-swap", async () => {
    const inner = new MemoryStore();
    inner.put(KEY, {}, "uid-a");
    const racing: TeardownStore = {
      read: (key) => inner.read(key),
      write: async (key, change, version, uid) => {
        // Another writer gets in between this read and this write.
        const current = await inner.read(key);
        if (current.found)
          await inner.write(key, { record: current.record ?? null }, current.version);
        return inner.write(key, change, version, uid);
      },
    };
    const { effects, events, executor } = setup({ store: racing });
    expect(await executor.request(KEY, { params: { n: 1 }, cause: "Test" })).toEqual({
      status: "conflict",
    });
    expect(effects).toEqual([]);
    expect(events).toEqual([{ type: "conflict", key: KEY, phase: "pinging" }]);
  });

  it("refuses an unreadable record, another incarnation's record, and a missing subject", async () => {
    const { store, executor } = setup();
    await store.write(KEY, { record: "{oops" }, store.get(KEY)?.version ?? "");
    expect((await executor.tick(KEY)).status).toBe("invalid");

    const started = oneShot.start({ params: { n: 1 }, cause: "Test", uid: "uid-old" }, 0);
    if (started.kind !== "step") throw new Error(started.reason);
    await store.write(KEY, { record: encodeRecord(started.record) }, store.get(KEY)?.version ?? "");
    expect(await executor.tick(KEY)).toEqual({
      status: "foreign",
      reason: "the record was written for UID uid-old, but the subject is uid-a",
    });

    store.remove(KEY);
    expect(await executor.tick(KEY)).toEqual({ status: "absent" });
    expect(await executor.request(KEY, { params: { n: 1 }, cause: "Test" })).toEqual({
      status: "absent",
    });
  });

  it("reports store and observation failures as results, never throws", async () => {
    const broken: TeardownStore = {
      read: () => Promise.reject(new Error("connection refused")),
      write: () => Promise.reject(new Error("connection refused")),
    };
    const { executor } = setup({ store: broken });
    expect(await executor.tick(KEY)).toMatchObject({
      status: "error",
      error: { code: "StoreFailed", cause: { message: "connection refused" } },
    });

    const { executor: blind, store } = setup({
      done: () => {
        throw new Error("DescribeInstances failed");
      },
    });
    await blind.request(KEY, { params: { n: 1 }, cause: "Test" });
    expect(await blind.tick(KEY)).toMatchObject({
      status: "error",
      error: { code: "ObserveFailed" },
    });
    expect(store.get(KEY)?.record).toBeDefined();
  });

  it("records the subject's UID and writes with it as a precondition", async () => {
    const { store, executor } = setup({ done: () => false });
    await executor.request(KEY, { params: { n: 1 }, cause: "Test" });
    const stored = decodeRecord(store.get(KEY)?.record);
    expect(stored.ok && stored.record.uid).toBe("uid-a");
  });

  it("settle() ticks until the teardown waits or completes", async () => {
    const { executor } = setup();
    await executor.request(KEY, { params: { n: 1 }, cause: "Test" });
    expect((await executor.settle(KEY)).status).toBe("complete");
  });
});

describe("MemoryStore", () => {
  it("gives a new UID and version on recreate, so stale writers conflict or find it gone", async () => {
    const store = new MemoryStore();
    const first = store.put("k", { a: 1 });
    const second = store.put("k", { a: 1 });
    expect(second.uid).not.toBe(first.uid);
    expect(await store.write("k", { record: "x" }, first.version)).toEqual({ status: "conflict" });
    expect(await store.write("k", { record: "x" }, second.version, first.uid)).toEqual({
      status: "gone",
    });
    expect(await store.write("missing", { record: "x" }, "1")).toEqual({ status: "gone" });
  });

  it("applies the subject patch atomically with the record", async () => {
    const store = new MemoryStore();
    const subject = store.put("k", { spec: { replicas: 1, paused: true } });
    await store.write(
      "k",
      { record: "r", subject: { spec: { replicas: 0, paused: null } } },
      subject.version,
    );
    expect(store.get("k")).toMatchObject({ record: "r", body: { spec: { replicas: 0 } } });
  });
});

describe("applyMergePatch", () => {
  it("follows RFC 7386", () => {
    expect(applyMergePatch({ a: "b", c: { d: "e", f: "g" } }, { a: "z", c: { f: null } })).toEqual({
      a: "z",
      c: { d: "e" },
    });
    expect(applyMergePatch({ a: [1, 2] }, { a: [3] })).toEqual({ a: [3] });
    expect(applyMergePatch("text", { a: 1 })).toEqual({ a: 1 });
    expect(applyMergePatch({ a: 1 }, "x")).toBe("x");
  });
});
