import { supervisorScript } from "@nebula/userdata";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { agentOfInstance } from "./host-agents.js";
import { HOST_AGENT_TAG } from "./tags.js";

const FP = "3f".repeat(32);
const instance = (tags: Record<string, string>, privateIp: string | null = "10.0.0.7") => ({
  instanceId: "i-0123456789abcdef0",
  privateIp: privateIp ?? undefined,
  tags: new Map(Object.entries(tags)),
});

describe("agentOfInstance: the agent a host reports in nebula:agent", () => {
  it("is found at the private address and the configured port, with the reported fingerprint", () => {
    expect(
      agentOfInstance(instance({ [HOST_AGENT_TAG]: `v1 port=10250 sha256=${FP}` }), 10250),
    ).toEqual({
      kind: "found",
      address: "10.0.0.7",
      port: 10250,
      fingerprint: FP,
    });
  });

  it.each([
    ["no tag yet", {}, undefined, /reports no agent yet/],
    [
      "another version",
      { [HOST_AGENT_TAG]: `v2 port=10250 sha256=${FP}` },
      undefined,
      /does not read/,
    ],
    [
      "an upper-case digest",
      { [HOST_AGENT_TAG]: `v1 port=10250 sha256=${FP.toUpperCase()}` },
      undefined,
      /does not read/,
    ],
    [
      "a short digest",
      { [HOST_AGENT_TAG]: "v1 port=10250 sha256=abcd" },
      undefined,
      /does not read/,
    ],
    [
      "another port",
      { [HOST_AGENT_TAG]: `v1 port=2222 sha256=${FP}` },
      undefined,
      /port 2222, not the configured 10250/,
    ],
    [
      "no private address",
      { [HOST_AGENT_TAG]: `v1 port=10250 sha256=${FP}` },
      "none",
      /no private address/,
    ],
  ])("is unavailable (503) with %s, saying why", (_, tags, ip, why) => {
    const got = agentOfInstance(instance(tags, ip === "none" ? null : "10.0.0.7"), 10250);
    expect(got).toMatchObject({ kind: "unavailable", status: 503 });
    expect(got.kind === "unavailable" && got.message).toMatch(why);
  });

  it("answers any tag value without throwing, and finds an agent only for the exact form", () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 300 }),
        fc.integer({ min: 1, max: 65535 }),
        (value, port) => {
          const got = agentOfInstance(instance({ [HOST_AGENT_TAG]: value }), port);
          if (got.kind === "found") {
            expect(value).toBe(`v1 port=${port} sha256=${got.fingerprint}`);
            expect(got.fingerprint).toMatch(/^[0-9a-f]{64}$/);
          } else {
            expect(got.message.length).toBeGreaterThan(0);
          }
        },
      ),
    );
  });
});

it("reads the tag key the host supervisor writes", () => {
  expect(supervisorScript({ delivery: "parameters" })).toContain(
    `\nAGENT_TAG_KEY=${HOST_AGENT_TAG}\n`,
  );
});
