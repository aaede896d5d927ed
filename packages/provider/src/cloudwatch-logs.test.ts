import { CloudWatchLogsClient } from "@aws-sdk/client-cloudwatch-logs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CloudWatchContainerLogs } from "./cloudwatch-logs.js";
import { ProviderError } from "./errors.js";
import { parseLogEventsPage } from "./log-events.js";

const dnsLabel = fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/);

describe("CloudWatchContainerLogs.streamName", () => {
  it("is <namespace>/<pod>/<pod-uid>/<container>/<restart>, the supervisor's awslogs-stream", () => {
    expect(
      CloudWatchContainerLogs.streamName({
        namespace: "default",
        pod: "web-7d9",
        podUid: "0d6f3a52-7c1e-4b8a-9f3e-2a1b5c7d9e01",
        container: "app",
        restart: 0,
      }),
    ).toBe("default/web-7d9/0d6f3a52-7c1e-4b8a-9f3e-2a1b5c7d9e01/app/0");
  });

  it("gives every run its own stream, and splits back into its parts", () => {
    fc.assert(
      fc.property(
        dnsLabel,
        dnsLabel,
        fc.uuid(),
        dnsLabel,
        fc.nat(1_000_000),
        fc.nat(1_000_000),
        (namespace, pod, podUid, container, restart, other) => {
          const ref = { namespace, pod, podUid, container, restart };
          const name = CloudWatchContainerLogs.streamName(ref);
          expect(name.split("/")).toEqual([namespace, pod, podUid, container, String(restart)]);
          // CloudWatch Logs forbids ':' and '*' in stream names and allows 512 characters.
          expect(name).not.toMatch(/[:*]/);
          expect(name.length).toBeLessThanOrEqual(512);
          if (other !== restart) {
            expect(CloudWatchContainerLogs.streamName({ ...ref, restart: other })).not.toBe(name);
          }
        },
      ),
    );
  });
});

describe("parseLogEventsPage", () => {
  it("keeps the events' order, turns timestamps into Dates and drops one trailing newline", () => {
    const page = parseLogEventsPage({
      events: [
        { timestamp: 1_700_000_000_000, message: "first", ingestionTime: 1 },
        { timestamp: 1_700_000_000_001, message: "second\n" },
        { timestamp: 1_700_000_000_001, message: "third\r\n" },
        { timestamp: 1_700_000_000_002, message: "  indented\n\n" },
      ],
      nextForwardToken: "f/1",
      nextBackwardToken: "b/0",
    });
    expect(page.lines).toEqual([
      { timestamp: new Date(1_700_000_000_000), message: "first" },
      { timestamp: new Date(1_700_000_000_001), message: "second" },
      { timestamp: new Date(1_700_000_000_001), message: "third" },
      { timestamp: new Date(1_700_000_000_002), message: "  indented\n" },
    ]);
    expect(page.forward).toBe("f/1");
    expect(page.backward).toBe("b/0");
  });

  it("skips events without a numeric timestamp or a string message instead of failing", () => {
    const page = parseLogEventsPage({
      events: [
        { message: "no time" },
        { timestamp: 5 },
        null,
        { timestamp: "5", message: "string time" },
        { timestamp: 6, message: "kept" },
      ],
    });
    expect(page.lines).toEqual([{ timestamp: new Date(6), message: "kept" }]);
    expect(page.forward).toBeUndefined();
  });

  it("never throws a TypeError on any event list; a non-answer is a typed error", () => {
    fc.assert(
      fc.property(fc.array(fc.anything()), (events) => {
        const page = parseLogEventsPage({ events });
        for (const line of page.lines) {
          expect(line.timestamp).toBeInstanceOf(Date);
          expect(typeof line.message).toBe("string");
        }
      }),
    );
    expect(() => parseLogEventsPage({ events: "nope" })).toThrow(ProviderError);
    expect(() => parseLogEventsPage(undefined)).toThrow(
      expect.objectContaining({ code: "Unknown" }),
    );
  });
});

describe("CloudWatchContainerLogs options", () => {
  const client = new CloudWatchLogsClient({ region: "us-east-1" });
  const ref = { namespace: "a", pod: "b", podUid: "c", container: "d", restart: 0 };

  it("refuses a log group name CloudWatch Logs would refuse", () => {
    expect(() => new CloudWatchContainerLogs({ client, group: "" })).toThrow(ProviderError);
    expect(() => new CloudWatchContainerLogs({ client, group: "has space" })).toThrow(
      expect.objectContaining({ code: "InvalidRequest" }),
    );
    expect(new CloudWatchContainerLogs({ client, group: "/nebula/prod-1" })).toBeInstanceOf(
      CloudWatchContainerLogs,
    );
  });

  it("refuses a negative or fractional tailLines before calling AWS", async () => {
    const logs = new CloudWatchContainerLogs({ client, group: "g" });
    await expect(logs.read(ref, { tailLines: -1 })).rejects.toMatchObject({
      code: "InvalidRequest",
    });
    await expect(logs.read(ref, { tailLines: 1.5 })).rejects.toBeInstanceOf(ProviderError);
    const follow = logs.follow(ref, { signal: new AbortController().signal, pollMs: 0 });
    await expect(follow.next()).rejects.toMatchObject({ code: "InvalidRequest" });
  });
});

/**
 * A log stream of `total` events made on demand (never all in memory), answering GetLogEvents as
 * CloudWatch Logs does: pages of at most `pageSize` events (its 1 MB bound) and at most `limit`,
 * forwards or backwards from a token, only events at or after `startTime`; the token repeats at
 * either end. Event `i` is at millisecond `BASE + floor(i / perMs)` (several lines share one).
 * Counts the calls and the events it handed out.
 */
