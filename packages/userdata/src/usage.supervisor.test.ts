/**
 * The supervisor's logs and usage-metrics functions, in real bash: the installed supervisor is
 * sourced (without its last line, `main "$@"`) into a shell whose `docker`, `date +%s%3N` (the
 * clock) and `sigv4_post` are test functions, so parsing, integration and batching are checked
 * exactly and without waiting. The real calls (podman, moto) are in userdata.integration.test.ts.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { renderUserData, supervisorScript } from "./index.js";
import { containerLogStream, USAGE_METRICS } from "./render.js";
import { TestHost } from "./testing/host.js";

const dirs: string[] = [];
const hosts: TestHost[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  await Promise.all(hosts.splice(0).map((h) => h.close()));
});

const LIBRARY = supervisorScript().replace(/\nmain "\$@"\n$/, "\n");

/**
 * Runs `body` in bash after sourcing the supervisor, with RUN in a fresh directory (returned), the
 * Pod data below, a `docker` on PATH whose `stats` prints $T/stats, `date +%s%3N` printing $T/clock, and
 * `sigv4_post` recording each body in $T/calls/<n> and answering the status in $T/status.
 */
function bash(body: string, files: Record<string, string> = {}): { out: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), "nebula-usage-"));
  dirs.push(dir);
  writeFileSync(join(dir, "lib.sh"), LIBRARY);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  const harness = `
set -u
T=${JSON.stringify(dir)}
. "$T/lib.sh"
set +u
RUN=$T/run
mkdir -p "$RUN/usage" "$T/calls" "$T/bin"
printf '#!/bin/bash\n[ "$1" = stats ] && printf "%%s" "$*" >"$T/stats-args" && cat "$T/stats"\n' >"$T/bin/docker"
chmod +x "$T/bin/docker"
export T PATH=$T/bin:$PATH
N=2
NAMES=(app sidecar)
POD_NAME=web-1
POD_NAMESPACE=shop
POD_UID=8f3a-uid
REGION=eu-west-1
METRICS_NAMESPACE=Nebula
METRICS_SAMPLE=15
METRICS_PUBLISH=60
date() { if [ "$*" = +%s%3N ]; then cat "$T/clock"; else command date "$@"; fi; }
sigv4_post() {
  local n
  n=$(find "$T/calls" -type f | wc -l)
  printf '%s\\n%s' "$2" "$5" >"$T/calls/$n"
  cat "$T/status"
}
log() { printf 'log: %s\\n' "$*" >>"$T/log"; }
${body}
`;
  const out = execFileSync("bash", ["-c", harness], { encoding: "utf8" });
  return { out, dir };
}

/** The datum lines waiting in metrics.cur. */
const waiting = (dir: string) =>
  readFileSync(join(dir, "run/metrics.cur"), "utf8").split("\n").filter(Boolean);

const ID_A = "a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6abcd";
const ID_B = "0f0e0d0c0b0a0f0e0d0c0b0a0f0e0d0c0b0a0f0e0d0c0b0a0f0e0d0c0b0a0f0e";

