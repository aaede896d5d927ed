import { describe, expect, it } from "vitest";
import { summarizeEvent } from "./events.js";
import { TeardownError } from "./executor.js";
import type { TeardownRecord } from "./record.js";

const record = {} as TeardownRecord;

describe("summarizeEvent", () => {
  it("turns transitions into Events, warning when a deadline or hold expired", () => {
    expect(
      summarizeEvent({
        type: "transition",
        key: "k",
        record,
        transition: { from: null, to: "stopping", reason: "Started", skipped: [], at: 0 },
      }),
    ).toEqual({
      type: "Normal",
      reason: "TeardownStopping",
      message: "start → stopping: teardown requested",
    });
    expect(
      summarizeEvent({
        type: "transition",
        key: "k",
        record,
        transition: {
          from: "stopping",
          to: "releasing",
          reason: "DeadlineExpired",
          skipped: ["terminating"],
          at: 0,
        },
      }),
    ).toEqual({
      type: "Warning",
      reason: "TeardownReleasing",
      message: "stopping → releasing: the previous phase's deadline passed (skipped: terminating)",
    });
  });

  it("reports failures and holds, and leaves routine events out", () => {
    const error = new TeardownError("EffectFailed", "effect StopInstance of phase stopping failed");
    expect(summarizeEvent({ type: "error", key: "k", error })).toEqual({
      type: "Warning",
      reason: "TeardownEffectFailed",
      message: "effect StopInstance of phase stopping failed",
    });
    expect(summarizeEvent({ type: "held", key: "k", waitingFor: "x" })?.reason).toBe(
      "TeardownHeld",
    );
    expect(summarizeEvent({ type: "invalid", key: "k", reason: "bad" })?.type).toBe("Warning");
    expect(summarizeEvent({ type: "conflict", key: "k", phase: "stopping" })).toBeUndefined();
    expect(
      summarizeEvent({ type: "issuing", key: "k", phase: "p", attempt: 1, effects: [] }),
    ).toBeUndefined();
  });
});
