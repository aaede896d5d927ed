import type { ExitReport } from "@nebula/state-mapping";
import type { PodStatusChange } from "@nebula/virtual-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Doorbell } from "./doorbell-message.js";
import type { DoorbellQueue, QueueMessage } from "./doorbell-queue.js";
import { type DoorbellBatch, Doorbells } from "./doorbells.js";
import { ProviderError } from "./errors.js";
import { StatusPublisher } from "./publisher.js";
import { observe, refreshState } from "./record.js";
import {
  addOwnedInstance,
  observed,
  T0,
  tagReport,
  testContext,
  testRecord,
} from "./testing/context.js";
import { testPod } from "./testing/fixtures.js";

/**
 * The queue in memory, for the reader's unit tests (the SQS adapter runs against moto in
 * `doorbells.integration.test.ts`): messages to hand out, receipts deleted, receives that fail.
 */
class MemoryQueue implements DoorbellQueue {
  readonly waiting: QueueMessage[] = [];
  readonly deleted: string[] = [];
  failures = 0;
  receives = 0;

  async receive(_waitSeconds: number, signal: AbortSignal): Promise<readonly QueueMessage[]> {
    this.receives++;
    if (this.failures > 0) {
      this.failures--;
      throw new ProviderError("Unavailable", "ReceiveMessage failed (ServiceUnavailable)");
    }
    if (this.waiting.length === 0) {
      // A long poll that finds nothing: wait a little (or until aborted), then answer empty.
      await new Promise<void>((r) => {
        const t = setTimeout(r, 5);
        signal.addEventListener(
          "abort",
          () => {
            clearTimeout(t);
            r();
          },
          { once: true },
        );
      });
    }
    return this.waiting.splice(0, 10);
  }

  async delete(receipts: readonly string[]): Promise<void> {
    this.deleted.push(...receipts);
  }
}

let next = 0;
function message(doorbell: Doorbell, extra: Partial<QueueMessage> = {}): QueueMessage {
  next++;
  return { id: `m-${next}`, receipt: `r-${next}`, sentAt: T0, receiveCount: 1, doorbell, ...extra };
}
const ring = (instanceId: string, seq: number) => message({ kind: "report", instanceId, seq });

function report(seq: number, final: boolean, exitCode = 0): ExitReport {
  const at = new Date(T0).toISOString();
  return {
    v: 1,
    seq,
    time: at,
    final,
    containers: [
      final
        ? {
            name: "app",
            init: false,
            state: "terminated",
            restarts: 0,
            exitCode,
            startedAt: at,
            finishedAt: at,
            containerID: "abc123",
          }
        : {
            name: "app",
            init: false,
            state: "running",
            restarts: 0,
            startedAt: at,
            containerID: "abc123",
          },
    ],
  } as ExitReport;
}

function setup(options: { rereadMs?: number; rereads?: number; windowMs?: number } = {}) {
  const t = testContext();
  const publisher = new StatusPublisher(t.ctx);
  const changes: PodStatusChange[] = [];
  publisher.subscribe(async (change) => void changes.push(change));
  const queue = new MemoryQueue();
  const doorbells = new Doorbells(t.ctx, publisher, queue, {
    windowMs: options.windowMs ?? 0,
    waitSeconds: 20,
    rereadMs: options.rereadMs ?? 1,
    rereads: options.rereads ?? 3,
  });
  /** A Pod whose instance runs and reported seq 1 (running), observed and published. */
  const running = async (uid: string) => {
    const instance = addOwnedInstance(t.gateway, uid);
    tagReport(instance, report(1, false));
    const record = testRecord(t.ctx, testPod(`pod-${uid}`, uid), {
      instanceId: instance.InstanceId,
      launchRequested: true,
      launchedAt: new Date(T0),
    });
    observe(t.ctx, record, observed(instance), T0);
    refreshState(t.ctx, record);
    await publisher.publish(record);
    return { instance, record };
  };
  /**
   * Records the IDs of every `DescribeInstances` (sorted), each after `before` resolves (a gate
   * that holds the read in flight).
   */
  const recordReads = (before?: () => Promise<void>) => {
    const reads: string[][] = [];
    const describe = t.gateway.describeInstances.bind(t.gateway);
    t.gateway.describeInstances = async (ids: readonly string[]) => {
      reads.push([...ids].sort());
      await before?.();
      return describe(ids);
    };
    return reads;
  };
  return { ...t, publisher, changes, queue, doorbells, running, recordReads };
}

