import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";

const common = readFileSync(new URL("./common.sh", import.meta.url), "utf8");

/** The text of shell function `name` as common.sh defines it. */
function shellFunction(name: string): string {
  const found = common.match(new RegExp(`^${name}\\(\\) \\{\\n[\\s\\S]*?^\\}\\n`, "m"));
  if (!found) throw new Error(`common.sh defines no function ${name}`);
  return found[0];
}

/** PIDs of the live processes whose environment holds `KILL_TREE_MARK=<mark>`. */
function marked(mark: string): number[] {
  const found: number[] = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
      if (env.includes(`KILL_TREE_MARK=${mark}`)) found.push(Number(pid));
    } catch {}
  }
  return found;
}

const marks: string[] = [];
afterEach(() => {
  // Nothing a test started outlives it, whatever it asserted.
  for (const mark of marks.splice(0))
    for (const pid of marked(mark)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {}
    }
});

/** Runs `script` under bash with kill_tree defined and `KILL_TREE_MARK=<mark>`; it must exit 0. */
function runMarked(script: string, mark: string): void {
  const run = spawnSync("bash", ["-c", `${shellFunction("kill_tree")}\n${script}`], {
    env: { ...process.env, KILL_TREE_MARK: mark },
    encoding: "utf8",
    timeout: 20_000,
  });
  expect(run.status, run.stderr).toBe(0);
}

/** Waits up to `ms` for no marked process to be left; returns those that are. */
async function leftAfter(mark: string, ms: number): Promise<number[]> {
  const end = Date.now() + ms;
  let left = marked(mark);
  while (left.length > 0 && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50));
    left = marked(mark);
  }
  return left;
}

describe("kill_tree", () => {
  it("leaves no descendant of a process that keeps starting children while it is killed", async () => {
    const mark = randomUUID();
    marks.push(mark);
    // The loop starts a 30 s sleep every few milliseconds: one started between the listing of its
    // children and its own kill would outlive it (4 to 12 did, of each run, before kill_tree
    // stopped a process before listing its children).
    const script = `( while :; do sleep 30 & sleep 0.005; done ) >/dev/null 2>&1 &
loop=$!
sleep 0.05
kill_tree "$loop"
wait "$loop" || :
`;
    runMarked(script, mark);
    expect(await leftAfter(mark, 2000)).toEqual([]);
  });

  it("kills every level of a tree (a loop, the shell under it, that shell's command)", async () => {
    const mark = randomUUID();
    marks.push(mark);
    const script = `( while :; do bash -c 'sleep 30; :'; done ) >/dev/null 2>&1 &
loop=$!
sleep 0.3
kill_tree "$loop"
wait "$loop" || :
`;
    runMarked(script, mark);
    expect(await leftAfter(mark, 2000)).toEqual([]);
  });
});
