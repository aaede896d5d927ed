import { readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { renderUserData } from "./index.js";

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