describe("usage_parse: one line of `docker stats --format '{{.ID}}\\t{{.CPUPerc}}\\t{{.MemUsage}}'`", () => {
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"] as const;
  /** A value as Go's `%.4g` prints it below 1024 (go-units' BytesSize), and the bytes it means. */
  const memory = fc
    .tuple(
      fc.integer({ min: 0, max: 1023 }),
      fc.integer({ min: 0, max: 999 }),
      fc.integer({ min: 0, max: 4 }),
    )
    .map(([whole, frac, unit]) => {
      const digits = Math.max(0, 4 - String(whole).length);
      const f = String(frac).padStart(3, "0").slice(0, digits).replace(/0+$/, "");
      const text = `${whole}${f === "" ? "" : `.${f}`}${UNITS[unit]}`;
      const k = 2n ** BigInt(10 * unit);
      const frac4 = BigInt((f || "0").padEnd(4, "0").slice(0, 4));
      return { text, bytes: BigInt(whole) * k + (frac4 * k) / 10000n };
    });
  const cpu = fc.integer({ min: 0, max: 6_400_00 }).map((h) => ({
    text: `${Math.floor(h / 100)}.${String(h % 100).padStart(2, "0")}%`,
    hundredths: h,
  }));
  const id = fc.oneof(
    fc.constant(ID_A),
    fc.constant(ID_A.slice(0, 12)),
    fc.stringMatching(/^[0-9a-f]{12}$/),
  );

  it("reads every line Docker prints: the id, CPU in hundredths of a percent, memory in bytes", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(id, cpu, memory, memory), { minLength: 1 }), (rows) => {
        const lines = rows.map(([i, c, m, limit]) => `${i}\t${c.text}\t${m.text} / ${limit.text}`);
        const { out } = bash(
          `while IFS= read -r l; do if usage_parse "$l"; then echo "$U_ID $U_CPU $U_MEM"; else echo bad; fi; done <"$T/in"`,
          { in: `${lines.join("\n")}\n` },
        );
        expect(out.trim().split("\n")).toEqual(
          rows.map(([i, c, m]) => `${i} ${c.hundredths} ${m.bytes}`),
        );
      }),
      { numRuns: 25 },
    );
  });

  it("refuses what it cannot read, and never fails the shell", () => {
    const bad = [
      "",
      "garbage",
      `${ID_A}\t--\t-- / --`,
      `${ID_A}\t12.5\t1MiB / 2MiB`,
      `${ID_A}\t12.50%\t1.5MB / 2GB`,
      `${ID_A}\t12.50%\t1e+03MiB / 2GiB`,
      `NOT-HEX\t1.00%\t1MiB / 2MiB`,
      `${ID_A}\t-1.00%\t1MiB / 2MiB`,
      `${ID_A} 1.00% 1MiB / 2MiB`,
    ];
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.constantFrom(...bad), fc.string())), (lines) => {
        const clean = lines.map((l) => l.replace(/[\n\r\0]/g, ""));
        const { out } = bash(
          `while IFS= read -r l; do if usage_parse "$l"; then echo ok; else echo bad; fi; done <"$T/in"; echo end`,
          { in: clean.map((l) => `${l}\n`).join("") },
        );
        const verdicts = out.trim().split("\n");
        expect(verdicts.at(-1)).toBe("end");
        for (const [i, line] of clean.entries()) {
          if (bad.includes(line)) expect(verdicts[i]).toBe("bad");
        }
      }),
      { numRuns: 20 },
    );
  });
});

describe("usage_sample: CPU integrated per run, memory as sampled", () => {
  it("integrates CPUPerc over the time since the run started, then since the last sample", () => {
    const { dir, out } = bash(
      `
echo "${ID_A} 100000" >"$RUN/usage/0"
echo "${ID_B} 100000" >"$RUN/usage/1"
printf '%s\\t50.00%%\\t1.5MiB / 1.944GiB\\n%s\\t--\\t-- / --\\nnoise\\n' "${ID_A.slice(0, 12)}" "${ID_B.slice(0, 12)}" >"$T/stats"
echo 110000 >"$T/clock"
usage_sample
printf '%s\\t100.00%%\\t2GiB / 4GiB\\n%s\\t250.00%%\\t512KiB / 1GiB\\n' "${ID_A}" "${ID_B.slice(0, 12)}" >"$T/stats"
echo 125000 >"$T/clock"
usage_sample
cat "$T/stats-args"
`,
      { stats: "" },
    );
    // The contract's docker stats call, for the running containers' ids.
    expect(out).toBe(
      `stats --no-stream --format {{.ID}}\\t{{.CPUPerc}}\\t{{.MemUsage}} ${ID_A} ${ID_B}`,
    );
    const ts = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
    expect(waiting(dir)).toEqual([
      // 10 s at half a core; sidecar's "--" line skipped (a bad line is never a zero).
      `0 app CPUUsageCoreSeconds Seconds 5.000000 ${ts(110000)}`,
      `0 app MemoryWorkingSetBytes Bytes 1572864 ${ts(110000)}`,
      // Then 15 s at one core.
      `0 app CPUUsageCoreSeconds Seconds 20.000000 ${ts(125000)}`,
      `0 app MemoryWorkingSetBytes Bytes 2147483648 ${ts(125000)}`,
      // The sidecar's first sample covers its 25 s since its start at 2.5 cores.
      `0 sidecar CPUUsageCoreSeconds Seconds 62.500000 ${ts(125000)}`,
      `0 sidecar MemoryWorkingSetBytes Bytes 524288 ${ts(125000)}`,
    ]);
  });

  it("starts the counter from 0 when the container restarts (a new id), and samples nothing when none runs", () => {
    const { dir } = bash(
      `
echo "${ID_A} 0" >"$RUN/usage/0"
printf '%s\\t100.00%%\\t1MiB / 2MiB\\n' "${ID_A.slice(0, 12)}" >"$T/stats"
echo 30000 >"$T/clock"
usage_sample
rm "$RUN/usage/0"
echo 40000 >"$T/clock"
usage_sample
echo "${ID_B} 50000" >"$RUN/usage/0"
printf '%s\\t100.00%%\\t1MiB / 2MiB\\n' "${ID_B.slice(0, 12)}" >"$T/stats"
echo 52000 >"$T/clock"
usage_sample
`,
      { stats: "" },
    );
    const cpu = waiting(dir)
      .filter((l) => l.includes(USAGE_METRICS.cpu))
      .map((l) => l.split(" ")[4]);
    expect(cpu).toEqual(["30.000000", "2.000000"]);
  });

  it("keeps at most METRICS_MAX datums waiting", () => {
    const { dir } = bash(
      `
METRICS_MAX=6
echo "${ID_A} 0" >"$RUN/usage/0"
printf '%s\\t1.00%%\\t1MiB / 2MiB\\n' "${ID_A.slice(0, 12)}" >"$T/stats"
for t in 1000 2000 3000 4000 5000; do echo $t >"$T/clock"; usage_sample; done
`,
      { stats: "" },
    );
    expect(waiting(dir)).toHaveLength(6);
  });
});

