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
    expect(parseCommandLine([])).toEqual({
      ok: true,
      flags: {
        "leader-elect": false,
        "log-level": "info",
        "metrics-bind-address": ":8080",
        "health-probe-bind-address": ":8081",
        help: false,
        version: false,
      },
    });
  });

  it("reads the stability window in seconds", () => {
    expect(parseCommandLine(["--stability-window-seconds", "30"])).toMatchObject({
      ok: true,
      flags: { "stability-window-seconds": 30 },
    });
    expect(parseCommandLine(["--stability-window-seconds", "ten"])).toMatchObject({
      ok: false,
      message: expect.stringContaining("--stability-window-seconds"),
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

describe("the bundled binary running the manager", () => {
  it("serves probes and metrics (not ready while its caches cannot sync), then stops in order on SIGTERM with exit code 0", async () => {
    const dir = mkdtempSync(join(tmpdir(), "nebula-operator-"));
    const kubeconfig = join(dir, "kubeconfig");
    // Unreachable: the informers keep retrying, so the process is alive but never ready.
    writeFileSync(
      kubeconfig,
      "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    );
    const child = spawn(
      process.execPath,
      [
        bundle,
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
      expect(bodies.filter((b) => b.startsWith("/readyz 503"))).toHaveLength(1);
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
  }, 60_000);

  it("exits 1 naming the problem when no cluster configuration exists", () => {
    const home = mkdtempSync(join(tmpdir(), "nebula-operator-home-"));
    try {
      const { KUBECONFIG: _k, KUBERNETES_SERVICE_HOST: _h, ...env } = process.env;
      const run = spawnSync(process.execPath, [bundle, ...[]], {
        encoding: "utf8",
        env: { ...env, HOME: home },
        timeout: 20_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain("no cluster configuration");
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  }, 60_000);
});
