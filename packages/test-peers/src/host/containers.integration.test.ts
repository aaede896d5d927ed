/**
 * The simulator's hold on its guests' containers, against the real podman + runc: a Pod sandbox
 * container (a network namespace of its own) created inside a guest's sandbox, removal by ID with
 * its dependants, and what a broken container in podman's store does to `podman ps`.
 *
 * The broken container is made for real, the way the simulator made it before its sandboxes kept
 * `/run/netns` shared: podman, run in a private mount namespace, mounts the container's network
 * namespace where no podman outside can see it, and every `podman ps` outside fails ("unknown FS
 * magic") while the container runs. That breaks `podman ps` for the whole machine for the second or
 * so the test needs.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokenContainer, containerExists, removeStrayNetns } from "../testing/podman.js";
import {
  listContainers,
  removeContainers,
  shareNetnsDir,
  trackedContainerIds,
} from "./containers.js";
import { ensureGuestImages, GUEST_PAUSE_IMAGE } from "./images.js";
import { dockerShim, ENTER_SCRIPT } from "./shims.js";

const run = promisify(execFile);
const RUNTIME = "/usr/sbin/runc";
const RUN = `ctr${randomBytes(4).toString("hex")}`;
const GUEST = `i-${RUN}`;

let work: string;
let containersDir: string;

beforeAll(async () => {
  await ensureGuestImages();
  shareNetnsDir();
  work = mkdtempSync(join(tmpdir(), "nebula-containers-"));
  containersDir = join(work, "containers");
  writeFileSync(
    join(work, "docker"),
    dockerShim({
      instanceId: GUEST,
      runId: RUN,
      stateDir: join(work, "state"),
      containersDir,
      runtime: RUNTIME,
      nofile: "",
      nproc: "",
      network: "host",
    }),
  );
  chmodSync(join(work, "docker"), 0o755);
  writeFileSync(join(work, "enter.sh"), ENTER_SCRIPT);
  writeFileSync(join(work, "mounts"), "");
});

afterAll(async () => {
  if (work === undefined) return;
  await removeContainers(RUNTIME, trackedContainerIds(containersDir), () => {});
  rmSync(work, { recursive: true, force: true });
});

/** The guest's `docker`, run in a sandbox as the simulator enters it. */
async function dockerInSandbox(...args: string[]): Promise<string> {
  const { stdout } = await run("unshare", [
    "--mount",
    "--propagation",
    "unchanged",
    "--",
    "/bin/bash",
    join(work, "enter.sh"),
    join(work, "mounts"),
    join(work, "docker"),
    ...args,
  ]);
  return stdout.trim();
}

describe("a guest's containers", () => {
  it("a Pod sandbox made in a guest's sandbox leaves podman ps working outside; removal by the sandbox's ID takes the containers that joined it", async () => {
    const sandbox = await dockerInSandbox(
      "run",
      "-d",
      "--name",
      "sandbox",
      "--network=bridge",
      GUEST_PAUSE_IMAGE,
    );
    const app = await dockerInSandbox(
      "run",
      "-d",
      "--name",
      "app",
      `--network=container:${sandbox}`,
      "busybox",
      "sleep",
      "600",
    );
    expect(trackedContainerIds(containersDir, GUEST).sort()).toEqual([sandbox, app].sort());
    const listed = await listContainers(RUNTIME, `nebula-sim.run=${RUN}`);
    expect(listed).toEqual({
      ok: true,
      containers: expect.arrayContaining([
        { id: sandbox, name: `nsim-${GUEST}--sandbox` },
        { id: app, name: `nsim-${GUEST}--app` },
      ]),
    });
    const reports: string[] = [];
    expect(await removeContainers(RUNTIME, [sandbox], (line) => reports.push(line))).toEqual([]);
    expect(reports).toEqual([]);
    expect(await containerExists(sandbox)).toBe(false);
    expect(await containerExists(app)).toBe(false);
  });

  it("a container that joins a Pod sandbox's network has the sandbox's host name and may not name its own, as with Docker", async () => {
    const sandbox = await dockerInSandbox(
      "run",
      "-d",
      "--name",
      "named-sandbox",
      "--network=bridge",
      "--hostname=web-0",
      GUEST_PAUSE_IMAGE,
    );
    try {
      const seen = await dockerInSandbox(
        "run",
        "--rm",
        `--network=container:${sandbox}`,
        "busybox",
        "sh",
        "-c",
        'echo "$(hostname) $HOSTNAME"',
      );
      expect(seen).toBe("web-0 web-0");
      const refused = await dockerInSandbox(
        "run",
        "--rm",
        "--hostname=other",
        `--network=container:${sandbox}`,
        "busybox",
        "true",
      ).then(
        () => undefined,
        (error: { code?: number; stderr?: string }) => error,
      );
      expect(refused?.code).toBe(125);
      expect(refused?.stderr).toContain(
        "docker: Error response from daemon: conflicting options: hostname and the network mode.",
      );
    } finally {
      await removeContainers(RUNTIME, [sandbox], () => {});
    }
  });

  it("a container whose network namespace podman cannot see breaks podman ps, which says so; removal by ID still removes it", async () => {
    // The old way: everything private, /run/netns included.
    const broken = await brokenContainer(join(work, "docker"));
    try {
      const listed = await listContainers(RUNTIME, `nebula-sim.run=${RUN}`);
      expect(listed.ok).toBe(false);
      expect(listed.ok ? "" : listed.error).toMatch(
        /joining network namespace of container .*unknown FS magic/,
      );
      expect(await removeContainers(RUNTIME, [broken.id], () => {})).toEqual([]);
      expect(await containerExists(broken.id)).toBe(false);
      expect(await listContainers(RUNTIME, `nebula-sim.run=${RUN}`)).toEqual({
        ok: true,
        containers: [],
      });
    } finally {
      await run("podman", ["rm", "-f", "-t", "0", "-i", broken.id]);
      removeStrayNetns(broken.netns);
    }
  });
});
