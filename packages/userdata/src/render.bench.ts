/**
 * Render time for a typical Pod and for the largest Pod that still fits, next to a floor (gzip of
 * the typical script alone, which every render pays), and the user-data sizes. Run: `npm run bench`
 * in this package. Ratios are measured side by side in this one run. The renderer measured is the
 * built bundle (`dist/index.js`, which the `bench` script builds first), as users run it.
 *
 * With NEBULA_BENCH_OUT=<file> set (the root `npm run bench` sets it) each figure is also appended
 * to that file as a JSON line {package, figure, value, unit, baseline, baselineLabel, ratio, goal}.
 */
import { randomBytes } from "node:crypto";
import { appendFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { expect, test } from "vitest";
import { typicalPod } from "./testing/pods.js";

const bundle = fileURLToPath(new URL("../dist/index.js", import.meta.url));
const { MAX_USER_DATA_BYTES, renderUserData }: typeof import("./index.js") = await import(bundle);

const typical = typicalPod();
const app = typical.spec?.containers[0] as V1Container;

/** A Pod with `count` copies of the typical app container. */
const manyContainers = (count: number): V1Pod =>
  typicalPod({
    containers: Array.from({ length: count }, (_, i) => ({ ...app, name: `app-${i}` })),
  });
/** The typical Pod plus one env var of `bytes` random base64 characters (barely compressible). */
const payload = randomBytes(64 * 1024).toString("base64");
const bigEnv = (bytes: number): V1Pod =>
  typicalPod({
    containers: [
      { ...app, env: [...(app.env ?? []), { name: "BLOB", value: payload.slice(0, bytes) }] },
    ],
  });

/** Largest n in [0, hi] for which `fits(n)`, by bisection. */
function largest(fits: (n: number) => boolean, hi: number): number {
  let lo = 0;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
const size = (pod: V1Pod) => {
  const r = renderUserData(pod);
  return r.ok ? r.value : undefined;
};

const maxContainers = largest((n) => size(manyContainers(n)) !== undefined, 500);
const maxEnv = largest((n) => size(bigEnv(n)) !== undefined, payload.length);
const typicalOut = size(typical);
const rows = [
  ["typical Pod (app + sidecar)", typicalOut],
  [
    `largest Pod of typical containers that fits (${maxContainers} containers)`,
    size(manyContainers(maxContainers)),
  ],
  [`typical Pod + largest random env value that fits (${maxEnv} bytes)`, size(bigEnv(maxEnv))],
] as const;
console.log(`\nuser-data sizes (EC2 limit ${MAX_USER_DATA_BYTES} bytes before base64):`);
for (const [what, out] of rows) {
  console.log(
    `  ${what}: ${out?.bytes} bytes${out?.gzipped ? " gzipped" : ""}, ${out ? Buffer.byteLength(out.script) : "?"} bytes in clear`,
  );
}

const largestPod = manyContainers(maxContainers);
const typicalScript = Buffer.from(typicalOut?.script ?? "");
let sink = 0;
const FLOOR = "floor: gzip of the typical script" as const;
const TYPICAL = "renderUserData, typical Pod" as const;
const LARGEST = `renderUserData, largest Pod (${maxContainers} containers)`;

test("render time", async ({ bench }) => {
  const results = await bench.compare(
    bench(FLOOR, () => {
      sink += gzipSync(typicalScript, { level: 9 }).length;
    }),
    bench(TYPICAL, () => {
      const r = renderUserData(typical);
      sink += r.ok ? r.value.bytes : 0;
    }),
    bench(LARGEST, () => {
      const r = renderUserData(largestPod);
      sink += r.ok ? r.value.bytes : 0;
    }),
    { time: 3_000, iterations: 20 },
  );
  const ms = (name: string, stat: "p50" | "mean") => results.get(name).latency[stat];
  const lines = [FLOOR, TYPICAL, LARGEST].map((name) => {
    const cells = (["p50", "mean"] as const).map(
      (stat) =>
        `${stat} ${ms(name, stat).toFixed(3).padStart(8)} ms ${(ms(name, stat) / ms(FLOOR, stat)).toFixed(1).padStart(5)}× floor`,
    );
    return `${name.padEnd(50)} ${cells.join("   ")}`;
  });
  console.log(`\nRender time:\n${lines.join("\n")}`);

  const out = process.env.NEBULA_BENCH_OUT;
  if (out) {
    const round = (n: number, digits: number) => Math.round(n * 10 ** digits) / 10 ** digits;
    const row = (
      figure: string,
      value: number | null,
      unit: string,
      baseline: number | null,
      baselineLabel: string | null,
      goal: string | null,
    ) => ({
      package: "@nebula/userdata",
      figure,
      value,
      unit,
      baseline,
      baselineLabel,
      ratio: value !== null && baseline ? round(value / baseline, 2) : null,
      goal,
    });
    const rowsOut = [
      ...[TYPICAL, LARGEST].map((name) =>
        row(
          `${name}, p50 (no goal)`,
          round(ms(name, "p50"), 3),
          "ms",
          round(ms(FLOOR, "p50"), 3),
          FLOOR,
          null,
        ),
      ),
      ...rows.map(([what, rendered]) =>
        row(
          `user-data size, ${what} (no baseline)`,
          rendered?.bytes ?? null,
          rendered?.gzipped ? "bytes gzipped" : "bytes",
          null,
          null,
          `≤ ${MAX_USER_DATA_BYTES} bytes (EC2 limit)`,
        ),
      ),
    ];
    appendFileSync(out, rowsOut.map((r) => `${JSON.stringify(r)}\n`).join(""));
  }
  expect(sink).toBeGreaterThan(0);
});
