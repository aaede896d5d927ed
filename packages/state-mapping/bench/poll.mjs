// Mapping cost for one poll of 10,000 instances (10 DescribeInstances pages of 1,000), next to
// floors that do only the work the mapping cannot skip. Run: `npm run bench` in this package (it
// builds the bundle first), or `npx nx run @nebula/state-mapping:bench`. It measures the built
// bundle, `dist/index.js`, as users run it.
//
// Mix per poll: 70 % running and reporting, 10 % crash-looping, 10 % booting (no report yet),
// 5 % stopped with a final report, 5 % stopped without one (Spot). Steady state passes each
// instance's previous state (from the poll before) and the Pod with its stored status, as the
// provider does; a first poll passes neither.
//
// Floors:
// - "parse": read the pages with zod (`parseEc2Instance` on each instance of a page).
// - "parse + decode": the same, plus decoding every instance's report from its tags
//   (`decodeReportTags`: SHA-256 check, base64url, JSON, zod), which a first poll must do.
//
// Every round times each variant back to back, so a change in machine load hits them alike; the
// figures are medians over the rounds. NEBULA_BENCH_BASELINE=<another build's index.js> adds that
// build side by side (to compare before/after in one run).
//
// With NEBULA_BENCH_OUT=<file> set (the root `npm run bench` sets it) each figure is also appended
// to that file as a JSON line {package, figure, value, unit, baseline, baselineLabel, ratio, goal};
// the ratio is the median of the per-round ratios, as printed below.
import { Buffer } from "node:buffer";
import { appendFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const ROUNDS = Number(process.env.NEBULA_BENCH_ROUNDS ?? 15);
const INSTANCES = 10_000;
const PAGE_SIZE = 1_000;
const NOW = new Date("2026-11-30T06:00:00Z");

const current = await import(fileURLToPath(new URL("../dist/index.js", import.meta.url)));
const baselinePath = process.env.NEBULA_BENCH_BASELINE;
const baseline =
  baselinePath !== undefined && existsSync(baselinePath) ? await import(baselinePath) : undefined;
const lib = current;

const b64 = (text) => Buffer.from(text, "utf8").toString("base64");
const report = (seq, final, containers) => ({
  v: 1,
  seq,
  time: "2026-11-30T05:59:00Z",
  final,
  containers,
});
const running = (name = "app") => ({
  name,
  init: false,
  state: "running",
  restarts: 0,
  startedAt: "2026-11-30T05:55:00Z",
  containerID: "abc123",
  imageID: "sha256:feed",
});
const exited = (exitCode, name = "app") => ({
  name,
  init: false,
  state: "terminated",
  restarts: 0,
  exitCode,
  reason: exitCode === 0 ? "Completed" : "Error",
  startedAt: "2026-11-30T05:55:00Z",
  finishedAt: "2026-11-30T05:58:00Z",
});
const crashLooping = (restarts, name = "app") => ({
  name,
  init: false,
  state: "waiting",
  reason: "CrashLoopBackOff",
  restarts,
  messageB64: b64(`back-off 40s restarting failed container=${name}`),
  last: {
    exitCode: 1,
    reason: "Error",
    startedAt: "2026-11-30T05:57:00Z",
    finishedAt: "2026-11-30T05:57:02Z",
  },
});

function ec2(i, state, options = {}) {
  const tags = {
    "nebula:cluster": "c1",
    "nebula:pod-uid": "uid-1",
    ...(options.report ? lib.encodeReportTags(options.report) : {}),
  };
  return {
    InstanceId: `i-${i.toString(16).padStart(17, "0")}`,
    InstanceType: "m7i.large",
    State: { Name: state, Code: 16 },
    ...(options.code
      ? { StateReason: { Code: options.code, Message: `${options.code}: detail` } }
      : {}),
    StateTransitionReason: options.code ? "User initiated (2026-11-30 05:59:00 GMT)" : "",
    LaunchTime: new Date("2026-11-30T05:50:00Z"),
    PrivateIpAddress: "10.0.1.23",
    PublicIpAddress: "3.3.3.3",
    Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
  };
}

function instance(i) {
  const slot = i % 20;
  if (slot < 14)
    return ec2(i, "running", { report: report(3, false, [running(), running("sidecar")]) });
  if (slot < 16)
    return ec2(i, "running", { report: report(9, false, [crashLooping(4), running("sidecar")]) });
  if (slot < 18) return ec2(i, "running");
  if (slot < 19)
    return ec2(i, "stopped", {
      code: "Client.InstanceInitiatedShutdown",
      report: report(12, true, [exited(0), exited(0, "sidecar")]),
    });
  return ec2(i, "stopped", { code: "Server.SpotInstanceTermination" });
}

const pages = Array.from({ length: INSTANCES / PAGE_SIZE }, (_, p) => ({
  Reservations: Array.from({ length: PAGE_SIZE }, (_, i) => ({
    ReservationId: `r-${p}-${i}`,
    Instances: [instance(p * PAGE_SIZE + i)],
  })),
}));

const thePod = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: { name: "p", namespace: "default", uid: "uid-1" },
  spec: {
    nodeName: "nebula",
    restartPolicy: "Always",
    containers: [
      { name: "app", image: "registry.example/app:1" },
      { name: "sidecar", image: "registry.example/sidecar:1" },
    ],
  },
  status: { phase: "Pending", qosClass: "BestEffort" },
};

