import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import {
  bootTimeline,
  type ContainerReport,
  decodeReportTags,
  type ExitReport,
  encodeReportTags,
  REPORT_TAG_MESSAGE_BUDGET,
  toInstanceState,
} from "@nebula/state-mapping";
import { afterEach, describe, expect, it } from "vitest";
import { type RenderOptionsInput, renderUserData, supervisorScript } from "./index.js";
import { type FakeImage, HOST_IP, INSTANCE_ID, TestHost } from "./testing/host.js";

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

async function run(
  p: V1Pod,
  images: Record<string, FakeImage>,
  options: RenderOptionsInput = {},
  host: Partial<{
    awsCli: boolean | "broken";
    failCreateTags: number;
    awsFailures: number;
    cgroup: "v1" | "v2";
    lifeCycle: "spot" | "on-demand" | "scheduled";
  }> = {},
) {
  const rendered = renderUserData(p, { ...FAST, ...options });
  if (!rendered.ok) throw rendered.error;
  const h = new TestHost({ images, ...host });
  hosts.push(h);
  expect(await h.boot(rendered.value)).toBe(0);
  return h;
}

const last = (reports: ExitReport[]) => reports[reports.length - 1];
const container = (r: ExitReport | undefined, name: string): ContainerReport | undefined =>
  r?.containers.find((c) => c.name === name);
const text = (b64: string | undefined) => Buffer.from(b64 ?? "", "base64").toString("utf8");

