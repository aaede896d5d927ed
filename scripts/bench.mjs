// `npm run bench`: builds what the benchmarks need, runs each in turn (its own output streams
// through), then prints one table (figure | value | baseline | ratio | goal) grouped by package and
// writes it to bench-results.json at the repository root.
//
// Each bench appends its figures to the file named by NEBULA_BENCH_OUT, one JSON line each:
//   {"package","figure","value","unit","baseline","baselineLabel","ratio","goal"}
// baseline is measured in the same run, beside the figure (a floor or the naive alternative);
// baseline, ratio and goal are null where there is none, and the figure's name says so. Where a
// bench times variants in interleaved rounds, ratio is the median of the per-round ratios, so it
// can differ a little from value / baseline (the medians). Figures are printed, never asserted:
// the exit code is non-zero only when a bench crashed (or wrote no figure).
//
// Options (environment):
//   NEBULA_BENCH_VNODES=10 NEBULA_BENCH_PER_VNODE=500
//                                       the many-vnodes bench's size (default 10 × 20 here)
//   NEBULA_BENCH_ONLY=rollup,provider   run only the benches whose package name contains one of these
//   NEBULA_BENCH_SIZES=10,100,1000,5000 the provider's instance counts (default 10,100,1000 here; the
//                                       5,000 size did not finish in an hour here: moto takes
//                                       minutes to list 5,000 instances)
//   NEBULA_BENCH_WARM_ROUNDS=4          the warm pool's comparison (the demo's world, `--only
//                                       warm-pool`): rounds of 3 warm + 3 cold Pods (default 4)
//   NEBULA_BENCH_HOST_TIMES=30,12,5     its simulated hosts' first boot, boot after StartInstances
//                                       and image pull, in seconds (the demo's --host-times; default
//                                       30,12,5, the README's estimate of an EC2 host; 0.5,0.5,0 is
//                                       the simulator's own speed)
//   the benches' own variables (NEBULA_BENCH_ROUNDS, NEBULA_BENCH_CYCLES, BENCH_DEPLOYMENTS, ...)
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const vitest = join(root, "node_modules/vitest/vitest.mjs");
const node = process.execPath;

const major = Number(process.versions.node.split(".")[0]);
if (major < 22) {
  console.error(
    `bench: Node.js ${process.versions.node} is too old; run \`source scripts/use-node24.sh\` first`,
  );
  process.exit(2);
}

/** Each bench: its package, a label for the progress line, where and what to run. */
const BENCHES = [
  {
    pkg: "@nebula/rollup",
    label: "rollup: roll-up vs counting pass",
    dir: "packages/rollup",
    args: [node, "bench/rollup.mjs"],
  },
  {
    pkg: "@nebula/state-mapping",
    label: "state-mapping: mapping vs parsing",
    dir: "packages/state-mapping",
    args: [node, "bench/poll.mjs"],
  },
  {
    pkg: "@nebula/userdata",
    label: "userdata: render time and sizes",
    dir: "packages/userdata",
    args: [node, vitest, "bench", "--run"],
  },
  {
    pkg: "@nebula/provider",
    label: "provider poll cycle against moto",
    dir: "packages/provider",
    args: [node, "bench/poll-cycle.mjs"],
    env: { NEBULA_BENCH_SIZES: process.env.NEBULA_BENCH_SIZES ?? "10,100,1000" },
  },
  {
    pkg: "@nebula/provider",
    label:
      "provider: 10 vnodes sharing one account's EC2 budget, with and without shares, against moto",
    dir: "packages/provider",
    args: [node, "bench/many-vnodes.mjs"],
  },
  {
    pkg: "@nebula/provider",
    label: "provider: exit → status, event channel on vs off, against moto",
    dir: "packages/provider",
    args: [node, "bench/exit-latency.mjs"],
  },
  {
    pkg: "@nebula/provider",
    label: "provider: instance-type planner at 1,000 Pending Pods, catalogue vs rules",
    dir: "packages/provider",
    args: [node, vitest, "bench", "--run"],
  },
  {
    pkg: "@nebula/demo-app",
    label:
      "demo world: Pod created → container running, warm pool vs cold launch, the same Pods in one run",
    dir: "apps/demo",
    args: [
      node,
      "dist/main.js",
      "--ci",
      "--only",
      "warm-pool",
      "--warm-rounds",
      process.env.NEBULA_BENCH_WARM_ROUNDS ?? "4",
      "--host-times",
      process.env.NEBULA_BENCH_HOST_TIMES ?? "30,12,5",
      "--timeout",
      "900",
    ],
    // The demo runs nebula-vnode and nebula-operator from their bundles.
    build: ["@nebula/vnode-app", "@nebula/operator-app"],
  },
  {
    pkg: "@nebula/test-peers",
    label: "test-peers: cached start-up",
    dir: "packages/test-peers",
    args: [node, vitest, "bench", "--run"],
  },
  {
    pkg: "@nebula/operator-app",
    label: "operator: reconcile throughput and latency",
    dir: "apps/operator",
    args: [node, vitest, "run", "--config", "vitest.bench.config.ts"],
  },
];

