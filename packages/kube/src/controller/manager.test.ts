import { KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
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
