import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { expect, it } from "vitest";
import { renderUserData, supervisorScript } from "./index.js";
import { renderPoolUserData } from "./pool/index.js";

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const example = /```js\n([\s\S]*?)```/.exec(readme)?.[1] ?? "";
const IMPORT = 'import { renderUserData } from "@nebula/userdata";\n';
/** The statements of a script: its leading comment lines dropped. */
const statements = (code: string) => code.replace(/^(\/\/.*\n)+/, "");

it("ships the README's first example as examples/render.mjs", () => {
  const file = readFileSync(new URL("../examples/render.mjs", import.meta.url), "utf8");
  expect(statements(example)).toBe(statements(file));
});

// The README's first example, run against the source (its import bound to this package's
// renderUserData, `console` captured): it prints exactly the line the README shows.
it("prints what the README says it prints", () => {
  const printed = /^prints `([^`]*)`/m.exec(readme)?.[1];
  expect(printed).toMatch(/^user-data: \d+ bytes/);
  const body = statements(example);
  expect(body.startsWith(IMPORT)).toBe(true);
  const lines: string[] = [];
  const console = {
    log: (...parts: unknown[]) => lines.push(parts.join(" ")),
    error: (...parts: unknown[]) => lines.push(`error: ${parts.join(" ")}`),
  };
  const process = {
    exit: (code: number) => {
      throw new Error(`the example exited with ${code}: ${lines.join("\n")}`);
    },
  };
  const run = new Function("renderUserData", "console", "process", body.slice(IMPORT.length));
  run(renderUserData, console, process);
  expect(lines).toEqual([printed]);
});

// The README's size figures of the supervisor as installed stay true.
it("states the supervisor's size as it is", () => {
  const match = /about (\d+) KB of bash, ([\d.]+) KB gzipped/.exec(readme.replace(/\s+/g, " "));
  const script = Buffer.from(supervisorScript(), "utf8");
  expect([match?.[1], match?.[2]]).toEqual([
    String(Math.round(script.length / 1000)),
    (gzipSync(script, { level: 9 }).length / 1000).toFixed(1),
  ]);
  // And the figure of the example's user-data is the one the example prints.
  const printed = /^prints `user-data: (\d+) bytes/m.exec(readme)?.[1];
  expect(readme.replace(/\s+/g, " ")).toContain(`the README example above is ${printed} bytes`);
  // Issue #14: the typical Pod's user-data fits 8 KiB (the supervisor travels in parameters).
  expect(Number(printed)).toBeLessThanOrEqual(8192);
});

// The README's size figure of the warm-pool user-data stays true, and far under EC2's 16 KiB.
it("states the pool user-data's size as it is", () => {
  const match = /`renderPoolUserData\(\{ images: \["busybox:1\.36"\] \}\)` is (\d+) bytes/.exec(
    readme.replace(/\s+/g, " "),
  );
  const { bytes } = renderPoolUserData({ images: ["busybox:1.36"] });
  expect(match?.[1]).toBe(String(bytes));
  expect(bytes).toBeLessThanOrEqual(8192);
});
