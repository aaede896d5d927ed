/**
 * CloudWatchContainerLogs against moto through the real AWS SDK: events are written as Docker's
 * awslogs driver writes them (CreateLogStream, PutLogEvents in order) and read back: order,
 * tailLines, since, a missing stream, a 16,384-line stream complete and in order, and follow
 * (lines appended after it started, a stream that appears late, done() and abort); and what a
 * read of a 64 MiB stream costs in heap, whole (`read`) against streamed (`lines`).
 */

import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import {
  CloudWatchLogsClient,
  CreateLogGroupCommand,
  CreateLogStreamCommand,
  type InputLogEvent,
  PutLogEventsCommand,
} from "@aws-sdk/client-cloudwatch-logs";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CloudWatchContainerLogs } from "./cloudwatch-logs.js";
import { ProviderError } from "./errors.js";
import type { ContainerRunRef, LogLine } from "./log-events.js";

const GROUP = "/nebula/test";
const UID = "33333333-0000-4000-8000-000000000001";

let moto: Moto;
let client: CloudWatchLogsClient;
let logs: CloudWatchContainerLogs;

beforeAll(async () => {
  moto = await startMoto();
  client = new CloudWatchLogsClient({
    region: moto.region,
    endpoint: moto.endpoint,
    credentials: MOTO_CREDENTIALS,
  });
  await client.send(new CreateLogGroupCommand({ logGroupName: GROUP }));
  logs = new CloudWatchContainerLogs({ client, group: GROUP });
});

afterAll(async () => {
  client?.destroy();
  await moto?.stop();
});

let runs = 0;
/** A container run of its own (its own stream) for each test. */
function run(restart = 0): ContainerRunRef {
  runs += 1;
  return { namespace: "default", pod: `pod-${runs}`, podUid: UID, container: "app", restart };
}

/** As the awslogs driver: the stream once, then batches of at most 10,000 events, in order. */
async function write(ref: ContainerRunRef, events: InputLogEvent[], create = true): Promise<void> {
  const logStreamName = CloudWatchContainerLogs.streamName(ref);
  if (create) await client.send(new CreateLogStreamCommand({ logGroupName: GROUP, logStreamName }));
  for (let i = 0; i < events.length; i += 10_000) {
    await client.send(
      new PutLogEventsCommand({
        logGroupName: GROUP,
        logStreamName,
        logEvents: events.slice(i, i + 10_000),
      }),
    );
  }
}

const BASE = Date.now() - 3_600_000;
/** Lines `from`…`to - 1`, one millisecond apart from BASE + from, padded to `width` characters. */
function lines(from: number, to: number, width = 0): InputLogEvent[] {
  return Array.from({ length: to - from }, (_, k) => ({
    timestamp: BASE + from + k,
    message: `line ${from + k}`.padEnd(width, "."),
  }));
}
const messages = (read: LogLine[] | undefined) => read?.map((l) => l.message);

