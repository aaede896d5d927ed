// Roll-up cost per instance for 10,000 instances, next to the floor: one plain pass that only
// counts the instances (ready, and not ready by reason). Run: `npm run bench` in this package
// (it builds the bundle first), or `npx nx run @nebula/rollup:bench`. It measures the built
// bundle, `dist/index.js`, as users run it.
//
// Mix: 60 % ready; the rest spread over InstanceCrashing, ImageUnavailable, Provisioning and
// OutOfMemory, with up to 21 distinct messages. The roll-up runs as the operator runs it: with the
// previously stored conditions passed in. Every round times each variant back to back, so a change
// in machine load hits them alike; the figures are medians over the rounds.
//
// NEBULA_BENCH_BASELINE=<path to another build's index.js> adds that build side by side (to
// compare before/after in one run).
//
// With NEBULA_BENCH_OUT=<file> set (the root `npm run bench` sets it) each figure is also appended
// to that file as a JSON line {package, figure, value, unit, baseline, baselineLabel, ratio, goal};
// the ratio is the median of the per-round ratios, as printed below.
import { appendFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const ROUNDS = Number(process.env.NEBULA_BENCH_ROUNDS ?? 41);
const INSTANCES = 10_000;
const REASONS = ["InstanceCrashing", "ImageUnavailable", "Provisioning", "OutOfMemory"];

const bundle = fileURLToPath(new URL("../dist/index.js", import.meta.url));
const current = await import(bundle);
const baselinePath = process.env.NEBULA_BENCH_BASELINE;
const baseline =
  baselinePath !== undefined && existsSync(baselinePath) ? await import(baselinePath) : undefined;

const instances = Array.from({ length: INSTANCES }, (_, i) => {
  if (i % 10 < 6) return { name: `web-${i}`, ready: true, reason: "Ready" };
  return {
    name: `web-${i}`,
    ready: false,
    reason: REASONS[i % REASONS.length],
    message: `container "app" has exited and restarted ${i % 7} times without staying up for 10 minutes. Its last exit was with code ${i % 3}.`,
  };
});
const input = { desiredReplicas: INSTANCES, generation: 3, instances };
const now = new Date("2026-11-30T05:00:00Z");

let sink = 0;

function floor() {
  let ready = 0;
  const byReason = new Map();
  for (const instance of instances) {
    if (instance.ready) ready++;
    else {
      const reason = instance.reason ?? "";
      byReason.set(reason, (byReason.get(reason) ?? 0) + 1);
    }
  }
  sink += ready + byReason.size;
}

/** The floor plus the message histogram the representative message needs (a count per message). */
function histogramFloor() {
  let ready = 0;
  const byReason = new Map();
  for (const instance of instances) {
    if (instance.ready) ready++;
    else {
      const reason = instance.reason ?? "";
      let messages = byReason.get(reason);
      if (messages === undefined) {
        messages = new Map();
        byReason.set(reason, messages);
      }
      const message = instance.message ?? "";
      messages.set(message, (messages.get(message) ?? 0) + 1);
    }
  }
  sink += ready + byReason.size;
}

function rollupWith(lib) {
  const previous = lib.rollupWorkloadDeployment(input, { now }).conditions;
  return () => {
    sink += lib.rollupWorkloadDeployment(input, { now, previous }).readyReplicas;
  };
}

const variants = [
  ["floor: one pass counting ready / not ready by reason", floor],
  ["floor + message histogram (a count per reason and message)", histogramFloor],
  ["rollupWorkloadDeployment (dist)", rollupWith(current)],
  ...(baseline ? [["rollupWorkloadDeployment (baseline)", rollupWith(baseline)]] : []),
];

for (let i = 0; i < 20; i++) for (const [, run] of variants) run(); // warm-up

const times = variants.map(() => []);
for (let r = 0; r < ROUNDS; r++) {
  variants.forEach(([, run], v) => {
    const t0 = performance.now();
    run();
    times[v].push(performance.now() - t0);
  });
}
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const ratio = (v) => median(times[v].map((t, r) => t / times[0][r]));
const ratioTo = (v, f) => median(times[v].map((t, r) => t / times[f][r]));
console.log(`Roll-up of ${INSTANCES} instances, median of ${ROUNDS} interleaved rounds:`);
console.log(`${"".padEnd(62)} ns/instance  × floor  × floor+histogram`);
variants.forEach(([name], v) => {
  const ns = ((median(times[v]) * 1e6) / INSTANCES).toFixed(1).padStart(7);
  console.log(
    `${name.padEnd(62)} ${ns}  ${ratio(v).toFixed(2).padStart(7)}  ${ratioTo(v, 1).toFixed(2).padStart(7)}`,
  );
});
if (sink <= 0) throw new Error("nothing was computed");

const out = process.env.NEBULA_BENCH_OUT;
if (out) {
  const nsPerInstance = (v) => Math.round((median(times[v]) * 1e7) / INSTANCES) / 10;
  const row = (figure, v, f, goal) => ({
    package: "@nebula/rollup",
    figure: goal === null ? `${figure} (no goal)` : figure,
    value: nsPerInstance(v),
    unit: "ns/instance",
    baseline: nsPerInstance(f),
    baselineLabel: variants[f][0],
    ratio: Math.round(ratioTo(v, f) * 100) / 100,
    goal,
  });
  const rows = [
    row(`rollupWorkloadDeployment, ${INSTANCES} instances`, 2, 0, "≤ 3× (unreachable: see README)"),
    row(`rollupWorkloadDeployment, ${INSTANCES} instances`, 2, 1, null),
  ];
  if (baseline) rows.push(row(`rollupWorkloadDeployment, ${INSTANCES} instances`, 2, 3, null));
  appendFileSync(out, rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
}