describe("usage_publish: PutMetricData batches", () => {
  const datum = (tries: number, i: number) =>
    `${tries} app ${i % 2 ? USAGE_METRICS.memory : USAGE_METRICS.cpu} ${i % 2 ? "Bytes" : "Seconds"} ${i}.5 2026-12-01T04:00:${String(i % 60).padStart(2, "0")}Z`;
  const calls = (dir: string, n: number) =>
    Array.from({ length: n }, (_, k) => {
      const [endpoint, body] = readFileSync(join(dir, "calls", String(k)), "utf8").split("\n");
      return { endpoint, form: new URLSearchParams(body) };
    });

  it("sends every waiting datum in one query-protocol call, with the contract's names and dimensions", () => {
    const lines = Array.from({ length: 8 }, (_, i) => datum(0, i));
    // Nothing waiting: no call.
    expect(
      bash(`usage_publish; find "$T/calls" -type f | wc -l`, { status: "200" }).out.trim(),
    ).toBe("0");
    const second = bash(
      `cp "$T/in" "$RUN/metrics.cur"; usage_publish; find "$T/calls" -type f | wc -l; wc -c <"$RUN/metrics.cur"`,
      { status: "200", in: `${lines.join("\n")}\n` },
    );
    expect(second.out.trim().split("\n")).toEqual(["1", "0"]);
    const [call] = calls(second.dir, 1);
    expect(call?.endpoint).toBe("https://monitoring.eu-west-1.amazonaws.com");
    const form = call?.form as URLSearchParams;
    expect(form.get("Action")).toBe("PutMetricData");
    expect(form.get("Version")).toBe("2010-08-01");
    expect(form.get("Namespace")).toBe("Nebula");
    for (let i = 0; i < 8; i++) {
      const p = `MetricData.member.${i + 1}`;
      expect({
        name: form.get(`${p}.MetricName`),
        dims: [1, 2].map((d) => [
          form.get(`${p}.Dimensions.member.${d}.Name`),
          form.get(`${p}.Dimensions.member.${d}.Value`),
        ]),
        unit: form.get(`${p}.Unit`),
        value: form.get(`${p}.Value`),
        timestamp: form.get(`${p}.Timestamp`),
        resolution: form.get(`${p}.StorageResolution`),
      }).toEqual({
        name: i % 2 ? "MemoryWorkingSetBytes" : "CPUUsageCoreSeconds",
        dims: [
          ["PodUID", "8f3a-uid"],
          ["Container", "app"],
        ],
        unit: i % 2 ? "Bytes" : "Seconds",
        value: `${i}.5`,
        timestamp: `2026-12-01T04:00:${String(i).padStart(2, "0")}Z`,
        resolution: "1",
      });
    }
    expect(form.has("MetricData.member.9.MetricName")).toBe(false);
  });

  it("splits more than 1000 datums into calls of at most 1000, and takes the endpoint overrides", () => {
    const lines = Array.from({ length: 2345 }, (_, i) => datum(0, i));
    const run = bash(
      `cp "$T/in" "$RUN/metrics.cur"; AWS_ENDPOINT_URL=http://shared:1 usage_publish; find "$T/calls" -type f | wc -l`,
      { status: "200", in: `${lines.join("\n")}\n` },
    );
    expect(run.out.trim()).toBe("3");
    const sent = calls(run.dir, 3);
    expect(sent.map((c) => c.endpoint)).toEqual(Array(3).fill("http://shared:1"));
    const counts = sent.map(
      (c) => [...c.form.keys()].filter((k) => k.endsWith(".MetricName")).length,
    );
    expect(counts).toEqual([1000, 1000, 345]);
    const specific = bash(
      `echo '${datum(0, 1)}' >"$RUN/metrics.cur"; AWS_ENDPOINT_URL=http://shared:1 AWS_ENDPOINT_URL_CLOUDWATCH=http://cw:2/ usage_publish`,
      { status: "200" },
    );
    expect(calls(specific.dir, 1)[0]?.endpoint).toBe("http://cw:2");
  });

  it("keeps a failed call's datums for one more try, then drops them; the log says why", () => {
    const { dir, out } = bash(
      `
printf '%s\\n' '${datum(0, 0)}' '${datum(0, 1)}' >"$RUN/metrics.cur"
usage_publish
cat "$RUN/metrics.cur"; echo --
echo '${datum(0, 2)}' >>"$RUN/metrics.cur"
usage_publish
cat "$RUN/metrics.cur"; echo --
usage_publish
wc -c <"$RUN/metrics.cur"
`,
      { status: "500" },
    );
    const [afterFirst, afterSecond, afterThird] = out.split("--\n");
    // Kept, marked as tried once.
    expect(afterFirst?.trim().split("\n")).toEqual([datum(1, 0), datum(1, 1)]);
    // Tried twice: dropped; the new one kept for its second try.
    expect(afterSecond?.trim().split("\n")).toEqual([datum(1, 2)]);
    expect(afterThird?.trim()).toBe("0");
    // Three calls, each holding everything that waited.
    const sent = calls(dir, 3).map(
      (c) => [...c.form.keys()].filter((k) => k.endsWith(".MetricName")).length,
    );
    expect(sent).toEqual([2, 3, 1]);
    expect(readFileSync(join(dir, "log"), "utf8")).toMatch(
      /^log: metrics: PutMetricData failed \(HTTP 500\)/,
    );
  });
});

