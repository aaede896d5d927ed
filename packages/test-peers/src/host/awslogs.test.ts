import { describe, expect, it } from "vitest";
import {
  AWSLOGS_EVENT_OVERHEAD,
  AWSLOGS_MAX_BATCH_BYTES,
  AWSLOGS_MAX_BATCH_EVENTS,
  AWSLOGS_MAX_EVENT_BYTES,
  checkLogConfig,
  K8sFileLines,
  LogEventBatcher,
  parseAwslogsOptions,
  splitLogMessage,
} from "./awslogs.js";

const AWSLOGS = [
  "awslogs-region=us-east-1",
  "awslogs-group=/nebula/test",
  "awslogs-stream=default/web/uid-1/app/0",
  "awslogs-create-group=false",
  "awslogs-endpoint=http://127.0.0.1:5000",
];

describe("checkLogConfig (Docker's daemon check on create)", () => {
  it("accepts the contract's awslogs options and Docker's other played drivers", () => {
    expect(checkLogConfig("awslogs", AWSLOGS)).toMatchObject({ ok: true, driver: "awslogs" });
    expect(checkLogConfig(undefined, ["max-size=10m", "max-file=3"])).toMatchObject({
      ok: true,
      driver: "json-file",
    });
    expect(checkLogConfig("local", ["compress=true"])).toMatchObject({ ok: true, driver: "local" });
    expect(checkLogConfig("none", [])).toMatchObject({ ok: true, driver: "none" });
    expect(
      checkLogConfig("awslogs", [...AWSLOGS, "mode=non-blocking", "max-buffer-size=4m"]),
    ).toMatchObject({
      ok: true,
    });
  });

  it("refuses what Docker refuses, with Docker's messages", () => {
    expect(checkLogConfig("awslogs", [...AWSLOGS, "awslogs-bogus=1"])).toEqual({
      ok: false,
      message: "unknown log opt 'awslogs-bogus' for awslogs log driver",
    });
    expect(checkLogConfig("awslogs", ["awslogs-region=us-east-1"])).toEqual({
      ok: false,
      message: "must specify a value for log opt 'awslogs-group'",
    });
    expect(checkLogConfig("awslogs", ["awslogs-group=g", "awslogs-create-group=maybe"])).toEqual({
      ok: false,
      message:
        "must specify valid value for log opt 'awslogs-create-group': strconv.ParseBool: parsing \"maybe\": invalid syntax",
    });
    expect(checkLogConfig("json-file", ["awslogs-group=g"])).toEqual({
      ok: false,
      message: "unknown log opt 'awslogs-group' for json-file log driver",
    });
    expect(checkLogConfig("awslogs", ["awslogs-group=g", "mode=fast"])).toEqual({
      ok: false,
      message: "logger: logging mode not supported: fast",
    });
    expect(checkLogConfig("awslogs", ["awslogs-group=g", "max-buffer-size=4m"])).toEqual({
      ok: false,
      message: "logger: max-buffer-size option is only supported with 'mode=non-blocking'",
    });
    expect(checkLogConfig("awslogs", ["awslogs-group"])).toEqual({
      ok: false,
      message: "invalid key value pair format in log opt: awslogs-group",
    });
  });

  it("refuses drivers and awslogs options it does not play, by name, instead of ignoring them", () => {
    const fluentd = checkLogConfig("fluentd", []);
    expect(fluentd.ok).toBe(false);
    expect(fluentd.ok ? "" : fluentd.message).toMatch(
      /^logger: no log driver named 'fluentd' is registered/,
    );
    const multiline = checkLogConfig("awslogs", [...AWSLOGS, "awslogs-multiline-pattern=^x"]);
    expect(multiline.ok ? "" : multiline.message).toMatch(
      /'awslogs-multiline-pattern' of the awslogs log driver is not played/,
    );
  });
});

describe("parseAwslogsOptions", () => {
  it("reads the options with Docker's defaults", () => {
    expect(parseAwslogsOptions(AWSLOGS)).toEqual({
      group: "/nebula/test",
      stream: "default/web/uid-1/app/0",
      region: "us-east-1",
      endpoint: "http://127.0.0.1:5000",
      createGroup: false,
      createStream: true,
      flushIntervalMs: 5_000,
    });
    expect(
      parseAwslogsOptions(["awslogs-group=g", "awslogs-force-flush-interval-seconds=2"]),
    ).toMatchObject({ stream: undefined, region: undefined, flushIntervalMs: 2_000 });
  });
});

const record = (ms: number, stream: string, tag: string, content: string): string =>
  `2026-12-01T04:24:13.${String(ms).padStart(3, "0")}027178+00:00 ${stream} ${tag} ${content}\n`;

