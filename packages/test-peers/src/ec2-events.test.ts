import { describe, expect, it } from "vitest";
import { EC2_EVENT_PATTERN, startEc2Events, statesBetween } from "./ec2-events.js";
import { TestPeerError } from "./errors.js";
import { startTestPeers } from "./peers.js";

describe("statesBetween", () => {
  it("fills in the states EC2 passes through and moto skips", () => {
    expect(statesBetween(undefined, "running")).toEqual(["pending", "running"]);
    expect(statesBetween(undefined, "pending")).toEqual(["pending"]);
    expect(statesBetween("running", "stopped")).toEqual(["stopping", "stopped"]);
    expect(statesBetween("stopping", "stopped")).toEqual(["stopped"]);
    expect(statesBetween("stopped", "running")).toEqual(["pending", "running"]);
    expect(statesBetween("running", "terminated")).toEqual(["shutting-down", "terminated"]);
    expect(statesBetween("stopped", "terminated")).toEqual(["shutting-down", "terminated"]);
    expect(statesBetween("pending", "terminated")).toEqual(["shutting-down", "terminated"]);
    // Launched and gone between two looks: EC2 still said each.
    expect(statesBetween(undefined, "stopped")).toEqual([
      "pending",
      "running",
      "stopping",
      "stopped",
    ]);
    expect(statesBetween(undefined, "terminated")).toEqual([
      "pending",
      "shutting-down",
      "terminated",
    ]);
  });

  it("says nothing for no change or an unknown state, and only the new state for a jump no lifecycle explains", () => {
    expect(statesBetween("running", "running")).toEqual([]);
    expect(statesBetween("running", "rebooting")).toEqual([]);
    // moto "stops" a terminated instance (EC2 refuses).
    expect(statesBetween("terminated", "stopped")).toEqual(["stopped"]);
  });
});

describe("EC2_EVENT_PATTERN", () => {
  it("is the rule of docs/operating.md", () => {
    expect(EC2_EVENT_PATTERN).toEqual({
      source: ["aws.ec2"],
      "detail-type": [
        "EC2 Instance State-change Notification",
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
      ],
    });
  });
});

describe("startEc2Events", () => {
  it("refuses options that do not parse", async () => {
    const failure = await startEc2Events({
      moto: { endpoint: "not a url", region: "us-east-1" },
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(TestPeerError);
    expect((failure as TestPeerError).code).toBe("InvalidOptions");
  });
});

describe("startTestPeers({ ec2Events })", () => {
  it("refuses EC2's events without moto, before starting anything", async () => {
    const failure = await startTestPeers({
      controlPlane: false,
      moto: false,
      ec2Events: true,
    }).catch((e: unknown) => e);
    expect((failure as TestPeerError).code).toBe("InvalidOptions");
  });
});
