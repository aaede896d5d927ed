import { KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { createLogger, type Logger } from "../observability/logger.js";
import { Controller } from "./controller.js";
import { Manager, type ShutdownPhase } from "./manager.js";

// Never contacted: without leader election and informers the manager makes no API call.
const kubeConfig = new KubeConfig();
kubeConfig.loadFromOptions({
  clusters: [{ name: "c", server: "https://127.0.0.1:9", skipTLSVerify: false }],
  users: [{ name: "u", token: "t" }],
  contexts: [{ name: "x", cluster: "c", user: "u" }],
  currentContext: "x",
});

/** A logger that records each warning as `message: runnable`. */
const recordingLogger = (warnings: string[]): Logger =>
  createLogger({
    level: "warn",
    destination: {
      write: (line: string) => {
        const entry = JSON.parse(line) as { level: string; msg: string; runnable?: string };
        if (entry.level === "warn") warnings.push(`${entry.msg}: ${entry.runnable}`);
      },
    },
  });

const until = async (condition: () => boolean, timeoutMs = 5000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met before the deadline");
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
};

describe("Manager without leader election", () => {
  it("runs controllers at once and shuts down in order after the in-flight reconcile", async () => {
    const phases: ShutdownPhase[] = [];
    let release: () => void = () => {};
    const events: string[] = [];
    const manager = new Manager({
      name: "unit",
      kubeConfig,
      handleSignals: false,
      healthProbeBindAddress: "127.0.0.1:0",
      onShutdownPhase: (phase) => {
        phases.push(phase);
        events.push(phase);
      },
    });
    const controller = new Controller({
      name: "c",
      reconcile: async () => {
        events.push("reconcile-start");
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        events.push("reconcile-end");
        return undefined;
      },
    });
    manager.addController(controller);
    const stop = new AbortController();
    const exit = manager.run(stop.signal);
    await until(() => manager.isLeader() && manager.urls().health !== undefined);
    expect(manager.ready()).toBe(true);
    controller.enqueue("k");
    await until(() => events.includes("reconcile-start"));
    stop.abort();
    await until(() => phases.length === 1);
    expect(manager.ready()).toBe("shutting down");
    release();
    expect(await exit).toEqual({ reason: "stopped", exitCode: 0 });
    expect(events).toEqual([
      "reconcile-start",
      "stop-leading",
      "reconcile-end",
      "drained",
      "server-closed",
    ]);
  });

  it("aborts an in-flight reconcile at its drainTimeoutMs after the stop, then shuts down in order", async () => {
    const phases: ShutdownPhase[] = [];
    const manager = new Manager({
      name: "unit",
      kubeConfig,
      handleSignals: false,
      drainTimeoutMs: 50,
      onShutdownPhase: (phase) => phases.push(phase),
    });
    let started = false;
    let abortedAfterStop: number | undefined;
    let stoppedAt = 0;
    const controller = new Controller({
      name: "c",
      // Its own deadline is far away: only the manager's may end it.
      drainTimeoutMs: 60_000,
      reconcile: async (_key, signal) => {
        started = true;
        await new Promise<void>((resolve) => {
          signal.addEventListener("abort", () => {
            abortedAfterStop = Date.now() - stoppedAt;
            resolve();
          });
        });
        return undefined;
      },
    });
    manager.addController(controller);
    const stop = new AbortController();
    const exit = manager.run(stop.signal);
    await until(() => manager.isLeader());
    controller.enqueue("k");
    await until(() => started);
    stoppedAt = Date.now();
    stop.abort();
    expect(await exit).toEqual({ reason: "stopped", exitCode: 0 });
    expect(abortedAfterStop).toBeGreaterThanOrEqual(40);
    expect(abortedAfterStop).toBeLessThan(5_000);
    expect(phases).toEqual(["stop-leading", "drained"]);
  });

  it("stops waiting for a leader-only runnable that ignores its signal at the drain deadline", async () => {
    const phases: ShutdownPhase[] = [];
    const warnings: string[] = [];
    const manager = new Manager({
      name: "unit",
      kubeConfig,
      handleSignals: false,
      drainTimeoutMs: 50,
      logger: recordingLogger(warnings),
      onShutdownPhase: (phase) => phases.push(phase),
    });
    let started = false;
    let finish: () => void = () => {};
    manager.addRunnable({
      name: "stuck-flush",
      // Stands for a call that does not take the signal (an SDK call under throttling).
      run: () =>
        new Promise<void>((resolve) => {
          started = true;
          finish = resolve;
        }),
    });
    const stop = new AbortController();
    const exit = manager.run(stop.signal);
    await until(() => started);
    const stoppedAt = Date.now();
    stop.abort();
    expect(await exit).toEqual({ reason: "stopped", exitCode: 0 });
    const took = Date.now() - stoppedAt;
    expect(took).toBeGreaterThanOrEqual(40);
    expect(took).toBeLessThan(5_000);
    expect(phases).toEqual(["stop-leading", "drained"]);
    expect(warnings).toEqual([
      "runnable still running at the drain deadline; shutting down without it: stuck-flush",
    ]);
    finish();
  });

  it("waits for a leader-only runnable that stops before the drain deadline", async () => {
    const warnings: string[] = [];
    const manager = new Manager({
      name: "unit",
      kubeConfig,
      handleSignals: false,
      drainTimeoutMs: 60_000,
      logger: recordingLogger(warnings),
    });
    const seen: string[] = [];
    manager.addRunnable({
      name: "flush",
      run: (signal) =>
        new Promise<void>((resolve) => {
          seen.push("started");
          signal.addEventListener("abort", () => {
            // Its last work after the stop (a queued request sent) is waited for.
            setTimeout(() => {
              seen.push("flushed");
              resolve();
            }, 30);
          });
        }),
    });
    const stop = new AbortController();
    const exit = manager.run(stop.signal);
    await until(() => seen.length > 0);
    stop.abort();
    expect(await exit).toEqual({ reason: "stopped", exitCode: 0 });
    expect(seen).toEqual(["started", "flushed"]);
    expect(warnings).toEqual([]);
  });

  it("a bad bind address or a failing runnable ends the run with exit code 1", async () => {
    const bad = new Manager({
      name: "unit",
      kubeConfig,
      handleSignals: false,
      metricsBindAddress: "nowhere",
    });
    const badExit = await bad.run();
    expect(badExit).toMatchObject({
      reason: "failed",
      exitCode: 1,
      error: { code: "InvalidOptions" },
    });
    const failing = new Manager({ name: "unit", kubeConfig, handleSignals: false });
    failing.addRunnable({
      name: "poller",
      run: async () => {
        throw new Error("poller broke");
      },
    });
    const exit = await failing.run();
    expect(exit).toMatchObject({
      reason: "failed",
      exitCode: 1,
      error: { message: "poller broke" },
    });
  });

  it("a runnable that is not leader-only starts and stops with the manager", async () => {
    const manager = new Manager({ name: "unit", kubeConfig, handleSignals: false });
    const seen: string[] = [];
    manager.addRunnable(
      {
        name: "heartbeat",
        run: (signal) =>
          new Promise<void>((resolve) => {
            seen.push("started");
            signal.addEventListener("abort", () => {
              seen.push("stopped");
              resolve();
            });
          }),
      },
      { leaderOnly: false },
    );
    const stop = new AbortController();
    const exit = manager.run(stop.signal);
    await until(() => seen.length === 1);
    stop.abort();
    expect(await exit).toEqual({ reason: "stopped", exitCode: 0 });
    expect(seen).toEqual(["started", "stopped"]);
  });
});