describe("log_flags: the awslogs options of the contract", () => {
  const flags = (env: string) =>
    bash(
      `${env}
flags=(--name=x)
S[restarts.1]=3
log_flags 1
printf '%s\\n' "\${flags[@]}"`,
    ).out.trim();

  it("adds nothing without LOG_GROUP", () => {
    expect(flags("")).toBe("--name=x");
  });

  it("names the stream <namespace>/<pod>/<uid>/<container>/<restart>, never creates the group", () => {
    const stream = containerLogStream({
      namespace: "shop",
      pod: "web-1",
      uid: "8f3a-uid",
      container: "sidecar",
      restart: 3,
    });
    expect(stream).toBe("shop/web-1/8f3a-uid/sidecar/3");
    expect(flags("LOG_GROUP=/nebula/prod").split("\n")).toEqual([
      "--name=x",
      "--log-driver=awslogs",
      "--log-opt",
      "awslogs-region=eu-west-1",
      "--log-opt",
      "awslogs-group=/nebula/prod",
      "--log-opt",
      `awslogs-stream=${stream}`,
      "--log-opt",
      "awslogs-create-group=false",
    ]);
  });

  it("passes the logs endpoint override, or the general one", () => {
    const ep = (env: string) => flags(`LOG_GROUP=g ${env}`).split("\n").slice(-2);
    expect(ep("AWS_ENDPOINT_URL=http://a:1 AWS_ENDPOINT_URL_LOGS=http://logs:2")).toEqual([
      "--log-opt",
      "awslogs-endpoint=http://logs:2",
    ]);
    expect(ep("AWS_ENDPOINT_URL=http://a:1")).toEqual(["--log-opt", "awslogs-endpoint=http://a:1"]);
  });
});