const only = process.env.NEBULA_BENCH_ONLY?.split(",").filter(Boolean);
const selected = only ? BENCHES.filter((b) => only.some((o) => b.pkg.includes(o))) : BENCHES;
const started = Date.now();
const elapsed = (since) => `${((Date.now() - since) / 1000).toFixed(0)} s`;
const say = (line) => process.stderr.write(`\n${line}\n`);
const projects = [...new Set(selected.flatMap((b) => [b.pkg, ...(b.build ?? [])]))];

say(`[0/${selected.length}] building ${projects.join(", ")}…`);
const build = spawnSync(
  node,
  [
    join(root, "node_modules/nx/dist/bin/nx.js"),
    "run-many",
    "-t",
    "build",
    "-p",
    projects.join(","),
    "--outputStyle=stream",
  ],
  { cwd: root, stdio: "inherit", env: { ...process.env, NX_DAEMON: "false" } },
);
if (build.status !== 0) {
  say(`bench: the build failed (exit ${build.status ?? build.signal}); no bench ran`);
  process.exit(1);
}

const dir = mkdtempSync(join(tmpdir(), "nebula-bench-"));
const rows = [];
const runs = [];
selected.forEach((bench, i) => {
  const out = join(dir, `${i}.jsonl`);
  writeFileSync(out, "");
  const t0 = Date.now();
  say(`[${i + 1}/${selected.length}] ${bench.label}… (${elapsed(started)} so far)`);
  const [command, ...args] = bench.args;
  const result = spawnSync(command, args, {
    cwd: join(root, bench.dir),
    stdio: "inherit",
    env: { ...process.env, ...bench.env, NEBULA_BENCH_OUT: out },
  });
  const lines = readFileSync(out, "utf8").split("\n").filter(Boolean);
  const figures = lines.map((line) => JSON.parse(line));
  const exit = result.status ?? result.signal ?? result.error?.message;
  const crashed = result.status !== 0 || figures.length === 0;
  runs.push({
    package: bench.pkg,
    command: bench.args.slice(1).join(" "),
    env: bench.env ?? {},
    exit,
    crashed,
    seconds: Math.round((Date.now() - t0) / 1000),
    figures: figures.length,
  });
  rows.push(...figures);
  say(
    `[${i + 1}/${selected.length}] ${bench.label}: ${crashed ? `CRASHED (exit ${exit}, ${figures.length} figures)` : `${figures.length} figures`} in ${elapsed(t0)}`,
  );
});
rmSync(dir, { recursive: true, force: true });

const num = (n) =>
  n === null || n === undefined
    ? "—"
    : Math.abs(n) >= 1000
      ? Math.round(n).toLocaleString("en-US")
      : String(Number(n.toPrecision(4)));
const table = [["figure", "value", "baseline", "ratio", "goal"]];
const groups = [...new Set(rows.map((r) => r.package))];
const lines = [];
for (const pkg of groups) {
  const body = rows
    .filter((r) => r.package === pkg)
    .map((r) => [
      r.figure,
      `${num(r.value)} ${r.unit}`,
      r.baseline === null ? "—" : `${num(r.baseline)} ${r.unit} (${r.baselineLabel})`,
      r.ratio === null ? "—" : `${num(r.ratio)}×`,
      r.goal ?? "—",
    ]);
  lines.push({ pkg, body });
  table.push(...body);
}
const widths = table[0].map((_, c) => Math.max(...table.map((row) => [...row[c]].length)));
const cell = (text, c) => {
  const pad = " ".repeat(widths[c] - [...text].length);
  return c === 1 || c === 3 ? pad + text : text + pad;
};
const format = (row) => `| ${row.map(cell).join(" | ")} |`;
const wallSeconds = Math.round((Date.now() - started) / 1000);
const print = [format(table[0]), format(widths.map((w) => "-".repeat(w)))];
for (const { pkg, body } of lines) {
  print.push(format([`**${pkg}**`, "", "", "", ""]));
  print.push(...body.map(format));
}
console.log(`\nBenchmarks (${wallSeconds} s in all):\n${print.join("\n")}`);
for (const run of runs.filter((r) => r.crashed))
  console.log(`CRASHED: ${run.package} (${run.command}) exit ${run.exit}`);

writeFileSync(
  join(root, "bench-results.json"),
  `${JSON.stringify(
    {
      startedAt: new Date(started).toISOString(),
      wallSeconds,
      node: process.versions.node,
      runs,
      rows,
    },
    null,
    2,
  )}\n`,
);
console.log("written: bench-results.json");
process.exit(runs.some((r) => r.crashed) ? 1 : 0);
