#!/usr/bin/env node
// The time table printed at the end of `npm test` (scripts/run.sh): how long each project's tasks
// took in this run, read from the profile nx writes when NX_PROFILE names a file, beside the
// previous run's figures on this machine, so drift shows before the CI limit is reached.
//
//   node scripts/time-table.mjs <nx profile.json> [--history <file.json>]
//
// With --history, the previous run is read from that file (if there is one) and this run is
// written to it. Exits 0 whatever the profile holds: the table informs, it never fails a run.

import { readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";

/**
 * The tasks of an nx profile (Chrome trace events, `ph: "X"`, one per task) as
 * `{ project, target, seconds, status }`. Anything else in the file is ignored.
 *
 * @param {unknown} profile the parsed profile
 * @returns {{ project: string, target: string, seconds: number, start: number, status: string }[]}
 */
export function tasksOf(profile) {
  if (!Array.isArray(profile)) return [];
  const tasks = [];
  for (const event of profile) {
    if (event === null || typeof event !== "object" || event.ph !== "X") continue;
    const target = event.args?.target;
    const project = typeof target?.project === "string" ? target.project : undefined;
    const name = typeof target?.target === "string" ? target.target : undefined;
    if (project === undefined || name === undefined) continue;
    const dur = Number(event.dur);
    const ts = Number(event.ts);
    if (!Number.isFinite(dur) || !Number.isFinite(ts)) continue;
    tasks.push({
      project,
      target: name,
      seconds: dur / 1e6,
      start: ts / 1e6,
      status: typeof event.args?.status === "string" ? event.args.status : "unknown",
    });
  }
  return tasks;
}

/** `83` → `1m23s`; `7.4` → `7s`. */
export function duration(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}

/** The change from `before` to `now` in whole seconds, signed; empty when there is no `before`. */
function change(now, before) {
  if (before === undefined) return "";
  const d = Math.round(now - before);
  if (d === 0) return "±0s";
  return `${d > 0 ? "+" : "-"}${duration(Math.abs(d))}`;
}

/**
 * This run's figures: seconds per project and target, each project's total, and the run's wall
 * time (first task start to last task end).
 *
 * @param {ReturnType<typeof tasksOf>} tasks
 */
export function summarize(tasks) {
  /** @type {Record<string, Record<string, number>>} */
  const projects = {};
  let first = Number.POSITIVE_INFINITY;
  let last = Number.NEGATIVE_INFINITY;
  const failed = [];
  for (const t of tasks) {
    projects[t.project] ??= {};
    projects[t.project][t.target] = (projects[t.project][t.target] ?? 0) + t.seconds;
    first = Math.min(first, t.start);
    last = Math.max(last, t.start + t.seconds);
    if (t.status === "failure") failed.push(`${t.project}:${t.target}`);
  }
  return {
    projects,
    wallSeconds: tasks.length === 0 ? 0 : last - first,
    tasks: tasks.length,
    failed,
  };
}

/**
 * The table's lines: one row per project, longest first, a column per target, the total, and the
 * change since `previous` (a {@link summarize} result of an earlier run) where there is one.
 *
 * @param {ReturnType<typeof summarize>} run
 * @param {ReturnType<typeof summarize> | undefined} previous
 * @returns {string[]}
 */
export function tableLines(run, previous) {
  const total = (p) => Object.values(p ?? {}).reduce((a, b) => a + b, 0);
  const targets = [...new Set(Object.values(run.projects).flatMap((p) => Object.keys(p)))].sort(
    (a, b) => order(a) - order(b) || a.localeCompare(b),
  );
  const names = Object.keys(run.projects).sort(
    (a, b) => total(run.projects[b]) - total(run.projects[a]) || a.localeCompare(b),
  );
  const header = ["project", ...targets, "total", previous ? "vs previous" : ""];
  const rows = names.map((name) => {
    const p = run.projects[name];
    const before = previous?.projects?.[name];
    return [
      name,
      ...targets.map((t) => (p[t] === undefined ? "-" : duration(p[t]))),
      duration(total(p)),
      before === undefined ? (previous ? "new" : "") : change(total(p), total(before)),
    ];
  });
  const widths = header.map((_, i) => Math.max(...[header, ...rows].map((r) => r[i].length)));
  const line = (r) =>
    `  ${r.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join("  ")}`.trimEnd();
  const wall = `${duration(run.wallSeconds)}${previous ? ` (previous run ${duration(previous.wallSeconds)}, ${change(run.wallSeconds, previous.wallSeconds)})` : ""}`;
  return [
    `time per project (nx, ${run.tasks} tasks; wall ${wall}; tasks run side by side, so the totals add up to more)`,
    line(header),
    ...rows.map(line),
    ...(run.failed.length > 0 ? [`  failed: ${run.failed.join(", ")}`] : []),
  ];
}

/** The usual order of the targets, the rest after them. */
function order(target) {
  const known = ["build", "typecheck", "test", "check-package", "test-integration"];
  const i = known.indexOf(target);
  return i === -1 ? known.length : i;
}

function main() {
  const { values, positionals } = parseArgs({
    options: { history: { type: "string" } },
    allowPositionals: true,
  });
  const [file] = positionals;
  if (file === undefined) {
    console.error("usage: node scripts/time-table.mjs <nx profile.json> [--history <file.json>]");
    process.exit(2);
  }
  let profile;
  try {
    profile = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    console.error(`nebula: no time table: could not read the nx profile ${file}: ${error.message}`);
    return;
  }
  const run = summarize(tasksOf(profile));
  let previous;
  if (values.history !== undefined) {
    try {
      previous = JSON.parse(readFileSync(values.history, "utf8"));
    } catch {
      previous = undefined;
    }
    if (previous === null || typeof previous !== "object" || typeof previous.projects !== "object")
      previous = undefined;
  }
  for (const l of tableLines(run, previous)) console.log(l);
  if (values.history !== undefined && run.tasks > 0) {
    try {
      writeFileSync(values.history, `${JSON.stringify(run)}\n`);
    } catch (error) {
      console.error(
        `nebula: could not keep this run's times in ${values.history}: ${error.message}`,
      );
    }
  }
}

if (import.meta.url === `file://${process.argv[1]}`) main();