describe("read", () => {
  it("returns every line of a run in order, with its time, and undefined for a stream never written", async () => {
    const ref = run();
    await write(ref, [
      { timestamp: BASE, message: "first" },
      { timestamp: BASE, message: "same millisecond, written after" },
      { timestamp: BASE + 5, message: "  spaces kept  " },
      { timestamp: BASE + 9, message: '{"json": true}' },
    ]);
    expect(await logs.read(ref)).toEqual([
      { timestamp: new Date(BASE), message: "first" },
      { timestamp: new Date(BASE), message: "same millisecond, written after" },
      { timestamp: new Date(BASE + 5), message: "  spaces kept  " },
      { timestamp: new Date(BASE + 9), message: '{"json": true}' },
    ]);
    // Another run of the same container is another stream.
    expect(await logs.read({ ...ref, restart: 1 })).toBeUndefined();
    expect(await logs.read(run())).toBeUndefined();
    // A stream created (the container started) but never written to reads as empty.
    const empty = run();
    await write(empty, []);
    expect(await logs.read(empty)).toEqual([]);
  });

  it("tailLines gives the last N lines; since is an inclusive lower bound on the time; both combine", async () => {
    const ref = run();
    await write(ref, lines(0, 10));
    expect(messages(await logs.read(ref, { tailLines: 3 }))).toEqual([
      "line 7",
      "line 8",
      "line 9",
    ]);
    expect(await logs.read(ref, { tailLines: 0 })).toEqual([]);
    expect(messages(await logs.read(ref, { tailLines: 50 }))).toHaveLength(10);
    expect(messages(await logs.read(ref, { since: new Date(BASE + 6) }))).toEqual([
      "line 6",
      "line 7",
      "line 8",
      "line 9",
    ]);
    expect(messages(await logs.read(ref, { since: new Date(BASE + 6), tailLines: 2 }))).toEqual([
      "line 8",
      "line 9",
    ]);
    expect(messages(await logs.read(ref, { since: new Date(BASE + 8), tailLines: 5 }))).toEqual([
      "line 8",
      "line 9",
    ]);
    expect(await logs.read(ref, { since: new Date(BASE + 10) })).toEqual([]);
    // Lines that share a millisecond: the tail starts among them, the forward read skips the rest.
    const burst = run();
    await write(
      burst,
      Array.from({ length: 25 }, (_, k) => ({
        timestamp: BASE + Math.floor(k / 10),
        message: `b${k}`,
      })),
    );
    expect(messages(await logs.read(burst, { tailLines: 13 }))).toEqual(
      Array.from({ length: 13 }, (_, k) => `b${k + 12}`),
    );
    const streamed: string[] = [];
    for await (const line of logs.lines(burst, { tailLines: 7, since: new Date(BASE + 1) })) {
      streamed.push(line.message);
    }
    expect(streamed).toEqual(Array.from({ length: 7 }, (_, k) => `b${k + 18}`));
  });

  it("reads 16,384 lines (1 MiB of output) complete and in order, whole or tailed over pages", async () => {
    const ref = run();
    // 63 characters and a newline each: 1 MiB of output.
    const written = lines(0, 16_384, 63);
    expect(written.reduce((bytes, e) => bytes + (e.message?.length ?? 0) + 1, 0)).toBe(1 << 20);
    await write(ref, written);
    const all = await logs.read(ref);
    expect(all).toHaveLength(16_384);
    expect(all?.map((line) => line.message)).toEqual(written.map((e) => e.message));
    expect(all?.every((line, i) => line.timestamp.getTime() === BASE + i)).toBe(true);
    const tail = await logs.read(ref, { tailLines: 12_000 });
    expect(tail).toHaveLength(12_000);
    expect(tail?.map((line) => line.message)).toEqual(written.slice(4384).map((e) => e.message));
    const since = await logs.read(ref, { since: new Date(BASE + 10_500) });
    expect(since).toHaveLength(16_384 - 10_500);
    expect(since?.map((line) => line.message)).toEqual(written.slice(10_500).map((e) => e.message));
  });

  it("throws a ProviderError with the SDK error as cause when CloudWatch Logs cannot be reached", async () => {
    const unreachable = new CloudWatchLogsClient({
      region: moto.region,
      endpoint: "http://127.0.0.1:1",
      credentials: MOTO_CREDENTIALS,
      maxAttempts: 1,
    });
    try {
      const failing = new CloudWatchContainerLogs({ client: unreachable, group: GROUP });
      const error = await failing.read(run()).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ProviderError);
      expect(error).toMatchObject({ code: "Unavailable" });
      expect((error as ProviderError).cause).toBeInstanceOf(Error);
    } finally {
      unreachable.destroy();
    }
  });
});

/** Collects a follow's lines; `onLine` may act (append, stop) after each one. */
async function collect(
  iterable: AsyncIterable<LogLine>,
  onLine: (line: LogLine, seen: number) => Promise<void> | void = () => {},
): Promise<string[]> {
  const seen: string[] = [];
  for await (const line of iterable) {
    seen.push(line.message);
    await onLine(line, seen.length);
  }
  return seen;
}

describe("follow", () => {
  it("yields what read() would, then the lines appended after it started, and ends on done()", async () => {
    const ref = run();
    await write(ref, lines(0, 5));
    let exited = false;
    const controller = new AbortController();
    const seen = await collect(
      logs.follow(ref, {
        tailLines: 2,
        signal: controller.signal,
        pollMs: 50,
        done: () => exited,
      }),
      async (_line, count) => {
        if (count === 2) {
          // Appended after the follow read the tail: it must still see them, in order.
          await write(ref, lines(5, 8), false);
          await write(ref, lines(8, 12_500), false);
          exited = true; // the container ended after its last flush
        }
      },
    );
    expect(seen).toEqual(Array.from({ length: 12_500 - 3 }, (_, i) => `line ${i + 3}`));
    expect(controller.signal.aborted).toBe(false);
  });

  it("waits for a stream that does not exist yet, reads it from the start, and ends on abort", async () => {
    const ref = run(2);
    const controller = new AbortController();
    const following = collect(
      logs.follow(ref, { tailLines: 1, signal: controller.signal, pollMs: 50 }),
      (_line, count) => {
        if (count === 3) controller.abort();
      },
    );
    // The follow finds no stream and waits; the container starts and writes only now.
    await new Promise((resolve) => setTimeout(resolve, 200));
    await write(ref, lines(0, 3));
    // tailLines applies to what existed when the follow started (nothing): every line is new.
    expect(await following).toEqual(["line 0", "line 1", "line 2"]);
  });

  it("ends without a line on abort while waiting, and on done() for a stream never written", async () => {
    const controller = new AbortController();
    const iterator = logs.follow(run(), { signal: controller.signal, pollMs: 60_000 });
    const next = iterator.next();
    setTimeout(() => controller.abort(), 100);
    expect(await next).toEqual({ done: true, value: undefined });
    const never = await collect(
      logs.follow(run(), { signal: new AbortController().signal, pollMs: 10, done: () => true }),
    );
    expect(never).toEqual([]);
  });

  it("with since, follows only lines at or after it", async () => {
    const ref = run();
    await write(ref, lines(0, 4));
    let exited = false;
    const seen = await collect(
      logs.follow(ref, {
        since: new Date(BASE + 2),
        signal: new AbortController().signal,
        pollMs: 20,
        done: async () => exited,
      }),
      async (_line, count) => {
        if (count === 2) {
          await write(ref, lines(4, 6), false);
          exited = true;
        }
      },
    );
    expect(seen).toEqual(["line 2", "line 3", "line 4", "line 5"]);
  });
});

