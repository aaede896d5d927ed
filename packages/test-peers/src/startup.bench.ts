/**
 * Start-up cost of the peers from the cache (binaries built, venv installed): start, wait until
 * ready, stop; what a test run pays once in its global setup. Run: `npm run bench` in this package.
 *
 * With NEBULA_BENCH_OUT=<file> set (the root `npm run bench` sets it) each figure is also appended
 * to that file as a JSON line {package, figure, value, unit, baseline, baselineLabel, ratio, goal}.
 */
import { appendFileSync } from "node:fs";
import { expect, test } from "vitest";
import { startControlPlane } from "./control-plane.js";
import { startMoto } from "./moto.js";
import { startTestPeers } from "./peers.js";

const MOTO = "moto (start + stop)";
const CONTROL_PLANE = "control plane: etcd + kube-apiserver (start + stop)";
const BOTH = "whole set, side by side (startTestPeers + stop)";
const WHOLE_CONTROL_PLANE =
  "control plane + kube-controller-manager + kube-scheduler (start + stop)";
let started = 0;

test("cached start-up of the test peers", { timeout: 900_000 }, async ({ bench }) => {
  const results = await bench.compare(
    bench(MOTO, async () => {
      await (await startMoto()).stop();
      started++;
    }),
    bench(CONTROL_PLANE, async () => {
      await (await startControlPlane()).stop();
      started++;
    }),
    bench(BOTH, async () => {
      await (await startTestPeers()).stop();
      started++;
    }),
    bench(WHOLE_CONTROL_PLANE, async () => {
      await (await startControlPlane({ controllers: true, scheduler: true })).stop();
      started++;
    }),
    { time: 0, iterations: 3, warmupIterations: 0, warmupTime: 0 },
  );
  const lines = ([MOTO, CONTROL_PLANE, BOTH, WHOLE_CONTROL_PLANE] as const).map((name) => {
    const { mean, min, max } = results.get(name).latency;
    return `${name.padEnd(72)} mean ${(mean / 1000).toFixed(2)} s  (min ${(min / 1000).toFixed(2)}, max ${(max / 1000).toFixed(2)})`;
  });
  console.log(`\nCached start-up, 3 runs each:\n${lines.join("\n")}`);

  const out = process.env.NEBULA_BENCH_OUT;
  if (out) {
    type Name = typeof MOTO | typeof CONTROL_PLANE | typeof BOTH | typeof WHOLE_CONTROL_PLANE;
    const seconds = (name: Name) => Math.round(results.get(name).latency.mean / 10) / 100;
    const row = (name: Name, baselineName: Name | null) => {
      const baseline = baselineName === null ? null : seconds(baselineName);
      return {
        package: "@nebula/test-peers",
        figure: `${name}, mean of 3 (${baselineName === null ? "no baseline, " : ""}no goal)`,
        value: seconds(name),
        unit: "s",
        baseline,
        baselineLabel: baselineName,
        ratio: baseline ? Math.round((seconds(name) / baseline) * 100) / 100 : null,
        goal: null,
      };
    };
    const rows = [
      row(MOTO, null),
      row(CONTROL_PLANE, null),
      row(BOTH, CONTROL_PLANE),
      row(WHOLE_CONTROL_PLANE, CONTROL_PLANE),
    ];
    appendFileSync(out, rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
  }
  expect(started).toBeGreaterThanOrEqual(12);
});
