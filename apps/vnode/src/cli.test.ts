import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { cli } from "./cli.js";

const parseCommandLine = (argv: readonly string[]) => cli.parse(argv);

const bundle = fileURLToPath(new URL("../dist/main.js", import.meta.url));

describe("parseCommandLine", () => {
  it("applies defaults", () => {
    const result = parseCommandLine(["--cluster", "prod", "--config", "config.json"]);
    expect(result).toEqual({
      ok: true,
      flags: {
        cluster: "prod",
        config: "config.json",
        "node-name": "nebula-vnode",
        "log-level": "info",
        "leader-elect": false,
        "metrics-bind-address": ":8080",
        "health-probe-bind-address": ":8081",
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

describe("the bundled binary refusing to start", () => {
  it("exits 2 naming a missing --config, with the usage (bad input, as any other flag)", () => {
    const run = spawnSync(process.execPath, [bundle, "--cluster", "test"], {
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(run.status).toBe(2);
    expect(run.stderr).toContain("nebula-vnode: --config: is required");
    expect(run.stderr).toContain("Usage: nebula-vnode");
  });

  it("exits 1 listing every problem of the configuration file", () => {
    const dir = mkdtempSync(join(tmpdir(), "nebula-vnode-config-"));
    try {
      const config = join(dir, "config.json");
      writeFileSync(config, JSON.stringify({ node: { capacity: { cpu: "lots" } }, provider: {} }));
      const run = spawnSync(process.execPath, [bundle, "--config", config], {
        encoding: "utf8",
        timeout: 60_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain("capacity.cpu");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("exits 1 naming the problem when no cluster configuration exists", () => {
    const home = mkdtempSync(join(tmpdir(), "nebula-vnode-home-"));
    try {
      const config = join(home, "config.json");
      writeFileSync(config, JSON.stringify({ provider: { clusterName: "c" } }));
      const { KUBECONFIG: _k, KUBERNETES_SERVICE_HOST: _h, ...env } = process.env;
      const run = spawnSync(process.execPath, [bundle, "--config", config], {
        encoding: "utf8",
        env: { ...env, HOME: home },
        timeout: 60_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain("no cluster configuration");
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
