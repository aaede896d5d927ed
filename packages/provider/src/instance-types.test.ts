import { describe, expect, it } from "vitest";
import { ProviderError } from "./errors.js";
import { type ReadInstanceTypes, readInstanceTypes } from "./instance-catalogue.js";
import { InstanceTypeCatalogue, readCatalogue } from "./instance-types.js";
import { FakeGateway } from "./testing/fake-gateway.js";
import { EC2_INSTANCE_TYPES } from "./testing/fixtures.js";

const entry = (name: string, vcpus: number) => ({
  InstanceType: name,
  VCpuInfo: { DefaultVCpus: vcpus },
  MemoryInfo: { SizeInMiB: vcpus * 4096 },
  ProcessorInfo: { SupportedArchitectures: ["x86_64"] },
});

/** A catalogue whose reads answer, in turn, what `answers` holds (an Error is thrown). */
function setUp(answers: (unknown[] | Error)[]) {
  let now = 0;
  let reads = 0;
  const logs: string[] = [];
  const catalogue = new InstanceTypeCatalogue({
    read: async (): Promise<ReadInstanceTypes> => {
      const answer = answers[Math.min(reads++, answers.length - 1)];
      await new Promise((r) => setTimeout(r, 1));
      if (answer instanceof Error) throw answer;
      return readInstanceTypes(answer ?? []);
    },
    refreshMs: 60_000,
    now: () => now,
    log: (level, message) => void logs.push(`${level}: ${message}`),
  });
  return {
    catalogue,
    logs,
    reads: () => reads,
    advance: (ms: number) => {
      now += ms;
    },
  };
}

const names = (types: readonly { name: string }[]) => types.map((t) => t.name);

describe("InstanceTypeCatalogue", () => {
  it("reads once for callers that ask together, then answers from what it read", async () => {
    const t = setUp([[entry("m7i.large", 2)]]);
    expect(t.catalogue.latest()).toEqual([]);
    const [a, b] = await Promise.all([t.catalogue.current(), t.catalogue.current()]);
    expect(names(a)).toEqual(["m7i.large"]);
    expect(b).toBe(a);
    await t.catalogue.current();
    expect(t.reads()).toBe(1);
    expect(names(t.catalogue.latest())).toEqual(["m7i.large"]);
  });

  it("a failed first read throws with the EC2 error's code and what to do; the next call reads again", async () => {
    const denied = Object.assign(new Error("not authorized to perform ec2:DescribeInstanceTypes"), {
      name: "UnauthorizedOperation",
    });
    const t = setUp([denied, [entry("m7i.large", 2)]]);
    const error = await t.catalogue.current().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).code).toBe("Unauthorized");
    expect((error as ProviderError).message).toContain("ec2:DescribeInstanceTypes");
    expect((error as ProviderError).cause).toBe(denied);
    expect(names(await t.catalogue.current())).toEqual(["m7i.large"]);
  });

  it("a read with no readable type is no catalogue (Unavailable), and unreadable entries are logged", async () => {
    const t = setUp([[{ InstanceType: "m7i.large" }], [entry("m7i.large", 2), { bad: true }]]);
    await expect(t.catalogue.current()).rejects.toMatchObject({ code: "Unavailable" });
    expect(names(await t.catalogue.current())).toEqual(["m7i.large"]);
    expect(
      t.logs.some((l) => l.startsWith("warn: DescribeInstanceTypes: 1 entries not readable")),
    ).toBe(true);
  });

  it("once stale, answers the old catalogue and reads again in the background; a failed refresh keeps it", async () => {
    const t = setUp([
      [entry("m7i.large", 2)],
      new Error("socket hang up"),
      [entry("m7i.xlarge", 4)],
    ]);
    await t.catalogue.current();
    t.advance(60_000);
    expect(names(await t.catalogue.current())).toEqual(["m7i.large"]);
    await new Promise((r) => setTimeout(r, 20));
    expect(t.reads()).toBe(2);
    expect(names(t.catalogue.latest())).toEqual(["m7i.large"]);
    expect(t.logs.some((l) => l.startsWith("warn: ") && l.includes("socket hang up"))).toBe(true);
    // Still stale: the next call refreshes again, and this time it takes.
    await t.catalogue.current();
    await new Promise((r) => setTimeout(r, 20));
    expect(names(t.catalogue.latest())).toEqual(["m7i.xlarge"]);
    expect(t.reads()).toBe(3);
  });
});

describe("readCatalogue", () => {
  it("gives each type the configured subnets whose zone offers it, asking EC2 for those zones only", async () => {
    const gateway = new FakeGateway();
    gateway.instanceTypes = EC2_INSTANCE_TYPES;
    gateway.zones = new Map([
      ["subnet-a", "us-east-1a"],
      ["subnet-e", "us-east-1e"],
      ["subnet-other", "us-east-1c"],
    ]);
    gateway.offerings = new Map([
      ["m7i.large", new Set(["us-east-1a", "us-east-1c"])],
      ["t3.micro", new Set(["us-east-1a", "us-east-1e"])],
    ]);
    const { types } = await readCatalogue(gateway, ["subnet-e", "subnet-a"]);
    const subnets = Object.fromEntries(types.map((t) => [t.name, t.subnets]));
    expect(subnets).toMatchObject({
      "m7i.large": ["subnet-a"],
      "t3.micro": ["subnet-e", "subnet-a"],
      "g5.xlarge": [],
    });
    expect(gateway.calls.find((c) => c.action === "instanceTypeOfferings")?.arg).toEqual([
      "us-east-1e",
      "us-east-1a",
    ]);
  });

  it("refuses a configured subnet EC2 does not list, naming it", async () => {
    const gateway = new FakeGateway();
    gateway.instanceTypes = EC2_INSTANCE_TYPES;
    gateway.zones = new Map([["subnet-a", "us-east-1a"]]);
    await expect(readCatalogue(gateway, ["subnet-a", "subnet-gone"])).rejects.toMatchObject({
      code: "InvalidConfiguration",
      message: "DescribeSubnets lists no Availability Zone for subnet-gone (subnetIds)",
    });
  });
});
