/**
 * What a test host leaves running when a test ends early, found from /proc and killed: the guest's
 * own processes (the supervisor, its subshells, a `docker` call still on its way), and, as the last
 * resort, a `conmon` of a private podman root whose container `podman rm` did not remove. Killing
 * only the supervisor's PID is not enough: a `podman run` it had started goes on, and the container
 * it creates after the suite's clean-up outlives the suite (its conmon and network namespace stay
 * on the machine, with the root they belong to deleted). Nor may that `podman run` be killed
 * half-way: podman has no daemon, and a `podman run` or `start` killed between `runc create` and
 * recording the container leaves one that podman forgets while its conmon runs on. So the podman
 * commands that change the engine's state are let finish (for a while) before the rest is killed.
 */
import { readdirSync, readFileSync } from "node:fs";
import { processes, sparedPids } from "@nebula/test-peers";

/** The PIDs on this machine, except this process. */
function pids(): number[] {
  return readdirSync("/proc")
    .filter((name) => /^[0-9]+$/.test(name))
    .map(Number)
    .filter((pid) => pid !== process.pid);
}

/** A file of /proc/<pid>, or "" when the process is gone (or not ours to read). */
function read(pid: number, file: string): string {
  try {
    return readFileSync(`/proc/${pid}/${file}`, "latin1");
  } catch {
    return "";
  }
}

const isConmon = (pid: number) => read(pid, "comm").trim() === "conmon";

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // Already gone.
  }
}

/**
 * Processes whose environment holds `marker` (for example `FAKE_HOST_DIR=/tmp/nebula-host-x`, which
 * every process of one test host inherits), conmon excepted: killing a conmon would orphan its
 * container, which `podman rm` removes with its conmon instead.
 */
function marked(marker: string): number[] {
  return pids().filter(
    (pid) => !isConmon(pid) && read(pid, "environ").split("\0").includes(marker),
  );
}

/**
 * Kills every process whose environment holds `marker`: stopped first, then killed, in rounds until
 * none is left (a process forked during one round is found by the next). The podman commands among
 * them that change the engine's state (`podman run`, `start`, `rm`, … and what they started) are
 * spared for up to `engineGraceMs`, then killed like the rest. Returns how many it killed; throws,
 * naming them, when some are still there `limitMs` after that.
 */
export async function killMarked(
  marker: string,
  limitMs = 5_000,
  engineGraceMs = 20_000,
): Promise<number> {
  const graceEnd = Date.now() + engineGraceMs;
  const deadline = graceEnd + limitMs;
  let killed = 0;
  for (;;) {
    let found = marked(marker);
    if (found.length === 0) return killed;
    if (Date.now() < graceEnd) {
      const mine = new Set(found);
      const spared = sparedPids(processes().filter((p) => mine.has(p.pid)));
      found = found.filter((pid) => !spared.has(pid));
    }
    if (Date.now() > deadline) {
      throw new Error(
        `test host: ${found.length} process(es) with ${marker} survive SIGKILL: ${found
          .map((pid) => `${pid} ${read(pid, "cmdline").replaceAll("\0", " ").slice(0, 120)}`)
          .join("; ")}`,
      );
    }
    for (const pid of found) signal(pid, "SIGSTOP");
    for (const pid of found) signal(pid, "SIGKILL");
    killed += found.length;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `pid` and its descendants, from /proc's parent links (the parent is the 2nd field after ")"). */
function tree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const p of pids()) {
    const stat = read(p, "stat");
    const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    children.set(parent, [...(children.get(parent) ?? []), p]);
  }
  const out: number[] = [];
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop() as number;
    out.push(p);
    todo.push(...(children.get(p) ?? []));
  }
  return out;
}

/**
 * The last resort after a suite's `podman rm`: every conmon whose command line names `root` (a
 * podman root of the suite's own) is killed with its container's processes. Returns one line per
 * conmon found (its PID and command line), so the suite can fail loudly: a conmon found here is a
 * clean-up that missed.
 */
export function reapConmons(root: string): string[] {
  // `root/`: a root's name may be the start of another's (nebula-userdata-podman, -podman-x1).
  const inRoot = `${root.replace(/\/+$/, "")}/`;
  const found = pids().filter((pid) => isConmon(pid) && read(pid, "cmdline").includes(inRoot));
  const lines = found.map(
    (pid) => `conmon ${pid}: ${read(pid, "cmdline").replaceAll("\0", " ").slice(0, 300)}`,
  );
  for (const pid of found) {
    const all = tree(pid);
    for (const p of all) signal(p, "SIGSTOP");
    for (const p of all) signal(p, "SIGKILL");
  }
  return lines;
}
