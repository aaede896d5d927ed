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