class FakeStream {
  calls: Array<{ startFromHead: boolean; startTime?: number; nextToken?: string; limit?: number }> =
    [];
  events = 0;
  constructor(
    readonly total: number,
    readonly pageSize = 100,
    readonly perMs = 3,
  ) {}
  static readonly BASE = 1_700_000_000_000;
  time(i: number): number {
    return FakeStream.BASE + Math.floor(i / this.perMs);
  }
  message(i: number): string {
    return `line ${i}`;
  }
  /** The first event at or after `startTime`. */
  first(startTime: number | undefined): number {
    if (startTime === undefined) return 0;
    const ms = startTime - FakeStream.BASE;
    return Math.min(this.total, Math.max(0, ms * this.perMs));
  }
  readonly client = {
    send: async (command: { input: Record<string, unknown> }) => {
      const input = command.input as {
        startFromHead: boolean;
        startTime?: number;
        nextToken?: string;
        limit?: number;
      };
      this.calls.push(input);
      const low = this.first(input.startTime);
      const size = Math.min(this.pageSize, input.limit ?? 10_000);
      let from: number;
      let to: number;
      if (input.startFromHead) {
        from = input.nextToken === undefined ? low : Number(input.nextToken.slice(2));
        to = Math.min(this.total, from + size);
      } else {
        to = input.nextToken === undefined ? this.total : Number(input.nextToken.slice(2));
        from = Math.max(low, to - size);
      }
      const events = [];
      for (let i = from; i < to; i++)
        events.push({ timestamp: this.time(i), message: this.message(i) });
      this.events += events.length;
      return { events, nextForwardToken: `f/${to}`, nextBackwardToken: `b/${from}` };
    },
  };
  logs(): CloudWatchContainerLogs {
    return new CloudWatchContainerLogs({
      client: this.client as unknown as CloudWatchLogsClient,
      group: "g",
    });
  }
}

async function take(
  iterable: AsyncIterable<{ message: string }>,
  max = Infinity,
): Promise<string[]> {
  const seen: string[] = [];
  if (max <= 0) return seen;
  for await (const line of iterable) {
    seen.push(line.message);
    if (seen.length >= max) break;
  }
  return seen;
}

describe("CloudWatchContainerLogs.lines", () => {
  const ref = { namespace: "a", pod: "b", podUid: "c", container: "d", restart: 0 };

  it("asks for a page only when its lines are wanted: a reader that stops after 5 lines of 1,000,000 pulled one page", async () => {
    const stream = new FakeStream(1_000_000);
    expect(await take(stream.logs().lines(ref), 5)).toEqual([
      "line 0",
      "line 1",
      "line 2",
      "line 3",
      "line 4",
    ]);
    expect(stream.calls).toHaveLength(1);
    expect(stream.events).toBe(100);
  });

  it("tails from the end: tailLines=10 of 1,000,000 lines reads two pages backwards, then forwards from the tail, never the head", async () => {
    const stream = new FakeStream(1_000_000);
    const tail = await take(stream.logs().lines(ref, { tailLines: 10 }));
    expect(tail).toEqual(Array.from({ length: 10 }, (_, k) => `line ${999_990 + k}`));
    // The tail starts at line 999,990, which shares its millisecond with line 999,989: one more
    // backward page counts it, and the forward read from that millisecond skips it; the last
    // call is GetLogEvents' end of stream (the forward token repeats).
    expect(stream.calls.map((c) => c.startFromHead)).toEqual([false, false, true, true]);
    expect(stream.calls[0]?.limit).toBe(10);
    expect(stream.calls[2]?.startTime).toBe(stream.time(999_990));
    expect(stream.events).toBeLessThan(1_000);
  });

  it("caps tailLines at 100,000 lines", async () => {
    const stream = new FakeStream(300_000, 10_000, 1);
    let count = 0;
    let first: string | undefined;
    for await (const line of stream.logs().lines(ref, { tailLines: 250_000 })) {
      first ??= line.message;
      count += 1;
    }
    expect(count).toBe(100_000);
    expect(first).toBe("line 200000");
  });

  it("yields what read() returns and the naive tail, for any stream, page size, tail and since", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.nat(300),
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 7 }),
        fc.option(fc.nat(320), { nil: undefined }),
        fc.option(fc.nat(120), { nil: undefined }),
        async (total, pageSize, perMs, tailLines, sinceMs) => {
          const stream = new FakeStream(total, pageSize, perMs);
          const since = sinceMs === undefined ? undefined : new Date(FakeStream.BASE + sinceMs);
          const options = {
            ...(tailLines === undefined ? {} : { tailLines }),
            ...(since === undefined ? {} : { since }),
          };
          const all = Array.from({ length: total }, (_, i) => i).filter(
            (i) => since === undefined || stream.time(i) >= since.getTime(),
          );
          const expected = (
            tailLines === undefined ? all : all.slice(Math.max(0, all.length - tailLines))
          ).map((i) => `line ${i}`);
          expect(await take(stream.logs().lines(ref, options))).toEqual(expected);
          expect((await stream.logs().read(ref, options))?.map((l) => l.message)).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("ends quietly on abort, and refuses invalid options", async () => {
    const stream = new FakeStream(1_000);
    const controller = new AbortController();
    const seen: string[] = [];
    for await (const line of stream.logs().lines(ref, { signal: controller.signal })) {
      seen.push(line.message);
      if (seen.length === 3) controller.abort();
    }
    // The page in hand is finished with; no other page is asked for.
    expect(stream.calls).toHaveLength(1);
    await expect(take(stream.logs().lines(ref, { tailLines: -1 }))).rejects.toMatchObject({
      code: "InvalidRequest",
    });
  });
});
