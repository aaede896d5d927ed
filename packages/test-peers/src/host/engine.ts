/**
 * Ending a guest's processes without tearing the container engine in half.
 *
 * On a real instance `docker` is a client: killing it (a unit's stop, a power-off) leaves dockerd
 * to finish the create or start it was asked for, and a power-off ends the containers with the
 * machine. In the simulator the guest's `docker` is a shim over podman, and podman has no daemon:
 * the `podman start` in the guest's process group *is* the engine. Killed half-way (after conmon
 * and `runc create`, before podman records the container as running) it leaves a container that
 * podman's database calls `created` while conmon and `runc init` live on; `podman rm -f` then
 * forgets it without ending them, and the conmon, the runc state and the network namespace outlive
 * the run. (Reproduced: `podman start` SIGKILLed 0.13 to 0.16 s in, then `podman rm -f`; two CI runs
 * left such a conmon.)
 *
 * So the simulator signals a guest's process group *sparing* the podman commands that change the
 * engine's state (and everything they started), waits for those to finish, with a deadline, and
 * only then removes the guest's containers. {@link reapOrphans} (in `containers.ts`) is the last
 * resort for a podman that had to be killed after all.
 *
 * @packageDocumentation
 */

import { readdirSync, readFileSync } from "node:fs";

/** One process as `/proc` describes it. */
export interface ProcessInfo {
  /** Process ID. */
  readonly pid: number;
  /** Parent's process ID. */
  readonly ppid: number;
  /** Process group ID. */
  readonly pgrp: number;
  /** `/proc/<pid>/stat`'s state letter (`Z` for a zombie). */
  readonly state: string;
  /** The command line, split at NULs (empty for a kernel thread or a zombie). */
  readonly argv: readonly string[];
}

/**
 * podman subcommands that change the engine's state: never killed half-way. Reads (`inspect`,
 * `ps`, `logs`) and waits (`wait`, `events`) are killed like any guest process: a `wait` would
 * otherwise hold the stop until its container ends.
 */
const ENGINE_WRITES = new Set([
  "create",
  "start",
  "run",
  "rm",
  "stop",
  "kill",
  "restart",
  "pause",
  "unpause",
]);

/** podman's global flags that take a value as the next argument (`--flag value`). */
const VALUE_FLAGS = new Set([
  "--runtime",
  "--root",
  "--runroot",
  "--tmpdir",
  "--log-level",
  "--cgroup-manager",
  "--events-backend",
  "--network-backend",
  "--network-config-dir",
  "--storage-driver",
  "--storage-opt",
  "--conmon",
  "--volumepath",
  "--hooks-dir",
  "--url",
  "--connection",
  "--identity",
  "--module",
  "--imagestore",
]);

/**
 * Whether a command line is a podman command that changes the engine's state (`podman … start`,
 * `podman container rm …`, …). Total: any list of strings gets an answer.
 */
export function isEngineWrite(argv: readonly string[]): boolean {
  const [program, ...args] = argv;
  if (program === undefined || (program.split("/").pop() ?? "") !== "podman") return false;
  let i = 0;
  while (i < args.length) {
    const arg = args[i] ?? "";
    if (!arg.startsWith("-")) break;
    i += VALUE_FLAGS.has(arg) ? 2 : 1;
  }
  let command = args[i];
  if (command === "container") command = args[i + 1];
  return command !== undefined && ENGINE_WRITES.has(command);
}

/**
 * The processes among `members` to spare: every engine write ({@link isEngineWrite}) and every
 * process below one (its CNI plugins, its `runc`), found by walking parents within `members`.
 * Zombies are never spared (they are already dead).
 */
export function sparedPids(members: readonly ProcessInfo[]): Set<number> {
  const byPid = new Map(members.map((p) => [p.pid, p]));
  const spared = new Set<number>();
  for (const p of members) {
    if (p.state === "Z") continue;
    const seen = new Set<number>();
    for (let q: ProcessInfo | undefined = p; q !== undefined && !seen.has(q.pid); ) {
      seen.add(q.pid);
      if (isEngineWrite(q.argv)) {
        spared.add(p.pid);
        break;
      }
      q = byPid.get(q.ppid);
    }
  }
  return spared;
}

/** Parses `/proc/<pid>/stat` (the command name may hold spaces and parentheses). */
export function parseStat(text: string): { ppid: number; pgrp: number; state: string } | undefined {
  const close = text.lastIndexOf(")");
  if (close < 0) return undefined;
  const [state, ppid, pgrp] = text.slice(close + 2).split(" ");
  const parent = Number(ppid);
  const group = Number(pgrp);
  if (state === undefined || !Number.isInteger(parent) || !Number.isInteger(group))
    return undefined;
  return { ppid: parent, pgrp: group, state };
}

/** Every process on the machine (as this process's PID namespace sees them). */
export function processes(): ProcessInfo[] {
  const out: ProcessInfo[] = [];
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return out;
  }
  for (const entry of entries) {
    if (!/^[0-9]+$/.test(entry)) continue;
    try {
      const stat = parseStat(readFileSync(`/proc/${entry}/stat`, "utf8"));
      if (stat === undefined) continue;
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (argv.at(-1) === "") argv.pop();
      out.push({ pid: Number(entry), ...stat, argv });
    } catch {
      // Ended meanwhile.
    }
  }
  return out;
}

/** The live (non-zombie) processes of process group `pgid`. */
function groupMembers(pgid: number): ProcessInfo[] {
  return processes().filter((p) => p.pgrp === pgid && p.state !== "Z");
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Already gone.
  }
}

/**
 * Sends `sig` to every process of group `pgid` except the engine writes in flight and what they
 * started ({@link sparedPids}). Answers how many were spared.
 */
export function signalGroupSparingEngine(pgid: number | undefined, sig: NodeJS.Signals): number {
  if (pgid === undefined) return 0;
  const members = groupMembers(pgid);
  const spared = sparedPids(members);
  for (const p of members) if (!spared.has(p.pid)) signal(p.pid, sig);
  return spared.size;
}

/**
 * Kills process group `pgid`: everything at once but the engine writes in flight, which are
 * waited for until they end or `graceMs` has passed, and then killed too (`late` is told which
 * command lines, to say so where a person sees it). Resolves once no live process of the group
 * is left, or after a last SIGKILL round when one will not go.
 */
export async function killGroupSparingEngine(
  pgid: number | undefined,
  graceMs: number,
  late: (commands: string[]) => void,
): Promise<void> {
  if (pgid === undefined) return;
  const deadline = Date.now() + graceMs;
  let warned = false;
  for (let round = 0; ; round++) {
    const members = groupMembers(pgid);
    if (members.length === 0) return;
    const overdue = Date.now() >= deadline;
    const spared = overdue ? new Set<number>() : sparedPids(members);
    if (overdue && !warned) {
      const writes = members.filter((p) => isEngineWrite(p.argv)).map((p) => p.argv.join(" "));
      if (writes.length > 0) late(writes);
      warned = true;
    }
    for (const p of members) if (!spared.has(p.pid)) signal(p.pid, "SIGKILL");
    // A process in uninterruptible sleep takes a moment to die; give up after ~10 s overdue.
    if (overdue && round > 0 && Date.now() >= deadline + 10_000) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}