describe("the generated user-data on a host", () => {
  it("installs the unit, runs a container that exits 0, reports Completed and powers off", async () => {
    const h = await run(pod([{ name: "app", image: "fake/ok:1" }]), {
      "fake/ok:1": { script: "echo working; exit 0" },
    });
    expect(await h.finished()).toBe(0);
    const unit = h.calls().filter((c) => c.startsWith("systemctl"));
    expect(unit).toEqual([
      "systemctl daemon-reload",
      "systemctl enable --now --no-block nebula-supervisor.service",
    ]);
    expect(h.poweredOff()).toBe(true);
    const final = last(h.tagReports());
    expect(final).toMatchObject({ v: 1, final: true });
    expect(container(final, "app")).toMatchObject({
      state: "terminated",
      exitCode: 0,
      reason: "Completed",
      restarts: 0,
    });
    expect(h.badSignatures()).toBe(0);
    expect(last(h.consoleReports())).toEqual(final);
    // The supervisor ended the Pod itself: not a stop it was asked for.
    expect(h.tagReports().some((r) => "stopRequested" in r)).toBe(false);
    // Only keys the instance role's policy allows (policies/instance-report-tags.json).
    const allowed = JSON.parse(
      readFileSync(new URL("../policies/instance-report-tags.json", import.meta.url), "utf8"),
    ).Statement[0].Condition["ForAllValues:StringEquals"]["aws:TagKeys"] as string[];
    for (const write of h.tagWrites)
      for (const key of Object.keys(write)) expect(allowed).toContain(key);
  });

  it("writes the unit of the guest contract, with the endpoint overrides it ran with", async () => {
    const h = await run(pod([{ name: "app", image: "fake/ok:1" }]), {
      "fake/ok:1": { script: "exit 0" },
    });
    await h.finished();
    const unit = readFileSync(join(h.dir, "unit"), "utf8");
    expect(unit).toContain("ExecStart=/usr/local/lib/nebula/supervisor.sh\n");
    expect(unit).toContain("Type=simple\n");
    expect(unit).toContain("KillMode=mixed\n");
    // Ordered after docker, and pulling it in, so a host that does not enable docker still runs it.
    expect(unit).toContain("After=network-online.target docker.service\n");
    expect(unit).toContain("Wants=network-online.target docker.service\n");
    expect(unit).toContain("TimeoutStopSec=35\n");
    expect(unit).toMatch(
      /^Environment=AWS_EC2_METADATA_SERVICE_ENDPOINT=http:\/\/127\.0\.0\.1:\d+$/m,
    );
    expect(unit).toMatch(/^Environment=AWS_ENDPOINT_URL_EC2=http:\/\/127\.0\.0\.1:\d+$/m);
    expect(unit).not.toContain("AWS_CA_BUNDLE");
    const seqs = h.tagReports().map((r) => r.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
  });

  it("reports exit 1 as Error and, with restartPolicy Never, as terminal", async () => {
    const h = await run(pod([{ name: "app", image: "fake/fail:1" }]), {
      "fake/fail:1": { script: "exit 1" },
    });
    await h.finished();
    const app = container(last(h.tagReports()), "app");
    expect(app).toMatchObject({ state: "terminated", exitCode: 1, reason: "Error", restarts: 0 });
    expect(app?.signal).toBeUndefined();
    expect(last(h.tagReports())?.final).toBe(true);
    expect(h.poweredOff()).toBe(true);
  });

  it("reports an OOM kill as OOMKilled, which wins over the exit code, without a signal", async () => {
    const h = await run(pod([{ name: "app", image: "fake/oom:1" }]), {
      "fake/oom:1": { script: ': >"$FAKE_CTR/oom"; exit 137' },
    });
    await h.finished();
    const app = container(last(h.tagReports()), "app");
    expect(app).toMatchObject({ state: "terminated", exitCode: 137, reason: "OOMKilled" });
    expect(app?.signal).toBeUndefined();
  });

  it("reports deaths by SIGTERM and SIGKILL with their signal", async () => {
    const h = await run(
      pod([
        { name: "a", image: "fake/term:1" },
        { name: "b", image: "fake/kill:1" },
      ]),
      {
        "fake/term:1": { script: "kill -TERM $$" },
        "fake/kill:1": { script: "kill -KILL $$" },
      },
    );
    await h.finished();
    const final = last(h.tagReports());
    expect(container(final, "a")).toMatchObject({
      state: "terminated",
      exitCode: 143,
      signal: 15,
      reason: "Error",
    });
    expect(container(final, "b")).toMatchObject({
      state: "terminated",
      exitCode: 137,
      signal: 9,
      reason: "Error",
    });
  });

  it("retries a failing pull with back-off, reporting ErrImagePull then ImagePullBackOff", async () => {
    const h = await run(pod([{ name: "app", image: "fake/flaky:1" }]), {
      "fake/flaky:1": { script: "exit 0", pullFailures: 2 },
    });
    await h.finished();
    // The console has every report (the tags keep the latest: see the crash back-off test).
    const states = h.consoleReports().map((r) => container(r, "app"));
    const reasons = states.map((c) => `${c?.state}:${c?.reason ?? ""}`);
    expect(reasons).toEqual([
      "waiting:ContainerCreating",
      "waiting:ErrImagePull",
      "waiting:ImagePullBackOff",
      "running:",
      "terminated:Completed",
    ]);
    expect(text(states[1]?.messageB64)).toContain("pull access denied for fake/flaky:1");
    expect(h.dockerCalls("pull")).toHaveLength(3);
  });

  it("gives up pulling after the configured attempts: terminal, reported, powered off", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/missing:1" }]),
      {},
      { imagePull: { maxAttempts: 2 } },
    );
    await h.finished();
    const final = last(h.tagReports());
    expect(final?.final).toBe(true);
    expect(container(final, "app")).toMatchObject({ state: "waiting", reason: "ImagePullBackOff" });
    expect(text(container(final, "app")?.messageB64)).toContain(
      "manifest for fake/missing:1 not found",
    );
    expect(h.dockerCalls("create")).toHaveLength(0);
    expect(h.poweredOff()).toBe(true);
  });

  it("tells a crash before the restart it leads to (a start takes seconds the exit must not wait for)", async () => {
    const h = await run(
      pod(
        [{ name: "app", image: "fake/crash:1" }],
        { restartPolicy: "Always" },
        { "nebula.dev/restart-limit": "1" },
      ),
      // The second run lives 2 s, so its own report (running) is seen too.
      {
        "fake/crash:1": {
          script:
            'if [ -s "$TERMINATION_LOG" ]; then sleep 2; fi; echo once >>"$TERMINATION_LOG"; exit 3',
        },
      },
      { backoff: { initialSeconds: 1, maxSeconds: 4, resetAfterSeconds: 600 } },
    );
    await h.finished();
    const apps = h.consoleReports().map((r) => ({ seq: r.seq, app: container(r, "app") }));
    // The first crash restarts at once; its report comes before that restart's, saying so.
    const told = apps.find(
      ({ app }) => app?.state === "waiting" && app.restarts === 1 && app.last?.exitCode === 3,
    );
    expect(told?.app?.reason).toBe("ContainerCreating");
    const restarted = apps.find(({ app }) => app?.state === "running" && app.restarts === 1);
    expect(restarted?.seq).toBeGreaterThan(told?.seq ?? Number.POSITIVE_INFINITY);
    expect(h.dockerCalls("create")).toHaveLength(2);
  });

  it("restarts a first crash at once, then with the kubelet's doubling back-off, reports CrashLoopBackOff, and stops at the restart cap", async () => {
    const h = await run(
      pod(
        [{ name: "app", image: "fake/crash:1" }],
        { restartPolicy: "Always" },
        { "nebula.dev/restart-limit": "3" },
      ),
      { "fake/crash:1": { script: 'echo "attempt" >>"$TERMINATION_LOG"; exit 1' } },
      { backoff: { initialSeconds: 1, maxSeconds: 4, resetAfterSeconds: 600 } },
    );
    await h.finished();
    // Every report reaches the console; the tags keep the latest (a report whose tag write is still
    // retrying when the next one is made is superseded, as a loaded CI machine once showed: the
    // "back-off 1s" report never reached the tags). The sequence is read where all of it is.
    const waits = h
      .consoleReports()
      .map((r) => container(r, "app"))
      .filter((c) => c?.reason === "CrashLoopBackOff");
    // The first crash restarts at once (no back-off); the back-off starts with the second.
    expect(waits.map((c) => text(c?.messageB64))).toEqual([
      "back-off 1s restarting failed container=app pod=job-1_batch(uid-1)",
      "back-off 2s restarting failed container=app pod=job-1_batch(uid-1)",
    ]);
    expect(waits.map((c) => c?.restarts)).toEqual([2, 3]);
    expect(waits[0]?.last).toMatchObject({ exitCode: 1, reason: "Error" });
    const final = last(h.tagReports());
    expect(final?.final).toBe(true);
    expect(container(final, "app")).toMatchObject({
      state: "terminated",
      exitCode: 1,
      restarts: 3,
      last: { exitCode: 1 },
    });
    expect(h.dockerCalls("create")).toHaveLength(4);
    expect(h.poweredOff()).toBe(true);
  });

  it("with restartPolicy OnFailure, restarts a failure and treats exit 0 as terminal", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/second-time:1" }], { restartPolicy: "OnFailure" }),
      {
        "fake/second-time:1": {
          script: 'm="$FAKE_CTR/../../ran"; if [ -e "$m" ]; then exit 0; fi; : >"$m"; exit 1',
        },
      },
    );
    await h.finished();
    const final = last(h.tagReports());
    expect(final?.final).toBe(true);
    expect(container(final, "app")).toMatchObject({
      state: "terminated",
      reason: "Completed",
      restarts: 1,
      last: { exitCode: 1 },
    });
  });

  it("follows imagePullPolicy: IfNotPresent uses a present image, Never does not pull a missing one", async () => {
    const h = await run(
      pod([
        { name: "cached", image: "fake/cached:1", imagePullPolicy: "IfNotPresent" },
        { name: "never", image: "fake/absent:1", imagePullPolicy: "Never" },
      ]),
      { "fake/cached:1": { script: "exit 0", present: true } },
    );
    await h.finished();
    expect(h.dockerCalls("pull")).toEqual([]);
    const final = last(h.tagReports());
    expect(container(final, "never")).toMatchObject({
      state: "waiting",
      reason: "ErrImageNeverPull",
    });
    expect(text(container(final, "never")?.messageB64)).toBe(
      "image fake/absent:1 is not present on the host and imagePullPolicy is Never",
    );
    expect(final?.final).toBe(true);
  });

  it("restarts a failed init container under restartPolicy OnFailure, then runs the app", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/ok:1" }], {
        restartPolicy: "OnFailure",
        initContainers: [{ name: "wait-db", image: "fake/second-time:1" }],
      }),
      {
        "fake/ok:1": { script: "exit 0" },
        "fake/second-time:1": {
          script: 'm="$FAKE_CTR/../../ran"; if [ -e "$m" ]; then exit 0; fi; : >"$m"; exit 1',
        },
      },
    );
    await h.finished();
    const final = last(h.tagReports());
    expect(container(final, "wait-db")).toMatchObject({
      init: true,
      state: "terminated",
      reason: "Completed",
      restarts: 1,
    });
    expect(container(final, "app")).toMatchObject({ state: "terminated", reason: "Completed" });
    // A first crash restarts at once: no back-off to report.
    expect(
      h.consoleReports().some((r) => container(r, "wait-db")?.reason === "CrashLoopBackOff"),
    ).toBe(false);
  });

  it("a restart cap of 0 makes the first exit terminal even under restartPolicy Always", async () => {
    const h = await run(
      pod(
        [{ name: "app", image: "fake/ok:1" }],
        { restartPolicy: "Always" },
        { "nebula.dev/restart-limit": "0" },
      ),
      { "fake/ok:1": { script: "exit 0" } },
    );
    await h.finished();
    expect(container(last(h.tagReports()), "app")).toMatchObject({
      state: "terminated",
      reason: "Completed",
      restarts: 0,
    });
    expect(h.poweredOff()).toBe(true);
  });

  it("runs init containers in order, and a failed one (restartPolicy Never) ends the Pod before the app starts", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/ok:1" }], {
        initContainers: [
          { name: "setup", image: "fake/ok:1" },
          { name: "migrate", image: "fake/fail:1" },
        ],
      }),
      {
        "fake/ok:1": { script: "exit 0" },
        "fake/fail:1": { script: "echo 'migration 42 failed' >\"$TERMINATION_LOG\"; exit 2" },
      },
    );
    await h.finished();
    const final = last(h.tagReports());
    expect(final?.final).toBe(true);
    expect(container(final, "setup")).toMatchObject({
      init: true,
      state: "terminated",
      reason: "Completed",
    });
    expect(container(final, "migrate")).toMatchObject({
      init: true,
      state: "terminated",
      exitCode: 2,
      reason: "Error",
    });
    expect(text(container(final, "migrate")?.messageB64)).toBe("migration 42 failed\n");
    expect(container(final, "app")).toMatchObject({
      init: false,
      state: "waiting",
      reason: "PodInitializing",
    });
    expect(h.dockerCalls("create").map((c) => /--name=nebula-([a-z]+)/.exec(c)?.[1])).toEqual([
      "setup",
      "migrate",
    ]);
  });

  it("runs the app after its init containers succeed", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/ok:1" }], {
        initContainers: [{ name: "setup", image: "fake/ok:1" }],
      }),
      {
        "fake/ok:1": { script: "exit 0" },
      },
    );
    await h.finished();
    expect(h.dockerCalls("create").map((c) => /--name=nebula-([a-z]+)/.exec(c)?.[1])).toEqual([
      "setup",
      "app",
    ]);
    expect(container(last(h.tagReports()), "app")).toMatchObject({
      state: "terminated",
      reason: "Completed",
    });
  });

  it("reports a sidecar's exit while the app runs, and ends when the app ends", async () => {
    const h = await run(
      pod([
        { name: "app", image: "fake/slow:1" },
        { name: "sidecar", image: "fake/fail:1" },
      ]),
      {
        "fake/slow:1": { script: "sleep 3; exit 0" },
        "fake/fail:1": { script: "exit 3" },
      },
    );
    await h.finished();
    const reports = h.consoleReports();
    const middle = reports.find(
      (r) =>
        container(r, "sidecar")?.state === "terminated" && container(r, "app")?.state === "running",
    );
    expect(middle?.final).toBe(false);
    expect(container(middle, "sidecar")).toMatchObject({ exitCode: 3, reason: "Error" });
    const final = last(h.tagReports());
    expect(final?.final).toBe(true);
    expect(container(final, "app")).toMatchObject({ state: "terminated", reason: "Completed" });
  });

  it("reports a container the runtime lost as ContainerStatusUnknown, exit 137", async () => {
    const h = await run(pod([{ name: "app", image: "fake/vanish:1" }]), {
      "fake/vanish:1": { script: 'sleep 0.5; rm -rf "$FAKE_CTR"; sleep 1' },
    });
    await h.finished();
    const app = container(last(h.tagReports()), "app");
    expect(app).toMatchObject({
      state: "terminated",
      exitCode: 137,
      reason: "ContainerStatusUnknown",
    });
    expect(text(app?.messageB64)).toBe(
      "The container could not be located when the pod was terminated",
    );
  });

  it("reports a container that cannot start as ContainerCannotRun", async () => {
    const h = await run(pod([{ name: "app", image: "fake/broken:1", command: ["/missing"] }]), {
      "fake/broken:1": { script: "exit 0", noStart: true },
    });
    await h.finished();
    const app = container(last(h.tagReports()), "app");
    expect(app).toMatchObject({ state: "terminated", reason: "ContainerCannotRun", exitCode: 128 });
    expect(text(app?.messageB64)).toContain("no such file or directory");
  });

  it("takes the termination message from the log tail (80 lines, 2048 bytes) under FallbackToLogsOnError", async () => {
    const h = await run(
      pod([
        { name: "app", image: "fake/noisy:1", terminationMessagePolicy: "FallbackToLogsOnError" },
      ]),
      {
        "fake/noisy:1": { script: 'for i in $(seq 1 100); do echo "line $i"; done; exit 1' },
      },
    );
    await h.finished();
    const message = text(last(h.consoleReports())?.containers[0]?.messageB64);
    const lines = message.trimEnd().split("\n");
    expect(lines).toHaveLength(80);
    expect(lines[0]).toBe("line 21");
    expect(lines[79]).toBe("line 100");
  });

  it("prefers the file, ignores logs on success, and truncates: the last 4096 bytes on the console, the shared budget on tags", async () => {
    const h = await run(
      pod([
        { name: "big", image: "fake/big:1", terminationMessagePolicy: "FallbackToLogsOnError" },
        { name: "quiet", image: "fake/quiet:1", terminationMessagePolicy: "FallbackToLogsOnError" },
      ]),
      {
        "fake/big:1": {
          script:
            'echo "log line"; { printf start; head -c 5000 /dev/zero | tr "\\0" x; } >"$TERMINATION_LOG"; exit 1',
        },
        "fake/quiet:1": { script: 'echo "log line"; exit 0' },
      },
    );
    await h.finished();
    const consoleBig = container(last(h.consoleReports()), "big");
    expect(text(consoleBig?.messageB64)).toBe("x".repeat(4096));
    expect(container(last(h.consoleReports()), "quiet")?.messageB64).toBeUndefined();
    const tagBig = container(last(h.tagReports()), "big");
    // One budget for all messages: the only message gets all of it.
    expect(text(tagBig?.messageB64)).toBe("x".repeat(REPORT_TAG_MESSAGE_BUDGET));
    expect(tagBig?.truncated).toBe(true);
    expect(last(h.tagReports())?.cut).toBe(true);
  });

  it("on SIGTERM (instance stopped by the controller) stops the containers with the grace period and writes the final report", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/server:1" }], {
        restartPolicy: "Always",
        terminationGracePeriodSeconds: 7,
      }),
      {
        "fake/server:1": {
          script: "trap 'echo bye >\"$TERMINATION_LOG\"; exit 0' TERM; while :; do sleep 0.1; done",
        },
      },
    );
    await h.until(() => h.tagWrites.some((w) => w["nebula:report"]?.includes("seq=2") === true));
    h.terminate();
    expect(await h.finished()).toBe(0);
    expect(h.dockerCalls("stop")).toEqual([
      expect.stringMatching(/^docker stop -t 7 [0-9a-f]{64}$/),
    ]);
    const final = last(h.tagReports());
    expect(final?.final).toBe(true);
    expect(container(final, "app")).toMatchObject({
      state: "terminated",
      exitCode: 0,
      reason: "Completed",
      restarts: 0,
    });
    expect(text(container(final, "app")?.messageB64)).toBe("bye\n");
    expect(h.poweredOff()).toBe(false);
    // A stop it did not start: only the final report says so, on both channels.
    expect(final).toMatchObject({ stopRequested: true });
    expect(last(h.consoleReports())).toMatchObject({ final: true, stopRequested: true });
    expect(h.tagReports().filter((r) => "stopRequested" in r)).toEqual([final]);
  });

  it("on SIGTERM stops the containers with the stop's grace the controller tagged (a deletion's --grace-period), never longer than the Pod's", async () => {
    const stops: string[] = [];
    for (const [tagged, expected] of [
      ["2", 2],
      ["99", 7],
      ["soon", 7],
    ] as const) {
      const h = await run(
        pod([{ name: "app", image: "fake/stubborn:1" }], {
          restartPolicy: "Always",
          terminationGracePeriodSeconds: 7,
        }),
        { "fake/stubborn:1": { script: "trap '' TERM; while :; do sleep 0.1; done" } },
      );
      await h.until(() => h.tagWrites.some((w) => w["nebula:report"]?.includes("seq=2") === true));
      h.tagInstance("nebula:stop-grace-seconds", tagged);
      h.terminate();
      expect(await h.finished()).toBe(0);
      expect(h.dockerCalls("stop")).toEqual([
        expect.stringMatching(new RegExp(`^docker stop -t ${expected} [0-9a-f]{64}$`)),
      ]);
      stops.push(`${tagged}:${expected}`);
      expect(last(h.tagReports())).toMatchObject({ final: true, stopRequested: true });
    }
    expect(stops).toEqual(["2:2", "99:7", "soon:7"]);
  });

  it("on SIGTERM starts no CreateTags attempt that could outlast systemd's TimeoutStopSec", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/server:1" }], {
        restartPolicy: "Always",
        terminationGracePeriodSeconds: 1,
      }),
      { "fake/server:1": { script: "while :; do sleep 0.1; done" } },
      {},
      { awsCli: true },
    );
    await h.until(() => h.tagWrites.length >= 2);
    // Every CLI call now hangs 4 s and fails, and every signed call fails.
    h.failTagsFromNow(4);
    const sigterm = Date.now() / 1000;
    h.terminate();
    expect(await h.finished()).toBe(0);
    // TimeoutStopSec = grace + 30 = 31 s; attempts of up to 15 s end 5 s before it: none starts
    // later than 31 - 5 - 15 = 11 s after SIGTERM (the old 20 s window after the stop allowed 17 s).
    const late = h.awsStarts().filter((t) => t >= sigterm && t - sigterm >= 12);
    expect(late).toEqual([]);
    expect(h.awsStarts().filter((t) => t >= sigterm).length).toBeGreaterThanOrEqual(2);
    expect(h.supervisorLog()).toContain(
      "no time left for another attempt before the stop deadline",
    );
    // The last word names both ways' errors (the CLI was tried in a subshell of the attempts).
    expect(h.supervisorLog()).toMatch(/CreateTags failed: .*\(aws CLI: /);
    expect(last(h.consoleReports())).toMatchObject({ final: true, stopRequested: true });
  });

  it("writes the same tag report as the TypeScript codec: one shared budget, most useful text first, UTF-8 cuts", async () => {
    const euro = "€".repeat(2000);
    const h = await run(
      pod(
        [
          { name: "app", image: "fake/crash:1" },
          { name: "sidecar", image: "fake/chatty:1" },
        ],
        { restartPolicy: "Always" },
        { "nebula.dev/restart-limit": "1" },
      ),
      {
        "fake/crash:1": { script: `printf '%s' '${euro}' >"$TERMINATION_LOG"; exit 3` },
        "fake/chatty:1": {
          script: `trap 'printf "%s" "$(head -c 600 /dev/zero | tr "\\0" s)" >"$TERMINATION_LOG"; exit 0' TERM; while :; do sleep 0.1; done`,
        },
      },
    );
    await h.finished();
    const whole = last(h.consoleReports());
    expect(whole?.final).toBe(true);
    const app = container(whole, "app");
    // The console keeps the last 4096 bytes of the file, cut on a character boundary.
    expect(text(app?.messageB64)).toBe("€".repeat(1365));
    expect(text(app?.last?.messageB64)).toBe("€".repeat(1365));
    // The tags hold what the reference encoder makes of the whole report.
    const tags = decodeReportTags(h.tags);
    expect(tags.kind).toBe("report");
    if (tags.kind !== "report" || whole === undefined) return;
    expect(tags.report).toEqual(
      (decodeReportTags(encodeReportTags(whole)) as { report: ExitReport }).report,
    );
    const tagApp = container(tags.report, "app");
    expect(text(tagApp?.messageB64)).toBe("€".repeat(341));
    expect(tagApp?.last?.messageB64).toBeUndefined();
    expect(container(tags.report, "sidecar")?.messageB64).toBeUndefined();
    expect(tags.report.cut).toBe(true);
    expect(container(tags.report, "sidecar")).toMatchObject({ truncated: true });
    for (const r of [...h.tagReports(), ...h.consoleReports()])
      for (const c of r.containers)
        for (const m of [c.messageB64, c.last?.messageB64]) expect(text(m)).not.toContain("\uFFFD");
  });

  it("at the restart limit says so: the container that hit it, the others stopped for it, the limit", async () => {
    const h = await run(
      pod(
        [
          { name: "app", image: "fake/fail:1" },
          { name: "sidecar", image: "fake/server:1" },
        ],
        { restartPolicy: "Always" },
        { "nebula.dev/restart-limit": "2" },
      ),
      {
        "fake/fail:1": { script: "exit 1" },
        "fake/server:1": { script: "while :; do sleep 0.1; done" },
      },
    );
    await h.finished();
    const final = last(h.tagReports());
    expect(final).toMatchObject({ final: true, restartLimit: { container: "app", limit: 2 } });
    expect(final?.stopRequested).toBeUndefined();
    expect(container(final, "app")).toMatchObject({
      state: "terminated",
      exitCode: 1,
      reason: "Error",
      restarts: 2,
      restartLimitReached: true,
    });
    // Not "Error 137 signal 9": it was stopped because of the limit.
    expect(container(final, "sidecar")).toMatchObject({
      state: "terminated",
      reason: "StoppedByRestartLimit",
      stoppedBecause: "RestartLimit",
    });
    expect(container(final, "sidecar")?.restartLimitReached).toBeUndefined();
    const state = toInstanceState(
      {
        InstanceId: INSTANCE_ID,
        State: { Name: "stopped" },
        Tags: Object.entries(h.tags).map(([Key, Value]) => ({ Key, Value })),
      },
      { now: new Date() },
    );
    expect(state).toMatchObject({
      kind: "Terminal",
      restartLimit: {
        container: "app",
        limit: 2,
        message: expect.stringContaining("nebula.dev/restart-limit"),
      },
    });
    expect(h.poweredOff()).toBe(true);
  });

  it("keeps the end of the log under FallbackToLogsOnError in the tag channel too", async () => {
    const h = await run(
      pod([
        { name: "app", image: "fake/noisy:1", terminationMessagePolicy: "FallbackToLogsOnError" },
      ]),
      {
        "fake/noisy:1": {
          script: 'for i in $(seq 1 100); do echo "line $i ünïcødé"; done; exit 1',
        },
      },
    );
    await h.finished();
    const tag = text(container(last(h.tagReports()), "app")?.messageB64);
    expect(tag.endsWith("line 100 ünïcødé\n")).toBe(true);
    expect(Buffer.byteLength(tag)).toBeLessThanOrEqual(REPORT_TAG_MESSAGE_BUDGET);
    expect(tag).not.toContain("\uFFFD");
    const console = text(container(last(h.consoleReports()), "app")?.messageB64);
    expect(console.endsWith("line 100 ünïcødé\n")).toBe(true);
    expect(console).not.toContain("\uFFFD");
  });

  it("on SIGTERM during CreateTags throttling takes over at once and ends before TimeoutStopSec", async () => {
    const h = await run(
      pod(
        [
          { name: "server", image: "fake/server:1" },
          { name: "blip", image: "fake/blip:1" },
        ],
        { restartPolicy: "OnFailure", terminationGracePeriodSeconds: 2 },
      ),
      {
        "fake/server:1": {
          script: "trap 'echo bye >\"$TERMINATION_LOG\"; exit 0' TERM; while :; do sleep 0.1; done",
        },
        "fake/blip:1": { script: "sleep 2; exit 0" },
      },
      // Back-off sleeps of 10 to 20 s between attempts, as under a real throttle.
      { report: { retryAttempts: 8, retryBaseMs: 20_000 } },
    );
    await h.until(() => h.tagReports().some((r) => container(r, "blip")?.state === "running"));
    // From now on the in-process EC2 endpoint refuses every CreateTags (RequestLimitExceeded).
    h.failTagsFromNow(0);
    await h.until(() => h.supervisorLog().includes("container blip: exited"));
    // The report of that exit is now between attempts.
    await new Promise((r) => setTimeout(r, 1500));
    const sigterm = Date.now() / 1000;
    h.terminate();
    expect(await h.finished()).toBe(0);
    const exited = Date.now() / 1000;
    // The handler did not wait behind the 10–20 s back-off: docker stop went out at once.
    const [stop] = h.stopTimes();
    expect((stop ?? Number.POSITIVE_INFINITY) - sigterm).toBeLessThan(8);
    // Done, final console line included, before systemd's TimeoutStopSec (grace 2 s + 30 s).
    expect(exited - sigterm).toBeLessThan(32);
    const final = last(h.consoleReports());
    expect(final).toMatchObject({ final: true, stopRequested: true });
    expect(Math.abs(Date.parse(final?.stopRequestedAt ?? "") / 1000 - sigterm)).toBeLessThan(2);
    expect(container(final, "server")).toMatchObject({
      state: "terminated",
      exitCode: 0,
      stoppedBecause: "StopRequested",
    });
    expect(h.dockerCalls("stop")).toEqual([
      expect.stringMatching(/^docker stop -t 2 [0-9a-f]{64}$/),
    ]);
  });

  for (const version of ["v1", "v2"] as const) {
    it(`reports exit 137 as OOMKilled when the memory cgroup recorded an OOM kill the runtime did not flag (cgroup ${version})`, async () => {
      // The fake container leaves the kernel's OOM record in its own memory cgroup (the guest's
      // /sys/fs/cgroup is a directory of the test host), then dies like an OOM-killed process.
      const record =
        version === "v1"
          ? 'p=$(sed -n "s/^[0-9]*:\\([^:]*,\\)\\{0,1\\}memory\\(,[^:]*\\)\\{0,1\\}://p" /proc/self/cgroup); d=/sys/fs/cgroup/memory$p; mkdir -p "$d"; printf "oom_kill_disable 0\\nunder_oom 0\\noom_kill 1\\n" >"$d/memory.oom_control"'
          : 'p=$(sed -n "s/^0:://p" /proc/self/cgroup); d=/sys/fs/cgroup$p; mkdir -p "$d"; printf "low 0\\nhigh 0\\nmax 4\\noom 1\\noom_kill 1\\n" >"$d/memory.events"';
      const h = await run(
        pod([{ name: "app", image: "fake/memhog:1" }]),
        { "fake/memhog:1": { script: `${record}; sleep 2; kill -KILL $$` } },
        {},
        { cgroup: version },
      );
      await h.finished();
      const final = last(h.tagReports());
      expect(container(final, "app")).toMatchObject({
        state: "terminated",
        exitCode: 137,
        reason: "OOMKilled",
      });
      // (A SIGKILL without the record stays Error / signal 9: "reports deaths by SIGTERM and SIGKILL".)
      expect(container(final, "app")?.signal).toBeUndefined();
    });
  }

  // IMDS `instance-life-cycle` says `spot`, or cannot be read (404): the Spot paths are polled.
  it.each([
    ["says spot", "spot", "IMDS instance-life-cycle: spot"],
    ["is unreadable", undefined, "IMDS instance-life-cycle: unreadable"],
  ] as const)(
    "on a Spot interruption notice (the instance's life cycle %s) stops the containers within the warning, reports it and leaves the instance to EC2",
    async (_, lifeCycle, said) => {
      const h = await run(
        pod([{ name: "app", image: "fake/server:1" }], {
          restartPolicy: "Always",
          terminationGracePeriodSeconds: 600,
        }),
        {
          "fake/server:1": {
            script:
              "trap 'echo drained >\"$TERMINATION_LOG\"; exit 0' TERM; while :; do sleep 0.1; done",
          },
        },
        {},
        lifeCycle === undefined ? {} : { lifeCycle },
      );
      await h.until(() => h.tagReports().some((r) => container(r, "app")?.state === "running"));
      const action = new Date(Date.now() + 120_000);
      h.raiseSpotNotice("terminate", action);
      expect(await h.finished()).toBe(0);
      // Said once; read once when it answers, asked again at every poll while it does not.
      expect(h.supervisorLog().split(said)).toHaveLength(2);
      const asked = h.imdsReads.filter((p) => p === "instance-life-cycle").length;
      if (lifeCycle === undefined) expect(asked).toBeGreaterThanOrEqual(2);
      else expect(asked).toBe(1);
      expect(h.imdsReads).toContain("spot/instance-action");
      expect(h.imdsReads).toContain("events/recommendations/rebalance");
      // The grace is capped by the two-minute warning, less the time kept for the final report.
      const [stop] = h.dockerCalls("stop");
      const grace = Number(/^docker stop -t (\d+) /.exec(stop ?? "")?.[1]);
      expect(grace).toBeGreaterThan(80);
      expect(grace).toBeLessThanOrEqual(100);
      const final = last(h.tagReports());
      expect(final).toMatchObject({
        final: true,
        stopRequested: true,
        interruption: {
          kind: "spot",
          action: "terminate",
          time: action.toISOString().replace(/\.\d{3}Z$/, "Z"),
        },
      });
      expect(container(final, "app")).toMatchObject({
        state: "terminated",
        exitCode: 0,
        stoppedBecause: "SpotInterruption",
      });
      expect(text(container(final, "app")?.messageB64)).toBe("drained\n");
      expect(h.poweredOff()).toBe(false);
      // The notice was reported at once, before the containers were stopped: the controller marks
      // the Pod from that report while the grace runs.
      const notice = h.tagReports().find((r) => r.interruption !== undefined && !r.final);
      expect(notice).toMatchObject({ stopRequested: true, interruption: { action: "terminate" } });
      expect(container(notice, "app")?.state).toBe("running");
      expect(notice?.seq).toBe((final?.seq ?? 0) - 1);
      // The controller: the instance is still running, yet the Pod ends as a Spot interruption.
      const state = toInstanceState(
        {
          InstanceId: INSTANCE_ID,
          State: { Name: "running" },
          Tags: Object.entries(h.tags).map(([Key, Value]) => ({ Key, Value })),
        },
        { now: new Date() },
      );
      expect(state).toMatchObject({ kind: "Terminal", stopped: { cause: "SpotInterruption" } });
    },
  );

  it("reports a rebalance recommendation once and keeps the containers running", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/server:1" }], { restartPolicy: "Always" }),
      {
        "fake/server:1": { script: "while :; do sleep 0.1; done" },
      },
    );
    await h.until(() => h.tagReports().some((r) => container(r, "app")?.state === "running"));
    const at = new Date(Date.now() - 1000);
    h.raiseRebalance(at);
    const time = at.toISOString().replace(/\.\d{3}Z$/, "Z");
    await h.until(() => h.tagReports().some((r) => r.rebalance !== undefined));
    const reports = h.tagReports();
    const first = reports.findIndex((r) => r.rebalance !== undefined);
    expect(reports[first]).toMatchObject({ final: false, rebalance: { time } });
    expect(reports[first]?.stopRequested).toBeUndefined();
    expect(container(reports[first], "app")?.state).toBe("running");
    // Reported once: no report follows for it alone (the next poll sees the same recommendation).
    await new Promise((resolve) => setTimeout(resolve, 5000));
    expect(h.tagReports()).toHaveLength(first + 1);
    expect(h.dockerCalls("stop")).toEqual([]);
    h.terminate();
    expect(await h.finished()).toBe(0);
    expect(last(h.tagReports())).toMatchObject({ final: true, rebalance: { time } });
  });

  it.each(["on-demand", "scheduled"] as const)(
    "on a host whose IMDS says instance-life-cycle %s, never reads the Spot notice nor the rebalance recommendation",
    async (lifeCycle) => {
      const h = await run(
        pod([{ name: "app", image: "fake/server:1" }], { restartPolicy: "Always" }),
        { "fake/server:1": { script: "while :; do sleep 0.1; done" } },
        {},
        { lifeCycle },
      );
      await h.until(() => h.tagReports().some((r) => container(r, "app")?.state === "running"));
      // EC2 would never serve these to a host that is not Spot: served here, they show that the
      // supervisor does not even ask.
      h.raiseRebalance(new Date());
      h.raiseSpotNotice("terminate", new Date(Date.now() + 120_000));
      // Several Spot poll periods (SPOT_POLL_SECONDS, 2 s) with the container running.
      await new Promise((resolve) => setTimeout(resolve, 7000));
      expect(h.imdsReads).not.toContain("spot/instance-action");
      expect(h.imdsReads).not.toContain("events/recommendations/rebalance");
      h.terminate();
      expect(await h.finished()).toBe(0);
      expect(h.imdsReads.filter((p) => p === "instance-life-cycle")).toHaveLength(1);
      expect(h.imdsReads).not.toContain("spot/instance-action");
      expect(h.imdsReads).not.toContain("events/recommendations/rebalance");
      expect(h.supervisorLog()).toContain(`IMDS instance-life-cycle: ${lifeCycle}`);
      const final = last(h.tagReports());
      expect(final).toMatchObject({ final: true, stopRequested: true });
      expect(final?.interruption).toBeUndefined();
      expect(final?.rebalance).toBeUndefined();
      expect(container(final, "app")?.stoppedBecause).toBe("StopRequested");
    },
  );

  it("reports the boot timeline: supervisor start, each pull's start and end, each first start", async () => {
    const h = await run(
      pod([
        { name: "app", image: "fake/ok:1" },
        { name: "side", image: "fake/flaky:1" },
      ]),
      {
        "fake/ok:1": { script: "sleep 0.5; exit 0" },
        "fake/flaky:1": { script: "exit 0", pullFailures: 1 },
      },
    );
    await h.finished();
    const final = last(h.tagReports());
    const at = (t: string | undefined) => Date.parse(t ?? "");
    expect(final?.supervisorStartedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    for (const name of ["app", "side"]) {
      const c = container(final, name);
      expect(at(c?.pullStartedAt)).toBeGreaterThanOrEqual(at(final?.supervisorStartedAt));
      expect(at(c?.pullFinishedAt)).toBeGreaterThanOrEqual(at(c?.pullStartedAt));
      expect(at(c?.firstStartedAt)).toBeGreaterThanOrEqual(at(c?.pullFinishedAt) - 1);
    }
    // The failed first pull of `side` is inside its pull step: it ends with the pull that worked.
    const failed = h.tagReports().find((r) => container(r, "side")?.reason === "ErrImagePull");
    expect(container(failed, "side")?.pullStartedAt).toBe(container(final, "side")?.pullStartedAt);
    expect(container(failed, "side")?.pullFinishedAt).toBeUndefined();
    const timeline = bootTimeline(final as ExitReport);
    expect(timeline.steps.map((s) => `${s.step}:${s.container}`).sort()).toEqual([
      "pull:app",
      "pull:side",
      "start:app",
      "start:side",
    ]);
  });

  it("writes through its own signer first, even where the aws CLI runs (no interpreter to start)", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/ok:1" }]),
      { "fake/ok:1": { script: "exit 0" } },
      {},
      { awsCli: true },
    );
    await h.finished();
    expect(h.awsCalls()).toEqual([]);
    expect(h.tagReports("ec2").map((r) => r.seq)).toEqual([1, 2, 3]);
    expect(h.badSignatures()).toBe(0);
    expect(h.supervisorLog()).toContain(
      "reports: CreateTags through curl + SigV4, the aws CLI when that fails",
    );
    // Nothing failed, so the CLI was never started, not even to ask its version.
    expect(h.awsVersionCalls()).toBe(0);
  });

  it("when its own signer's call fails, writes the same report through the aws CLI, bounded", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/ok:1" }]),
      { "fake/ok:1": { script: "exit 0" } },
      {},
      { awsCli: true, failCreateTags: 100 },
    );
    await h.finished();
    const calls = h.awsCalls();
    // The CLI's default timeouts are 60 s each: bounded, so a stop is never held up by one call.
    expect(calls[0]?.slice(0, 6)).toEqual([
      "--cli-connect-timeout",
      "5",
      "--cli-read-timeout",
      "10",
      "--endpoint-url",
      expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/),
    ]);
    expect(calls[0]?.slice(6, 13)).toEqual([
      "ec2",
      "create-tags",
      "--region",
      "us-east-1",
      "--resources",
      INSTANCE_ID,
      "--tags",
    ]);
    const reports = h.tagReports("aws");
    expect(reports.map((r) => r.seq)).toEqual([1, 2, 3]);
    expect(last(reports)?.final).toBe(true);
    // Asked once whether it runs, at the first failure, though every call failed in subshells.
    expect(h.awsVersionCalls()).toBe(1);
    expect(h.supervisorLog()).toContain(
      "CreateTags through curl + SigV4 failed: the aws CLI takes over",
    );
  });

  it("falls back to its own signer when the aws on PATH cannot run", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/ok:1" }]),
      { "fake/ok:1": { script: "exit 0" } },
      {},
      { awsCli: "broken" },
    );
    await h.finished();
    expect(h.tagReports().map((r) => r.seq)).toEqual([1, 2, 3]);
    expect(h.supervisorLog()).toContain("reports: CreateTags through curl + SigV4");
  });

  it("retries a throttled CreateTags through its own SigV4 signer; a newer report replaces an older one's retries", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/ok:1" }]),
      { "fake/ok:1": { script: "exit 0" } },
      {},
      { failCreateTags: 3 },
    );
    await h.finished();
    const seqs = h.tagReports().map((r) => r.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(last(h.tagReports())).toMatchObject({ seq: 3, final: true });
    expect(h.badSignatures()).toBe(0);
  });

  it("a report throttled at boot does not hold up the first container's start", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/server:1" }], { restartPolicy: "Always" }),
      { "fake/server:1": { script: "while :; do sleep 0.1; done" } },
      { report: { retryAttempts: 8, retryBaseMs: 4000 } },
      { failCreateTags: 4 },
    );
    await h.until(() => h.dockerCalls("start").length > 0);
    // The container runs while every CreateTags so far was refused: it did not wait for them.
    expect(h.tagWrites).toEqual([]);
    h.terminate();
    expect(await h.finished()).toBe(0);
  });

  it("passes hostile strings byte for byte and fills the downward API", async () => {
    const nasty = [
      "it's",
      '"double"',
      "$(touch /tmp/pwned)",
      "`id`",
      "line1\nline2",
      "--leading-dash",
      "-e",
      "tab\there",
      "ünïcødé ✓",
      "\\back\\slash",
      "*",
      "",
      "a b  c",
    ];
    const h = await run(
      pod([
        {
          name: "app",
          image: "fake/echo:1",
          command: ["/bin/recorder", ...nasty],
          args: nasty,
          env: [
            ...nasty.map((value, i) => ({ name: `NASTY_${i}`, value })),
            { name: "NODE_IP", valueFrom: { fieldRef: { fieldPath: "status.hostIP" } } },
            { name: "MY_NS", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
          ],
        },
      ]),
      {
        "fake/echo:1": {
          script: 'printf "%s\\0" "$@" >"$FAKE_CTR/argv.out"; env -0 >"$FAKE_CTR/env.out"',
        },
      },
    );
    await h.finished();
    const base = h.workloadDir();
    const argv = readFileSync(join(base, "argv.out"), "utf8").split("\0").slice(0, -1);
    expect(argv).toEqual([...nasty, ...nasty]);
    expect(readFileSync(join(base, "entrypoint"), "utf8")).toBe("/bin/recorder");
    const env = new Map(
      readFileSync(join(base, "env.out"), "utf8")
        .split("\0")
        .slice(0, -1)
        .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
    );
    for (const [i, value] of nasty.entries()) expect(env.get(`NASTY_${i}`)).toBe(value);
    expect(env.get("NODE_IP")).toBe(HOST_IP);
    expect(env.get("MY_NS")).toBe("batch");
    expect(existsSync("/tmp/pwned")).toBe(false);
  });

  it("wraps a container with agents in the shim, keeping the image's ENTRYPOINT and CMD", async () => {
    const h = await run(
      pod([{ name: "app", image: "fake/agented:1" }]),
      {
        "fake/agented:1": {
          script: "exit 0",
          entrypoint: ["/docker-entrypoint.sh", 'it\'s "quoted" $(x)', "no\u00a0break"],
          // docker inspect's %q escapes these (\u2028, \U0010fffd, \x01): decoded as UTF-8, not C.
          cmd: ["serve", "--port=80", "line\u2028sep", "ünï ✓ \u{10fffd}", "ctl\x01\t"],
        },
      },
      {
        agents: [
          {
            name: "sandd",
            command: ["/opt/sandd/sandd", "--socket=/run/sandd.sock"],
            mounts: [{ hostPath: "/opt/sandd", containerPath: "/opt/sandd" }],
          },
        ],
      },
    );
    await h.finished();
    const [create] = h.dockerCalls("create");
    expect(create).toContain("--entrypoint=/bin/sh");
    expect(create).toContain(
      "--mount=type=bind\\,source=/usr/local/lib/nebula/shim-0.sh\\,target=/.nebula/shim\\,readonly",
    );
    expect(create).toContain(
      "--mount=type=bind\\,source=/opt/sandd\\,target=/opt/sandd\\,readonly",
    );
    const argv = readFileSync(join(h.workloadDir(), "argv"), "utf8").split("\0").slice(0, -1);
    expect(argv).toEqual([
      "/.nebula/shim",
      "/docker-entrypoint.sh",
      'it\'s "quoted" $(x)',
      "no\u00a0break",
      "serve",
      "--port=80",
      "line\u2028sep",
      "ünï ✓ \u{10fffd}",
      "ctl\x01\t",
    ]);
    const shim = readFileSync(join(h.dir, "lib", "shim-0.sh"), "utf8");
    expect(shim).toContain("'/opt/sandd/sandd' '--socket=/run/sandd.sock' &\nexec \"$@\"\n");
  });
});

