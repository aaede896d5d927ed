import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  decodeReportTags,
  type ExitReport,
  encodeReportTags,
  REPORT_TAG_BUDGET,
  REPORT_TAG_MESSAGE_BUDGET,
} from "./report.js";
import { messageSlots, utf8Head, utf8Tail } from "./report-budget.js";

const b64 = (text: string) => Buffer.from(text, "utf8").toString("base64");
const text = (value: string | undefined) => Buffer.from(value ?? "", "base64").toString("utf8");
const ID = "a".repeat(64);

function decoded(report: ExitReport): ExitReport {
  const read = decodeReportTags(encodeReportTags(report));
  if (read.kind !== "report") throw new Error(JSON.stringify(read));
  return read.report;
}

const base = { v: 1 as const, seq: 7, time: "2026-11-30T05:00:00Z", final: true };

describe("the shared tag message budget", () => {
  it("keeps the current exit's text when a crash loop's current and previous exits carry 1 KiB each", () => {
    const current = `${"c".repeat(1000)}FATAL: db password rejected`;
    const previous = `${"p".repeat(1000)}FATAL: earlier`;
    const report = decoded({
      ...base,
      containers: [
        {
          name: "app",
          init: false,
          state: "terminated",
          restarts: 4,
          exitCode: 1,
          reason: "Error",
          containerID: `docker://${ID}`,
          messageB64: b64(current),
          last: { exitCode: 1, reason: "Error", messageB64: b64(previous) },
        },
      ],
    });
    const [app] = report.containers;
    // The end of the current exit's message is there: the error is at the end.
    expect(text(app?.messageB64)).toBe(current.slice(-REPORT_TAG_MESSAGE_BUDGET));
    expect(app?.last?.messageB64).toBeUndefined();
    expect(app?.truncated).toBe(true);
    expect(report.cut).toBe(true);
  });

  it("keeps both current messages of two crashed containers with 400 bytes per exit and their docker IDs", () => {
    const at = "2026-11-30T04:59:59.123Z";
    const container = (name: string, fill: string) => ({
      name,
      init: false,
      state: "terminated" as const,
      restarts: 2,
      exitCode: 2,
      reason: "Error",
      startedAt: at,
      finishedAt: at,
      containerID: `docker://${ID}`,
      imageID: `sha256:${ID}`,
      messageB64: b64(fill.repeat(400)),
      last: {
        exitCode: 2,
        reason: "Error",
        startedAt: at,
        finishedAt: at,
        messageB64: b64(fill.toLowerCase().repeat(400)),
      },
    });
    const report = decoded({ ...base, containers: [container("a", "A"), container("b", "B")] });
    expect(report.containers.map((c) => text(c.messageB64))).toEqual([
      "A".repeat(400),
      "B".repeat(400),
    ]);
    expect(text(report.containers[0]?.last?.messageB64)).toBe("a".repeat(224));
    expect(report.containers[1]?.last?.messageB64).toBeUndefined();
    expect(report.cut).toBe(true);
  });

  it("cuts a multi-byte message on a character boundary", () => {
    const report = decoded({
      ...base,
      containers: [
        {
          name: "app",
          init: false,
          state: "terminated",
          restarts: 0,
          exitCode: 1,
          reason: "Error",
          messageB64: b64("€".repeat(500)),
        },
      ],
    });
    expect(text(report.containers[0]?.messageB64)).toBe("€".repeat(341));
  });

  it("spends the budget on the failing container's current exit, then its previous exit, then a healthy sidecar", () => {
    const report = decoded({
      ...base,
      containers: [
        {
          name: "sidecar",
          init: false,
          state: "terminated",
          restarts: 0,
          exitCode: 0,
          reason: "Completed",
          messageB64: b64("S".repeat(300)),
        },
        {
          name: "app",
          init: false,
          state: "terminated",
          restarts: 1,
          exitCode: 3,
          reason: "Error",
          messageB64: b64("C".repeat(600)),
          last: { exitCode: 3, reason: "Error", messageB64: b64("L".repeat(600)) },
        },
      ],
    });
    const [sidecar, app] = report.containers;
    expect(text(app?.messageB64)).toBe("C".repeat(600));
    expect(text(app?.last?.messageB64)).toBe("L".repeat(REPORT_TAG_MESSAGE_BUDGET - 600));
    expect(sidecar?.messageB64).toBeUndefined();
    expect(sidecar?.truncated).toBe(true);
    expect(report.cut).toBe(true);
  });

  it("keeps the start of a waiting message (it begins with what went wrong)", () => {
    const report = decoded({
      ...base,
      containers: [
        {
          name: "app",
          init: false,
          state: "waiting",
          reason: "ImagePullBackOff",
          restarts: 0,
          messageB64: b64(`failed to pull image x: ${"d".repeat(2000)}`),
        },
      ],
    });
    expect(text(report.containers[0]?.messageB64)).toMatch(/^failed to pull image x: d+$/);
  });

  it("never splits a character, whatever the text and the cut", () => {
    const message = fc.string({ unit: "grapheme", maxLength: 700 });
    fc.assert(
      fc.property(fc.array(fc.tuple(message, message), { maxLength: 6 }), (pairs) => {
        const report = decoded({
          ...base,
          containers: pairs.map(([current, previous], i) => ({
            name: `c${i}`,
            init: false,
            state: "terminated" as const,
            restarts: 1,
            exitCode: i % 2,
            reason: i % 2 ? "Error" : "Completed",
            messageB64: b64(current),
            last: { exitCode: 1, reason: "Error", messageB64: b64(previous) },
          })),
        });
        let total = 0;
        report.containers.forEach((c, i) => {
          const [current, previous] = pairs[i] ?? ["", ""];
          for (const [got, whole] of [
            [c.messageB64, current],
            [c.last?.messageB64, previous],
          ] as const) {
            const t = text(got);
            // A cut never makes a U+FFFD: the kept text is an exact tail of the whole (which may
            // itself contain U+FFFD: the generator can produce it), so no character was split.
            expect(whole.endsWith(t)).toBe(true);
            const replacements = (x: string) => x.split("\uFFFD").length - 1;
            expect(replacements(t)).toBeLessThanOrEqual(replacements(whole));
            total += Buffer.byteLength(t);
          }
        });
        expect(total).toBeLessThanOrEqual(REPORT_TAG_MESSAGE_BUDGET);
        expect(Object.keys(encodeReportTags(report)).length).toBeLessThanOrEqual(REPORT_TAG_BUDGET);
      }),
      { numRuns: 150 },
    );
  });
});

describe("UTF-8 cuts", () => {
  it("backs off to a character boundary from either end", () => {
    const bytes = Buffer.from("a€b", "utf8"); // 61 e2 82 ac 62
    expect(Buffer.from(utf8Head(bytes, 3)).toString()).toBe("a");
    expect(Buffer.from(utf8Head(bytes, 4)).toString()).toBe("a€");
    expect(Buffer.from(utf8Tail(bytes, 3)).toString()).toBe("b");
    expect(Buffer.from(utf8Tail(bytes, 4)).toString()).toBe("€b");
    expect(Buffer.from(utf8Head(Buffer.from("😀"), 3)).toString()).toBe("");
  });

  it("orders the slots by usefulness", () => {
    const slots = messageSlots([
      { state: "running", messageB64: b64("x") },
      {
        state: "waiting",
        reason: "CrashLoopBackOff",
        messageB64: b64("y"),
        last: { exitCode: 1, messageB64: b64("z") },
      },
    ]);
    expect(slots.map((s) => [s.container, s.which, s.rank])).toEqual([
      [1, "current", 0],
      [1, "last", 1],
      [0, "current", 2],
    ]);
  });
});
