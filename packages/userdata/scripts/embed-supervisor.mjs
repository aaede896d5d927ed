// Regenerates src/supervisor.sh.ts from the supervisor's fragments, src/supervisor/*.sh joined in
// the order of src/supervisor/fragments.ts (their shellcheck headers dropped), so the bash source
// stays real, shellcheck-able files while the package ships it as a string constant (no fs at
// render time), stripped of comment lines, blank lines and indentation (src/strip-shell.ts) to keep
// the user-data small.
// Run: npm run embed (a unit test fails when the two differ).
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { stripShell } from "../src/strip-shell.ts";
import { assembleShell, SUPERVISOR_FRAGMENTS } from "../src/supervisor/fragments.ts";

const fragments = SUPERVISOR_FRAGMENTS.map((name) =>
  readFileSync(new URL(`../src/supervisor/${name}`, import.meta.url), "utf8"),
);
const source = stripShell(assembleShell(fragments));
const out = `// Generated from src/supervisor/*.sh by scripts/embed-supervisor.mjs. Do not edit; run \`npm run embed\`.
// biome-ignore-all lint/suspicious/noTemplateCurlyInString: bash source text, not a JavaScript template

/**
 * The host supervisor's bash source (its fragments joined, comment lines, blank lines and indentation stripped), with \`@@NAME@@\` placeholders for the
 * exit-report constants of \`@nebula/state-mapping\` (filled in by {@link supervisorScript}).
 */
export const SUPERVISOR_TEMPLATE: string =
  ${JSON.stringify(source)};
`;
const target = fileURLToPath(new URL("../src/supervisor.sh.ts", import.meta.url));
writeFileSync(target, out);
// Format as the repository does, so regenerating leaves no diff.
execFileSync("npx", ["biome", "format", "--write", target], { stdio: "ignore" });
