import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import {
  type ContainerReport,
  type ExitReport,
  encodeReportTags,
  toInstanceState,
  toPodStatus,
} from "@nebula/state-mapping";
import { afterEach, describe, expect, it } from "vitest";
import { type RenderOptionsInput, renderUserData } from "./index.js";
import { type FakeImage, INSTANCE_ID, TestHost } from "./testing/host.js";

const FAST: RenderOptionsInput = {
  backoff: { initialSeconds: 1, maxSeconds: 2, resetAfterSeconds: 600 },
  report: { retryAttempts: 8, retryBaseMs: 50 },
};

function pod(
  containers: V1Container[],
  spec: Partial<V1Pod["spec"]> = {},
  annotations: Record<string, string> = {},
): V1Pod {
  return {
    metadata: { name: "job-1", namespace: "batch", uid: "uid-1", annotations },
    spec: { restartPolicy: "Never", terminationGracePeriodSeconds: 5, containers, ...spec },
  };
}

const hosts: TestHost[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

async function run(p: V1Pod, images: Record<string, FakeImage>) {
  const rendered = renderUserData(p, FAST);
  if (!rendered.ok) throw rendered.error;
  const h = new TestHost({ images });
  hosts.push(h);
  expect(await h.boot(rendered.value)).toBe(0);
  return h;
}

const last = (reports: ExitReport[]) => reports[reports.length - 1];
const container = (r: ExitReport | undefined, name: string): ContainerReport | undefined =>
  r?.containers.find((c) => c.name === name);
const text = (b64: string | undefined) => Buffer.from(b64 ?? "", "base64").toString("utf8");

/** Files named `name` anywhere under `dir`. */
function find(dir: string, name: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    let isDir = false;
    try {
      isDir = statSync(path).isDirectory();
    } catch {
      continue;
    }
    if (isDir) out.push(...find(path, name));
    else if (entry === name) out.push(path);
  }
  return out;
}

/** The Pod status `toPodStatus` derives from a report read off a running instance. */
function podStatus(p: V1Pod, report: ExitReport) {
  const state = toInstanceState(
    {
      InstanceId: INSTANCE_ID,
      State: { Name: "running" },
      Tags: Object.entries(encodeReportTags(report)).map(([Key, Value]) => ({ Key, Value })),
    },
    { now: new Date(report.time) },
  );
  return toPodStatus(p, state, { now: new Date(report.time) });
}
const condition = (s: ReturnType<typeof podStatus>, type: string) =>
  s.conditions?.find((c) => c.type === type)?.status;

