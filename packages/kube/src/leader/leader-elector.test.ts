import { KubeConfig } from "@kubernetes/client-node";
// The model serializer is what the generated API uses to write request bodies.
import { ObjectSerializer } from "@kubernetes/client-node/dist/serializer.js";
import { describe, expect, it } from "vitest";
import { LeaderElector, toMicroTime } from "./leader-elector.js";

const kc = new KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: "c", server: "https://127.0.0.1:9", skipTLSVerify: false }],
  users: [{ name: "u", token: "t" }],
  contexts: [{ name: "x", cluster: "c", user: "u" }],
  currentContext: "x",
});

describe("LeaderElector options", () => {
  it("defaults to 15 s / 10 s / 2 s with release on cancel", () => {
    const elector = new LeaderElector(kc, { namespace: "ns", name: "l", identity: "me" });
    expect(elector.options).toMatchObject({
      leaseDurationMs: 15_000,
      renewDeadlineMs: 10_000,
      retryPeriodMs: 2_000,
      releaseOnCancel: true,
    });
    expect(elector.isLeader()).toBe(false);
  });

  it("refuses a renew deadline not below the lease duration, or a retry not below the deadline", () => {
    expect(
      () =>
        new LeaderElector(kc, {
          namespace: "ns",
          name: "l",
          identity: "me",
          leaseDurationMs: 5000,
          renewDeadlineMs: 5000,
        }),
    ).toThrow(
      expect.objectContaining({
        code: "InvalidOptions",
        message: expect.stringContaining("renewDeadlineMs"),
      }),
    );
    expect(
      () =>
        new LeaderElector(kc, {
          namespace: "ns",
          name: "l",
          identity: "me",
          retryPeriodMs: 10_000,
        }),
    ).toThrow(
      expect.objectContaining({
        code: "InvalidOptions",
        message: expect.stringContaining("retryPeriodMs"),
      }),
    );
    expect(() => new LeaderElector(kc, { namespace: "", name: "l", identity: "me" })).toThrow(
      expect.objectContaining({ code: "InvalidOptions" }),
    );
  });
});

describe("toMicroTime", () => {
  it("serialises with six fractional digits, from a Date, a read-back string or epoch ms", () => {
    const at = Date.UTC(2026, 10, 30, 15, 0, 0, 545);
    for (const input of [new Date(at), "2026-11-30T15:00:00.545000Z", at]) {
      expect(
        JSON.parse(JSON.stringify(ObjectSerializer.serialize(toMicroTime(input), "V1MicroTime"))),
      ).toBe("2026-11-30T15:00:00.545000Z");
    }
  });
});