describe("memory", () => {
  /** Node's gc(), made available in this worker. */
  function collector(): () => void {
    setFlagsFromString("--expose-gc");
    return runInNewContext("gc") as () => void;
  }

  /**
   * The heap `work` holds live at its highest, over what was live before: at each `sample()` the
   * garbage is collected first, so what is measured is what the read keeps, not what the
   * collector has yet to reclaim (also given: the highest heap seen without collecting, every 2 ms).
   */
  async function growth(
    work: (sample: () => void) => Promise<unknown>,
  ): Promise<{ live: number; raw: number }> {
    const gc = collector();
    gc();
    const base = process.memoryUsage().heapUsed;
    let live = base;
    let raw = base;
    const timer = setInterval(() => {
      raw = Math.max(raw, process.memoryUsage().heapUsed);
    }, 2);
    const sample = () => {
      raw = Math.max(raw, process.memoryUsage().heapUsed);
      gc();
      live = Math.max(live, process.memoryUsage().heapUsed);
    };
    try {
      const kept = await work(sample);
      // What the work returns is kept until measured (an array read whole stays in memory).
      sample();
      expect(kept).toBeDefined();
    } finally {
      clearInterval(timer);
    }
    return { live: live - base, raw: raw - base };
  }

  it("reading 64 MiB with limitBytes holds about a page; read() holds the whole stream (figures logged)", async () => {
    const ref = run();
    // 65,536 lines of 1,023 characters and a newline: 64 MiB of output.
    const written = lines(0, 65_536, 1023);
    await write(ref, written);
    written.length = 0;
    const MiB = 1 << 20;
    const limit = MiB; // limitBytes=1048576
    // Before: the kubelet API read the whole stream, then cut it at limitBytes.
    const before = await growth(async (sample) => {
      const all = (await logs.read(ref)) ?? [];
      sample();
      let bytes = 0;
      const chunks: Buffer[] = [];
      for (const line of all) {
        const chunk = Buffer.from(`${line.message}\n`);
        chunks.push(chunk.subarray(0, Math.min(chunk.length, limit - bytes)));
        bytes += chunk.length;
        if (bytes >= limit) break;
      }
      return [all.length, Buffer.concat(chunks).length];
    });
    // After: pages streamed, the read left at the limit.
    const limited = await growth(async (sample) => {
      let bytes = 0;
      for await (const line of logs.lines(ref)) {
        bytes += Buffer.byteLength(line.message) + 1;
        if (bytes % (256 * 1024) < 1024) sample();
        if (bytes >= limit) break;
      }
      return bytes;
    });
    // The whole stream streamed, nothing kept.
    let total = 0;
    const drained = await growth(async (sample) => {
      for await (const line of logs.lines(ref)) {
        total += Buffer.byteLength(line.message) + 1;
        if (total % (4 * MiB) < 1024) sample();
      }
      return total;
    });
    // The last 100 lines, found backwards.
    let tailed = 0;
    const tail = await growth(async (sample) => {
      for await (const _line of logs.lines(ref, { tailLines: 100 })) {
        tailed += 1;
        if (tailed === 50) sample();
      }
      return tailed;
    });
    expect(total).toBe(64 * MiB);
    expect(tailed).toBe(100);
    const mib = (g: { live: number; raw: number }) =>
      `${(g.live / MiB).toFixed(1)} MiB live (${(g.raw / MiB).toFixed(1)} MiB before collection)`;
    console.log(
      [
        "heap growth reading a 64 MiB stream from moto (its pages are 10,000 events, 10 MiB here; CloudWatch's are at most 1 MB):",
        `  read() whole, then cut at limitBytes 1 MiB: ${mib(before)}`,
        `  lines() left at limitBytes 1 MiB: ${mib(limited)}`,
        `  lines() drained whole, nothing kept: ${mib(drained)}`,
        `  lines() with tailLines 100: ${mib(tail)}`,
      ].join("\n"),
    );
    // Not a benchmark: only that streaming does not hold the stream.
    expect(before.live).toBeGreaterThan(64 * MiB);
    expect(limited.live).toBeLessThan(before.live / 2);
    expect(drained.live).toBeLessThan(before.live / 2);
  });
});