describe("the rendered Pod data", () => {
  it("carries LOG_GROUP and the metrics settings only when turned on", () => {
    const pod = {
      metadata: { name: "p", namespace: "n", uid: "u" },
      spec: { containers: [{ name: "a", image: "busybox" }] },
    };
    const script = (options = {}) => {
      const r = renderUserData(pod, options);
      if (!r.ok) throw r.error;
      // Without the supervisor itself, which is the same either way.
      return r.value.script.replace(supervisorScript({ delivery: "user-data" }), "");
    };
    const off = script();
    expect(off).not.toMatch(/LOG_GROUP|METRICS_|AWS_ENDPOINT_URL_LOGS|AWS_ENDPOINT_URL_CLOUDWATCH/);
    const on = script({ logs: { group: "/nebula/prod" }, metrics: { sampleSeconds: 10 } });
    expect(on).toContain("\nLOG_GROUP=$'/nebula/prod'\n");
    expect(on).toContain("\nMETRICS_NAMESPACE=$'Nebula'\nMETRICS_SAMPLE=10\nMETRICS_PUBLISH=60\n");
    expect(on).toContain(
      "for name in AWS_EC2_METADATA_SERVICE_ENDPOINT AWS_ENDPOINT_URL_EC2 AWS_ENDPOINT_URL_SSM AWS_ENDPOINT_URL_LOGS AWS_ENDPOINT_URL_CLOUDWATCH AWS_ENDPOINT_URL AWS_CA_BUNDLE; do",
    );
    // Everything else is the same.
    const strip = (s: string) =>
      s
        .replace(/\nLOG_GROUP=.*|\nMETRICS_[A-Z]+=.*/g, "")
        .replace(/ AWS_ENDPOINT_URL_LOGS| AWS_ENDPOINT_URL_CLOUDWATCH/g, "");
    expect(strip(on)).toBe(off);
  });
});

/** Command lines of the live processes whose environment names the test host's directory. */
function guestProcesses(dir: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const env = readFileSync(`/proc/${pid}/environ`, "utf8");
      if (env.split("\0").includes(`FAKE_HOST_DIR=${dir}`))
        found.push(readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " "));
    } catch {}
  }
  return found;
}

describe("a Pod with logs and metrics on, on the test host (docker stand-in)", () => {
  it("creates each run with its own stream (restart 0, then 1) and ends the usage loop with the Pod", async () => {
    const rendered = renderUserData(
      {
        metadata: { name: "job-1", namespace: "batch", uid: "uid-1" },
        spec: {
          restartPolicy: "OnFailure",
          terminationGracePeriodSeconds: 5,
          containers: [{ name: "app", image: "fake/flaky:1" }],
        },
      },
      {
        backoff: { initialSeconds: 1, maxSeconds: 2, resetAfterSeconds: 600 },
        report: { retryAttempts: 8, retryBaseMs: 50 },
        logs: { group: "/nebula/test" },
        metrics: { sampleSeconds: 5, publishSeconds: 5 },
      },
    );
    if (!rendered.ok) throw rendered.error;
    const h = new TestHost({
      images: {
        "fake/flaky:1": {
          // Fails its first run; its second runs past a sample, then completes.
          script:
            'm="$FAKE_CTR/../../ran"; if [ -e "$m" ]; then sleep 7; exit 0; fi; : >"$m"; exit 1',
        },
      },
      // Nothing leaves the machine (the stand-in has no `docker stats`, so nothing is sampled).
      env: {
        AWS_ENDPOINT_URL_CLOUDWATCH: "http://127.0.0.1:9",
        AWS_ENDPOINT_URL_LOGS: "http://127.0.0.1:9",
      },
    });
    hosts.push(h);
    expect(await h.boot(rendered.value)).toBe(0);
    expect(await h.finished()).toBe(0);
    const creates = h.dockerCalls("create");
    expect(creates, h.supervisorLog()).toHaveLength(2);
    creates.forEach((call, restart) => {
      expect(call).toContain(
        ` --log-driver=awslogs --log-opt awslogs-region=us-east-1 --log-opt awslogs-group=/nebula/test --log-opt awslogs-stream=batch/job-1/uid-1/app/${restart} --log-opt awslogs-create-group=false --log-opt awslogs-endpoint=http://127.0.0.1:9 `,
      );
    });
    // The Pod sandbox logs as before.
    expect(h.sandboxCalls().filter((c) => c.startsWith("docker create"))[0]).not.toContain(
      "awslogs",
    );
    const unit = readFileSync(join(h.dir, "unit"), "utf8");
    expect(unit).toContain("Environment=AWS_ENDPOINT_URL_LOGS=http://127.0.0.1:9\n");
    expect(unit).toContain("Environment=AWS_ENDPOINT_URL_CLOUDWATCH=http://127.0.0.1:9\n");
    const final = h.tagReports().at(-1);
    expect(final?.final).toBe(true);
    expect(final?.containers[0]).toMatchObject({ reason: "Completed", restarts: 1 });
    // The loop sampled (docker stats, which the stand-in refuses) and ended with the supervisor:
    // no process of this guest is left.
    expect(h.calls().some((c) => c.startsWith("docker stats --no-stream --format"))).toBe(true);
    // A watcher's last `sleep 0.5` may outlive its killed loop by that half second: gone within 2 s.
    const deadline = Date.now() + 2_000;
    while (guestProcesses(h.dir).length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(guestProcesses(h.dir)).toEqual([]);
  });
});