describe("K8sFileLines (podman's k8s-file log back into lines)", () => {
  it("joins partial records per stream and keeps the file's order, however the bytes are cut", () => {
    const file = Buffer.from(
      record(1, "stdout", "F", "out-1") +
        record(2, "stdout", "P", "long-") +
        record(3, "stderr", "F", "err-1") +
        record(4, "stdout", "F", "line") +
        `2026-12-01T04:24:13.005+00:00 stdout F\n` +
        record(6, "stderr", "F", "spaces  inside "),
    );
    const expected = [
      { stream: "stdout", message: "out-1", timestamp: Date.parse("2026-12-01T04:24:13.001Z") },
      { stream: "stderr", message: "err-1", timestamp: Date.parse("2026-12-01T04:24:13.003Z") },
      { stream: "stdout", message: "long-line", timestamp: Date.parse("2026-12-01T04:24:13.004Z") },
      { stream: "stdout", message: "", timestamp: Date.parse("2026-12-01T04:24:13.005Z") },
      {
        stream: "stderr",
        message: "spaces  inside ",
        timestamp: Date.parse("2026-12-01T04:24:13.006Z"),
      },
    ];
    for (const cut of [1, 7, 50, file.length]) {
      const reader = new K8sFileLines();
      const lines = [];
      for (let at = 0; at < file.length; at += cut)
        lines.push(...reader.push(file.subarray(at, at + cut)));
      expect(lines.map((l) => ({ ...l, message: l.message.toString() }))).toEqual(expected);
      expect(reader.end()).toEqual([]);
    }
  });

  it("returns a run's unfinished last line at its end, and does not join it to the next run", () => {
    const reader = new K8sFileLines();
    expect(
      reader.push(Buffer.from(record(1, "stdout", "F", "one") + record(2, "stdout", "P", "two"))),
    ).toHaveLength(1);
    expect(reader.end().map((l) => l.message.toString())).toEqual(["two"]);
    expect(
      reader.push(Buffer.from(record(3, "stdout", "F", "one"))).map((l) => l.message.toString()),
    ).toEqual(["one"]);
  });
});

describe("splitLogMessage", () => {
  it("keeps lines up to 262,118 bytes whole and splits longer ones as Docker does", () => {
    expect(splitLogMessage(Buffer.from("hello"))).toEqual(["hello"]);
    const long = Buffer.alloc(AWSLOGS_MAX_EVENT_BYTES * 2 + 10, "a");
    expect(splitLogMessage(long).map((p) => p.length)).toEqual([
      AWSLOGS_MAX_EVENT_BYTES,
      AWSLOGS_MAX_EVENT_BYTES,
      10,
    ]);
  });

  it("never cuts a UTF-8 character in two", () => {
    const line = Buffer.concat([Buffer.alloc(AWSLOGS_MAX_EVENT_BYTES - 1, "a"), Buffer.from("é€")]);
    const parts = splitLogMessage(line);
    expect(parts.join("")).toBe(line.toString("utf8"));
    expect(parts.every((p) => !p.includes("\uFFFD"))).toBe(true);
    expect(Buffer.byteLength(parts[0] ?? "")).toBe(AWSLOGS_MAX_EVENT_BYTES - 1);
  });
});

describe("LogEventBatcher", () => {
  it("keeps each batch within 1,048,576 bytes counting 26 bytes an event, in order", () => {
    const batcher = new LogEventBatcher();
    for (let i = 0; i < 16_384; i++)
      batcher.add({ timestamp: i, message: String(i).padStart(63, "0") });
    const batches = batcher.takeAll();
    expect(batches.length).toBe(2);
    for (const batch of batches) {
      const bytes = batch.reduce(
        (n, e) => n + Buffer.byteLength(e.message) + AWSLOGS_EVENT_OVERHEAD,
        0,
      );
      expect(bytes).toBeLessThanOrEqual(AWSLOGS_MAX_BATCH_BYTES);
    }
    expect(batches.flat().map((e) => e.timestamp)).toEqual([...Array(16_384).keys()]);
    expect(batcher.pending).toBe(false);
  });

  it("keeps each batch within 10,000 events and hands out only full batches until told", () => {
    const batcher = new LogEventBatcher();
    for (let i = 0; i < AWSLOGS_MAX_BATCH_EVENTS + 1; i++)
      batcher.add({ timestamp: i, message: "" });
    expect(batcher.takeFull().map((b) => b.length)).toEqual([AWSLOGS_MAX_BATCH_EVENTS]);
    expect(batcher.pending).toBe(true);
    expect(batcher.takeAll().map((b) => b.length)).toEqual([1]);
  });
});
