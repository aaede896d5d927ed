import type { V1PodStatus } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { toInstanceReason, toInstanceState, toPodStatus } from "./index.js";
import { b64, ec2, exited, NOW, pod, report } from "./test-fixtures.js";
import { sanitize, truncate } from "./text.js";

/** Lone surrogates (what the API server turns into U+FFFD). */
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** A value stored through the API server: JSON, as Go encodes and decodes it. */
function throughApiServer<T>(value: T): T {
  return JSON.parse(
    JSON.stringify(value, (_key, v) => (typeof v === "string" ? v.replace(LONE, "\ufffd") : v)),
  ) as T;
}

const nastyText = fc
  .array(
    fc.oneof(
      fc.constantFrom("😀", "👩‍👩‍👧", "e\u0301", "🇫🇷", "\u001b[31m", "\u0000", "\u202e", "\n", '"'),
      fc.string({ maxLength: 8 }),
    ),
    { maxLength: 200 },
  )
  .map((parts) => parts.join(""));

describe("messages that never churn", () => {
  it("quotes a termination message cut on a grapheme boundary, a fixed point through the API server", () => {
    // 199 characters, then an emoji across the 200th: the old cut split its surrogate pair.
    const message = `${"x".repeat(199)}😀 and more text after the cut`;
    const state = toInstanceState(
      ec2("stopped", { report: report(2, true, [exited(1, "app", { messageB64: b64(message) })]) }),
      { now: NOW },
    );
    const status = toPodStatus(pod("Never"), state, { now: NOW });
    const reason = toInstanceReason({ ...pod("Never"), status });
    expect(reason.message).not.toMatch(LONE);
    expect(throughApiServer(reason.message)).toBe(reason.message);
    // Read back from the stored Pod, the reason is the same: nothing to write again.
    const stored = throughApiServer(status);
    expect(toInstanceReason({ ...pod("Never"), status: stored })).toEqual(reason);
  });

  it("a Pod status and its reason are fixed points through the API server, whatever the messages hold", () => {
    fc.assert(
      fc.property(nastyText, nastyText, (termination, waiting) => {
        const state = toInstanceState(
          ec2("running", {
            report: report(3, false, [
              {
                name: "app",
                init: false,
                state: "waiting",
                reason: "CrashLoopBackOff",
                restarts: 2,
                messageB64: b64(waiting),
                last: { exitCode: 1, reason: "Error", messageB64: b64(termination) },
              },
            ]),
          }),
          { now: NOW },
        );
        const status = toPodStatus(pod(), state, { now: NOW });
        const stored = throughApiServer(status);
        expect(stored).toEqual(throughApiServer(throughApiServer(status)));
        for (const text of [
          stored.containerStatuses?.[0]?.state?.waiting?.message ?? "",
          stored.containerStatuses?.[0]?.lastState?.terminated?.message ?? "",
        ]) {
          expect(text).not.toMatch(LONE);
          // biome-ignore lint/suspicious/noControlCharactersInRegex: no escape may reach a status.
          expect(text).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e]/);
        }
        // The next poll of the same world computes the same status from the stored one.
        const again = toPodStatus({ ...pod(), status: stored as V1PodStatus }, state, {
          now: new Date(NOW.getTime() + 3_600_000),
        });
        expect(throughApiServer(again)).toEqual(stored);
        const reason = toInstanceReason({ ...pod(), status: stored });
        expect(throughApiServer(reason)).toEqual(reason);
        expect(toInstanceReason({ ...pod(), status: throughApiServer(again) })).toEqual(reason);
      }),
    );
  });

  it("states restart counts exactly up to 5, then in steps", () => {
    const message = (restarts: number) =>
      toInstanceReason({
        containerStatuses: [
          {
            name: "app",
            restartCount: restarts,
            state: { waiting: { reason: "CrashLoopBackOff" } },
            lastState: { terminated: { exitCode: 1, reason: "Error" } },
          },
        ],
      }).message;
    expect(message(3)).toContain("restarted 3 times");
    expect(message(1)).toContain("restarted 1 time ");
    expect(message(6)).toContain("restarted more than 5 times");
    expect(message(10)).toBe(message(6));
    expect(message(11)).toContain("more than 10 times");
    expect(message(20)).toBe(message(11));
    expect(message(21)).toContain("more than 20 times");
    expect(message(51)).toContain("more than 50 times");
    expect(message(2_000_000)).toContain("more than 1000000 times");
  });

  it("bounds restart counts to int32 and drops a report whose seq is over the limit", () => {
    const state = toInstanceState(
      ec2("running", {
        report: report(1, false, [
          { name: "app", init: false, state: "running", restarts: 2 ** 40 },
        ]),
      }),
      { now: NOW },
    );
    expect(toPodStatus(pod(), state, { now: NOW }).containerStatuses?.[0]?.restartCount).toBe(
      2147483647,
    );
    const forged = toInstanceState(ec2("running", { report: report(2 ** 40, false, []) }), {
      now: NOW,
    });
    expect(forged).toMatchObject({ kind: "Unknown", reason: "ReportUnreadable" });
  });
});

describe("sanitize and truncate", () => {
  it("strip escapes and cut on graphemes, idempotently", () => {
    expect(sanitize("\u001b[1;31mred\u001b[0m\u0007")).toBe("red");
    expect(truncate("👩‍👩‍👧".repeat(3), 12)).toBe("👩‍👩‍👧...");
    fc.assert(
      fc.property(nastyText, fc.integer({ min: 3, max: 100 }), (text, max) => {
        const once = truncate(sanitize(text), max);
        expect(truncate(sanitize(once), max)).toBe(once);
        expect([...once].length).toBeLessThanOrEqual(max);
      }),
    );
  });
});
