import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createConnection } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import type { TestPeersInfo } from "./peers.js";
import { waitUntil } from "./process.js";

const testing = join(dirname(fileURLToPath(import.meta.url)), "testing");

/** Running means: exists and is not a zombie (an orphan's zombie waits for an init to reap it). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

function pidsMatching(pattern: string): number[] {
  try {
    return execFileSync("pgrep", ["-f", pattern], { encoding: "utf8" })
      .trim()
      .split("\n")
      .map(Number)
      .filter((pid) => pid > 0);
  } catch {
    return [];
  }
}

function portOpen(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = createConnection({ host: hostname, port: Number(port) });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Starts a whole set in a child Node process and resolves its info once it is up. */
async function holdPeers(): Promise<{ child: ChildProcess; info: Required<TestPeersInfo> }> {
  const child = spawn(
    process.execPath,
    ["--import", join(testing, "ts-hooks.mjs"), join(testing, "hold-peers.ts")],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  let out = "";
  let err = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    out += chunk.toString("utf8");
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    err += chunk.toString("utf8");
  });
  await waitUntil(async () => out.includes("\n"), {
    what: "the peers in the child process",
    timeoutMs: 120_000,
    intervalMs: 100,
  }).catch((error: unknown) => {
    child.kill("SIGKILL");
    throw new Error(`child did not start its peers: ${err}`, { cause: error });
  });
  return { child, info: JSON.parse(out.slice(0, out.indexOf("\n"))) };
}

describe.each(["SIGINT", "SIGTERM", "SIGKILL"] as const)("a test run killed with %s", (signal) => {
  it("leaves no peer process, port or temporary folder behind", async () => {
    const { child, info } = await holdPeers();
    try {
      const dir = dirname(info.controlPlane.certDir);
      const motoPort = new URL(info.moto.endpoint).port;
      const pids = [
        ...new Set([
          ...pidsMatching(dir),
          ...pidsMatching(`moto_server -H 127.0.0.1 -p ${motoPort}`),
          ...pidsMatching(`nebula-peer-watchdog ${child.pid} `),
        ]),
      ];
      // etcd, kube-apiserver, kube-controller-manager, kube-scheduler, moto_server and one
      // watchdog each.
      expect(pids).toHaveLength(10);
      const commands = pids.map(
        (pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0] ?? "",
      );
      for (const peer of ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]) {
        expect(commands.filter((c) => c.endsWith(`/${peer}`))).toHaveLength(1);
      }
      expect(await portOpen(info.controlPlane.server)).toBe(true);
      expect(await portOpen(info.moto.endpoint)).toBe(true);

      const exited = new Promise((resolve) =>
        child.once("exit", (code, sig) => resolve(sig ?? code)),
      );
      child.kill(signal);
      expect(await exited).toBe(signal);

      // After SIGKILL only the watchdogs can clean up: they poll once a second.
      await waitUntil(async () => pids.every((pid) => !running(pid)) && !existsSync(dir), {
        what: `every peer of the killed run to be gone (${pids.join(", ")})`,
        timeoutMs: 15_000,
      });
      expect(await portOpen(info.controlPlane.server)).toBe(false);
      expect(await portOpen(info.moto.endpoint)).toBe(false);
    } finally {
      // A failed assertion must not leak the child and its peers.
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    }
  });
});