describe("Doorbells.handle", () => {
  it("reads the rung instance at once and publishes its exit: one DescribeInstances, message deleted", async () => {
    const t = setup();
    const { instance } = await t.running("uid-1");
    expect(t.changes.at(-1)?.status.phase).toBe("Running");
    tagReport(instance, report(2, true, 3));
    t.gateway.calls.length = 0;
    const m = ring(instance.InstanceId, 2);
    const batch = await t.doorbells.handle([m]);
    expect(t.changes.at(-1)?.status.phase).toBe("Failed");
    expect(t.changes.at(-1)?.status.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(3);
    expect(t.gateway.calls.map((c) => c.action)).toEqual(["describeInstances"]);
    expect(t.queue.deleted).toEqual([m.receipt]);
    expect(batch).toMatchObject({ messages: 1, instances: 1, coalesced: 0, ignored: 0 });
    expect(batch.lagSeconds).toHaveLength(1);
  });

  it("folds many doorbells of many instances into one read, each Pod published once", async () => {
    const t = setup();
    const pods = await Promise.all(["a", "b", "c"].map((u) => t.running(`uid-${u}`)));
    for (const p of pods) tagReport(p.instance, report(2, true));
    const before = t.changes.length;
    t.gateway.calls.length = 0;
    const messages = pods.flatMap((p) => [
      ring(p.instance.InstanceId, 2),
      ring(p.instance.InstanceId, 2),
      message({ kind: "state", instanceId: p.instance.InstanceId, state: "stopping" }),
    ]);
    const batch = await t.doorbells.handle(messages);
    expect(t.gateway.count("describeInstances")).toBe(1);
    expect(batch).toMatchObject({ messages: 9, instances: 3, coalesced: 6 });
    expect(t.changes.length - before).toBe(3);
    expect(t.queue.deleted).toHaveLength(9);
  });

  it("trusts nothing in a message: an unknown instance costs no read, another node's changes nothing", async () => {
    const t = setup();
    const { instance, record } = await t.running("uid-1");
    const before = t.changes.length;
    t.gateway.calls.length = 0;
    // Not an instance of any Pod of this node: nothing is read.
    await t.doorbells.handle([ring("i-0fffffffffffffff0", 9)]);
    expect(t.gateway.calls).toEqual([]);
    // A recorded instance whose tags now say another node (the read is filtered by this node's
    // tags): read, found nothing, nothing changes.
    instance.Tags = instance.Tags.map((tg) =>
      tg.Key === "nebula:node" ? { ...tg, Value: "other-node" } : tg,
    );
    const batch = await t.doorbells.handle([ring(instance.InstanceId, 9)]);
    expect(batch).toMatchObject({ instances: 1, ignored: 0 });
    expect(t.changes.length).toBe(before);
    expect(record.state?.report?.seq).toBe(1);
  });

  it("leaves an unreadable message for the dead-letter queue, and deletes it after 10 receives", async () => {
    const t = setup();
    const bad = message({ kind: "unreadable", problem: "not JSON" });
    const batch = await t.doorbells.handle([bad]);
    expect(batch.unreadable).toBe(1);
    expect(t.queue.deleted).toEqual([]);
    expect(t.logs.some((l) => l.message.includes("unreadable (not JSON)"))).toBe(true);
    const tenth = message({ kind: "unreadable", problem: "not JSON" }, { receiveCount: 10 });
    await t.doorbells.handle([tenth]);
    expect(t.queue.deleted).toEqual([tenth.receipt]);
  });

  it("deletes nothing when the read fails: SQS hands the messages out again, and the poll is still there", async () => {
    const t = setup();
    const { instance } = await t.running("uid-1");
    t.gateway.fail(
      "describeInstances",
      new ProviderError("Throttled", "DescribeInstances failed (RequestLimitExceeded)"),
    );
    const batch = await t.doorbells.handle([ring(instance.InstanceId, 2)]);
    expect(batch.error?.code).toBe("Throttled");
    expect(t.queue.deleted).toEqual([]);
  });

  it("reads again, a bounded number of times, when the tags do not show the rung report yet", async () => {
    const t = setup({ rereadMs: 1, rereads: 3 });
    const { instance, record } = await t.running("uid-1");
    t.gateway.calls.length = 0;
    // The doorbell for seq 2 arrives before EC2's reads show it: read, then again up to 3 times.
    await t.doorbells.handle([ring(instance.InstanceId, 2)]);
    await until(() => t.gateway.count("describeInstances") === 4);
    await new Promise((r) => setTimeout(r, 30));
    expect(t.gateway.count("describeInstances")).toBe(4);
    expect(record.state?.report?.seq).toBe(1);

    // Once the tags show it, the next read publishes it and the reads stop.
    t.gateway.calls.length = 0;
    await t.doorbells.handle([ring(instance.InstanceId, 3)]);
    tagReport(instance, report(3, true));
    await until(() => record.state?.report?.seq === 3);
    await new Promise((r) => setTimeout(r, 30));
    expect(t.gateway.count("describeInstances")).toBe(2);
    expect(t.changes.at(-1)?.status.phase).toBe("Succeeded");
  });

  it("never lets an older read overwrite a newer one (a poll's listing that finishes after the doorbell's read)", async () => {
    const t = setup();
    const { instance, record } = await t.running("uid-1");
    const stale = observed(instance); // what a poll that started at T0 + 1 saw: seq 1, running
    t.clock.advance(2);
    tagReport(instance, report(2, true));
    await t.doorbells.handle([ring(instance.InstanceId, 2)]); // read at T0 + 2: seq 2, final
    expect(observe(t.ctx, record, stale, T0 + 1)).toBe(false);
    refreshState(t.ctx, record);
    expect(record.state?.report).toMatchObject({ seq: 2, final: true });
  });
});

describe("a burst", () => {
  it("10,000 doorbells for 20 Pods: read in batches of at most 1,000, each status written once", async () => {
    // Receiving goes on while a batch is gathered (the window) and read.
    const t = setup({ windowMs: 20 });
    const pods = await Promise.all(Array.from({ length: 20 }, (_, i) => t.running(`uid-${i}`)));
    for (const p of pods) tagReport(p.instance, report(2, true));
    const before = t.changes.length;
    t.gateway.calls.length = 0;
    for (let k = 0; k < 10_000; k++)
      t.queue.waiting.push(ring(pods[k % 20]?.instance.InstanceId ?? "", 2));
    const abort = new AbortController();
    const batches: number[] = [];
    t.doorbells.onBatch((b) => batches.push(b.messages));
    const running = t.doorbells.run(abort.signal);
    await until(() => t.queue.deleted.length === 10_000, 10_000);
    abort.abort();
    await running;
    expect(batches.every((n) => n <= 1000)).toBe(true);
    expect(batches.reduce((a, b) => a + b, 0)).toBe(10_000);
    expect(t.gateway.count("describeInstances")).toBe(batches.length);
    expect(batches.length).toBeLessThanOrEqual(11);
    expect(t.changes.length - before).toBe(20);
  });
});

describe("Doorbells.run", () => {
  it("keeps receiving while a read is in flight: what arrives meanwhile goes into the next read", async () => {
    const t = setup();
    const [a, b, c] = await Promise.all(["uid-a", "uid-b", "uid-c"].map((u) => t.running(u)));
    for (const p of [a, b, c]) if (p) tagReport(p.instance, report(2, true));
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const reads = t.recordReads(() => gate);
    const abort = new AbortController();
    const running = t.doorbells.run(abort.signal);
    t.queue.waiting.push(ring(a?.instance.InstanceId ?? "", 2));
    await until(() => reads.length === 1, 5_000);
    const receivesDuringRead = t.queue.receives;
    t.queue.waiting.push(
      ring(b?.instance.InstanceId ?? "", 2),
      ring(c?.instance.InstanceId ?? "", 2),
    );
    await until(() => t.queue.waiting.length === 0 && t.queue.receives > receivesDuringRead, 5_000);
    expect(reads.length).toBe(1);
    release();
    await until(() => t.queue.deleted.length === 3, 5_000);
    abort.abort();
    await running;
    expect(reads).toEqual([
      [a?.instance.InstanceId],
      [b?.instance.InstanceId, c?.instance.InstanceId].sort(),
    ]);
  });

  it("a doorbell after a quiet spell is read at once; the next read waits the window after it", async () => {
    // A window of a minute: the first read cannot be waiting for it, the second must be.
    const t = setup({ windowMs: 60_000 });
    const [a, b] = await Promise.all(["uid-a", "uid-b"].map((u) => t.running(u)));
    for (const p of [a, b]) if (p) tagReport(p.instance, report(2, true));
    const reads = t.recordReads();
    const abort = new AbortController();
    const running = t.doorbells.run(abort.signal);
    t.queue.waiting.push(ring(a?.instance.InstanceId ?? "", 2));
    await until(() => t.queue.deleted.length === 1, 5_000);
    expect(reads).toEqual([[a?.instance.InstanceId]]);
    // Received, and held for the next read, a minute after the first one ended.
    const receives = t.queue.receives;
    t.queue.waiting.push(ring(b?.instance.InstanceId ?? "", 2));
    await until(() => t.queue.waiting.length === 0 && t.queue.receives > receives + 2, 5_000);
    expect(reads).toHaveLength(1);
    abort.abort();
    await running;
    // Not read, so not deleted: the queue hands it out again.
    expect(reads).toHaveLength(1);
    expect(t.queue.deleted).toHaveLength(1);
  });

  it("a held status write holds no other batch's read; run() resolves only once it is written", async () => {
    const t = setup();
    const [a, b] = await Promise.all(["uid-a", "uid-b"].map((u) => t.running(u)));
    for (const p of [a, b]) if (p) tagReport(p.instance, report(2, true));
    // The API server hangs on a's status write.
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const written: string[] = [];
    t.publisher.subscribe(async (change) => {
      if (change.pod.metadata?.uid === "uid-a") await gate;
      written.push(change.pod.metadata?.uid ?? "");
    });
    const reads = t.recordReads();
    const abort = new AbortController();
    let ended = false;
    const running = t.doorbells.run(abort.signal).then(() => {
      ended = true;
    });
    t.queue.waiting.push(ring(a?.instance.InstanceId ?? "", 2));
    await until(() => reads.length === 1, 5_000);
    t.queue.waiting.push(ring(b?.instance.InstanceId ?? "", 2));
    // b is read and written while a's write still hangs.
    await until(() => written.includes("uid-b"), 5_000);
    expect(reads).toEqual([[a?.instance.InstanceId], [b?.instance.InstanceId]]);
    expect(written).toEqual(["uid-b"]);
    abort.abort();
    await new Promise((r) => setTimeout(r, 20));
    expect(ended).toBe(false);
    release();
    await running;
    expect(written).toEqual(["uid-b", "uid-a"]);
  });

  it("reports where each batch's time went: host, delivery, wait, read, publish", async () => {
    const t = setup();
    const { instance } = await t.running("uid-1");
    tagReport(instance, report(2, true));
    const batches: DoorbellBatch[] = [];
    t.doorbells.onBatch((b) => batches.push(b));
    const describe = t.gateway.describeInstances.bind(t.gateway);
    t.gateway.describeInstances = async (ids: readonly string[]) => {
      t.clock.advance(300);
      return describe(ids);
    };
    t.publisher.subscribe(async () => {
      t.clock.advance(50);
    });
    t.clock.now = T0 + 1000;
    const rung = { kind: "report", instanceId: instance.InstanceId, seq: 2 } as const;
    await t.doorbells.handle([
      // SQS received the first 0.7 s after the exit (finishedAt T0): the host's part.
      message(rung, { sentAt: T0 + 700 }),
      message(rung, { receivedAt: T0 + 200 }),
    ]);
    expect(batches[0]?.timings).toEqual({
      // One exit, timed once (by the first doorbell carrying it).
      hostSeconds: [0.7],
      deliverySeconds: [0.2],
      waitSeconds: 0.8,
      readSeconds: 0.3,
      publishSeconds: [0.05],
    });
    // A later report carrying the same exit does not time it again,
    tagReport(instance, report(3, true));
    await t.doorbells.handle([message({ ...rung, seq: 3 }, { sentAt: T0 + 9000 })]);
    expect(batches[1]?.timings.hostSeconds).toEqual([]);
    // nor once the Pod's record is made anew (a Pod loaded again, as at its deletion): the demo
    // once timed the exits of every deleted Pod again, 35 s late, from its stop's final report.
    const [uid, record] = [...t.ctx.records.entries()][0] ?? [];
    if (uid === undefined || record === undefined) throw new Error("no record");
    t.ctx.records.set(uid, { ...record });
    tagReport(instance, report(4, true));
    await t.doorbells.handle([message({ ...rung, seq: 4 }, { sentAt: T0 + 40_000 })]);
    expect(batches[2]?.timings.hostSeconds).toEqual([]);
    expect(batches[2]?.timings.readSeconds).toBeDefined();
    // nor by a new process (a vnode restarted), whose first doorbell of the Pod carries the
    // exit its report already carried when this process read it (the demo restarts its vnode).
    const fresh = new Doorbells(t.ctx, t.publisher, t.queue, { windowMs: 0, waitSeconds: 20 });
    const freshBatches: DoorbellBatch[] = [];
    fresh.onBatch((b) => freshBatches.push(b));
    tagReport(instance, report(5, true));
    await fresh.handle([message({ ...rung, seq: 5 }, { sentAt: T0 + 60_000 })]);
    expect(freshBatches[0]?.timings.hostSeconds).toEqual([]);
  });

  it("receives until aborted, reports its health, and backs off a failing queue", async () => {
    const t = setup();
    const { instance } = await t.running("uid-1");
    const abort = new AbortController();
    const handled: number[] = [];
    t.doorbells.onBatch((b) => handled.push(b.messages));
    const running = t.doorbells.run(abort.signal);
    await until(() => t.doorbells.healthy);
    // The queue fails: unhealthy (the poll speeds back up), said once, and retried after 1 s.
    t.queue.failures = 1;
    await until(() => !t.doorbells.healthy);
    expect(t.logs.filter((l) => l.message.includes("polling faster"))).toHaveLength(1);
    await until(() => t.doorbells.healthy, 5_000);
    tagReport(instance, report(2, true));
    t.queue.waiting.push(ring(instance.InstanceId, 2));
    await until(() => handled.length === 1);
    expect(t.changes.at(-1)?.status.phase).toBe("Succeeded");
    abort.abort();
    await running;
    const receives = t.queue.receives;
    await new Promise((r) => setTimeout(r, 20));
    expect(t.queue.receives).toBe(receives);
  }, 20_000);
});

async function until(test: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!test()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 2));
  }
}

