import { describe, expect, it } from "vitest";
import { parseProviderConfig } from "./config.js";
import { ProviderError } from "./errors.js";
import { MAX_USER_TAGS } from "./tags.js";
import { testConfig } from "./testing/fixtures.js";

function problems(input: unknown): string {
  try {
    parseProviderConfig(input);
  } catch (error) {
    expect(error).toBeInstanceOf(ProviderError);
    expect((error as ProviderError).code).toBe("InvalidConfiguration");
    return (error as Error).message;
  }
  throw new Error("expected the configuration to be rejected");
}

describe("parseProviderConfig", () => {
  it("applies the documented defaults", () => {
    const { podDelivery: _tests, ...documented } = testConfig();
    const config = parseProviderConfig(documented);
    expect(config).toMatchObject({
      pollIntervalSeconds: 10,
      maxPollIntervalSeconds: 120,
      apiHeadroomSeconds: 30,
      pageSize: 1000,
      batchSize: 500,
      metadataHopLimit: 1,
      tags: {},
      leakCollection: { graceSeconds: 300, intervalSeconds: 120, parameterGraceSeconds: 600 },
      podDelivery: "parameters",
      instanceTypes: { default: "m7i.large", byResources: [] },
    });
  });

  it("defaults the AWS clients' timeouts and the On-Demand price read, and bounds them", () => {
    expect(parseProviderConfig(testConfig())).toMatchObject({
      requestTimeoutMs: 30_000,
      connectionTimeoutMs: 5_000,
      pricing: { onDemand: true, region: "us-east-1" },
    });
    expect(parseProviderConfig(testConfig({ pricing: { region: "ap-south-1" } })).pricing).toEqual({
      onDemand: true,
      region: "ap-south-1",
    });
    expect(problems(testConfig({ requestTimeoutMs: 0 }))).toContain("requestTimeoutMs");
    expect(problems(testConfig({ connectionTimeoutMs: 60_001 }))).toContain("connectionTimeoutMs");
    expect(problems(testConfig({ pricing: { region: "Virginia" } }))).toContain(
      "pricing.region: must be an AWS Region",
    );
    expect(problems({ ...testConfig(), pricing: { currency: "EUR" } })).toContain("pricing");
  });

  it("lists every problem with its path", () => {
    const message = problems(
      testConfig({
        region: "Mars",
        subnetIds: [],
        imageId: "ubuntu",
        securityGroupIds: ["default"],
      }),
    );
    expect(message).toContain("region: must be an AWS Region");
    expect(message).toContain("subnetIds: at least one subnet is needed");
    expect(message).toContain('imageId: must be an AMI ID, "ami-…"');
    expect(message).toContain("securityGroupIds.0: must be a security group ID");
  });

  it("rejects reserved and illegal tag keys", () => {
    expect(problems(testConfig({ tags: { "nebula:pod": "x" } }))).toContain(
      '"nebula:" prefix is reserved',
    );
    expect(problems(testConfig({ tags: { "aws:foo": "x" } }))).toContain(
      '"aws:" prefix is reserved',
    );
    expect(problems(testConfig({ tags: { "team name": "x" } }))).toContain("no spaces or /");
    expect(problems(testConfig({ tags: { "a/b": "x" } }))).toContain("no spaces or /");
    expect(problems(testConfig({ tags: { team: "x".repeat(257) } }))).toContain("at most 256");
  });

  it("enforces the 50-tag budget", () => {
    const fits = Object.fromEntries(
      Array.from({ length: MAX_USER_TAGS }, (_, i) => [`t${i}`, "v"]),
    );
    expect(parseProviderConfig(testConfig({ tags: fits })).tags).toEqual(fits);
    const over = { ...fits, extra: "v" };
    expect(problems(testConfig({ tags: over }))).toContain(`at most ${MAX_USER_TAGS} extra tags`);
    expect(MAX_USER_TAGS).toBe(50 - 17 - 4 - 1 - 1 - 1 - 1 - 2);
  });

  it("rejects an inconsistent poll interval and unknown fields", () => {
    expect(problems(testConfig({ pollIntervalSeconds: 60, maxPollIntervalSeconds: 30 }))).toContain(
      "maxPollIntervalSeconds must be at least pollIntervalSeconds",
    );
    expect(problems({ ...testConfig(), subnet: "subnet-1" })).toContain("subnet");
  });

  it("requires the default instance type to be allowed", () => {
    expect(
      problems(testConfig({ instanceTypes: { default: "m7i.large", allowed: ["c7i.large"] } })),
    ).toContain("default instance type must be in the allowed list");
  });

  it("takes a catalogue of allowed names and families, with its defaults, and says what a bad one is", () => {
    const config = parseProviderConfig(
      testConfig({
        instanceTypes: { default: "m7i.large", catalogue: { allowed: ["m7i.*", "g5.xlarge"] } },
      }),
    );
    expect(config.instanceTypes.catalogue).toEqual({
      allowed: ["m7i.*", "g5.xlarge"],
      architecture: "x86_64",
      reserved: { cpu: 0.1, memoryMiB: 512 },
      maxCandidates: 20,
      refreshMinutes: 360,
    });
    expect(parseProviderConfig(testConfig()).instanceTypes.catalogue).toBeUndefined();
    const message = problems(
      testConfig({
        instanceTypes: {
          default: "m7i.large",
          catalogue: {
            allowed: ["m7i*", "*"],
            architecture: "i386" as "x86_64",
            maxCandidates: 61,
          },
        },
      }),
    );
    expect(message).toContain(
      'instanceTypes.catalogue.allowed.0: must be an EC2 instance type ("m7i.large") or a family with its sizes ("m7i.*")',
    );
    expect(message).toContain("instanceTypes.catalogue.allowed.1");
    expect(message).toContain("instanceTypes.catalogue.architecture");
    expect(message).toContain("instanceTypes.catalogue.maxCandidates");
    expect(
      problems(testConfig({ instanceTypes: { default: "m7i.large", catalogue: { allowed: [] } } })),
    ).toContain("instanceTypes.catalogue.allowed");
  });

  it("takes container logs and metrics (off by default), with the renderer's defaults and checks", () => {
    const off = parseProviderConfig(testConfig());
    expect(off.logs).toBeUndefined();
    expect(off.metrics).toBeUndefined();
    const on = parseProviderConfig(testConfig({ logs: { group: "/nebula/prod" }, metrics: {} }));
    expect(on.logs).toEqual({ group: "/nebula/prod" });
    expect(on.metrics).toEqual({ namespace: "Nebula", sampleSeconds: 15, publishSeconds: 60 });
    const logs = { group: "has space", stream: "x" }; // an unknown key, and a bad group
    const message = problems(
      testConfig({
        logs,
        metrics: { namespace: "AWS/EC2", sampleSeconds: 60, publishSeconds: 30 },
      }),
    );
    expect(message).toMatch(/logs\.group: must be a CloudWatch log group name/);
    expect(message).toMatch(/logs: Unrecognized key: "stream"/);
    expect(message).toMatch(/metrics\.namespace: must not start with 'AWS\/'/);
    expect(message).toMatch(
      /metrics\.publishSeconds: publishSeconds must be at least sampleSeconds/,
    );
  });
});
