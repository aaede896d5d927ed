import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseEc2Instance } from "./index.js";
import { Ec2Instance, ec2Cause, instanceTags, parseDescribeInstancesPage } from "./instance.js";
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

/** Instance-like inputs: the named fields valid, invalid or absent, and unknown keys at each level. */
const extra = fc.dictionary(
  fc.constantFrom("Extra", "Architecture", "Code", "Hypervisor", "constructor", "toString"),
  fc.oneof(
    fc.string({ maxLength: 3 }),
    fc.integer(),
    fc.constant(null),
    fc.jsonValue({ maxDepth: 1 }),
  ),
  { maxKeys: 3 },
);
const maybe = <T>(arb: fc.Arbitrary<T>) =>
  fc.oneof(
    arb,
    fc.constant(undefined),
    fc.constant(null),
    fc.integer(),
    fc.string({ maxLength: 2 }),
  );
const instanceLike = fc
  .record(
    {
      InstanceId: maybe(fc.constantFrom("i-1", "")),
      State: maybe(
        fc
          .tuple(extra, maybe(fc.constantFrom("running", "stopped", "")))
          .map(([x, Name]) => ({ ...x, Name })),
      ),
      StateReason: maybe(
        fc.tuple(extra, maybe(fc.string({ maxLength: 4 }))).map(([x, Code]) => ({ ...x, Code })),
      ),
      StateTransitionReason: maybe(fc.string({ maxLength: 4 })),
      LaunchTime: maybe(
        fc.constantFrom(
          new Date("2026-11-30T05:50:00Z"),
          new Date(Number.NaN),
          "2026-11-30T05:50:00Z",
          "x",
        ),
      ),
      PrivateIpAddress: maybe(fc.constant("10.0.0.1")),
      Tags: maybe(
        fc.array(
          fc
            .tuple(
              extra,
              maybe(fc.constantFrom("nebula:pod", "k")),
              maybe(fc.string({ maxLength: 3 })),
            )
            .map(([x, Key, Value]) => ({ ...x, Key, Value })),
          { maxLength: 3 },
        ),
      ),
    },
    { requiredKeys: [] },
  )
  .chain((fields) => extra.map((x) => ({ ...x, ...fields })));

describe("parseEc2Instance against the Ec2Instance schema", () => {
  it("gives what the loose schema gives, unknown keys kept at every level, and fails where it fails", () => {
    fc.assert(
      fc.property(instanceLike, (value) => {
        const fast = parseEc2Instance(value);
        const loose = Ec2Instance.safeParse(value);
        expect(fast.ok).toBe(loose.success);
        if (fast.ok && loose.success) expect(fast.instance).toEqual(loose.data);
      }),
      { numRuns: 3000 },
    );
  });

  it("keeps an own __proto__ key as data: it never becomes the instance's prototype", () => {
    const value = JSON.parse(
      '{"InstanceId":"i-1","State":{"Name":"running"},"__proto__":{"polluted":true}}',
    );
    const parsed = parseEc2Instance(value);
    expect(parsed.ok).toBe(true);
    if (!parsed.ok) return;
    expect(Object.getPrototypeOf(parsed.instance)).toBe(Object.prototype);
    expect((parsed.instance as Record<string, unknown>).polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
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
