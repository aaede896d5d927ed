import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
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

describe("the bundled binary running the manager", () => {
  it("serves probes and metrics, then stops in order on SIGTERM with exit code 0", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nebula-vnode-"));
    const kubeconfig = join(dir, "kubeconfig");
    // Never contacted: without leader election and controllers the manager makes no API call.
    writeFileSync(
      kubeconfig,
      "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    );
    const child = spawn(
      process.execPath,
      [
        bundle,
        ...["--cluster", "test"],
        "--kubeconfig",
        kubeconfig,
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--health-probe-bind-address",
        "127.0.0.1:0",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    const lines: Array<Record<string, unknown>> = [];
    const exited = new Promise<number | null>((resolve) =>
      child.once("exit", (code) => resolve(code)),
    );
    createInterface({ input: child.stdout }).on("line", (line) => lines.push(JSON.parse(line)));
    try {
      const deadline = Date.now() + 20_000;
      while (lines.filter((l) => l.msg === "listening").length < 2 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const urls = lines.filter((l) => l.msg === "listening").map((l) => String(l.url));
      expect(urls).toHaveLength(2);
      const bodies = await Promise.all(
        urls.flatMap((url) =>
          ["/healthz", "/readyz", "/metrics"].map(async (path) => {
            const response = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(5_000) });
            return `${path} ${response.status} ${(await response.text()).slice(0, 2000)}`;
          }),
        ),
      );
      expect(bodies.filter((b) => b.startsWith("/healthz 200 ok"))).toHaveLength(1);
      expect(bodies.filter((b) => b.startsWith("/readyz 200 ok"))).toHaveLength(1);
      expect(
        bodies.filter((b) => b.startsWith("/metrics 200") && b.includes("process_cpu")),
      ).toHaveLength(1);
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      expect(lines.filter((l) => l.msg === "shutdown").map((l) => l.phase)).toEqual([
        "stop-leading",
        "drained",
        "server-closed",
      ]);
    } finally {
      child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("exits 1 naming the problem when no cluster configuration exists", () => {
    const home = mkdtempSync(join(tmpdir(), "nebula-vnode-home-"));
    try {
      const { KUBECONFIG: _k, KUBERNETES_SERVICE_HOST: _h, ...env } = process.env;
      const run = spawnSync(process.execPath, [bundle, ...["--cluster", "test"]], {
        encoding: "utf8",
        env: { ...env, HOME: home },
        timeout: 20_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain("no cluster configuration");
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
