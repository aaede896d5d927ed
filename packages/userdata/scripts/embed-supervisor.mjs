// Regenerates src/supervisor.sh.ts from the supervisor's fragments, src/supervisor/*.sh joined in
// the order of src/supervisor/fragments.ts (their shellcheck headers dropped), so the bash source
// stays real, shellcheck-able files while the package ships it as a string constant (no fs at
// render time), stripped of comment lines, blank lines and indentation (src/strip-shell.ts) to keep
// the user-data small. It also names the text of the Parameter Store delivery's own fragments
// (PARAMETERS_ONLY_FRAGMENTS) inside that script, which the user-data delivery leaves out.
// Run: npm run embed (a unit test fails when the two differ).
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { stripShell } from "../src/strip-shell.ts";
import {
  assembleShell,
  PARAMETERS_ONLY_FRAGMENTS,
  SUPERVISOR_FRAGMENTS,
} from "../src/supervisor/fragments.ts";

const read = (name) => readFileSync(new URL(`../src/supervisor/${name}`, import.meta.url), "utf8");
const source = stripShell(assembleShell(SUPERVISOR_FRAGMENTS.map(read)));
const without = stripShell(
  assembleShell(
    SUPERVISOR_FRAGMENTS.filter((name) => !PARAMETERS_ONLY_FRAGMENTS.includes(name)).map(read),
  ),
);
// The parameters-only fragments are consecutive in SUPERVISOR_FRAGMENTS: their stripped lines are
// one run of lines of the whole script, and removing that run gives the script without them.
let start = 0;
while (source[start] === without[start]) start++;
start = source.lastIndexOf("\n", start - 1) + 1;
const part = source.slice(start, start + source.length - without.length);
if (source.replace(part, "") !== without || part === "" || !part.endsWith("\n")) {
  throw new Error("the parameters-only fragments must be consecutive in SUPERVISOR_FRAGMENTS");
}
const out = `// Generated from src/supervisor/*.sh by scripts/embed-supervisor.mjs. Do not edit; run \`npm run embed\`.
// biome-ignore-all lint/suspicious/noTemplateCurlyInString: bash source text, not a JavaScript template

/**
 * The host supervisor's bash source (its fragments joined, comment lines, blank lines and indentation stripped), with \`@@NAME@@\` placeholders for the
 * exit-report constants of \`@nebula/state-mapping\` (filled in by {@link supervisorScript}).
 */
export const SUPERVISOR_TEMPLATE: string =
  ${JSON.stringify(source)};

/**
 * The lines of {@link SUPERVISOR_TEMPLATE} that only the Parameter Store delivery needs (the
 * fragments of \`PARAMETERS_ONLY_FRAGMENTS\`): the user-data delivery installs the script without them.
 */
export const PARAMETERS_ONLY_PART: string =
  ${JSON.stringify(part)};
`;
const target = fileURLToPath(new URL("../src/supervisor.sh.ts", import.meta.url));
writeFileSync(target, out);
// Format as the repository does, so regenerating leaves no diff.
execFileSync("npx", ["biome", "format", "--write", target], { stdio: "ignore" });
