/**
 * Leader election against a real kube-apiserver: contenders never both lead, a killed leader is
 * replaced within the lease duration, a released Lease is taken over before it would have
 * expired, a stolen Lease ends the term, and times are written as MicroTime.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import {
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  V1MicroTime,
} from "@kubernetes/client-node";
import { startControlPlane } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundleTestChild } from "../testing/bundle.js";
import { LeaderElector, type StoppedLeadingReason } from "./leader-elector.js";

const namespace = `leader-${randomBytes(4).toString("hex")}`;
let kc: KubeConfig;
let core: CoreV1Api;
let leases: CoordinationV1Api;
const cleanups: Array<() => void> = [];

beforeAll(async () => {
  kc = useTestPeers().controlPlane.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  leases = kc.makeApiClient(CoordinationV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});

afterAll(async () => {
  for (const cleanup of cleanups) cleanup();
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
});

async function until(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

interface Contender {
  readonly elector: LeaderElector;
  readonly stop: AbortController;
  readonly done: Promise<StoppedLeadingReason>;
  readonly terms: number[];
  readonly observedLeaders: Array<string | undefined>;
}

function contend(
  name: string,
  identity: string,
  timing: { leaseDurationMs: number; renewDeadlineMs: number; retryPeriodMs: number },
  releaseOnCancel = true,
): Contender {
  const elector = new LeaderElector(kc, { namespace, name, identity, releaseOnCancel, ...timing });
  const stop = new AbortController();
  cleanups.push(() => stop.abort());
  const terms: number[] = [];
  const observedLeaders: Array<string | undefined> = [];
  const done = elector.run(stop.signal, {
    onStartedLeading: () => {
      terms.push(Date.now());
    },
    onNewLeader: (holder) => observedLeaders.push(holder),
  });
  return { elector, stop, done, terms, observedLeaders };
}

const fast = { leaseDurationMs: 3000, renewDeadlineMs: 2000, retryPeriodMs: 250 };

describe("LeaderElector against the real apiserver", () => {
  it("of three contenders exactly one leads, and the Lease names it with MicroTime times", async () => {
    const all = ["a", "b", "c"].map((id) => contend("three", id, fast));
    await until(() => all.some((c) => c.elector.isLeader()), 10_000);
    // Sample for a while: never two leaders at once.
    let maxLeaders = 0;
    const end = Date.now() + 4000;
    while (Date.now() < end) {
      maxLeaders = Math.max(maxLeaders, all.filter((c) => c.elector.isLeader()).length);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(maxLeaders).toBe(1);
    const leader = all.find((c) => c.elector.isLeader());
    const lease = await leases.readNamespacedLease({ namespace, name: "three" });
    expect(lease.spec?.holderIdentity).toBe(leader?.elector.options.identity);
    for (const c of all) expect(c.observedLeaders.at(-1)).toBe(leader?.elector.options.identity);
    expect(lease.spec?.leaseDurationSeconds).toBe(3);
    // Read back as strings: 6 fractional digits, as the apiserver's MicroTime requires.
    expect(String(lease.spec?.renewTime)).toMatch(/\.\d{6}Z$/);
    expect(String(lease.spec?.acquireTime)).toMatch(/\.\d{6}Z$/);
    for (const c of all) c.stop.abort();
    await Promise.all(all.map((c) => c.done));
  });

  it("a killed leader (no release) is replaced within the lease duration, never overlapping", async () => {
    const a = contend("killed", "a", fast, false);
    await until(() => a.elector.isLeader(), 10_000);
    const b = contend("killed", "b", fast);
    let overlap = false;
    const watch = setInterval(() => {
      if (a.elector.isLeader() && b.elector.isLeader()) overlap = true;
    }, 5);
    try {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(b.elector.isLeader()).toBe(false);
      a.stop.abort(); // stops renewing and does not release: as if the process died
      expect(await a.done).toBe("cancelled");
      const lease = await leases.readNamespacedLease({ namespace, name: "killed" });
      expect(lease.spec?.holderIdentity).toBe("a");
      await until(() => b.elector.isLeader(), fast.leaseDurationMs + 2 * fast.retryPeriodMs + 1000);
      expect(overlap).toBe(false);
      const after = await leases.readNamespacedLease({ namespace, name: "killed" });
      expect(after.spec?.holderIdentity).toBe("b");
      expect(after.spec?.leaseTransitions).toBe(1);
    } finally {
      clearInterval(watch);
      b.stop.abort();
      await b.done;
    }
  });

  it("a released Lease is taken over before it could have expired", async () => {
    // A long lease: without the release the standby would wait at least 20 s.
    const slow = { leaseDurationMs: 20_000, renewDeadlineMs: 10_000, retryPeriodMs: 200 };
    const a = contend("released", "a", slow);
    await until(() => a.elector.isLeader(), 10_000);
    const b = contend("released", "b", slow);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(b.elector.isLeader()).toBe(false);
    a.stop.abort();
    expect(await a.done).toBe("cancelled");
    // Taking over before the lease duration has passed is only possible after a release.
    await until(() => b.elector.isLeader(), slow.leaseDurationMs - 2000);
    b.stop.abort();
    expect(await b.done).toBe("cancelled");
    const lease = await leases.readNamespacedLease({ namespace, name: "released" });
    expect(lease.spec?.holderIdentity ?? "").toBe("");
  });

  it("a Lease taken by someone else ends the term with lost, calling onStoppedLeading first", async () => {
    const elector = new LeaderElector(kc, { namespace, name: "stolen", identity: "a", ...fast });
    const stop = new AbortController();
    cleanups.push(() => stop.abort());
    const order: string[] = [];
    let term: AbortSignal | undefined;
    const done = elector.run(stop.signal, {
      onStartedLeading: (signal) => {
        term = signal;
        order.push("started");
      },
      onStoppedLeading: (reason) => {
        order.push(`stopped:${reason}:${term?.aborted}`);
      },
    });
    await until(() => elector.isLeader(), 10_000);
    const lease = await leases.readNamespacedLease({ namespace, name: "stolen" });
    const now = new V1MicroTime();
    await leases.replaceNamespacedLease({
      namespace,
      name: "stolen",
      body: {
        ...lease,
        spec: {
          ...lease.spec,
          holderIdentity: "intruder",
          leaseDurationSeconds: 60,
          renewTime: now,
          acquireTime: now,
        },
      },
    });
    expect(await done).toBe("lost");
    expect(elector.isLeader()).toBe(false);
    expect(elector.leader()).toBe("intruder");
    expect(order).toEqual(["started", "stopped:lost:true"]);
  });

  it("a leader process killed with SIGKILL is replaced within the lease duration", async () => {
    const child = await bundleTestChild("elector-child");
    const dir = mkdtempSync(join(tmpdir(), "nebula-elector-"));
    const kubeconfig = join(dir, "kubeconfig");
    writeFileSync(kubeconfig, useTestPeers().controlPlane.kubeconfig);
    const a = spawn(process.execPath, [child], {
      env: {
        ...process.env,
        NEBULA_ELECTOR: JSON.stringify({
          kubeconfig,
          namespace,
          name: "sigkill",
          identity: "process-a",
          ...fast,
        }),
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      a.once("exit", (_code, signal) => resolve(signal)),
    );
    const lines: string[] = [];
    createInterface({ input: a.stdout }).on("line", (line) => lines.push(line));
    try {
      await until(() => lines.includes("leading"), 20_000);
      const b = contend("sigkill", "b", fast);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      expect(b.elector.isLeader()).toBe(false); // the live process keeps its Lease
      a.kill("SIGKILL");
      expect(await exited).toBe("SIGKILL");
      await until(() => b.elector.isLeader(), fast.leaseDurationMs + 2 * fast.retryPeriodMs + 1000);
      const lease = await leases.readNamespacedLease({ namespace, name: "sigkill" });
      expect(lease.spec?.holderIdentity).toBe("b");
      expect(lines).toEqual(["leading"]); // killed: it never printed "stopped"
      b.stop.abort();
      await b.done;
    } finally {
      a.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("LeaderElector when the apiserver goes away (a control plane of its own)", () => {
  it("steps down with lost before its Lease could expire, and campaigns afresh afterwards", async () => {
    const plane = await startControlPlane();
    try {
      const own = plane.kubeConfig();
      await own
        .makeApiClient(CoreV1Api)
        .createNamespace({ body: { metadata: { name: "election" } } });
      const elector = new LeaderElector(own, {
        namespace: "election",
        name: "outage",
        identity: "a",
        ...fast,
      });
      const stop = new AbortController();
      cleanups.push(() => stop.abort());
      const reasons: string[] = [];
      const done = elector.run(stop.signal, {
        onStartedLeading: () => {},
        onStoppedLeading: (reason) => {
          reasons.push(reason);
        },
      });
      await until(() => elector.isLeader(), 10_000);
      await plane.stopApiServer();
      // Its last renewal was before the stop: leading past the lease duration would overlap a
      // successor.
      await until(() => !elector.isLeader(), fast.leaseDurationMs);
      expect(await done).toBe("lost");
      expect(reasons).toEqual(["lost"]);
      await plane.startApiServer();
      const again = new AbortController();
      cleanups.push(() => again.abort());
      const second = elector.run(again.signal, { onStartedLeading: () => {} });
      await until(() => elector.isLeader(), 10_000);
      again.abort();
      expect(await second).toBe("cancelled");
    } finally {
      await plane.stop();
    }
  });
});
