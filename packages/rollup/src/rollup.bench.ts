/**
 * Roll-up cost per instance for 10,000 instances, next to the floor: one plain pass that only
 * counts the instances (ready, and not ready by reason). Run: `npm run bench` in this package.
 * The figure to report is the ratio, measured side by side in this one run.
 *
 * Mix: 60 % ready; the rest spread over InstanceCrashing, ImageUnavailable, Provisioning and
 * OutOfMemory, with up to 21 distinct messages. The roll-up is run as the operator runs it: with the
 * previously stored conditions passed in.
 *
 * The roll-up measured is the built bundle (`dist/index.js`, which the `bench` script builds
 * first), as users run it: importing `src/` through Vitest's module runner would put an export
 * getter on every call between modules and measure the test harness, not the code.
 */
import { fileURLToPath } from "node:url";
import { expect, test } from "vitest";
import type { InstanceInput } from "./deployment.js";

const bundle = fileURLToPath(new URL("../dist/index.js", import.meta.url));
const { rollupWorkloadDeployment }: typeof import("./index.js") = await import(bundle);

const INSTANCES = 10_000;
const REASONS = ["InstanceCrashing", "ImageUnavailable", "Provisioning", "OutOfMemory"];

const instances: InstanceInput[] = Array.from({ length: INSTANCES }, (_, i) => {
  if (i % 10 < 6) return { name: `web-${i}`, ready: true, reason: "Ready" };
  return {
    name: `web-${i}`,
    ready: false,
    reason: REASONS[i % REASONS.length] ?? "Provisioning",
    message: `container "app" has exited and restarted ${i % 7} times without staying up for 5 minutes. Its last exit was with code ${i % 3}.`,
  };
});
const input = { desiredReplicas: INSTANCES, generation: 3, instances };
const now = new Date("2026-11-30T05:00:00Z");
const previous = rollupWorkloadDeployment(input, { now }).conditions;

let sink = 0;

const FLOOR = "floor: one pass counting ready / not ready by reason" as const;
const ROLLUP = "rollupWorkloadDeployment (tally, messages, conditions)" as const;

function floor(): void {
  let ready = 0;
  const byReason = new Map<string, number>();
  for (const instance of instances) {
    if (instance.ready) ready++;
    else {
      const reason = instance.reason ?? "";
      byReason.set(reason, (byReason.get(reason) ?? 0) + 1);
    }
  }
  sink += ready + byReason.size;
}

function rollup(): void {
  sink += rollupWorkloadDeployment(input, { now, previous }).readyReplicas;
}

test(`roll-up of ${INSTANCES} instances`, async ({ bench }) => {
  const results = await bench.compare(bench(FLOOR, floor), bench(ROLLUP, rollup), {
    time: 3_000,
    iterations: 20,
  });
  // Medians, because the mean on a shared 2-core machine is dominated by GC and scheduling
  // outliers; the mean is printed beside it.
  const perInstanceNs = (name: typeof FLOOR | typeof ROLLUP, stat: "p50" | "mean") =>
    (results.get(name).latency[stat] * 1e6) / INSTANCES;
  const lines = [FLOOR, ROLLUP].map((name) => {
    const cells = (["p50", "mean"] as const).map((stat) => {
      const ns = perInstanceNs(name, stat);
      const ratio = ns / perInstanceNs(FLOOR, stat);
      return `${stat} ${ns.toFixed(1).padStart(7)} ns/instance ${ratio.toFixed(1).padStart(5)}× floor`;
    });
    return `${name.padEnd(56)} ${cells.join("   ")}`;
  });
  console.log(`\nPer instance, ${INSTANCES} instances:\n${lines.join("\n")}`);
  expect(sink).toBeGreaterThan(0);
});
