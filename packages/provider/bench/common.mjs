// What the provider's benches share: the figure line for `npm run bench`, a bounded parallel map,
// and a median. Not a test helper: each bench measures with these and prints, never asserts.
import { appendFileSync } from "node:fs";

/**
 * Appends one figure to NEBULA_BENCH_OUT (set by the root `npm run bench`) as a JSON line
 * {package, figure, value, unit, baseline, baselineLabel, ratio, goal}; nothing when it is unset.
 * `ratio` is value / baseline unless the bench measured it itself (the median of its rounds).
 */
export function record(
  figure,
  value,
  unit,
  baseline = null,
  baselineLabel = null,
  goal = null,
  measuredRatio = undefined,
) {
  const out = process.env.NEBULA_BENCH_OUT;
  if (!out) return;
  const ratio = measuredRatio ?? (baseline ? Math.round((value / baseline) * 100) / 100 : null);
  const row = {
    package: "@nebula/provider",
    figure,
    value,
    unit,
    baseline,
    baselineLabel,
    ratio,
    goal,
  };
  appendFileSync(out, `${JSON.stringify(row)}\n`);
}

/** Runs `task` over `items` with at most `limit` calls in flight. */
export async function inParallel(items, limit, task) {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) await task(items[next++]);
    }),
  );
}

/** The median of a list of numbers. */
export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}