describe("probes on the host", () => {
  it("kills a hung container whose liveness probe fails, restarts it with back-off and says why", async () => {
    const p = pod(
      [
        {
          name: "app",
          image: "fake/hang:1",
          livenessProbe: {
            exec: { command: ["sh", "-c", "echo db connection stuck; exit 1"] },
            periodSeconds: 1,
            failureThreshold: 2,
            terminationGracePeriodSeconds: 1,
          },
        },
      ],
      { restartPolicy: "Always" },
      { "nebula.dev/restart-limit": "2" },
    );
    const h = await run(p, { "fake/hang:1": { script: "exec sleep 1000" } });
    expect(await h.finished()).toBe(0);
    const reports = h.tagReports();
    const final = last(reports);
    const app = container(final, "app");
    expect(app).toMatchObject({ state: "terminated", restarts: 2, restartLimitReached: true });
    const message = text(app?.messageB64);
    expect(message).toContain("Liveness probe failed: db connection stuck");
    expect(message).toContain("Container app failed liveness probe, will be restarted");
    expect(app?.exitCode).not.toBe(0);
    // The second crash waited for the back-off, in the kubelet's words.
    expect(reports.some((r) => container(r, "app")?.reason === "CrashLoopBackOff")).toBe(true);
    expect(text(container(final, "app")?.last?.messageB64)).toContain("Liveness probe failed");
    // The probe ran inside the container, through docker exec.
    expect(h.dockerCalls("exec").length).toBeGreaterThanOrEqual(6);
  });

  it("reports ready false, then true once the readiness probe passes: READY 0/1 then 1/1", async () => {
    const p = pod([
      {
        name: "app",
        image: "fake/slow:1",
        readinessProbe: {
          exec: { command: ["sh", "-c", 'test -e "$FAKE_CTR/warm"'] },
          periodSeconds: 1,
          failureThreshold: 1,
        },
      },
    ]);
    const h = await run(p, {
      "fake/slow:1": { script: 'sleep 3; : >"$FAKE_CTR/warm"; sleep 14; exit 0' },
    });
    expect(await h.finished()).toBe(0);
    const running = h.tagReports().filter((r) => container(r, "app")?.state === "running");
    const unready = running.find((r) => container(r, "app")?.ready === false);
    const ready = running.find((r) => container(r, "app")?.ready === true);
    expect(unready).toBeDefined();
    expect(ready).toBeDefined();
    expect(container(unready, "app")?.started).toBe(true);
    expect(running.indexOf(unready as ExitReport)).toBeLessThan(
      running.indexOf(ready as ExitReport),
    );
    const before = podStatus(p, unready as ExitReport);
    expect(before.containerStatuses?.[0]?.ready).toBe(false);
    expect(condition(before, "ContainersReady")).toBe("False");
    expect(condition(before, "Ready")).toBe("False");
    const after = podStatus(p, ready as ExitReport);
    expect(after.containerStatuses?.[0]?.ready).toBe(true);
    expect(condition(after, "ContainersReady")).toBe("True");
    expect(condition(after, "Ready")).toBe("True");
  });

  it("holds liveness and readiness until the startup probe passes, and reports started", async () => {
    const p = pod([
      {
        name: "app",
        image: "fake/boot:1",
        startupProbe: {
          exec: { command: ["sh", "-c", 'test -e "$FAKE_CTR/booted"'] },
          periodSeconds: 1,
          failureThreshold: 30,
        },
        // Would kill the container at once if it ran before the startup probe passed.
        livenessProbe: {
          exec: { command: ["sh", "-c", 'test -e "$FAKE_CTR/booted"'] },
          periodSeconds: 1,
          failureThreshold: 1,
        },
      },
    ]);
    const h = await run(p, {
      "fake/boot:1": { script: 'sleep 4; : >"$FAKE_CTR/booted"; sleep 12; exit 0' },
    });
    expect(await h.finished()).toBe(0);
    const reports = h.tagReports();
    const app = container(last(reports), "app");
    expect(app).toMatchObject({ state: "terminated", reason: "Completed", restarts: 0 });
    const states = reports
      .map((r) => container(r, "app"))
      .filter((c) => c?.state === "running")
      .map((c) => c?.started);
    expect(states[0]).toBe(false);
    expect(states).toContain(true);
  });

  it("kills a container whose startup probe keeps failing", async () => {
    const p = pod([
      {
        name: "app",
        image: "fake/never:1",
        startupProbe: {
          tcpSocket: { port: "http" },
          periodSeconds: 1,
          failureThreshold: 2,
          terminationGracePeriodSeconds: 1,
        },
        ports: [{ name: "http", containerPort: 1 }],
      },
    ]);
    const h = await run(p, { "fake/never:1": { script: "exec sleep 1000" } });
    expect(await h.finished()).toBe(0);
    const app = container(last(h.tagReports()), "app");
    expect(text(app?.messageB64)).toContain("Startup probe failed: dial tcp 127.0.0.1:1");
    expect(text(app?.messageB64)).toContain("Container app failed startup probe");
  });

  it("backs off readiness-only reports while the probe flaps: 10 s, then 20 s apart", async () => {
    const p = pod([
      {
        name: "app",
        image: "fake/flap:1",
        readinessProbe: {
          // Passes and fails every other second.
          exec: { command: ["sh", "-c", "test $(( $(date +%s) % 2 )) = 0"] },
          periodSeconds: 1,
          failureThreshold: 1,
        },
      },
    ]);
    const h = await run(p, { "fake/flap:1": { script: "sleep 40; exit 0" } });
    expect(await h.finished()).toBe(0);
    const running = h
      .tagReports()
      .filter((r) => !r.final && container(r, "app")?.state === "running");
    // Every report after the one announcing the start changed readiness only: the first 10 s
    // after it, the next 20 s after that (the gap doubles while the probe flaps).
    const times = running.map((r) => Date.parse(r.time) / 1000);
    expect(running.length, JSON.stringify(times)).toBeGreaterThanOrEqual(3);
    for (let i = 1; i < times.length; i++) {
      expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBeGreaterThanOrEqual(10 * 2 ** (i - 1));
    }
  });
});

