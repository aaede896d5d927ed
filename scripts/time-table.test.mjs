import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { duration, summarize, tableLines, tasksOf } from "./time-table.mjs";

/** A task event as nx's TaskProfilingLifeCycle writes it (microseconds). */
const task = (project, target, startS, seconds, status = "success") => ({
  name: `${project}:${target}`,
  cat: `${project},${target}`,
  ph: "X",
  ts: startS * 1e6,
  dur: seconds * 1e6,
  pid: 1,
  tid: 0,
  args: { target: { project, target }, status },
});

const profile = [
  { name: "thread_name", ph: "M", pid: 1, tid: 0, ts: 0, args: { name: "Group #1" } },
  task("@nebula/vnode-app", "build", 100, 20),
  task("@nebula/vnode-app", "test-integration", 130, 1560),
  task("@nebula/rollup", "test", 120, 30, "failure"),
  task("@nebula/rollup", "build", 100, 8),
  { ph: "X", args: {} },
  "noise",
];

test("reads the tasks of an nx profile and ignores everything else", () => {
  const tasks = tasksOf(profile);
  assert.equal(tasks.length, 4);
  assert.deepEqual(tasks[0], {
    project: "@nebula/vnode-app",
    target: "build",
    seconds: 20,
    start: 100,
    status: "success",
  });
  assert.deepEqual(tasksOf({ not: "an array" }), []);
  assert.deepEqual(tasksOf(null), []);
});

test("sums per project and target, with the wall time from first start to last end", () => {
  const run = summarize(tasksOf(profile));
  assert.deepEqual(run.projects["@nebula/rollup"], { test: 30, build: 8 });
  assert.equal(run.wallSeconds, 1590);
  assert.equal(run.tasks, 4);
  assert.deepEqual(run.failed, ["@nebula/rollup:test"]);
});

test("prints the longest project first, the targets in their usual order, and the change since the previous run", () => {
  const run = summarize(tasksOf(profile));
  const previous = summarize(
    tasksOf([
      task("@nebula/vnode-app", "build", 0, 20),
      task("@nebula/vnode-app", "test", 0, 1500),
    ]),
  );
  const lines = tableLines(run, previous);
  assert.match(lines[0], /4 tasks.*wall 26m30s \(previous run 25m00s, \+1m30s\)/);
  assert.deepEqual(lines[1].trim().split(/\s+/), [
    "project",
    "build",
    "test",
    "test-integration",
    "total",
    "vs",
    "previous",
  ]);
  assert.deepEqual(lines[2].trim().split(/\s+/), [
    "@nebula/vnode-app",
    "20s",
    "-",
    "26m00s",
    "26m20s",
    "+1m00s",
  ]);
  assert.deepEqual(lines[3].trim().split(/\s+/), [
    "@nebula/rollup",
    "8s",
    "30s",
    "-",
    "38s",
    "new",
  ]);
  assert.equal(lines[4], "  failed: @nebula/rollup:test");
  // Without a previous run: no change column.
  assert.doesNotMatch(tableLines(run, undefined).join("\n"), /previous|new/);
});

test("durations read as minutes and seconds", () => {
  assert.equal(duration(7.4), "7s");
  assert.equal(duration(83), "1m23s");
  assert.equal(duration(3600), "60m00s");
});

test("the command prints the table, keeps the run as the next one's previous, and never fails on a bad profile", () => {
  const dir = mkdtempSync(join(tmpdir(), "time-table-"));
  try {
    const file = join(dir, "profile.json");
    const history = join(dir, "history.json");
    writeFileSync(file, JSON.stringify(profile));
    const script = new URL("./time-table.mjs", import.meta.url).pathname;
    const first = execFileSync("node", [script, file, "--history", history], { encoding: "utf8" });
    assert.match(first, /@nebula\/vnode-app/);
    assert.doesNotMatch(first, /previous/);
    assert.equal(JSON.parse(readFileSync(history, "utf8")).tasks, 4);
    const second = execFileSync("node", [script, file, "--history", history], { encoding: "utf8" });
    assert.match(second, /previous run 26m30s, ±0s/);
    writeFileSync(file, "{ not json");
    const bad = execFileSync("node", [script, file], { encoding: "utf8", stdio: "pipe" });
    assert.equal(bad, "");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
