import { execFileSync, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseCommandLine } from "./cli.js";

const bundle = fileURLToPath(new URL("../dist/main.js", import.meta.url));

describe("parseCommandLine", () => {
  it("applies defaults", () => {
    const result = parseCommandLine(["--cluster", "prod"]);
    expect(result).toEqual({
      ok: true,
      flags: {
        cluster: "prod",
        "node-name": "nebula-vnode",
        "log-level": "info",
        help: false,
        version: false,
      },
    });
  });

  it("names the option that is wrong", () => {
    expect(parseCommandLine(["--node-name", "Not_Valid"])).toEqual({
      ok: false,
      message: "--node-name: must be a lowercase RFC 1123 name",
    });
    expect(parseCommandLine(["--log-level", "loud"])).toMatchObject({
      ok: false,
      message: expect.stringMatching(/^--log-level: /),
    });
    expect(parseCommandLine(["--bogus"])).toMatchObject({
      ok: false,
      message: expect.stringContaining("--bogus"),
    });
  });
});

describe("the bundled binary", () => {
  it("prints its help and exits 0", () => {
    const out = execFileSync(process.execPath, [bundle, "--help"], { encoding: "utf8" });
    expect(out).toMatch(/^Usage: nebula-vnode/);
    expect(out).toContain("--kubeconfig");
  });

  it("rejects an unknown option with exit code 2 and the usage", () => {
    const run = spawnSync(process.execPath, [bundle, "--nope"], { encoding: "utf8" });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain("nebula-vnode: Unknown option '--nope'");
    expect(run.stderr).toContain("Usage: nebula-vnode");
  });
});