// spot_check in real bash, the installed supervisor sourced (without `main "$@"`) with an IMDS
// of test functions: what each poll reads, and LIFE_CYCLE after it.
describe("spot_check: the instance's life cycle, read once", () => {
  /**
   * Runs one poll per answer, IMDS `instance-life-cycle` answering it at that poll (`null`: 404);
   * returns each poll's reads then `|` and LIFE_CYCLE, and the log lines.
   */
  function polls(answers: readonly (string | null)[]): { reads: string[][]; log: string[] } {
    const dir = mkdtempSync(join(tmpdir(), "nebula-life-cycle-"));
    try {
      const script = `
. "$T/lib.sh"
RUN=$T INSTANCE_ID=i-1
log() { printf '%s\\n' "$*" >>"$T/log"; }
imds_to() {
  printf ' %s' "$2" >>"$T/reads"
  [ "$2" = instance-life-cycle ] && [ -e "$T/answer" ] && cp "$T/answer" "$1"
}
answer() { if [ "$1" = null ]; then rm -f "$T/answer"; else printf '%s' "$1" >"$T/answer"; fi; }
${answers
  .map(
    (a) =>
      `answer ${a === null ? "null" : `'${a}'`}; SPOT_NEXT=0; spot_check; printf ' | %s\\n' "$LIFE_CYCLE" >>"$T/reads"`,
  )
  .join("\n")}
`;
      execFileSync("bash", ["-c", `cat >"$T/lib.sh"; ${script}`], {
        input: supervisorScript().replace(/\nmain "\$@"\n$/, "\n"),
        env: { ...process.env, T: dir },
        encoding: "utf8",
      });
      const reads = readFileSync(join(dir, "reads"), "utf8").trim().split("\n");
      const log = existsSync(join(dir, "log"))
        ? readFileSync(join(dir, "log"), "utf8").trim().split("\n")
        : [];
      return { reads: reads.map((line) => line.trim().split(/\s+/)), log };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const SPOT = ["events/recommendations/rebalance", "spot/instance-action"];

  it.each([
    ["on-demand", "on-demand"],
    ["scheduled", "scheduled"],
    ["on-demand\n", "on-demand"],
  ])("%j: reads it once and no Spot path ever", (answer, said) => {
    const { reads, log } = polls([answer, "spot", "spot"]);
    expect(reads).toEqual([
      ["instance-life-cycle", "|", said],
      ["|", said],
      ["|", said],
    ]);
    expect(log).toEqual([`IMDS instance-life-cycle: ${said}`]);
  });

  it.each(["spot", "capacity-block"])(
    "%j: reads it once and the Spot paths at every poll",
    (answer) => {
      const { reads, log } = polls([answer, "on-demand", "on-demand"]);
      expect(reads).toEqual([
        ["instance-life-cycle", ...SPOT, "|", answer],
        [...SPOT, "|", answer],
        [...SPOT, "|", answer],
      ]);
      expect(log).toEqual([`IMDS instance-life-cycle: ${answer}`]);
    },
  );

  it("unreadable (404, or an empty answer): reads the Spot paths, and asks again at every poll until it is told", () => {
    const { reads, log } = polls([null, "", "on-demand", "spot"]);
    expect(reads).toEqual([
      // Unreadable: the Spot paths as on a Spot host.
      ["instance-life-cycle", ...SPOT, "|", "-"],
      // An empty answer is no answer.
      ["instance-life-cycle", ...SPOT, "|", "-"],
      ["instance-life-cycle", "|", "on-demand"],
      ["|", "on-demand"],
    ]);
    // Said once each.
    expect(log).toEqual([
      "IMDS instance-life-cycle: unreadable",
      "IMDS instance-life-cycle: on-demand",
    ]);
  });
});
