/**
 * The host simulator's tests' hands on the real podman: whether a container exists, and a
 * container that breaks `podman ps`, made for real.
 *
 * A container whose network namespace podman mounted in a private mount namespace (as the
 * simulator's guests made their Pod sandboxes before `/run/netns` stayed shared) breaks every
 * `podman ps` outside that namespace that lists it: podman finds an empty file at the namespace's
 * path, "unknown FS magic … ef53", for as long as the container runs.
 *
 * @packageDocumentation
 */
import { execFile } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { promisify } from "node:util";
import { GUEST_PAUSE_IMAGE } from "../host/images.js";

const run = promisify(execFile);

/** Whether podman still has the container (`podman container exists`: 0 yes, 1 no). */
export async function containerExists(id: string): Promise<boolean> {
  try {
    await run("podman", ["container", "exists", id]);
    return true;
  } catch (error) {
    if ((error as { code?: number }).code === 1) return false;
    throw error;
  }
}

/** A container made by {@link brokenContainer}. */
export interface BrokenContainer {
  /** Its podman ID. */
  readonly id: string;
  /** Its network namespace's path, as podman in the container's own mount namespace sees it. */
  readonly netns: string;
}

/**
 * Runs a Pod sandbox (`--network=bridge`, the pause image) through a guest's `docker` shim in a
 * private mount namespace of its own: while it runs, `podman ps` elsewhere fails for every listing
 * that includes it.
 */
export async function brokenContainer(docker: string): Promise<BrokenContainer> {
  const { stdout } = await run("unshare", [
    ...["--mount", "--propagation", "private", "--"],
    ...[docker, "run", "-d", "--network=bridge", GUEST_PAUSE_IMAGE],
  ]);
  const id = stdout.trim();
  return { id, netns: await netnsOf(id) };
}

/** A running container's network namespace path, as podman in conmon's mount namespace sees it. */
export async function netnsOf(id: string): Promise<string> {
  const conmon = (
    await run("podman", ["inspect", "--format", "{{.State.ConmonPid}}", id])
  ).stdout.trim();
  const { stdout } = await run("nsenter", [
    ...["-t", conmon, "-m", "--", "podman", "inspect"],
    ...["--format", "{{.NetworkSettings.SandboxKey}}", id],
  ]);
  return stdout.trim();
}

/**
 * Removes the empty file podman on the host leaves at a broken container's namespace path (it
 * could not unmount what it could not see); a path that is a mount point here is left alone.
 */
export function removeStrayNetns(path: string): void {
  if (!path.startsWith("/run/netns/")) return;
  if (readFileSync("/proc/self/mountinfo", "utf8").includes(` ${path} `)) return;
  rmSync(path, { force: true });
}
