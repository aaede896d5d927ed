import {
  type ContainerReport,
  type ExitReport,
  encodeReportTags,
  type InstanceState,
  toInstanceReason,
  toInstanceState,
  toPodStatus,
} from "@nebula/state-mapping";
import { describe, expect, it } from "vitest";
import { statusChanged } from "./condition.js";
import { rollupWorkloadDeployment, type WorkloadDeploymentStatus } from "./deployment.js";

// A steady crash loop, simulated end to end with the real mapping: the host supervisor writes a
// report on every change (the container exits → CrashLoopBackOff; the back-off ends → running
// again), with the kubelet's back-off (10 s doubling to 5 minutes); the controller polls every
// 10 s (the provider's default), writes the Pod status when it changed, and the operator rolls the
// Pod up into its WorkloadDeployment and writes that status when it changed.

const POLL_SECONDS = 10;
const BACKOFF_MAX = 300;
const HOURS = 24;
const start = Date.parse("2026-11-30T00:00:00Z");
const iso = (s: number) => new Date(start + s * 1000).toISOString().replace(/\.000Z$/, "Z");

/** Every report the supervisor writes in `hours`, with the second it is written at. */
function reports(hours: number, runSeconds: number): { at: number; report: ExitReport }[] {
  const out: { at: number; report: ExitReport }[] = [];
  let seq = 0;
  let t = 0;
  let restarts = 0;
  let delay = 0;
  let last: ContainerReport["last"];
  const push = (container: ContainerReport) =>
    out.push({
      at: t,
      report: { v: 1, seq: ++seq, time: iso(t), final: false, containers: [container] },
    });
  while (t < hours * 3600) {
    push({
      name: "app",
      init: false,
      state: "running",
      restarts,
      startedAt: iso(t),
      ...(last === undefined ? {} : { last }),
    });
    const started = t;
    t += runSeconds;
    last = { exitCode: 1, reason: "Error", startedAt: iso(started), finishedAt: iso(t) };
    delay = delay === 0 ? 10 : Math.min(delay * 2, BACKOFF_MAX);
    restarts++;
    const backOff = delay >= 60 ? `${Math.floor(delay / 60)}m${delay % 60}s` : `${delay}s`;
    push({
      name: "app",
      init: false,
      state: "waiting",
      reason: "CrashLoopBackOff",
      restarts,
      messageB64: Buffer.from(`back-off ${backOff} restarting failed container=app`).toString(
        "base64",
      ),
      last,
    });
    t += delay;
  }
  return out;
}

const pod = {
  metadata: { name: "web-0", namespace: "default", uid: "u" },
  spec: { restartPolicy: "Always", containers: [{ name: "app", image: "registry.example/app:1" }] },
};

/** Writes per hour of the Pod status and of the WorkloadDeployment status, hour by hour. */
function simulate(hours: number, runSeconds: number): { pod: number[]; deployment: number[] } {
  const timeline = reports(hours, runSeconds);
  const podWrites = Array.from({ length: hours }, () => 0);
  const deploymentWrites = Array.from({ length: hours }, () => 0);
  let previous: InstanceState | undefined;
  let storedPod: unknown;
  let storedDeployment: WorkloadDeploymentStatus | undefined;
  let next = 0;
  let latest: ExitReport | undefined;
  for (let t = 0; t < hours * 3600; t += POLL_SECONDS) {
    while (next < timeline.length && (timeline[next]?.at ?? Number.POSITIVE_INFINITY) <= t) {
      latest = timeline[next]?.report;
      next++;
    }
    const now = new Date(start + t * 1000);
    const hour = Math.floor(t / 3600);
    const tags = latest === undefined ? {} : encodeReportTags(latest);
    const instance = {
      InstanceId: "i-0abc",
      State: { Name: "running" },
      LaunchTime: new Date(start),
      PrivateIpAddress: "10.0.1.23",
      Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
    };
    const state = toInstanceState(instance, { now, previous });
    previous = state;
    const status = JSON.parse(
      JSON.stringify(toPodStatus({ ...pod, status: storedPod } as never, state, { now })),
    );
    if (JSON.stringify(status) !== JSON.stringify(storedPod)) {
      podWrites[hour] = (podWrites[hour] ?? 0) + 1;
      storedPod = status;
    }
    const reason = toInstanceReason({ spec: pod.spec, status: storedPod });
    const deployment = rollupWorkloadDeployment(
      { desiredReplicas: 1, generation: 1, instances: [{ name: "web-0", ...reason }] },
      { now, previous: storedDeployment?.conditions },
    );
    if (storedDeployment === undefined || statusChanged(storedDeployment, deployment)) {
      deploymentWrites[hour] = (deploymentWrites[hour] ?? 0) + 1;
      storedDeployment = JSON.parse(JSON.stringify(deployment));
    }
  }
  return { pod: podWrites, deployment: deploymentWrites };
}

const steady = (writes: number[]) => writes.slice(1).reduce((a, b) => a + b, 0) / (HOURS - 1);

function report(runSeconds: number, writes: { pod: number[]; deployment: number[] }): void {
  console.log(
    `crash loop, ${POLL_SECONDS} s polls, ${runSeconds} s runs, back-off capped at ${BACKOFF_MAX} s, ${HOURS} h: ` +
      `Pod status writes/hour: first hour ${writes.pod[0]}, then ${steady(writes.pod).toFixed(1)}; ` +
      `WorkloadDeployment status writes/hour: first hour ${writes.deployment[0]}, then ${steady(writes.deployment).toFixed(2)} ` +
      `(hour by hour: ${writes.deployment.join(",")})`,
  );
}

describe("a steady crash loop", () => {
  it("where only restart counts grow, writes the Pod status per restart and the roll-up almost never", {
    timeout: 120_000,
  }, () => {
    // The container exits at once: every poll sees it waiting in CrashLoopBackOff.
    const writes = simulate(HOURS, 0);
    report(0, writes);
    // The Pod status follows Kubernetes: a new restart count and last exit at every restart,
    // about 3600 / 300 = 12 an hour once the back-off is capped.
    for (const perHour of writes.pod.slice(1)) {
      expect(perHour).toBeGreaterThanOrEqual(11);
      expect(perHour).toBeLessThanOrEqual(13);
    }
    // The roll-up states restart counts exactly only up to 5, then "more than 5/10/20/50/100/200
    // times": after the first hour it changes only when the count crosses one of these steps.
    const crossings = [20, 50, 100, 200].filter((n) => n * 302 > 3600 && n * 302 < HOURS * 3600);
    expect(writes.deployment.slice(1).reduce((a, b) => a + b, 0)).toBe(crossings.length);
  });

  it("where the container runs for 2 s, writes more only when a poll sees it up (it is ready then)", {
    timeout: 120_000,
  }, () => {
    const writes = simulate(HOURS, 2);
    report(2, writes);
    // A poll that lands in a 2 s run sees a running, ready container: one more Pod write, and
    // the WorkloadDeployment turns ready and back (two writes). Nothing else changes.
    expect(steady(writes.deployment)).toBeLessThan(steady(writes.pod) / 2);
    expect(steady(writes.pod)).toBeLessThan(16);
  });
});
