import { describe, expect, it } from "vitest";
import { TestPeerError } from "../errors.js";
import { startInstanceHosts } from "./simulator.js";

// The options are checked before anything is started or any prerequisite is looked for, so these
// run anywhere (no root, no podman).
const base = { ec2Endpoint: "http://127.0.0.1:1", region: "us-east-1" };

describe("startInstanceHosts options", () => {
  it.each([
    ["firstBootDelayMs", -1],
    ["firstBootDelayMs", 1.5],
    ["firstBootDelayMs", 2 ** 31],
    ["restartBootDelayMs", -1],
    ["restartBootDelayMs", Number.NaN],
    ["pullDelayMs", -1],
    ["pullDelayMs", 0.5],
  ])("refuses %s = %s with InvalidOptions, naming it", async (name, value) => {
    const refused = await startInstanceHosts({ ...base, [name]: value }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(TestPeerError);
    expect(refused).toMatchObject({ code: "InvalidOptions" });
    expect((refused as Error).message).toContain(name);
  });

  it("refuses a delay given as a string (as from an environment variable)", async () => {
    await expect(
      startInstanceHosts({ ...base, pullDelayMs: "1000" as unknown as number }),
    ).rejects.toMatchObject({ code: "InvalidOptions" });
  });
});
