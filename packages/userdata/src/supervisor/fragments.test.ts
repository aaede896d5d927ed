import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stripShell } from "../strip-shell.js";
import { SUPERVISOR_TEMPLATE } from "../supervisor.sh.js";
import { assembleShell, SUPERVISOR_FRAGMENTS } from "./fragments.js";

const read = (name: string) => readFileSync(new URL(`./${name}`, import.meta.url), "utf8");

describe("the supervisor's fragments", () => {
  it("are the .sh files of src/supervisor, each listed once", () => {
    const files = readdirSync(new URL(".", import.meta.url)).filter((f) => f.endsWith(".sh"));
    expect([...SUPERVISOR_FRAGMENTS].sort()).toEqual(files.sort());
    expect(new Set(SUPERVISOR_FRAGMENTS).size).toBe(SUPERVISOR_FRAGMENTS.length);
  });

  it("are embedded joined in order, without comments (run `npm run embed` after editing one)", () => {
    const source = assembleShell(SUPERVISOR_FRAGMENTS.map(read));
    expect(SUPERVISOR_TEMPLATE).toBe(stripShell(source));
    expect(SUPERVISOR_TEMPLATE.length).toBeLessThan(source.length * 0.85);
    expect(SUPERVISOR_TEMPLATE).not.toMatch(/^\s*#(?!!|\s*shellcheck)/m);
    expect(SUPERVISOR_TEMPLATE).not.toMatch(/^\s*$\n/m);
    // The fragments' own shellcheck headers stay out of the installed script.
    expect(SUPERVISOR_TEMPLATE).not.toContain("shellcheck shell=");
    expect(SUPERVISOR_TEMPLATE.match(/^#!/gm)).toHaveLength(1);
    expect(SUPERVISOR_TEMPLATE.endsWith('\nmain "$@"\n')).toBe(true);
  });
});

/**
 * What bash defines from a script sourced without its last line (`main "$@"`): its functions as
 * `declare -f` prints them (bash's own layout, strings byte for byte) and the globals it sets.
 */
function definitions(script: string): string {
  const dir = mkdtempSync(join(tmpdir(), "nebula-strip-"));
  const file = join(dir, "script.sh");
  writeFileSync(file, script.replace(/\nmain "\$@"\n$/, "\n"));
  const run = spawnSync(
    "bash",
    [
      "-c",
      'before=$(compgen -v); . "$1" >/dev/null 2>&1; declare -f; for v in $(compgen -v); do grep -qxF "$v" <<<"$before" || declare -p "$v"; done',
      "_",
      file,
    ],
    { encoding: "utf8" },
  );
  rmSync(dir, { recursive: true, force: true });
  expect(run.status).toBe(0);
  return run.stdout;
}

describe("stripShell", () => {
  it("changes nothing bash defines from the supervisor (no comment, blank line or indentation is data)", () => {
    const source = assembleShell(SUPERVISOR_FRAGMENTS.map(read));
    const stripped = definitions(stripShell(source));
    expect(stripped).toContain("report () \n{");
    expect(stripped).toContain('declare -- STATE="/var/lib/nebula"');
    expect(stripped).toBe(definitions(source));
  });

  it("drops comment lines, blank lines and indentation, keeping the shebang and shellcheck directives", () => {
    expect(
      stripShell(
        "#!/bin/bash\n# a comment\n\nf() {\n  # shellcheck disable=SC2034\n  x=1 # kept\n}\n",
      ),
    ).toBe("#!/bin/bash\nf() {\n# shellcheck disable=SC2034\nx=1 # kept\n}\n");
  });

  it("would change a multi-line string, which this check then catches (the supervisor has none)", () => {
    const script = 'f() {\n  echo "a\n  b"\n}\nmain "$@"\n';
    expect(definitions(stripShell(script))).not.toBe(definitions(script));
  });
});

describe("assembleShell", () => {
  it("keeps the first fragment's shebang, drops every header, and joins the rest in order", () => {
    const script = assembleShell([
      "#!/bin/bash\n# shellcheck disable=SC2034 # header\n\n# one\na=1\n",
      "# shellcheck shell=bash\n# header\n\nb() { :; }\n\nc=2\n",
      "# shellcheck shell=bash\n\nmain\n",
    ]);
    expect(script).toBe("#!/bin/bash\n# one\na=1\n\nb() { :; }\n\nc=2\n\nmain\n");
  });

  it("refuses a fragment without a header, with code in its header, or a misplaced shebang", () => {
    const good = "# shellcheck shell=bash\n\nx=1\n";
    expect(() => assembleShell(["#!/bin/bash\nx=1\n"])).toThrow(/no header/);
    expect(() => assembleShell(["#!/bin/bash\nset -e\n\nx=1\n"])).toThrow(/code in its header/);
    expect(() => assembleShell([good])).toThrow(/shebang/);
    expect(() => assembleShell(["#!/bin/bash\n\n", "#!/bin/bash\n\nx=1\n"])).toThrow(/shebang/);
  });
});
