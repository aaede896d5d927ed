#!/usr/bin/env node
/**
 * What failed in an `nx run-many` log, in a few lines: for each failed test (vitest's `FAIL` lines),
 * its task, its name and the first lines of its error; vitest's unhandled errors; TypeScript's
 * errors. `npm test` prints it last, after the time table, so that a CI log that keeps only its
 * tail still says which test failed and why (a run once failed with "@nebula/provider:test-integration"
 * as the only clue left).
 *
 *   node scripts/failure-digest.mjs <nx-run.log> [--max-lines N]
 *
 * Prints nothing when the log holds no failure it recognises; exits 0 either way (a digest never
 * changes a run's result), 2 on a usage error.
 */
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI escapes are what this removes
const ANSI = /\u001b\[[0-9;?]*[A-Za-z]/g;
const TASK = /^> nx run (\S+)/;
const FAIL = /^\s*FAIL\s+(\S.*)$/;
const UNHANDLED = /Unhandled (Error|Rejection)/;
const TS_ERROR = /error TS\d+:/;
/** A code frame or stack line of vitest's error report: not part of the message. */
const FRAME = /^\s*(\d+\||\||❯|at |⎯|\^)/;

/**
 * The digest of one log's text: an array of lines (empty for none). Total: any text gets an answer.
 *
 * @param {string} text the log, ANSI colours and all
 * @param {{ maxLines?: number, errorLines?: number }} [options]
 * @returns {string[]}
 */
export function digest(text, options = {}) {
  const maxLines = options.maxLines ?? 80;
  const errorLines = options.errorLines ?? 4;
  const lines = String(text).replace(ANSI, "").split(/\r?\n/);
  /** @type {Map<string, string[]>} task → its digest lines */
  const byTask = new Map();
  const seen = new Set();
  let task = "(no nx task)";
  const add = (line) => {
    const list = byTask.get(task) ?? [];
    byTask.set(task, list);
    list.push(line);
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const header = TASK.exec(line);
    if (header) {
      task = header[1] ?? task;
      continue;
    }
    const failed = FAIL.exec(line);
    const unhandled = UNHANDLED.test(line) && /⎯/.test(line);
    if (failed || unhandled) {
      const title = failed ? `FAIL ${(failed[1] ?? "").trim()}` : line.replace(/⎯/g, "").trim();
      // vitest names a failed test twice (the run's list, the summary): keep it once per task.
      const key = `${task}\u0000${title}`;
      const message = [];
      for (let j = i + 1; j < lines.length && message.length < errorLines; j++) {
        const next = (lines[j] ?? "").trimEnd();
        if (FAIL.test(next) || TASK.test(next)) break;
        if (next.trim() === "") {
          if (message.length > 0) break;
          continue;
        }
        if (FRAME.test(next)) {
          if (message.length > 0) break;
          continue;
        }
        message.push(`    ${next.trim().slice(0, 300)}`);
      }
      if (seen.has(key) && message.length === 0) continue;
      if (seen.has(key)) {
        // The summary's copy carries the error: replace the bare one from the run's list.
        const list = byTask.get(task) ?? [];
        const at = list.indexOf(`  ${title}`);
        if (at >= 0 && !(list[at + 1] ?? "").startsWith("    ")) list.splice(at, 1);
        else continue;
      }
      seen.add(key);
      add(`  ${title}`);
      for (const m of message) add(m);
      continue;
    }
    if (TS_ERROR.test(line)) {
      const key = `${task}\u0000${line.trim()}`;
      if (seen.has(key)) continue;
      seen.add(key);
      add(`  ${line.trim().slice(0, 300)}`);
    }
  }
  if (byTask.size === 0) return [];
  const out = ["what failed (from the tasks' output above; the whole of it is there):"];
  for (const [name, list] of byTask) {
    out.push(` ${name}`);
    out.push(...list);
  }
  if (out.length > maxLines) {
    const cut = out.length - (maxLines - 1);
    return [...out.slice(0, maxLines - 1), `  … ${cut} more lines: see the tasks' output above`];
  }
  return out;
}

function main(argv) {
  const [file, ...rest] = argv;
  let maxLines = 80;
  if (rest[0] === "--max-lines") maxLines = Number(rest[1]);
  if (file === undefined || file === "--help" || !Number.isInteger(maxLines) || maxLines < 2) {
    console.error("usage: node scripts/failure-digest.mjs <nx-run.log> [--max-lines N]");
    return file === "--help" ? 0 : 2;
  }
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    console.error(`failure-digest: cannot read ${file}: ${error.message}`);
    return 0;
  }
  for (const line of digest(text, { maxLines })) console.log(line);
  return 0;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  process.exitCode = main(process.argv.slice(2));
}