/** The previous poll's states and stored Pods, keyed by instance ID, as the provider keeps them. */
function remember(m) {
  const states = new Map();
  const pods = new Map();
  for (const page of pages) {
    for (const { Instances } of page.Reservations) {
      for (const raw of Instances) {
        const state = m.toInstanceState(raw, { now: NOW });
        states.set(raw.InstanceId, state);
        // What the API server returns after the status write: JSON.
        const status = JSON.parse(JSON.stringify(m.toPodStatus(thePod, state, { now: NOW })));
        pods.set(raw.InstanceId, { ...thePod, status });
      }
    }
  }
  return { states, pods };
}

let sink = 0;

/**
 * The instances of a DescribeInstances page a build reads, as the provider reads them: each with
 * `parseEc2Instance` (a build from before the narrowed entry reads the page with its
 * `parseDescribeInstancesPage`).
 */
function readPage(m, page) {
  if (typeof m.parseDescribeInstancesPage === "function") {
    return m.parseDescribeInstancesPage(page).instances;
  }
  const instances = [];
  for (const reservation of page.Reservations ?? []) {
    for (const entry of reservation.Instances ?? []) {
      const one = m.parseEc2Instance(entry);
      if (one.ok) instances.push(one.instance);
    }
  }
  return instances;
}

function parseFloor() {
  for (const page of pages) sink += readPage(lib, page).length;
}

function decodeFloor() {
  for (const page of pages) {
    for (const instance of readPage(lib, page)) {
      sink += lib.decodeReportTags(instance.Tags).kind.length;
    }
  }
}

function mapper(m, steady, reverse) {
  const memory = steady ? remember(m) : undefined;
  // As the provider does: read each page, then map each instance read.
  return () => {
    for (const page of pages) {
      for (const raw of readPage(m, page)) {
        {
          const id = raw.InstanceId;
          const state = m.toInstanceState(raw, { now: NOW, previous: memory?.states.get(id) });
          const pod = memory?.pods.get(id) ?? thePod;
          const status = m.toPodStatus(pod, state, { now: NOW });
          sink += reverse
            ? m.toInstanceReason({ spec: pod.spec, status }).ready
              ? 1
              : 0
            : (status.containerStatuses?.length ?? 0);
        }
      }
    }
  };
}

const variants = [
  ["floor: parse the pages (zod)", parseFloor],
  ["floor: parse + decode every report (first poll's floor)", decodeFloor],
  ["steady: toInstanceState + toPodStatus", mapper(current, true, false)],
  ["steady: ... + toInstanceReason", mapper(current, true, true)],
  ["first poll: toInstanceState + toPodStatus", mapper(current, false, false)],
  ...(baseline
    ? [
        ["baseline steady: toInstanceState + toPodStatus", mapper(baseline, true, false)],
        ["baseline steady: ... + toInstanceReason", mapper(baseline, true, true)],
        ["baseline first poll: toInstanceState + toPodStatus", mapper(baseline, false, false)],
      ]
    : []),
];

for (let i = 0; i < 3; i++) for (const [, run] of variants) run(); // warm-up

const times = variants.map(() => []);
for (let r = 0; r < ROUNDS; r++) {
  variants.forEach(([, run], v) => {
    const t0 = performance.now();
    run();
    times[v].push(performance.now() - t0);
  });
}
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const ratio = (v, f) => median(times[v].map((t, r) => t / times[f][r]));
console.log(`One poll of ${INSTANCES} instances, median of ${ROUNDS} interleaved rounds:`);
console.log(`${"".padEnd(58)} µs/instance  × parse  × parse+decode`);
variants.forEach(([name], v) => {
  const us = ((median(times[v]) * 1000) / INSTANCES).toFixed(2).padStart(8);
  console.log(
    `${name.padEnd(58)} ${us}  ${ratio(v, 0).toFixed(2).padStart(6)}  ${ratio(v, 1).toFixed(2).padStart(6)}`,
  );
});
if (sink <= 0) throw new Error("nothing was computed");

const out = process.env.NEBULA_BENCH_OUT;
if (out) {
  const usPerInstance = (v) => Math.round((median(times[v]) * 1e5) / INSTANCES) / 100;
  const row = (figure, v, f, goal) => ({
    package: "@nebula/state-mapping",
    figure: `${figure}, one poll of ${INSTANCES} instances${goal === null ? " (no goal)" : ""}`,
    value: usPerInstance(v),
    unit: "µs/instance",
    baseline: usPerInstance(f),
    baselineLabel: variants[f][0],
    ratio: Math.round(ratio(v, f) * 100) / 100,
    goal,
  });
  const rows = [
    row("steady: toInstanceState + toPodStatus", 2, 0, "≤ 2×"),
    row("steady: ... + toInstanceReason", 3, 0, null),
    row("first poll: toInstanceState + toPodStatus", 4, 1, null),
  ];
  if (baseline) {
    rows.push(row("baseline build, steady", 5, 0, null));
    rows.push(row("baseline build, first poll", 7, 1, null));
  }
  appendFileSync(out, rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
}
