import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseDoorbell } from "./doorbell-message.js";

/** EventBridge's envelope of an EC2 event (the fields AWS documents for these events). */
const event = (detailType: string, detail: Record<string, unknown>) =>
  JSON.stringify({
    version: "0",
    id: "7bf73129-1428-4cd3-a780-95db273d1602",
    "detail-type": detailType,
    source: "aws.ec2",
    account: "123456789012",
    time: "2026-12-02T02:00:00Z",
    region: "us-east-1",
    resources: ["arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"],
    detail,
  });

describe("parseDoorbell", () => {
  it("reads a host's doorbell: the instance and the report's seq", () => {
    expect(parseDoorbell('{"v":1,"instance":"i-0123456789abcdef0","seq":7}')).toEqual({
      kind: "report",
      instanceId: "i-0123456789abcdef0",
      seq: 7,
    });
  });

  it("reads EC2's state changes, Spot interruption warnings and rebalance recommendations", () => {
    const id = "i-0123456789abcdef0";
    expect(
      parseDoorbell(
        event("EC2 Instance State-change Notification", { "instance-id": id, state: "stopped" }),
      ),
    ).toEqual({ kind: "state", instanceId: id, state: "stopped" });
    expect(
      parseDoorbell(
        event("EC2 Spot Instance Interruption Warning", {
          "instance-id": id,
          "instance-action": "terminate",
        }),
      ),
    ).toEqual({ kind: "interruption", instanceId: id, action: "terminate" });
    expect(
      parseDoorbell(event("EC2 Instance Rebalance Recommendation", { "instance-id": id })),
    ).toEqual({ kind: "rebalance", instanceId: id });
  });

  it("refuses what is not exactly one of those, saying why", () => {
    for (const body of [
      undefined,
      "",
      "not json",
      "[]",
      '{"v":2,"instance":"i-0123456789abcdef0","seq":1}',
      '{"v":1,"instance":"i-0123456789abcdef0","seq":-1}',
      '{"v":1,"instance":"i-0123456789abcdef0","seq":1.5}',
      '{"v":1,"instance":"i-0123456789abcdef0","seq":1,"state":"terminated"}',
      '{"v":1,"instance":"vol-0123456789abcdef0","seq":1}',
      '{"v":1,"instance":"i-0123456789abcdef0; rm -rf /","seq":1}',
      event("EC2 Instance State-change Notification", { "instance-id": "i-0123456789abcdef0" }),
      JSON.stringify({
        ...JSON.parse(
          event("EC2 Instance Rebalance Recommendation", { "instance-id": "i-0123456789abcdef0" }),
        ),
        source: "my.app",
      }),
      `{"v":1,"instance":"i-0123456789abcdef0","seq":1,"pad":"${"x".repeat(20_000)}"}`,
    ]) {
      const read = parseDoorbell(body);
      expect(read.kind, String(body).slice(0, 80)).toBe("unreadable");
      expect(read.kind === "unreadable" && read.problem.length).toBeGreaterThan(0);
    }
  });

  it("is total: any value gets an answer, never an exception", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.json(), fc.anything()), (body) => {
        const read = parseDoorbell(body);
        expect(["report", "state", "interruption", "rebalance", "unreadable"]).toContain(read.kind);
      }),
    );
  });
});
