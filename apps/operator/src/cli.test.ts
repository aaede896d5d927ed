import { execFileSync, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseCommandLine } from "./cli.js";

const bundle = fileURLToPath(new URL("../dist/main.js", import.meta.url));

describe("parseCommandLine", () => {
  it("applies defaults", () => {
    expect(parseCommandLine([])).toEqual({
      ok: true,
      flags: { "leader-elect": false, "log-level": "info", help: false, version: false },
    });
  });

  it("names the option that is wrong", () => {
    expect(parseCommandLine(["--namespace", "Bad_NS"])).toEqual({
      ok: false,
      message: "--namespace: must be a lowercase RFC 1123 label",
    });
    expect(parseCommandLine(["--extra"])).toMatchObject({
      ok: false,
      message: expect.stringContaining("--extra"),
    });
  });
});

describe("the bundled binary", () => {
  it("prints its help and exits 0", () => {
    const out = execFileSync(process.execPath, [bundle, "--help"], { encoding: "utf8" });
    expect(out).toMatch(/^Usage: nebula-operator/);
    expect(out).toContain("compute.nebula.dev");
  });

  it("rejects an invalid value with exit code 2", () => {
    const run = spawnSync(process.execPath, [bundle, "--namespace", "Bad_NS"], {
      encoding: "utf8",
    });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain(
      "nebula-operator: --namespace: must be a lowercase RFC 1123 label",
    );
  });

  it("prints its version", () => {
    const out = execFileSync(process.execPath, [bundle, "--version"], { encoding: "utf8" });
    expect(out.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });
});
