import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { digest } from "./failure-digest.mjs";

const here = dirname(fileURLToPath(import.meta.url));
// A real `nx run-many -t test --outputStyle=static` log (colours and all): one task with two
// failing vitest tests, then a task that passed.
const fixture = readFileSync(join(here, "failure-digest.fixture.log"), "utf8");

test("names each failed test once, under its task, with the first line of its error", () => {
  assert.deepEqual(digest(fixture), [
    "what failed (from the tasks' output above; the whole of it is there):",
    " @nebula/test-peers:test",
    "  FAIL src/zz-digest-sample.test.ts > a group > fails with a message",
    "    AssertionError: expected { phase: 'Running' } to deeply equal { phase: 'Succeeded' }",
    "  FAIL src/zz-digest-sample.test.ts > throws",
    "    Error: the instance i-123 is still running after 30 s",
  ]);
});

test("says nothing for a log without failures", () => {
  assert.deepEqual(digest("> nx run a:test\n ✓ src/a.test.ts (3 tests)\n"), []);
  assert.deepEqual(digest(""), []);
});

test("keeps unhandled errors and TypeScript errors, and their tasks", () => {
  const log = [
    "> nx run @nebula/kube:test-integration",
    "⎯⎯⎯⎯ Unhandled Errors ⎯⎯⎯⎯",
    "",
    "Vitest caught 1 unhandled error during the test run.",
    "⎯⎯⎯⎯ Unhandled Rejection ⎯⎯⎯⎯",
    "Error: socket hang up",
    " ❯ Socket.emit node:events:1",
    "> nx run @nebula/api:typecheck",
    "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
    "src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
  ].join("\n");
  assert.deepEqual(digest(log), [
    "what failed (from the tasks' output above; the whole of it is there):",
    " @nebula/kube:test-integration",
    "  Unhandled Errors",
    "    Vitest caught 1 unhandled error during the test run.",
    "  Unhandled Rejection",
    "    Error: socket hang up",
    " @nebula/api:typecheck",
    "  src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
  ]);
});

test("cuts a long digest to its limit, saying how much is left out", () => {
  const log = Array.from({ length: 50 }, (_, i) => ` FAIL src/t${i}.test.ts > case`).join("\n");
  const lines = digest(log, { maxLines: 10 });
  assert.equal(lines.length, 10);
  assert.match(lines.at(-1) ?? "", /… 43 more lines/);
});

test("answers any text without throwing", () => {
  for (const text of ["\u001b[", "FAIL", " FAIL ", "> nx run", "⎯ Unhandled Error ⎯\n", "\r\n\r\n"])
    assert.ok(Array.isArray(digest(text)));
});

test("the command prints the digest and exits 0; a missing file is said, not fatal", () => {
  const script = join(here, "failure-digest.mjs");
  const ok = spawnSync(process.execPath, [script, join(here, "failure-digest.fixture.log")], {
    encoding: "utf8",
  });
  assert.equal(ok.status, 0);
  assert.match(ok.stdout, /FAIL src\/zz-digest-sample.test.ts > throws/);
  const missing = spawnSync(process.execPath, [script, join(here, "no-such.log")], {
    encoding: "utf8",
  });
  assert.equal(missing.status, 0);
  assert.match(missing.stderr, /cannot read/);
  assert.equal(spawnSync(process.execPath, [script], { encoding: "utf8" }).status, 2);
});
