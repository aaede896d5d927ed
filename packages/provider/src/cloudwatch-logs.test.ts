import { CloudWatchLogsClient } from "@aws-sdk/client-cloudwatch-logs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CloudWatchContainerLogs, parseLogEventsPage } from "./cloudwatch-logs.js";
import { ProviderError } from "./errors.js";

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
