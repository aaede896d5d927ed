/**
 * CloudWatchContainerLogs against moto through the real AWS SDK: events are written as Docker's
 * awslogs driver writes them (CreateLogStream, PutLogEvents in order) and read back: order,
 * tailLines, since, a missing stream, a 16,384-line stream complete and in order, and follow
 * (lines appended after it started, a stream that appears late, done() and abort).
 */
import {
  CloudWatchLogsClient,
  CreateLogGroupCommand,
  CreateLogStreamCommand,
  type InputLogEvent,
  PutLogEventsCommand,
} from "@aws-sdk/client-cloudwatch-logs";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CloudWatchContainerLogs, type ContainerRunRef, type LogLine } from "./cloudwatch-logs.js";
import { ProviderError } from "./errors.js";

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
