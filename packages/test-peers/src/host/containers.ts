/**
 * The simulator's hold on the containers its guests create. Every container is known by its ID:
 * the guest's `docker` shim has podman write each new container's ID to a file of its own in the
 * run's containers directory (`--cidfile`), and cleanup removes by those IDs. Listing by label
 * (`podman ps --filter label=…`) is only an extra sweep: `podman ps` loads every container in
 * podman's store and fails as a whole when one of them cannot be loaded (a running container whose
 * network namespace this mount namespace cannot see), and a cleanup built on it alone then removes
 * nothing at all.
 *
 * @packageDocumentation
 */

import { execFile, execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { type ProcessInfo, processes } from "./engine.js";

const run = promisify(execFile);

const ID = /^[0-9a-f]{64}$/;

/** podman's global flags for the simulator's containers. */
function podman(runtime: string): string[] {
  return ["--runtime", runtime, "--cgroup-manager=cgroupfs"];
}

/** Says a cleanup problem where a person sees it (stderr), not only in a guest's events.log. */
export function warnLoudly(line: string): void {
  console.error(`nebula instance-host simulator: ${line}`);
}

/**
 * The container IDs recorded in `dir` (one `--cidfile` per container, named `<instance>.<…>`),
 * of one guest when `instanceId` is given. Missing directory: none.
 */
export function trackedContainerIds(dir: string, instanceId?: string): string[] {
  let files: string[];
  try {
    files = readdirSync(dir);
  } catch {
    return [];
  }
  const ids = new Set<string>();
  for (const file of files) {
    if (instanceId !== undefined && !file.startsWith(`${instanceId}.`)) continue;
    try {
      const id = readFileSync(join(dir, file), "utf8").trim();
      if (ID.test(id)) ids.add(id);
    } catch {
      // Removed meanwhile.
    }
  }
  return [...ids];
}

/** A container as `podman ps` or `podman inspect` names it. */
export interface SimContainer {
  /** The full podman ID. */
  readonly id: string;
  /** podman's name (`nsim-<instance>--<name>` for a named guest container). */
  readonly name: string;
}

/** What a label listing found: the containers, or why podman could not list them. */
export type Listing =
  | { readonly ok: true; readonly containers: SimContainer[] }
  | { readonly ok: false; readonly error: string };

/**
 * Every container with `label` (`key=value`), stopped ones included. A failing `podman ps` is an
 * answer of its own (`ok: false` with podman's message), never an empty list.
 */
export async function listContainers(runtime: string, label: string): Promise<Listing> {
  try {
    const { stdout } = await run("podman", [
      ...podman(runtime),
      "ps",
      "-a",
      "--no-trunc",
      "--filter",
      `label=${label}`,
      "--format",
      "{{.ID}} {{.Names}}",
    ]);
    return {
      ok: true,
      containers: rows(stdout).map(([id, name = ""]) => ({ id, name: name.replace(/^\//, "") })),
    };
  } catch (error) {
    const e = error as { stderr?: string; message?: string };
    const why = (e.stderr ?? "").trim() || String(e.message ?? error);
    return { ok: false, error: why.slice(-1000) };
  }
}

/** The lines of podman's `--format "{{ID}} …"` output that start with a container ID, split. */
function rows(stdout: string): [string, ...string[]][] {
  return stdout
    .split("\n")
    .map((line) => line.trim().split(" "))
    .filter((fields): fields is [string, ...string[]] => ID.test(fields[0] ?? ""));
}

/**
 * Those of `ids` that podman still has, with their names and whether they run. One
 * `podman inspect` for all: IDs that are gone are left out (inspect fails for them but still
 * prints the others).
 */
export async function existingContainers(
  runtime: string,
  ids: readonly string[],
): Promise<(SimContainer & { running: boolean })[]> {
  if (ids.length === 0) return [];
  let stdout: string;
  try {
    ({ stdout } = await run("podman", [
      ...podman(runtime),
      "container",
      "inspect",
      "--format",
      "{{.Id}} {{.Name}} {{.State.Running}}",
      ...ids,
    ]));
  } catch (error) {
    stdout = (error as { stdout?: string }).stdout ?? "";
  }
  return rows(stdout).map(([id, name = "", running]) => ({
    id,
    name,
    running: running === "true",
  }));
}

/**
 * Removes containers by ID, with everything that depends on them (`--depend`: the containers
 * that share a Pod sandbox's network namespace go with the sandbox) and without a stop timeout.
 * IDs that are already gone are fine. Answers the containers that are still there afterwards
 * (each also reported to `report`).
 */
export async function removeContainers(
  runtime: string,
  ids: readonly string[],
  report: (line: string) => void,
): Promise<SimContainer[]> {
  const unique = [...new Set(ids)];
  if (unique.length === 0) return [];
  try {
    await run("podman", [...podman(runtime), "rm", "-f", "-t", "0", "-i", "--depend", ...unique]);
  } catch (error) {
    const e = error as { stderr?: string };
    report(
      `podman rm of ${unique.length} containers failed: ${(e.stderr ?? "").trim().slice(-500)}`,
    );
  }
  const left = await existingContainers(runtime, unique);
  for (const c of left)
    report(`container ${c.name} (${c.id.slice(0, 12)}) is still there after podman rm`);
  return left;
}

/**
 * Makes the host's `/run/netns` (where podman keeps the network namespaces of its containers) a
 * shared mount point, as podman itself does when it first creates one. A guest's sandbox keeps
 * this one mount in the host's peer group (see `ENTER_SCRIPT`), so that a network namespace the
 * guest's podman creates there is seen by every podman on the host, not only inside the guest.
 */
export function shareNetnsDir(): void {
  execFileSync(
    "bash",
    [
      "-c",
      "set -e; mkdir -p /run/netns; mountpoint -q /run/netns || mount --bind /run/netns /run/netns; mount --make-shared /run/netns",
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
}

/** A container podman no longer knows but runc still has: what {@link reapOrphans} ended. */
export interface ReapedContainer {
  /** The container's ID (runc's and, before it forgot it, podman's). */
  readonly id: string;
  /** The `--cidfile` podman was given when it made the container (it names the guest). */
  readonly cidfile: string;
  /** The network namespace under `/run/netns` it had of its own, removed too; empty for none. */
  readonly netns: string;
}

const RUNC_ROOT = "/run/runc";

/** The runc state of one container, as far as {@link reapOrphans} reads it. */
const RuncState = z.object({
  config: z
    .object({
      labels: z.array(z.string()).optional(),
      namespaces: z.array(z.object({ type: z.string(), path: z.string().optional() })).optional(),
    })
    .optional(),
});

/** Which containers {@link reapOrphans} looks at. */
export interface OrphanMatch {
  /**
   * The start of their `--cidfile` (runc keeps it as an annotation): a guest's
   * `<containersDir>/<instance>.`, a run's `<containersDir>/`.
   */
  readonly cidfilePrefix: string;
  /**
   * The start of their podman name as their conmon was given it (`-n`), for a container that runc
   * has no state of yet (killed before `runc create` wrote it): a guest's `nsim-<instance>--`.
   */
  readonly namePrefix?: string;
}

/**
 * Ends the containers that podman forgot while they still ran: those of `match` (runc's state
 * under `/run/runc`, or a conmon by name) that podman has no container for. Each one's conmon and
 * processes are killed, `runc delete --force` removes it, and a network namespace of its own under
 * `/run/netns` is unmounted and removed. This happens when a `podman run` or `start` is killed
 * half-way (see `engine.ts`); the simulator avoids that, so everything reaped is also reported.
 */
export async function reapOrphans(
  runtime: string,
  match: OrphanMatch,
  report: (line: string) => void,
): Promise<ReapedContainer[]> {
  let ids: string[];
  try {
    ids = readdirSync(RUNC_ROOT).filter((id) => ID.test(id));
  } catch {
    ids = [];
  }
  let all = processes();
  const conmonOf = (p: ProcessInfo) => {
    if (!(p.argv[0] ?? "").endsWith("conmon")) return undefined;
    const id = p.argv[p.argv.indexOf("-c") + 1] ?? "";
    const name = p.argv[p.argv.indexOf("-n") + 1] ?? "";
    return ID.test(id) ? { id, name } : undefined;
  };
  const mine = new Map<string, { id: string; cidfile: string; netns: string }>();
  const { namePrefix } = match;
  if (namePrefix !== undefined)
    for (const p of all) {
      const c = conmonOf(p);
      if (c?.name.startsWith(namePrefix))
        mine.set(c.id, { id: c.id, cidfile: `(conmon -n ${c.name})`, netns: "" });
    }
  for (const id of ids) {
    let state: z.infer<typeof RuncState>;
    try {
      const parsed = RuncState.safeParse(
        JSON.parse(readFileSync(join(RUNC_ROOT, id, "state.json"), "utf8")),
      );
      if (!parsed.success) continue;
      state = parsed.data;
    } catch {
      continue; // removed meanwhile, or being written
    }
    const label = (state.config?.labels ?? []).find((l) =>
      l.startsWith("io.podman.annotations.cid-file="),
    );
    const cidfile = label?.slice("io.podman.annotations.cid-file=".length) ?? "";
    if (!cidfile.startsWith(match.cidfilePrefix) && !mine.has(id)) continue;
    const net = (state.config?.namespaces ?? []).find((n) => n.type === "NEWNET")?.path ?? "";
    mine.set(id, { id, cidfile, netns: net.startsWith("/run/netns/") ? net : "" });
  }
  if (mine.size === 0) return [];
  const known = new Set((await existingContainers(runtime, [...mine.keys()])).map((c) => c.id));
  let orphans = [...mine.values()].filter((c) => !known.has(c.id));
  // A conmon found by name only (runc has no state of its container) is usually one whose
  // container podman has just removed, still running its exit command: give those a few seconds to
  // end, and count one as an orphan only if it is still there and not running that command.
  const byNameOnly = (o: { cidfile: string }) => o.cidfile.startsWith("(conmon");
  for (let waited = 0; orphans.some(byNameOnly) && waited < 5_000; waited += 100) {
    await new Promise((r) => setTimeout(r, 100));
    all = processes();
    const live = new Set(all.map((p) => conmonOf(p)?.id));
    orphans = orphans.filter((o) => !byNameOnly(o) || live.has(o.id));
  }
  orphans = orphans.filter((o) => {
    if (!byNameOnly(o)) return true;
    const conmon = all.find((p) => conmonOf(p)?.id === o.id);
    return !all.some((p) => p.ppid === conmon?.pid && p.argv.includes("cleanup"));
  });
  for (const orphan of orphans) {
    // Its conmon (`-c <id>`) and everything below it: runc init, the workload.
    const conmons = all.filter((p) => conmonOf(p)?.id === orphan.id);
    const doomed = new Set(conmons.map((p) => p.pid));
    for (let grew = true; grew; ) {
      grew = false;
      for (const p of all)
        if (!doomed.has(p.pid) && doomed.has(p.ppid)) {
          doomed.add(p.pid);
          grew = true;
        }
    }
    for (const pid of doomed) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    try {
      await run(runtime, ["--root", RUNC_ROOT, "delete", "--force", orphan.id]);
    } catch (error) {
      const e = error as { stderr?: string };
      if (!/does not exist/.test(e.stderr ?? ""))
        report(`runc delete --force ${orphan.id.slice(0, 12)} failed: ${(e.stderr ?? "").trim()}`);
    }
    if (orphan.netns !== "") {
      try {
        await run("ip", ["netns", "delete", orphan.netns.slice("/run/netns/".length)]);
      } catch (error) {
        const e = error as { stderr?: string };
        if (!/No such file/.test(e.stderr ?? ""))
          report(`ip netns delete ${orphan.netns} failed: ${(e.stderr ?? "").trim()}`);
      }
    }
    report(
      `container ${orphan.id.slice(0, 12)} (${orphan.cidfile}) outlived podman's record of it ` +
        `(a podman command killed half-way): killed ${doomed.size} processes, ran runc delete --force` +
        (orphan.netns === "" ? "" : `, removed ${orphan.netns}`),
    );
  }
  return orphans;
}
