import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  decodeConsoleOutput,
  decodeReportTags,
  type ExitReport,
  encodeConsoleLine,
  encodeReportTags,
  REPORT_TAG_BUDGET,
} from "./report.js";

const b64 = (text: string) => Buffer.from(text, "utf8").toString("base64");

const crashed: ExitReport = {
  v: 1,
  seq: 4,
  time: "2026-11-30T05:00:00Z",
  final: false,
  containers: [
    {
      name: "app",
      init: false,
      state: "waiting",
      reason: "CrashLoopBackOff",
      restarts: 3,
      last: {
        exitCode: 1,
        reason: "Error",
        startedAt: "2026-11-30T04:59:50Z",
        finishedAt: "2026-11-30T04:59:55Z",
        messageB64: b64("config file /etc/app.yaml not found\n"),
      },
    },
    {
      name: "sidecar",
      init: false,
      state: "running",
      restarts: 0,
      startedAt: "2026-11-30T04:58:00Z",
    },
  ],
};

describe("tag channel", () => {
  it("round-trips a report", () => {
    const tags = encodeReportTags(crashed);
    expect(tags["nebula:report"]).toMatch(/^v1 seq=4 chunks=\d+ sha256=[0-9a-f]{16}$/);
    expect(decodeReportTags(tags)).toEqual({ kind: "report", report: crashed });
  });

  it("reads the DescribeInstances tag shape", () => {
    const tags = Object.entries(encodeReportTags(crashed)).map(([Key, Value]) => ({ Key, Value }));
    expect(decodeReportTags([{ Key: "nebula:pod", Value: "ns/p" }, ...tags])).toEqual({
      kind: "report",
      report: crashed,
    });
  });

  it("says absent when there is no header", () => {
    expect(decodeReportTags([{ Key: "Name", Value: "x" }])).toEqual({ kind: "absent" });
    expect(decodeReportTags(undefined)).toEqual({ kind: "absent" });
  });

  it("detects a missing chunk and a mixed write", () => {
    const tags = encodeReportTags(crashed);
    const { "nebula:report:1": _gone, ...missing } = tags;
    expect(decodeReportTags(missing)).toEqual({
      kind: "unreadable",
      message: expect.stringContaining("chunk 1 of"),
    });
    const other = encodeReportTags({ ...crashed, seq: 5, final: true });
    const mixed = { ...tags, "nebula:report:1": other["nebula:report:1"] ?? "" };
    expect(decodeReportTags(mixed)).toEqual({
      kind: "unreadable",
      message: expect.stringContaining("checksum"),
    });
  });

  it("refuses a future version with a message", () => {
    expect(
      decodeReportTags({ "nebula:report": "v2 seq=1 chunks=1 sha256=0123456789abcdef" }),
    ).toEqual({
      kind: "unreadable",
      message: "report version v2 is not supported (this reader knows v1)",
    });
  });

  it("reads stopRequested, and refuses one that is not a boolean", () => {
    const stopped: ExitReport = { ...crashed, final: true, stopRequested: true };
    expect(decodeReportTags(encodeReportTags(stopped))).toEqual({
      kind: "report",
      report: stopped,
    });
    const bad = { ...crashed, stopRequested: "yes" } as unknown as ExitReport;
    expect(decodeReportTags(encodeReportTags(bad))).toEqual({
      kind: "unreadable",
      message: "report field stopRequested: Invalid input: expected boolean, received string",
    });
  });

  it("keeps unknown future fields", () => {
    const future = { ...crashed, hostname: "ip-10-0-0-1" } as ExitReport;
    const read = decodeReportTags(encodeReportTags(future));
    expect(read).toMatchObject({ kind: "report", report: { hostname: "ip-10-0-0-1" } });
  });

  it("truncates long messages to stay within the tag budget and marks them", () => {
    const long: ExitReport = {
      ...crashed,
      containers: [
        {
          name: "app",
          init: false,
          state: "terminated",
          restarts: 0,
          exitCode: 1,
          reason: "Error",
          messageB64: b64("x".repeat(4096)),
        },
      ],
    };
    const tags = encodeReportTags(long);
    expect(Object.keys(tags).length).toBeLessThanOrEqual(REPORT_TAG_BUDGET);
    const read = decodeReportTags(tags);
    expect(read.kind).toBe("report");
    if (read.kind !== "report") return;
    const [app] = read.report.containers;
    expect(app?.truncated).toBe(true);
    expect(Buffer.from(app?.messageB64 ?? "", "base64").toString()).toBe("x".repeat(1024));
  });

  it("always fits the budget, whatever the report", () => {
    const container = fc.record({
      name: fc.string({ minLength: 1, maxLength: 63 }),
      init: fc.boolean(),
      state: fc.constantFrom("waiting" as const, "running" as const, "terminated" as const),
      restarts: fc.nat(),
      messageB64: fc.option(fc.string({ maxLength: 4096 }).map(b64), { nil: undefined }),
    });
    fc.assert(
      fc.property(fc.array(container, { maxLength: 40 }), fc.nat(), (containers, seq) => {
        const clean = containers.map((c) =>
          Object.fromEntries(Object.entries(c).filter(([, v]) => v !== undefined)),
        );
        const report = {
          v: 1,
          seq,
          time: "2026-11-30T05:00:00Z",
          final: true,
          containers: clean,
        } as ExitReport;
        const tags = encodeReportTags(report);
        expect(Object.keys(tags).length).toBeLessThanOrEqual(REPORT_TAG_BUDGET);
        for (const value of Object.values(tags)) expect(value.length).toBeLessThanOrEqual(256);
        expect(decodeReportTags(tags).kind).toBe("report");
      }),
      { numRuns: 200 },
    );
  });

  it("never throws on arbitrary input", () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(["absent", "unreadable", "report"]).toContain(decodeReportTags(value).kind);
        expect(["absent", "unreadable", "report"]).toContain(
          decodeReportTags({ "nebula:report": value }).kind,
        );
      }),
    );
  });
});

describe("console channel", () => {
  it("takes the highest sequence number among report lines", () => {
    const output = [
      "[   0.000000] Linux version 6.1",
      encodeConsoleLine({ ...crashed, seq: 9, final: true }),
      "cloud-init[123]: something",
      encodeConsoleLine(crashed),
      "NEBULA-REPORT v1 !!!damaged",
    ].join("\r\n");
    expect(decodeConsoleOutput(output)).toEqual({
      kind: "report",
      report: { ...crashed, seq: 9, final: true },
    });
  });

  it("reads a marker only at the start of a line", () => {
    const forged = encodeConsoleLine({ ...crashed, seq: 99, final: true });
    const output = [
      encodeConsoleLine(crashed),
      `app[12]: ${forged}`,
      ` ${forged}`,
      `x${forged}`,
    ].join("\r\n");
    expect(decodeConsoleOutput(output)).toEqual({ kind: "report", report: crashed });
    expect(decodeConsoleOutput(`log: ${forged}`)).toEqual({ kind: "absent" });
    expect(decodeConsoleOutput(`boot\n${forged}\r\nlogin:`)).toMatchObject({
      kind: "report",
      report: { seq: 99 },
    });
  });

  it("reports damage when no line is readable, absence when there is none", () => {
    expect(decodeConsoleOutput("NEBULA-REPORT v1 e30")).toEqual({
      kind: "unreadable",
      message: "1 console report line(s) could not be read",
    });
    expect(decodeConsoleOutput("boot\nlogin:")).toEqual({ kind: "absent" });
    expect(decodeConsoleOutput(42)).toEqual({ kind: "absent" });
  });
});
