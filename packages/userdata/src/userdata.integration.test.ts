/**
 * The generated user-data against REAL containers: podman + runc as the host's docker CLI (through
 * src/testing/podman/docker), a busybox-static image made offline with `podman import`, and the
 * same IMDS/EC2 endpoint and systemctl/shutdown stand-ins as the unit tests.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  CloudWatchClient,
  GetMetricStatisticsCommand,
  ListMetricsCommand,
} from "@aws-sdk/client-cloudwatch";
import {
  CloudWatchLogsClient,
  CreateLogGroupCommand,
  DescribeLogStreamsCommand,
  GetLogEventsCommand,
} from "@aws-sdk/client-cloudwatch-logs";
import { DescribeTagsCommand, EC2Client, RunInstancesCommand } from "@aws-sdk/client-ec2";
import { PutParameterCommand, SSMClient } from "@aws-sdk/client-ssm";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import {
  type ContainerReport,
  decodeReportTags,
  type ExitReport,
  encodeReportTags,
  toInstanceState,
  toPodStatus,
} from "@nebula/state-mapping";
import {
  type InstanceHosts,
  MOTO_CREDENTIALS,
  type Moto,
  NEBULA_INSTANCE_PROFILE,
  startInstanceHosts,
  startMoto,
} from "@nebula/test-peers";
import fc from "fast-check";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  type PodSources,
  podTokenParameterName,
  podTokenParameterValue,
  podTokenRequests,
  type RenderOptionsInput,
  renderUserData,
} from "./index.js";
import { expand as expandKubernetesReferences } from "./pod.js";
import { containerLogStream } from "./render.js";
import { INSTANCE_ID, TestHost } from "./testing/host.js";
import { reapConmons } from "./testing/reap.js";

// A podman root of this run's own: two runs on one machine (two clones, two CI jobs) never share
// containers, network namespaces or images.
const ROOT = mkdtempSync(join(tmpdir(), "nebula-userdata-podman-"));
const IMAGE = "localhost/nebula-busybox:1";
const IMAGE_EP = "localhost/nebula-busybox-entrypoint:3";
const podman = (...args: string[]) =>
  execFileSync(
    "podman",
    [
      "--root",
      join(ROOT, "storage"),
      "--runroot",
      join(ROOT, "run"),
      "--runtime",
      "/usr/sbin/runc",
      "--cgroup-manager=cgroupfs",
      "--events-backend=file",
      ...args,
    ],
    {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    },
  );

const FAST: RenderOptionsInput = {
  backoff: { initialSeconds: 1, maxSeconds: 2, resetAfterSeconds: 600 },
  imagePull: { maxAttempts: 2 },
  report: { retryAttempts: 8, retryBaseMs: 50 },
  // The Pod sandbox: the busybox image asleep (this sandbox cannot pull registry.k8s.io/pause).
  sandbox: { image: IMAGE, command: ["sleep", "2147483647"] },
};

beforeAll(() => {
  mkdirSync(ROOT, { recursive: true });
  const have = spawnSync("podman", [
    "--root",
    join(ROOT, "storage"),
    "--runroot",
    join(ROOT, "run"),
    "image",
    "exists",
    IMAGE_EP,
  ]);
  if (have.status === 0) return;
  // A busybox-static rootfs: /bin/busybox plus one symlink per applet (what `busybox --install -s` makes).
  const rootfs = mkdtempSync(join(tmpdir(), "nebula-busybox-"));
  mkdirSync(join(rootfs, "bin"));
  mkdirSync(join(rootfs, "tmp"));
  writeFileSync(join(rootfs, "bin/busybox"), readFileSync("/bin/busybox"), { mode: 0o755 });
  for (const applet of execFileSync("/bin/busybox", ["--list"], { encoding: "utf8" }).split("\n")) {
    if (applet && applet !== "busybox") symlinkSync("busybox", join(rootfs, "bin", applet));
  }
  // The recorder: writes the exact argv and environment it was exec'd with.
  writeFileSync(
    join(rootfs, "bin/recorder"),
    "#!/bin/sh\ncat /proc/$$/cmdline >/out/argv\ncat /proc/$$/environ >/out/env\n",
  );
  chmodSync(join(rootfs, "bin/recorder"), 0o755);
  execFileSync("tar", ["-C", rootfs, "-cf", join(ROOT, "rootfs.tar"), "."]);
  podman("import", "--change", "ENV PATH=/bin", join(ROOT, "rootfs.tar"), IMAGE);
  podman(
    "import",
    "--change",
    "ENV PATH=/bin",
    "--change",
    'ENTRYPOINT ["/bin/sh", "-c"]',
    "--change",
    'CMD ["i=0; while [ ! -e /out/agent ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; echo $$ >/out/workload-pid; echo from-image\u00a0cmd >/out/cmd"]',
    join(ROOT, "rootfs.tar"),
    IMAGE_EP,
  );
  rmSync(rootfs, { recursive: true, force: true });
}, 300_000);

const hosts: TestHost[] = [];
const outs: string[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
  for (const dir of outs.splice(0)) rmSync(dir, { recursive: true, force: true });
  // Podman removes a Pod sandbox only after the containers that joined it: it can take two passes.
  for (let pass = 1; ; pass++) {
    try {
      podman("rm", "-af", "-t", "0");
      break;
    } catch (error) {
      if (pass >= 3) throw error;
    }
  }
  const missed = reapConmons(ROOT);
  if (missed.length > 0) {
    throw new Error(`podman rm -af left these running (now killed):\n${missed.join("\n")}`);
  }
});
afterAll(() => {
  const base = ["--root", join(ROOT, "storage"), "--runroot", join(ROOT, "run")];
  spawnSync("podman", [...base, "rm", "-af", "-t", "0"]);
  const missed = reapConmons(ROOT);
  // Not `podman system reset`: with a root of its own it still wipes what every root shares, the
  // libpod state in /run/libpod and the networks in /etc/containers/networks, so podman thinks
  // the machine rebooted and forgets the containers other suites are running at the same time
  // (found as orphaned conmons and network namespaces after a CI run).
  spawnSync("podman", [...base, "rmi", "-af"]);
  rmSync(ROOT, { recursive: true, force: true });
  if (missed.length > 0) {
    throw new Error(`podman rm -af left these running (now killed):\n${missed.join("\n")}`);
  }
});

function outDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "nebula-userdata-out-"));
  chmodSync(dir, 0o777);
  outs.push(dir);
  return dir;
}

function pod(containers: V1Container[], out: string, spec: Partial<V1Pod["spec"]> = {}): V1Pod {
  return {
    metadata: { name: "it", namespace: "test", uid: "uid-it" },
    spec: {
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 5,
      containers: containers.map((c) => ({
        ...c,
        volumeMounts: [{ name: "out", mountPath: "/out" }],
      })),
      volumes: [{ name: "out", hostPath: { path: out } }],
      ...spec,
    },
  };
}

async function run(p: V1Pod, options: RenderOptionsInput = {}) {
  const rendered = renderUserData(p, { ...FAST, ...options });
  if (!rendered.ok) throw rendered.error;
  const h = new TestHost({ images: {}, docker: "podman", env: { NEBULA_PODMAN_ROOT: ROOT } });
  hosts.push(h);
  expect(await h.boot(rendered.value)).toBe(0);
  return h;
}

const last = (reports: ExitReport[]) => reports[reports.length - 1];
const container = (r: ExitReport | undefined, name: string): ContainerReport | undefined =>
  r?.containers.find((c) => c.name === name);
const nul = (file: string) => readFileSync(file, "utf8").split("\0").slice(0, -1);

describe("user-data with real podman + runc", () => {
  it("random strings in command, args and env reach the container byte for byte", async () => {
    const text = fc
      .oneof(
        fc.string({ unit: "binary-ascii", maxLength: 24 }),
        fc.string({ unit: "grapheme", maxLength: 12 }),
        fc.constantFrom("$(HOME)", "$$(X)", "`id`", "-", "--x", "'\"", "a\nb", ""),
      )
      .filter((s) => !s.includes("\0"));
    await fc.assert(
      fc.asyncProperty(
        fc.array(text, { maxLength: 6 }),
        fc.array(text, { maxLength: 6 }),
        fc.array(text, { minLength: 1, maxLength: 6 }),
        async (command, args, values) => {
          const out = outDir();
          const env = values.map((value, i) => ({ name: `PROP_${i}`, value }));
          const h = await run(
            pod(
              [{ name: "app", image: IMAGE, command: ["/bin/recorder", ...command], args, env }],
              out,
            ),
          );
          await h.finished(120_000);
          const known = new Map<string, string>();
          for (const { name, value } of env)
            known.set(name, expandKubernetesReferences(value, known));
          const argv = nul(join(out, "argv"));
          expect(argv.slice(2)).toEqual(
            [...command, ...args].map((s) => expandKubernetesReferences(s, known)),
          );
          const got = new Map(
            nul(join(out, "env")).map((kv) => [
              kv.slice(0, kv.indexOf("=")),
              kv.slice(kv.indexOf("=") + 1),
            ]),
          );
          for (const [name, value] of known) expect(got.get(name)).toBe(value);
          expect(container(last(h.tagReports()), "app")).toMatchObject({
            state: "terminated",
            exitCode: 0,
            reason: "Completed",
          });
          await h.close();
        },
      ),
      { numRuns: 8 },
    );
  });

  it("captures exit codes, signals and the termination message from podman inspect, with real time stamps", async () => {
    const out = outDir();
    const h = await run(
      pod(
        [
          {
            name: "fails",
            image: IMAGE,
            command: ["/bin/sh", "-c", "echo 'bad config' >/dev/termination-log; exit 3"],
          },
          // PID 1 of a PID namespace ignores its own SIGKILL; a child is killed and PID 1 exits 128+9.
          {
            name: "killed",
            image: IMAGE,
            command: ["/bin/sh", "-c", "sleep 100 & kill -KILL $!; wait $!"],
          },
          {
            name: "logs",
            image: IMAGE,
            command: ["/bin/sh", "-c", "echo one; echo two; exit 1"],
            terminationMessagePolicy: "FallbackToLogsOnError",
          },
        ],
        out,
      ),
    );
    await h.finished(120_000);
    const final = last(h.tagReports());
    expect(final?.final).toBe(true);
    expect(container(final, "fails")).toMatchObject({
      state: "terminated",
      exitCode: 3,
      reason: "Error",
    });
    expect(Buffer.from(container(final, "fails")?.messageB64 ?? "", "base64").toString()).toBe(
      "bad config\n",
    );
    expect(container(final, "killed")).toMatchObject({ exitCode: 137, signal: 9, reason: "Error" });
    expect(Buffer.from(container(final, "logs")?.messageB64 ?? "", "base64").toString()).toBe(
      "one\ntwo\n",
    );
    const times = container(final, "fails");
    expect(times?.startedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(Date.parse(times?.finishedAt ?? "")).toBeGreaterThanOrEqual(
      Date.parse(times?.startedAt ?? ""),
    );
    expect(h.poweredOff()).toBe(true);
  });

  it("reports an image that cannot be pulled, then gives up", async () => {
    const h = await run(pod([{ name: "app", image: "localhost:1/nebula/absent:1" }], outDir()));
    await h.finished(120_000);
    const reasons = h.tagReports().map((r) => container(r, "app")?.reason);
    expect(reasons).toEqual(["ContainerCreating", "ErrImagePull", "ImagePullBackOff"]);
    expect(last(h.tagReports())?.final).toBe(true);
  });

  it("restarts a crashing container with back-off up to the cap", async () => {
    const h = await run({
      ...pod([{ name: "app", image: IMAGE, command: ["/bin/sh", "-c", "exit 1"] }], outDir(), {
        restartPolicy: "Always",
      }),
      metadata: { name: "it", annotations: { "nebula.dev/restart-limit": "2" } },
    });
    await h.finished(120_000);
    const final = last(h.tagReports());
    expect(container(final, "app")).toMatchObject({
      state: "terminated",
      exitCode: 1,
      restarts: 2,
      last: { exitCode: 1, reason: "Error" },
    });
    // The first crash restarts at once; only the second waits in CrashLoopBackOff.
    expect(
      h.tagReports().filter((r) => container(r, "app")?.reason === "CrashLoopBackOff"),
    ).toHaveLength(1);
  });

  it("kills a hung container whose liveness probe fails, restarts it with back-off and reports why", async () => {
    const h = await run({
      ...pod(
        [
          {
            name: "app",
            image: IMAGE,
            // PID 1 without a handler ignores SIGTERM: a hang only the grace period's SIGKILL ends.
            command: ["/bin/sleep", "1000"],
            livenessProbe: {
              exec: { command: ["/bin/sh", "-c", "echo backend stuck; exit 1"] },
              periodSeconds: 1,
              failureThreshold: 2,
              terminationGracePeriodSeconds: 1,
            },
          },
        ],
        outDir(),
        { restartPolicy: "Always" },
      ),
      metadata: { name: "it", annotations: { "nebula.dev/restart-limit": "2" } },
    });
    await h.finished(120_000);
    const reports = h.tagReports();
    const app = container(last(reports), "app");
    expect(app).toMatchObject({
      state: "terminated",
      exitCode: 137,
      reason: "Error",
      signal: 9,
      restarts: 2,
      restartLimitReached: true,
    });
    const message = Buffer.from(app?.messageB64 ?? "", "base64").toString("utf8");
    expect(message).toContain("Liveness probe failed: backend stuck");
    expect(message).toContain("Container app failed liveness probe, will be restarted");
    expect(reports.filter((r) => container(r, "app")?.reason === "CrashLoopBackOff")).toHaveLength(
      1,
    );
  });

  it("runs preStop in the container before the stop signal: the container sees its effect", async () => {
    const out = outDir();
    const h = await run(
      pod(
        [
          {
            name: "app",
            image: IMAGE,
            // On SIGTERM the workload records what the preStop hook left for it.
            command: [
              "/bin/sh",
              "-c",
              "trap 'cat /tmp/drained >/out/seen; exit 0' TERM; while :; do sleep 1; done",
            ],
            lifecycle: {
              preStop: { exec: { command: ["/bin/sh", "-c", "echo drained >/tmp/drained"] } },
            },
          },
        ],
        out,
      ),
    );
    await h.until(() => h.tagReports().some((r) => container(r, "app")?.state === "running"));
    h.terminate();
    await h.finished(120_000);
    expect(readFileSync(join(out, "seen"), "utf8")).toBe("drained\n");
    expect(container(last(h.tagReports()), "app")).toMatchObject({
      state: "terminated",
      exitCode: 0,
      stoppedBecause: "StopRequested",
    });
  });

  it("a readiness httpGet probe that fails for a while: READY 0/1, then 1/1 through toPodStatus", async () => {
    const port = 20000 + Math.floor(Math.random() * 20000);
    const p = pod(
      [
        {
          name: "web",
          image: IMAGE,
          command: [
            "/bin/sh",
            "-c",
            `sleep 3; mkdir -p /tmp/www; echo ok >/tmp/www/healthz; httpd -p ${port} -h /tmp/www; sleep 14`,
          ],
          ports: [{ name: "http", containerPort: port }],
          readinessProbe: {
            httpGet: { port: "http", path: "/healthz" },
            periodSeconds: 1,
            failureThreshold: 1,
          },
        },
      ],
      outDir(),
    );
    const h = await run(p);
    await h.finished(120_000);
    const running = h.tagReports().filter((r) => container(r, "web")?.state === "running");
    const before = running.find((r) => container(r, "web")?.ready === false);
    const after = running.find((r) => container(r, "web")?.ready === true);
    expect(before).toBeDefined();
    expect(after).toBeDefined();
    const ready = (r: ExitReport) => {
      const state = toInstanceState(
        {
          InstanceId: INSTANCE_ID,
          State: { Name: "running" },
          Tags: Object.entries(encodeReportTags(r)).map(([Key, Value]) => ({ Key, Value })),
        },
        { now: new Date(r.time) },
      );
      const status = toPodStatus(p, state, { now: new Date(r.time) });
      const n = status.containerStatuses?.filter((c) => c.ready).length ?? 0;
      return `${n}/${status.containerStatuses?.length ?? 0} ${status.conditions?.find((c) => c.type === "Ready")?.status}`;
    };
    expect(ready(before as ExitReport)).toBe("0/1 False");
    expect(ready(after as ExitReport)).toBe("1/1 True");
    expect(container(last(h.tagReports()), "web")).toMatchObject({ reason: "Completed" });
  });

  it("on SIGTERM stops the container with docker stop -t <grace> and writes the final report", async () => {
    const h = await run(
      pod(
        [
          {
            name: "app",
            image: IMAGE,
            command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.2; done"],
          },
        ],
        outDir(),
        { restartPolicy: "Always" },
      ),
    );
    await h.until(
      () => h.tagReports().some((r) => container(r, "app")?.state === "running"),
      120_000,
    );
    h.terminate();
    expect(await h.finished(120_000)).toBe(0);
    expect(container(last(h.tagReports()), "app")).toMatchObject({
      state: "terminated",
      exitCode: 0,
      reason: "Completed",
    });
    expect(last(h.tagReports())).toMatchObject({ final: true, stopRequested: true });
    expect(h.poweredOff()).toBe(false);
  });

  it("runs agents through the shim: the workload is PID 1 with the image's ENTRYPOINT and CMD, and the agent dies with it", async () => {
    const out = outDir();
    const h = await run(pod([{ name: "app", image: IMAGE_EP }], out), {
      agents: [
        {
          name: "sandd",
          command: ["/bin/sh", "-c", "echo started >/out/agent; exec sleep 987654"],
        },
      ],
    });
    await h.finished(120_000);
    expect(readFileSync(join(out, "workload-pid"), "utf8").trim()).toBe("1");
    // The CMD holds U+00A0, which `docker inspect` prints as \\u00a0 (Go %q).
    expect(readFileSync(join(out, "cmd"), "utf8")).toBe("from-image\u00a0cmd\n");
    expect(existsSync(join(out, "agent"))).toBe(true);
    expect(spawnSync("pgrep", ["-f", "sleep 987654"]).status).toBe(1);
    expect(container(last(h.tagReports()), "app")).toMatchObject({
      state: "terminated",
      exitCode: 0,
    });
  });

  it("reports a real memory-limit kill as OOMKilled, also where the runtime does not flag it", async () => {
    // The kernel kills the container in its memory cgroup. On this cgroup-v1 sandbox podman 4.3
    // (runc, cgroupfs) leaves OOMKilled=false in inspect; the supervisor must still say OOMKilled,
    // from the cgroup's OOM record (or the kernel's record of it, which outlives the cgroup).
    const cgroup = existsSync("/sys/fs/cgroup/cgroup.controllers") ? "v2" : "v1";
    const h = await run(
      pod(
        [
          {
            name: "app",
            image: IMAGE,
            command: ["/bin/tail", "/dev/zero"],
            resources: { limits: { memory: "32Mi" } },
          },
        ],
        outDir(),
      ),
    );
    await h.finished(120_000);
    const app = container(last(h.tagReports()), "app");
    const id = (app?.containerID ?? "").replace("docker://", "");
    const flagged = podman("inspect", "--format", "{{.State.OOMKilled}}", id).trim();
    expect({ cgroup, app }).toMatchObject({
      cgroup: expect.stringMatching(/^v[12]$/),
      app: { state: "terminated", exitCode: 137, reason: "OOMKilled" },
    });
    expect(app?.signal).toBeUndefined();
    // Say which path this run exercised (the runtime's flag, or the supervisor's own reading).
    expect(["true", "false"]).toContain(flagged);
  });
});

describe("the Parameter Store delivery: real bash, real podman, moto's SSM through SigV4", () => {
  let moto: Moto;
  let ssm: SSMClient;
  beforeAll(async () => {
    moto = await startMoto();
    ssm = new SSMClient({
      endpoint: moto.endpoint,
      region: moto.region,
      credentials: MOTO_CREDENTIALS,
    });
  }, 120_000);
  afterAll(async () => {
    ssm?.destroy();
    await moto?.stop();
  });

  // Values a shell or a parser would trip on, and bytes that are not text.
  const SECRET = "s3cr3t-'\"$(id)`id`\\n\u00e9-end";
  const CERT = Buffer.from([0, 1, 2, 250, 251, 252, 10, 13, 0x27]);
  const sources: PodSources = {
    configMaps: {
      settings: { data: { MODE: "blue", LEVEL: "3", "bad name": "skipped" } },
      files: { data: { "app.conf": "listen 8080\n" } },
    },
    secrets: {
      db: {
        data: {
          password: Buffer.from(SECRET).toString("base64"),
          "tls.bin": CERT.toString("base64"),
        },
      },
    },
  };

  /** A host with real podman whose SSM calls go to moto. */
  function ssmHost(): TestHost {
    const h = new TestHost({
      images: {},
      docker: "podman",
      env: { NEBULA_PODMAN_ROOT: ROOT, AWS_ENDPOINT_URL_SSM: moto.endpoint },
    });
    hosts.push(h);
    return h;
  }

  async function put(parameters: readonly { name: string; value: string }[]) {
    for (const p of parameters)
      await ssm.send(
        new PutParameterCommand({
          Name: p.name,
          Value: p.value,
          Type: "SecureString",
          Overwrite: true,
        }),
      );
  }

  it("env from a Secret key and a ConfigMap (envFrom with a prefix), Secret and ConfigMap files, byte for byte; no secret in user-data, console or report", async () => {
    const out = outDir();
    const p = pod(
      [
        {
          name: "app",
          image: IMAGE,
          command: [
            "sh",
            "-c",
            "cat /proc/self/environ >/out/env; cp /secret/pw /out/pw; cp /secret/tls.bin /out/tls; stat -c %a /secret/pw >/out/mode; cp /etc/app.conf /out/conf",
          ],
          env: [
            { name: "DB_PASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } },
            { name: "URL", value: "db://$(CFG_MODE)" },
            {
              name: "GONE",
              valueFrom: { configMapKeyRef: { name: "nope", key: "x", optional: true } },
            },
          ],
          envFrom: [{ prefix: "CFG_", configMapRef: { name: "settings" } }],
        },
      ],
      out,
    );
    p.metadata = { ...p.metadata, uid: "uid-parameters-1" };
    p.spec?.containers[0]?.volumeMounts?.push(
      { name: "secret", mountPath: "/secret" },
      { name: "conf", mountPath: "/etc/app.conf", subPath: "app.conf" },
    );
    p.spec?.volumes?.push(
      {
        name: "secret",
        secret: {
          secretName: "db",
          defaultMode: 0o400,
          items: [
            { key: "password", path: "pw" },
            { key: "tls.bin", path: "tls.bin" },
          ],
        },
      },
      { name: "conf", configMap: { name: "files" } },
    );
    const rendered = renderUserData(p, { ...FAST, cluster: "it", delivery: "parameters" }, sources);
    if (!rendered.ok) throw rendered.error;
    const { parameters, sharedParameters, script, notices } = rendered.value;
    expect(parameters.map((x) => x.name)).toEqual(["/nebula/it/pods/uid-parameters-1/0"]);
    expect(notices.map((n) => n.reason).sort()).toEqual([
      "InvalidEnvironmentVariableNames",
      "OptionalConfigMapNotFound",
    ]);
    // The user-data names the parameters; it holds nothing of the Pod's.
    expect(script).toContain("/nebula/it/pods/uid-parameters-1/0");
    for (const leak of ["s3cr3t", "listen 8080", "blue", "DB_PASSWORD", "/proc/self/environ"])
      expect(script).not.toContain(leak);
    // The user-data is a bootstrap: the supervisor comes from its own (shared) parameters too.
    expect(sharedParameters.length).toBeGreaterThan(0);
    expect(rendered.value.bytes).toBeLessThanOrEqual(8192);
    await put([...sharedParameters, ...parameters]);

    const h = ssmHost();
    expect(await h.boot(rendered.value)).toBe(0);
    expect(await h.finished(120_000)).toBe(0);
    const env = new Map(
      nul(join(out, "env")).map((kv) => [
        kv.slice(0, kv.indexOf("=")),
        kv.slice(kv.indexOf("=") + 1),
      ]),
    );
    expect(env.get("DB_PASSWORD")).toBe(SECRET);
    expect(env.get("CFG_MODE")).toBe("blue");
    expect(env.get("CFG_LEVEL")).toBe("3");
    expect(env.get("URL")).toBe("db://blue");
    expect(env.has("GONE")).toBe(false);
    expect(readFileSync(join(out, "pw"), "utf8")).toBe(SECRET);
    expect(readFileSync(join(out, "tls"))).toEqual(CERT);
    expect(readFileSync(join(out, "mode"), "utf8").trim()).toBe("400");
    expect(readFileSync(join(out, "conf"), "utf8")).toBe("listen 8080\n");
    const report = last(h.consoleReports());
    expect(container(report, "app")).toMatchObject({ state: "terminated", exitCode: 0 });
    const seen = [h.consoleText(), h.supervisorLog(), JSON.stringify(h.tagReports())].join("\n");
    expect(seen).not.toContain("s3cr3t");
    // Nothing decrypted was left on disk: pod.sh lives in the memory-backed /run/nebula only.
    expect(readdirSync(join(h.dir, "state"), { recursive: true }).join(" ")).not.toContain(
      "pod.sh",
    );
  });

  // Issue #34: the kube-api-access-* volume served as the kubelet serves it. The token comes from
  // the Pod's token parameter (<prefix>t), which the test writes and overwrites as the controller
  // does when it renews a token; `tokenPollSeconds: 2` (a render option, default a tenth of the
  // token's life) makes the host read it every 2 s instead of every 6 minutes.
  it("serves the service-account token, CA and namespace; a renewed token reaches the running container without a restart; a malformed value keeps the old one", async () => {
    const out = outDir();
    const dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    const T1 = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLTE";
    const T2 = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjIifQ.eyJzdWIiOiJzeXN0ZW06c2EiLCJuIjoyfQ.c2ln-_2";
    const p = pod(
      [
        {
          name: "app",
          image: IMAGE,
          command: [
            "sh",
            "-c",
            // Started once (the starts file); copies what it reads every 0.2 s until told to stop.
            `echo $$ >>/out/starts; cp ${dir}/ca.crt /out/ca; cp ${dir}/namespace /out/namespace; stat -c %a ${dir}/token >/out/mode
while [ ! -e /out/stop ]; do cat ${dir}/token >/out/seen.part && mv /out/seen.part /out/seen; sleep 0.2; done`,
          ],
        },
      ],
      out,
    );
    p.metadata = { ...p.metadata, uid: "uid-tokens-1" };
    p.spec?.containers[0]?.volumeMounts?.push({
      name: "kube-api-access-k8x2p",
      mountPath: dir,
      readOnly: true,
    });
    // The volume exactly as the API server injects it.
    p.spec?.volumes?.push({
      name: "kube-api-access-k8x2p",
      projected: {
        defaultMode: 420,
        sources: [
          { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
          { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
          {
            downwardAPI: {
              items: [
                {
                  path: "namespace",
                  fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" },
                },
              ],
            },
          },
        ],
      },
    });
    const CA =
      "-----BEGIN CERTIFICATE-----\nMIIC/zCCAeegAwIBAgIBADANBgkqhkiG9w0BAQsFADAVMRMwEQYDVQQD\n-----END CERTIFICATE-----\n";
    const rendered = renderUserData(
      p,
      { ...FAST, cluster: "it", delivery: "parameters", tokenPollSeconds: 2 },
      {
        ...sources,
        configMaps: { ...sources.configMaps, "kube-root-ca.crt": { data: { "ca.crt": CA } } },
      },
    );
    if (!rendered.ok) throw rendered.error;
    expect(podTokenRequests(p)).toEqual([
      { key: "0", subject: "pod", audience: undefined, expirationSeconds: 3607 },
    ]);
    const tokenParameter = podTokenParameterName("it", "uid-tokens-1");
    const tokens = (value: string) => put([{ name: tokenParameter, value }]);
    const value = (token: string) => {
      const v = podTokenParameterValue([{ key: "0", token }]);
      if (!v.ok) throw v.error;
      return v.value;
    };
    await put([...rendered.value.sharedParameters, ...rendered.value.parameters]);
    await tokens(value(T1));

    const h = ssmHost();
    expect(await h.boot(rendered.value)).toBe(0);
    const seen = () =>
      existsSync(join(out, "seen")) ? readFileSync(join(out, "seen"), "utf8") : "";
    await h.until(() => seen() === T1, 120_000);
    expect(readFileSync(join(out, "ca"), "utf8")).toBe(CA);
    expect(readFileSync(join(out, "namespace"), "utf8")).toBe("test");
    expect(readFileSync(join(out, "mode"), "utf8").trim()).toBe("644");

    // The controller renews the token: the same container reads the new one within a poll or two.
    await tokens(value(T2));
    await h.until(() => seen() === T2, 30_000);
    // A value that is not key:token pairs is ignored whole: the file keeps T2.
    await tokens("0:not-a-token 1:x.y.z");
    await h.until(() => h.supervisorLog().includes("not <key>:<token> pairs"), 30_000);
    await new Promise((r) => setTimeout(r, 4_500));
    expect(seen()).toBe(T2);
    // Said once for the streak of failures, not at every poll.
    expect(h.supervisorLog().split("cannot read the service-account tokens").length - 1).toBe(1);

    writeFileSync(join(out, "stop"), "");
    expect(await h.finished(120_000)).toBe(0);
    expect(readFileSync(join(out, "starts"), "utf8").trim().split("\n")).toHaveLength(1);
    expect(container(last(h.tagReports()), "app")).toMatchObject({
      state: "terminated",
      exitCode: 0,
      restarts: 0,
    });
    const said = [h.consoleText(), h.supervisorLog(), JSON.stringify(h.tagReports())].join("\n");
    for (const token of [T1, T2]) {
      expect(said).not.toContain(token);
      expect(rendered.value.script).not.toContain(token);
    }
    // The token files live in memory-backed /run/nebula, never on disk.
    for (const file of readdirSync(join(h.dir, "state"), {
      recursive: true,
      withFileTypes: true,
    })) {
      if (!file.isFile()) continue;
      const text = readFileSync(join(file.parentPath, file.name), "utf8");
      for (const token of [T1, T2]) expect(text, file.name).not.toContain(token);
    }
    expect(readFileSync(join(h.dir, "run/volumes/kube-api-access-k8x2p/token"), "utf8")).toBe(T2);
  });

  it("without its token parameter the host starts no container: it says why on the console and powers off", async () => {
    const out = outDir();
    const p = pod([{ name: "app", image: IMAGE, command: ["sh", "-c", "touch /out/ran"] }], out);
    p.metadata = { ...p.metadata, uid: "uid-tokens-2" };
    p.spec?.volumes?.push({
      name: "kube-api-access-q1",
      projected: { sources: [{ serviceAccountToken: { path: "token" } }] },
    });
    const rendered = renderUserData(
      p,
      { ...FAST, cluster: "it", delivery: "parameters", parameterWaitSeconds: 10 },
      sources,
    );
    if (!rendered.ok) throw rendered.error;
    await put([...rendered.value.sharedParameters, ...rendered.value.parameters]);
    const h = ssmHost();
    expect(await h.boot(rendered.value)).toBe(0);
    await h.until(() => h.poweredOff(), 60_000);
    expect(h.consoleText()).toContain(
      "cannot read the pod's service-account tokens from /nebula/it/pods/uid-tokens-2/t within 10s: no value in the answer",
    );
    expect(existsSync(join(out, "ran"))).toBe(false);
  });

  it("a parameter that does not hold what the user-data names is refused: the host says why and powers off", async () => {
    const out = outDir();
    const p = pod([{ name: "app", image: IMAGE, command: ["sh", "-c", "touch /out/ran"] }], out);
    p.metadata = { ...p.metadata, uid: "uid-parameters-2" };
    const options = {
      ...FAST,
      cluster: "it",
      delivery: "parameters",
      parameterWaitSeconds: 10,
    } as const;
    const rendered = renderUserData(p, options, sources);
    if (!rendered.ok) throw rendered.error;
    // Another Pod's spec written under this Pod's name (a stale or foreign parameter).
    const other = renderUserData(
      {
        ...p,
        spec: {
          ...p.spec,
          containers: [{ name: "app", image: IMAGE, command: ["sh", "-c", "echo other"] }],
        },
      } as V1Pod,
      options,
      sources,
    );
    if (!other.ok) throw other.error;
    await put([...other.value.sharedParameters, ...other.value.parameters]);
    const h = ssmHost();
    expect(await h.boot(rendered.value)).toBe(0);
    await h.until(() => h.poweredOff(), 60_000);
    expect(h.consoleText()).toMatch(
      /cannot read the pod's SSM parameters under \/nebula\/it\/pods\/uid-parameters-2\/ within 10s: .*does not match the SHA-256/,
    );
    expect(existsSync(join(out, "ran"))).toBe(false);
  });

  it("without the supervisor's parameters the bootstrap says why on the console and powers off", async () => {
    const out = outDir();
    const p = pod([{ name: "app", image: IMAGE, command: ["sh", "-c", "touch /out/ran"] }], out);
    p.metadata = { ...p.metadata, uid: "uid-parameters-3" };
    // Another cluster: its supervisor parameters were never written.
    const rendered = renderUserData(
      p,
      { ...FAST, cluster: "nowhere", delivery: "parameters", parameterWaitSeconds: 10 },
      sources,
    );
    if (!rendered.ok) throw rendered.error;
    await put(rendered.value.parameters);
    const h = ssmHost();
    await h.boot(rendered.value);
    await h.until(() => h.poweredOff(), 60_000);
    expect(h.consoleText()).toMatch(
      /nebula user-data: cannot read the host supervisor from SSM \(\/nebula\/nowhere\/supervisor\/[0-9a-f]{16}\/\)/,
    );
    expect(existsSync(join(out, "ran"))).toBe(false);
  });
});

describe("logs and metrics to CloudWatch: the instance-host simulator (podman playing Docker's awslogs and docker stats) and moto", () => {
  const RUN = randomBytes(4).toString("hex");
  const CLUSTER = `cw-${RUN}`;
  const GROUP = `/nebula/${CLUSTER}`;
  const UID = `uid-cw-${RUN}`;
  let moto: Moto;
  let sim: InstanceHosts;
  const client = () => ({
    endpoint: moto.endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  beforeAll(async () => {
    moto = await startMoto();
    sim = await startInstanceHosts({
      ec2Endpoint: moto.endpoint,
      region: moto.region,
      cluster: CLUSTER,
      bootDelayMs: 200,
    });
  }, 180_000);
  afterAll(async () => {
    await sim?.close();
    await moto?.stop();
  });

  it("each run's lines in its own stream, in order, and the Pod's usage in Nebula metrics", async () => {
    const logs = new CloudWatchLogsClient(client());
    const cloudwatch = new CloudWatchClient(client());
    const ec2 = new EC2Client({ ...client(), endpoint: sim.ec2Endpoint });
    try {
      // The operator's part: the group exists before any Pod logs to it.
      await logs.send(new CreateLogGroupCommand({ logGroupName: GROUP }));
      // Crashes once (exit 3), then runs past a few samples and completes. The pauses keep stdout
      // and stderr in one order (two pipes, read by conmon as Docker reads them).
      const script = [
        "if [ -e /state/ran ]; then",
        "  echo 'run 1: one'; echo 'run 1: two'; sleep 0.5; echo 'run 1: to stderr' >&2",
        "  i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 8; exit 0",
        "fi",
        "touch /state/ran; echo 'run 0: one'; echo 'run 0: two'; sleep 0.5; echo 'run 0: to stderr' >&2; exit 3",
      ].join("\n");
      const rendered = renderUserData(
        {
          metadata: { name: "chatty", namespace: "test", uid: UID },
          spec: {
            restartPolicy: "OnFailure",
            terminationGracePeriodSeconds: 5,
            containers: [
              {
                name: "app",
                image: "busybox",
                imagePullPolicy: "IfNotPresent",
                command: ["sh", "-c", script],
                volumeMounts: [{ name: "state", mountPath: "/state" }],
              },
            ],
            volumes: [{ name: "state", emptyDir: {} }],
          },
        },
        {
          cluster: CLUSTER,
          backoff: { initialSeconds: 1, maxSeconds: 2, resetAfterSeconds: 600 },
          report: { retryAttempts: 8, retryBaseMs: 50 },
          logs: { group: GROUP },
          metrics: { sampleSeconds: 5, publishSeconds: 5 },
        },
      );
      if (!rendered.ok) throw rendered.error;
      const launchedAt = new Date();
      const launched = await ec2.send(
        new RunInstancesCommand({
          ImageId: "ami-12345678",
          MinCount: 1,
          MaxCount: 1,
          UserData: rendered.value.userData,
          IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
          MetadataOptions: { HttpTokens: "required" },
          TagSpecifications: [
            {
              ResourceType: "instance",
              Tags: [
                { Key: "nebula:cluster", Value: CLUSTER },
                { Key: "nebula:pod-uid", Value: UID },
              ],
            },
          ],
        }),
      );
      const id = launched.Instances?.[0]?.InstanceId ?? "";
      // The Pod completes and the host powers itself off (the simulator delivers the last batch first).
      const guest = await sim.waitForPhase(id, "off", 180_000);
      const journal = readFileSync(guest.unitLogPath("nebula-supervisor.service"), "utf8");

      // The final report: one restart, completed.
      const tags = await ec2.send(
        new DescribeTagsCommand({ Filters: [{ Name: "resource-id", Values: [id] }] }),
      );
      const report = decodeReportTags(
        Object.fromEntries((tags.Tags ?? []).map((t) => [t.Key ?? "", t.Value ?? ""])),
      );
      if (report.kind !== "report")
        throw new Error(`no report: ${JSON.stringify(report)}\n${journal}`);
      expect(report.report.containers[0]).toMatchObject({
        name: "app",
        reason: "Completed",
        restarts: 1,
      });

      // One stream per run, exactly the lines of that run, in order; none for the Pod sandbox.
      const stream = (restart: number) =>
        containerLogStream({
          namespace: "test",
          pod: "chatty",
          uid: UID,
          container: "app",
          restart,
        });
      const streams = await logs.send(new DescribeLogStreamsCommand({ logGroupName: GROUP }));
      expect((streams.logStreams ?? []).map((s) => s.logStreamName).sort()).toEqual([
        stream(0),
        stream(1),
      ]);
      for (const restart of [0, 1]) {
        const events = await logs.send(
          new GetLogEventsCommand({
            logGroupName: GROUP,
            logStreamName: stream(restart),
            startFromHead: true,
          }),
        );
        expect(
          events.events?.map((e) => e.message),
          journal,
        ).toEqual([`run ${restart}: one`, `run ${restart}: two`, `run ${restart}: to stderr`]);
      }

      // The usage: both metrics, with exactly the contract's dimensions, sent without a failure.
      expect(journal).not.toContain("PutMetricData failed");
      const listed = await cloudwatch.send(
        new ListMetricsCommand({
          Namespace: "Nebula",
          Dimensions: [{ Name: "PodUID", Value: UID }],
        }),
      );
      // moto lists a metric once per call that put it (CloudWatch once): compare the distinct ones.
      const metrics = [
        ...new Set(
          (listed.Metrics ?? []).map((m) =>
            JSON.stringify({
              name: m.MetricName,
              dimensions: [...(m.Dimensions ?? [])].sort((a, b) =>
                (a.Name ?? "").localeCompare(b.Name ?? ""),
              ),
            }),
          ),
        ),
      ]
        .sort()
        .map((m) => JSON.parse(m));
      expect(metrics, journal).toEqual(
        ["CPUUsageCoreSeconds", "MemoryWorkingSetBytes"].map((name) => ({
          name,
          dimensions: [
            { Name: "Container", Value: "app" },
            { Name: "PodUID", Value: UID },
          ],
        })),
      );
      const statistics = async (name: string) =>
        await cloudwatch.send(
          new GetMetricStatisticsCommand({
            Namespace: "Nebula",
            MetricName: name,
            Dimensions: [
              { Name: "PodUID", Value: UID },
              { Name: "Container", Value: "app" },
            ],
            StartTime: new Date(launchedAt.getTime() - 120_000),
            EndTime: new Date(Date.now() + 120_000),
            Period: 60,
            Statistics: ["Maximum", "SampleCount"],
          }),
        );
      const memory = (await statistics("MemoryWorkingSetBytes")).Datapoints ?? [];
      expect(memory.reduce((n, d) => n + (d.SampleCount ?? 0), 0)).toBeGreaterThan(0);
      expect(Math.max(...memory.map((d) => d.Maximum ?? 0))).toBeGreaterThan(0);
      for (const d of memory) expect(d.Unit).toBe("Bytes");
      const cpu = (await statistics("CPUUsageCoreSeconds")).Datapoints ?? [];
      expect(cpu.reduce((n, d) => n + (d.SampleCount ?? 0), 0)).toBeGreaterThan(0);
      for (const d of cpu) {
        expect(d.Unit).toBe("Seconds");
        expect(d.Maximum).toBeGreaterThanOrEqual(0);
      }
    } finally {
      logs.destroy();
      cloudwatch.destroy();
      ec2.destroy();
    }
  });
});