describe("lifecycle hooks on the host", () => {
  it("runs preStop before the stop signal when the instance is stopped", async () => {
    const p = pod([
      {
        name: "app",
        image: "fake/serve:1",
        lifecycle: {
          preStop: {
            exec: { command: ["sh", "-c", 'date +%s.%N >"$FAKE_CTR/prestop-at"'] },
          },
        },
      },
    ]);
    const h = await run(p, { "fake/serve:1": { script: "exec sleep 1000" } });
    await h.until(() => h.dockerCalls("start").length > 0);
    await h.until(() => h.tagReports().some((r) => container(r, "app")?.state === "running"));
    h.terminate();
    expect(await h.finished()).toBe(0);
    const [file] = find(h.dir, "prestop-at");
    expect(file).toBeDefined();
    const ranAt = Number(readFileSync(file as string, "utf8"));
    const [stopAt] = h.stopTimes();
    expect(ranAt).toBeLessThanOrEqual(stopAt ?? 0);
    expect(container(last(h.tagReports()), "app")).toMatchObject({
      state: "terminated",
      stoppedBecause: "StopRequested",
    });
  });

  it("kills a container whose postStart hook fails, with reason FailedPostStartHook", async () => {
    const p = pod([
      {
        name: "app",
        image: "fake/serve:1",
        lifecycle: {
          postStart: { exec: { command: ["sh", "-c", "echo cannot register; exit 3"] } },
        },
      },
    ]);
    const h = await run(p, { "fake/serve:1": { script: "exec sleep 1000" } });
    expect(await h.finished()).toBe(0);
    const app = container(last(h.tagReports()), "app");
    expect(app).toMatchObject({ state: "terminated", reason: "FailedPostStartHook" });
    expect(text(app?.messageB64)).toContain("PostStartHookError: cannot register");
  });
});

describe("native sidecars on the host", () => {
  it("starts a sidecar before the Pod's containers once its startup probe passes, and a Job-like Pod still completes", async () => {
    const p = pod([{ name: "app", image: "fake/job:1" }], {
      initContainers: [
        {
          name: "proxy",
          image: "fake/proxy:1",
          restartPolicy: "Always",
          startupProbe: {
            exec: { command: ["sh", "-c", 'test -e "$FAKE_CTR/../proxy-up"'] },
            periodSeconds: 1,
            failureThreshold: 30,
          },
        },
      ],
    });
    const h = await run(p, {
      "fake/proxy:1": { script: 'sleep 2; : >"$FAKE_CTR/../proxy-up"; exec sleep 1000' },
      // Succeeds only when the sidecar was up before it started.
      "fake/job:1": { script: 'sleep 1; test -e "$FAKE_CTR/../proxy-up"' },
    });
    expect(await h.finished()).toBe(0);
    expect(h.poweredOff()).toBe(true);
    const final = last(h.tagReports()) as ExitReport;
    expect(container(final, "app")).toMatchObject({ state: "terminated", reason: "Completed" });
    const proxy = container(final, "proxy");
    expect(proxy).toMatchObject({ init: true, state: "terminated" });
    // Stopped after the Pod's container ended.
    expect(Date.parse(proxy?.finishedAt ?? "")).toBeGreaterThanOrEqual(
      Date.parse(container(final, "app")?.finishedAt ?? ""),
    );
    const state = toInstanceState(
      {
        InstanceId: INSTANCE_ID,
        State: { Name: "stopped" },
        Tags: Object.entries(h.tags).map(([Key, Value]) => ({ Key, Value })),
      },
      { now: new Date(final.time) },
    );
    expect(toPodStatus(p, state, { now: new Date(final.time) }).phase).toBe("Succeeded");
  });

  it("restarts a sidecar that exits, whatever the Pod's restartPolicy", async () => {
    const p = pod([{ name: "app", image: "fake/job:1" }], {
      initContainers: [{ name: "proxy", image: "fake/flaky:1", restartPolicy: "Always" }],
    });
    const h = await run(p, {
      "fake/flaky:1": { script: "sleep 1; exit 1" },
      "fake/job:1": { script: "sleep 5; exit 0" },
    });
    expect(await h.finished()).toBe(0);
    const final = last(h.tagReports());
    expect(container(final, "app")).toMatchObject({ state: "terminated", reason: "Completed" });
    expect(container(final, "proxy")?.restarts).toBeGreaterThanOrEqual(1);
  });
});
