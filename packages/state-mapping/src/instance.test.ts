import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseEc2Instance } from "./index.js";
import { ec2Cause, instanceTags, parseDescribeInstancesPage } from "./instance.js";
import { ec2, LAUNCH } from "./test-fixtures.js";

describe("parseEc2Instance", () => {
  it("reads the SDK shape (LaunchTime as a Date)", () => {
    const parsed = parseEc2Instance(ec2("running"));
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(parsed.instance.InstanceId).toBe("i-0abc");
    expect(parsed.instance.State.Name).toBe("running");
    expect(parsed.instance.LaunchTime).toEqual(new Date(LAUNCH));
    expect(parsed.instance.PrivateIpAddress).toBe("10.0.1.23");
    expect(instanceTags(parsed.instance).get("nebula:pod-uid")).toBe("uid-1");
  });

  it("reads the JSON shape (LaunchTime as a string, nulls for missing fields)", () => {
    const parsed = parseEc2Instance({
      InstanceId: "i-1",
      State: { Name: "stopped" },
      StateReason: { Code: "Client.UserInitiatedShutdown", Message: null },
      LaunchTime: "2026-11-30T05:50:00.000Z",
      PublicIpAddress: null,
      Tags: null,
    });
    expect(parsed).toMatchObject({
      ok: true,
      instance: {
        InstanceId: "i-1",
        LaunchTime: new Date("2026-11-30T05:50:00Z"),
        StateReason: { Code: "Client.UserInitiatedShutdown" },
        Tags: [],
      },
    });
  });

  it("returns a typed error for a bad instance, never throws", () => {
    const parsed = parseEc2Instance({ State: { Name: "running" } });
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.error.code).toBe("InstanceUnreadable");
    expect(parsed.error.name).toBe("StateMappingError");
    expect(parsed.error.message).toContain("InstanceId");
    expect(parsed.error.cause).toBeDefined();
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(typeof parseEc2Instance(value).ok).toBe("boolean");
      }),
    );
  });
});

describe("parseDescribeInstancesPage", () => {
  it("reads every reservation's instances and skips unreadable ones", () => {
    const page = {
      Reservations: [
        { Instances: [ec2("running"), { InstanceId: "" }] },
        { Instances: [ec2("stopped")] },
        {},
      ],
      NextToken: "t",
    };
    const { instances, errors } = parseDescribeInstancesPage(page);
    expect(instances.map((i) => i.State.Name)).toEqual(["running", "stopped"]);
    expect(errors.map((e) => e.code)).toEqual(["InstanceUnreadable"]);
  });

  it("reports an unreadable page", () => {
    expect(parseDescribeInstancesPage("nope").errors.map((e) => e.code)).toEqual([
      "PageUnreadable",
    ]);
    expect(parseDescribeInstancesPage({}).instances).toEqual([]);
  });
});

describe("ec2Cause", () => {
  it.each([
    ["Server.SpotInstanceTermination", "SpotInterruption"],
    ["Server.SpotInstanceShutdown", "SpotInterruption"],
    ["Server.InsufficientInstanceCapacity", "InsufficientCapacity"],
    ["Client.UserInitiatedShutdown", "UserInitiatedShutdown"],
    ["Client.InstanceInitiatedShutdown", "InstanceInitiatedShutdown"],
    ["Server.InternalError", "InternalError"],
    ["Client.InternalError", "InternalError"],
    ["Client.VolumeLimitExceeded", "VolumeLimitExceeded"],
    ["Server.ScheduledStop", "ScheduledStop"],
    ["Client.Something.New", "Other"],
  ])("%s → %s", (code, cause) => {
    expect(ec2Cause(code)).toBe(cause);
  });

  it("falls back to StateTransitionReason, then None", () => {
    expect(ec2Cause(undefined, "User initiated (2026-11-30 05:59:00 GMT)")).toBe(
      "UserInitiatedShutdown",
    );
    expect(ec2Cause(undefined, "")).toBe("None");
    expect(ec2Cause(undefined)).toBe("None");
  });
});