describe("Doorbells over time (property)", () => {
  /** A running report whose container's restart count is its seq: the status shows which report it came from. */
  const numbered = (seq: number): ExitReport => {
    const r = report(seq, false);
    return { ...r, containers: r.containers.map((c) => ({ ...c, restarts: seq })) } as ExitReport;
  };
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("whatever the order, duplicates and delays of doorbells, reads and status writes: a Pod's published status never goes back, and ends at its latest report", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            pod: fc.integer({ min: 0, max: 2 }),
            kind: fc.constantFrom("advance", "advance", "ring-old", "ring-twice"),
            readMs: fc.integer({ min: 0, max: 4 }),
            writeMs: fc.integer({ min: 0, max: 20 }),
            gapMs: fc.integer({ min: 0, max: 3 }),
          }),
          { minLength: 1, maxLength: 12 },
        ),
        async (steps) => {
          const t = setup();
          // Every read starts at its own moment (the older-read guard compares start times).
          let tick = 0;
          Object.defineProperty(t.clock, "now", {
            get: () => T0 + ++tick,
            set: () => undefined,
            configurable: true,
          });
          const pods = await Promise.all(["uid-0", "uid-1", "uid-2"].map((u) => t.running(u)));
          const seqs = pods.map(() => 1);
          // Reads and status writes take as long as the steps say, in turn.
          let reads = 0;
          let writes = 0;
          const describe = t.gateway.describeInstances.bind(t.gateway);
          t.gateway.describeInstances = async (ids: readonly string[]) => {
            const found = await describe(ids);
            await pause(steps[reads++ % steps.length]?.readMs ?? 0);
            return found;
          };
          const shown = new Map<string, number[]>();
          t.publisher.subscribe(async (change) => {
            await pause(steps[writes++ % steps.length]?.writeMs ?? 0);
            const uid = change.pod.metadata?.uid ?? "";
            const restarts = change.status.containerStatuses?.[0]?.restartCount ?? -1;
            shown.set(uid, [...(shown.get(uid) ?? []), restarts]);
          });
          const abort = new AbortController();
          const running = t.doorbells.run(abort.signal);
          let rung = 0;
          for (const step of steps) {
            const p = pods[step.pod];
            if (p === undefined) continue;
            const id = p.instance.InstanceId;
            const i = step.pod;
            if (step.kind === "advance") {
              seqs[i] = (seqs[i] ?? 1) + 1;
              tagReport(p.instance, numbered(seqs[i] ?? 1));
              t.queue.waiting.push(ring(id, seqs[i] ?? 1));
              rung++;
            } else if (step.kind === "ring-old") {
              t.queue.waiting.push(ring(id, Math.max(1, (seqs[i] ?? 1) - 1)));
              rung++;
            } else {
              t.queue.waiting.push(ring(id, seqs[i] ?? 1), ring(id, seqs[i] ?? 1));
              rung += 2;
            }
            await pause(step.gapMs);
          }
          await until(() => t.queue.deleted.length === rung, 10_000);
          abort.abort();
          await running;
          pods.forEach((p, i) => {
            const seen = shown.get(p?.record.facts.uid ?? "") ?? [];
            for (let k = 1; k < seen.length; k++)
              expect(seen[k]).toBeGreaterThanOrEqual(seen[k - 1] ?? 0);
            // A Pod whose report moved on shows the latest one last.
            if ((seqs[i] ?? 1) > 1) expect(seen.at(-1)).toBe(seqs[i]);
          });
        },
      ),
      { numRuns: 40 },
    );
  }, 60_000);
});
