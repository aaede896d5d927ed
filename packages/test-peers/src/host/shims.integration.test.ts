import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokenContainer, containerExists, removeStrayNetns } from "../testing/podman.js";
import { removeContainers, trackedContainerIds } from "./containers.js";
import { ensureGuestImages } from "./images.js";
import { dockerShim, ENTER_SCRIPT, WATCHDOG_SCRIPT } from "./shims.js";

const run = promisify(execFile);
const RUNTIME = "/usr/sbin/runc";
// Unique per run, so that two runs of this file at once (two checkouts, nx and a developer) never
// share container names or have the watchdog test remove each other's containers.
const RUN = `shim${randomBytes(4).toString("hex")}`;

// Two guests' docker CLIs, side by side, against the real podman + runc.
let work: string;
let containersDir: string;
const docker: Record<"a" | "b", string> = { a: "", b: "" };

beforeAll(async () => {
  await ensureGuestImages();
  work = mkdtempSync(join(tmpdir(), "nebula-shims-"));
  containersDir = join(work, "containers");
  for (const guest of ["a", "b"] as const) {
    const dir = join(work, guest);
    mkdirSync(dir);
    const path = join(dir, "docker");
    writeFileSync(
      path,
      dockerShim({
        instanceId: `i-${RUN}${guest}`,
        runId: RUN,
        stateDir: join(dir, "state"),
        containersDir,
        runtime: RUNTIME,
        nofile: "",
        nproc: "",
        network: "host",
      }),
    );
    chmodSync(path, 0o755);
    docker[guest] = path;
  }
});

afterAll(async () => {
  if (work === undefined) return;
  await removeContainers(RUNTIME, trackedContainerIds(containersDir), (line) => {
    throw new Error(line);
  });
  // Every container the file's shims created was recorded by ID: podman lists none besides.
  const { stdout } = await run("podman", ["ps", "-aq", "--filter", `label=nebula-sim.run=${RUN}`]);
  rmSync(work, { recursive: true, force: true });
  expect(stdout.trim()).toBe("");
});

async function dockerIn(
  guest: "a" | "b",
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(docker[guest], args);
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
  }
}

describe("the guest docker CLI", () => {
  it("keeps container names per guest and runs the contract's subset against real containers", async () => {
    const a = await dockerIn(
      "a",
      "run",
      "-d",
      "--name",
      "app",
      "busybox",
      "sh",
      "-c",
      "echo from-a; echo line2; sleep 30",
    );
    const foreground = await dockerIn("a", "run", "busybox", "true");
    const cidfile = join(work, "caller.cid");
    const own = await dockerIn("a", "create", "--cidfile", cidfile, "busybox", "true");
    const b = await dockerIn(
      "b",
      "create",
      "--name",
      "app",
      "busybox",
      "sh",
      "-c",
      "echo from-b >/msg; exit 3",
    );
    expect(a.code).toBe(0);
    expect(b.code).toBe(0);
    expect(a.stdout.trim()).toMatch(/^[0-9a-f]{64}$/);
    expect(b.stdout.trim()).not.toBe(a.stdout.trim());
    // Every container the shim creates is recorded by ID, per guest: detached, created, one run in
    // the foreground (whose ID the shim never prints), and one with a --cidfile of the caller's,
    // which podman still writes.
    expect(foreground.code).toBe(0);
    expect(own.code).toBe(0);
    expect(readFileSync(cidfile, "utf8")).toBe(own.stdout.trim());
    const ofA = trackedContainerIds(containersDir, `i-${RUN}a`);
    expect(ofA).toHaveLength(3);
    expect(ofA).toEqual(expect.arrayContaining([a.stdout.trim(), own.stdout.trim()]));
    expect(trackedContainerIds(containersDir, `i-${RUN}b`)).toEqual([b.stdout.trim()]);
    const [foregroundId] = ofA.filter((id) => id !== a.stdout.trim() && id !== own.stdout.trim());
    expect(
      await removeContainers(RUNTIME, [foregroundId ?? "", own.stdout.trim()], () => {}),
    ).toEqual([]);
    expect(await containerExists(foregroundId ?? "")).toBe(false);

    expect((await dockerIn("b", "start", "app")).stdout.trim()).toBe("app");
    expect((await dockerIn("b", "wait", "app")).stdout.trim()).toBe("3");
    const state = await dockerIn(
      "b",
      "inspect",
      "--format",
      "{{.State.ExitCode}} {{.State.OOMKilled}} {{.State.FinishedAt}}",
      "app",
    );
    expect(state.stdout.trim()).toMatch(/^3 false \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    const json = JSON.parse((await dockerIn("b", "inspect", "app")).stdout) as {
      State: { ExitCode: number };
    }[];
    expect(json[0]?.State.ExitCode).toBe(3);
    const copied = join(work, "msg");
    expect((await dockerIn("b", "cp", "app:/msg", copied)).code).toBe(0);
    expect(readFileSync(copied, "utf8")).toBe("from-b\n");

    expect(
      (await dockerIn("a", "inspect", "--format", "{{.State.Running}}", "app")).stdout.trim(),
    ).toBe("true");
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await dockerIn("a", "logs", "--tail", "1", "app")).stdout).toBe("line2\n");
    // The container's main process got the explicit --ulimit nofile soft limit.
    const limits = await dockerIn("a", "exec", "app", "cat", "/proc/1/limits");
    expect(limits.stdout).toMatch(/Max open files\s+1024\s/);
    expect((await dockerIn("a", "stop", "-t", "1", "app")).stdout.trim()).toBe("app");
    expect(
      (await dockerIn("a", "inspect", "--format", "{{.State.ExitCode}}", "app")).stdout.trim(),
    ).toBe("137");
    expect((await dockerIn("a", "ps", "-a", "-q")).stdout.trim().split("\n")).toHaveLength(1);

    expect((await dockerIn("a", "rm", "-f", "app")).code).toBe(0);
    // Guest b's "app" is untouched; guest a may reuse the name.
    expect(
      (await dockerIn("b", "inspect", "--format", "{{.State.ExitCode}}", "app")).stdout.trim(),
    ).toBe("3");
    expect(
      (await dockerIn("a", "run", "--rm", "--name", "app", "busybox", "sh", "-c", "exit 7")).code,
    ).toBe(7);
    expect((await dockerIn("a", "inspect", "app")).code).not.toBe(0);
  });

  it("pulls only local images and fails fast on others, as an unreachable registry would", async () => {
    expect((await dockerIn("a", "pull", "busybox")).code).toBe(0);
    const missing = await dockerIn("a", "pull", "registry.example/none:1");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("pull access denied for registry.example/none:1");
    const runMissing = await dockerIn("a", "run", "-d", "registry.example/none:1");
    expect(runMissing.code).toBe(125);
  });

  it("turns the scripted OOM image into an OOMKilled exit 137, also in the foreground, detached, restarted and with a command given", async () => {
    // NEBULA_SIM_OOM_AFTER=0: the container dies at once, so the mark must be in place before it
    // starts (CI once saw a 0.5 s container exit before a mark written after its start).
    const fg = await dockerIn(
      "a",
      "run",
      "--name",
      "hog",
      "-e",
      "NEBULA_SIM_OOM_AFTER=0",
      "nebula-sim/oomkill",
      "ignored",
      "args",
    );
    expect(fg.code).toBe(137);
    const state = await dockerIn(
      "a",
      "inspect",
      "--format",
      "{{.State.OOMKilled}} {{.State.ExitCode}}",
      "hog",
    );
    expect(state.stdout.trim()).toBe("true 137");
    expect(
      (
        await dockerIn(
          "a",
          "create",
          "--name",
          "hog2",
          "-e",
          "NEBULA_SIM_OOM_AFTER=0",
          "nebula-sim/oomkill",
        )
      ).code,
    ).toBe(0);
    await dockerIn("a", "start", "hog2");
    expect((await dockerIn("a", "wait", "hog2")).stdout.trim()).toBe("137");
    expect(
      (await dockerIn("a", "inspect", "--format", "{{.State.OOMKilled}}", "hog2")).stdout.trim(),
    ).toBe("true");
    // Started again after its exit: podman re-initialises it, and the outcome holds.
    await dockerIn("a", "start", "hog2");
    expect((await dockerIn("a", "wait", "hog2")).stdout.trim()).toBe("137");
    expect(
      (await dockerIn("a", "inspect", "--format", "{{.State.OOMKilled}}", "hog2")).stdout.trim(),
    ).toBe("true");
    expect(
      (
        await dockerIn(
          "a",
          "run",
          "-d",
          "--name",
          "hog3",
          "-e",
          "NEBULA_SIM_OOM_AFTER=0",
          "nebula-sim/oomkill",
        )
      ).code,
    ).toBe(0);
    expect((await dockerIn("a", "wait", "hog3")).stdout.trim()).toBe("137");
    expect(
      (await dockerIn("a", "inspect", "--format", "{{.State.OOMKilled}}", "hog3")).stdout.trim(),
    ).toBe("true");
  });
});

describe("docker stats", () => {
  const LINE =
    /^([0-9a-f]{12})\t(\d+\.\d{2})%\t(\d+(?:\.\d+)?)(B|KiB|MiB|GiB|TiB) \/ (\d+(?:\.\d+)?)(B|KiB|MiB|GiB|TiB)$/;
  const UNIT = { B: 1, KiB: 2 ** 10, MiB: 2 ** 20, GiB: 2 ** 30, TiB: 2 ** 40 } as const;

  it("prints Docker's figures in Docker's format: CPU over a second, working set in binary units", async () => {
    // Holds ~8 MB in the shell, then burns a core; a file in the page cache does not count.
    const started = await dockerIn(
      "a",
      "run",
      "-d",
      "--name",
      "burn",
      "busybox",
      "sh",
      "-c",
      "dd if=/dev/zero of=/cache bs=1M count=32 2>/dev/null; x=$(head -c 8000000 /dev/zero | tr '\\0' a); touch /ready; while :; do :; done",
    );
    expect(started.code).toBe(0);
    const id = started.stdout.trim();
    for (
      let tries = 0;
      (await dockerIn("a", "exec", "burn", "test", "-e", "/ready")).code !== 0;
      tries++
    ) {
      expect(tries).toBeLessThan(300);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const stopped = await dockerIn("a", "create", "--name", "idle", "busybox", "true");
    const stats = await dockerIn(
      "a",
      "stats",
      "--no-stream",
      "--format",
      "{{.ID}}\\t{{.CPUPerc}}\\t{{.MemUsage}}",
      id,
      "idle",
    );
    expect(stats.code).toBe(0);
    const [burning, idle] = stats.stdout.split("\n");
    const m = LINE.exec(burning ?? "");
    expect(m, burning).not.toBeNull();
    const [, shortId, cpu, used, usedUnit, limit, limitUnit] = m ?? [];
    expect(shortId).toBe(id.slice(0, 12));
    expect(Number(cpu)).toBeGreaterThan(10);
    const bytes = Number(used) * UNIT[usedUnit as keyof typeof UNIT];
    expect(bytes).toBeGreaterThan(7_000_000);
    expect(bytes).toBeLessThan(32 * 2 ** 20);
    expect(Number(limit) * UNIT[limitUnit as keyof typeof UNIT]).toBeGreaterThan(bytes);
    // A container that does not run prints zeros, as Docker's does.
    expect(idle).toBe(`${stopped.stdout.trim().slice(0, 12)}\t0.00%\t0B / 0B`);
    expect(
      (await dockerIn("a", "stats", "--no-stream", "--format", "{{.Name}} {{.PIDs}}", "burn"))
        .stdout,
    ).toBe("burn 1\n");
    expect((await dockerIn("a", "kill", "burn")).code).toBe(0);
    expect((await dockerIn("a", "rm", "-f", "burn", "idle")).code).toBe(0);
  });
});

describe("docker wait", () => {
  it("follows a running container's process and answers its exit code; an exited one's at once", async () => {
    const started = await dockerIn("a", "run", "-d", "busybox", "sh", "-c", "sleep 2; exit 7");
    expect(started.code).toBe(0);
    const id = started.stdout.trim();
    const pid = (await dockerIn("a", "inspect", "--format", "{{.State.Pid}}", id)).stdout.trim();
    const waiting = dockerIn("a", "wait", id);
    // Docker's wait answers at the exit; podman's looks every 250 ms. The shim follows the
    // container's process instead (tail --pid) while it runs.
    let following: string[] = [];
    for (let i = 0; i < 40 && following.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      following = await run("pgrep", ["-f", `tail --pid=${pid} `]).then(
        ({ stdout }) => stdout.trim().split("\n"),
        () => [],
      );
    }
    expect(following).toHaveLength(1);
    const waited = await waiting;
    expect(waited).toMatchObject({ code: 0, stdout: "7\n" });
    // Already exited: podman answers at once, the same code.
    expect((await dockerIn("a", "wait", id)).stdout).toBe("7\n");
    expect((await dockerIn("a", "rm", id)).code).toBe(0);
  });
});

describe("docker with a pull delay (pullDelayMs)", () => {
  // Two more guests whose volumes hold only what they pulled; a pull of an image not held yet
  // takes PULL_MS. Each records its images under its own directory, as a guest's root does.
  const PULL_MS = 1000;
  const slow: Record<"c" | "d", { path: string; images: string; events: string }> = {
    c: { path: "", images: "", events: "" },
    d: { path: "", images: "", events: "" },
  };

  beforeAll(() => {
    for (const guest of ["c", "d"] as const) {
      const dir = join(work, guest);
      mkdirSync(dir);
      const images = join(dir, "root", "images");
      const events = join(dir, "events.log");
      const path = join(dir, "docker");
      writeFileSync(
        path,
        dockerShim({
          instanceId: `i-${RUN}${guest}`,
          runId: RUN,
          stateDir: join(dir, "state"),
          containersDir,
          runtime: RUNTIME,
          nofile: "",
          nproc: "",
          network: "host",
          pullDelayMs: PULL_MS,
          imagesDir: images,
          eventsLog: events,
        }),
      );
      chmodSync(path, 0o755);
      slow[guest] = { path, images, events };
    }
  });

  /** Runs the guest's docker; `ms` spans the whole command (a lower bound of what it waited). */
  async function slowDocker(
    guest: "c" | "d",
    ...args: string[]
  ): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
    const started = performance.now();
    try {
      const { stdout, stderr } = await run(slow[guest].path, args);
      return { code: 0, stdout, stderr, ms: performance.now() - started };
    } catch (error) {
      const e = error as { code?: number; stdout?: string; stderr?: string };
      const ms = performance.now() - started;
      return { code: e.code ?? -1, stdout: e.stdout ?? "", stderr: e.stderr ?? "", ms };
    }
  }

  const eventsOf = (guest: "c" | "d"): string[] => {
    try {
      return readFileSync(slow[guest].events, "utf8").trim().split("\n");
    } catch {
      return [];
    }
  };

  it("takes pullDelayMs to pull an image the volume does not hold, nothing once it holds it; another guest's volume is its own", async () => {
    // A fresh volume holds nothing: Docker says so, whichever way it is asked.
    const before = await slowDocker("c", "image", "inspect", "--format", "{{.Id}}", "busybox");
    expect(before).toMatchObject({
      code: 1,
      stdout: "",
      stderr: "Error: No such image: busybox\n",
    });
    const typed = await slowDocker(
      "c",
      "inspect",
      "--type=image",
      "--format={{.Id}}",
      "--",
      "busybox",
    );
    expect(typed).toMatchObject({ code: 1, stdout: "", stderr: "Error: No such image: busybox\n" });

    const first = await slowDocker("c", "pull", "busybox");
    expect(first).toMatchObject({
      code: 0,
      stdout: "Status: Downloaded newer image for busybox\nbusybox\n",
    });
    expect(first.ms).toBeGreaterThanOrEqual(PULL_MS);
    // Held now, also under another name of the same image (the volume holds images by ID).
    const again = await slowDocker("c", "pull", "busybox");
    expect(again.stdout).toBe("Status: Image is up to date for busybox\nbusybox\n");
    const alias = await slowDocker("c", "pull", "-q", "docker.io/library/busybox:latest");
    expect(alias).toMatchObject({ code: 0, stdout: "docker.io/library/busybox:latest\n" });
    const id = (await slowDocker("c", "image", "inspect", "--format", "{{.Id}}", "busybox")).stdout;
    expect(id).toMatch(/^[0-9a-f]{64}\n$/);
    expect(readdirSync(slow.c.images).filter((f) => !f.startsWith("."))).toEqual([id.trim()]);
    const c = eventsOf("c");
    expect(c).toHaveLength(4);
    expect(c[0]).toMatch(
      / docker pull busybox: image [0-9a-f]{12} is not on this host's volume: downloading \(1000 ms\)$/,
    );
    expect(c[1]).toMatch(
      / docker pull busybox: image [0-9a-f]{12} downloaded; on this host's volume from now on$/,
    );
    expect(c[2]).toMatch(
      / docker pull busybox: image [0-9a-f]{12} is on this host's volume: no download$/,
    );
    expect(c[3]).toMatch(
      / docker pull docker.io\/library\/busybox:latest: image [0-9a-f]{12} is on this host's volume: no download$/,
    );

    // Guest d pays again. Two pulls at once: one downloads, the other joins it (as Docker joins a
    // pull in flight) and says the image is up to date.
    const both = await Promise.all([
      slowDocker("d", "pull", "busybox"),
      slowDocker("d", "pull", "busybox"),
    ]);
    expect(both.map((p) => p.code)).toEqual([0, 0]);
    const downloaded = both.filter((p) => p.stdout.startsWith("Status: Downloaded newer image"));
    expect(downloaded).toHaveLength(1);
    expect(downloaded[0]?.ms).toBeGreaterThanOrEqual(PULL_MS);
    expect(both.filter((p) => p.stdout.startsWith("Status: Image is up to date"))).toHaveLength(1);
    expect(eventsOf("d").filter((line) => line.includes("downloading (1000 ms)"))).toHaveLength(1);
    expect(eventsOf("c")).toHaveLength(4);
  });

  it("pulls implicitly on create (Docker's --pull=missing; run takes the same path), fails --pull=never for an image not held, and fails an unknown image as before", async () => {
    const pause = "registry.k8s.io/pause:3.10";
    const never = await slowDocker("d", "create", "--pull=never", pause);
    expect(never.code).toBe(125);
    expect(never.stderr).toContain(`docker: Error response from daemon: No such image: ${pause}.`);

    const created = await slowDocker("d", "create", pause);
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^[0-9a-f]{64}\n$/);
    expect(created.stderr).toBe(
      `Unable to find image '${pause}' locally\nStatus: Downloaded newer image for ${pause}\n`,
    );
    expect(created.ms).toBeGreaterThanOrEqual(PULL_MS);
    // Held now: no pull, no message; --pull=always asks and finds it up to date.
    const again = await slowDocker("d", "create", "--pull=never", pause);
    expect(again).toMatchObject({ code: 0, stderr: "" });
    const always = await slowDocker("d", "create", "--pull", "always", pause);
    expect(always).toMatchObject({ code: 0, stderr: `Status: Image is up to date for ${pause}\n` });
    expect(readdirSync(slow.d.images).filter((f) => !f.startsWith("."))).toHaveLength(2);

    // An image this machine does not have fails at once, as without a delay, and is not recorded.
    const lines = eventsOf("d").length;
    expect((await slowDocker("d", "pull", "registry.example/none:1")).code).toBe(1);
    expect((await slowDocker("d", "create", "registry.example/none:1")).code).toBe(125);
    expect(eventsOf("d")).toHaveLength(lines);
    expect(readdirSync(slow.d.images).filter((f) => !f.startsWith("."))).toHaveLength(2);
    for (const id of [created.stdout.trim(), again.stdout.trim(), always.stdout.trim()]) {
      expect((await slowDocker("d", "rm", id)).code).toBe(0);
    }
  });
});

describe("the watchdog", () => {
  it("kills the guests' process groups and removes the run's containers by ID when the simulator's process dies, while podman ps cannot list them", async () => {
    const parent = spawn("sleep", ["600"], { stdio: "ignore" });
    const guestProcess = spawn("sleep", ["600"], { detached: true, stdio: "ignore" });
    const pgids = join(work, "pgids");
    writeFileSync(pgids, `${guestProcess.pid}\n`);
    const container = await dockerIn("a", "run", "-d", "busybox", "sleep", "600");
    expect(container.code).toBe(0);
    // A Pod sandbox of the run that breaks podman ps while it runs (see testing/podman.ts): the
    // watchdog's label listing fails until its removal by ID has taken it away.
    const broken = await brokenContainer(docker.a);
    try {
      await expect(
        run("podman", ["ps", "-aq", "--filter", `label=nebula-sim.run=${RUN}`]),
      ).rejects.toMatchObject({ stderr: expect.stringMatching(/unknown FS magic/) });
      const watchdog = spawn(
        "bash",
        [
          ...["-c", WATCHDOG_SCRIPT, "watchdog", String(parent.pid), pgids, RUN, RUNTIME],
          containersDir,
        ],
        { stdio: "ignore" },
      );
      const guestGone = new Promise((resolve) =>
        guestProcess.once("exit", (_code, signal) => resolve(signal)),
      );
      const watchdogDone = new Promise((resolve) => watchdog.once("exit", resolve));
      parent.kill("SIGKILL");
      expect(await guestGone).toBe("SIGKILL");
      await watchdogDone;
      expect(await containerExists(broken.id)).toBe(false);
      expect(await containerExists(container.stdout.trim())).toBe(false);
      const { stdout } = await run("podman", [
        "ps",
        "-aq",
        "--filter",
        `label=nebula-sim.run=${RUN}`,
      ]);
      expect(stdout.trim()).toBe("");
    } finally {
      await run("podman", ["rm", "-f", "-t", "0", "-i", broken.id]);
      removeStrayNetns(broken.netns);
    }
  });
});

describe("the sandbox entry script", () => {
  it("bind-mounts private paths and hides files for the sandboxed process only", async () => {
    const dir = join(work, "enter");
    mkdirSync(join(dir, "tools"), { recursive: true });
    mkdirSync(join(dir, "private"));
    mkdirSync(join(dir, "target"));
    mkdirSync(join(dir, "scratch"));
    for (const tool of ["visible", "hidden"]) {
      writeFileSync(join(dir, "tools", tool), "#!/bin/sh\necho ok\n", { mode: 0o755 });
    }
    writeFileSync(join(dir, "private", "mine"), "guest file");
    writeFileSync(join(dir, "enter.sh"), ENTER_SCRIPT);
    writeFileSync(
      join(dir, "mounts"),
      `bind\t${join(dir, "private")}\t${join(dir, "target")}\nhide\t${join(dir, "scratch")}\t${join(dir, "tools", "hidden")}\n`,
    );
    const { stdout } = await run("unshare", [
      "--mount",
      "--propagation",
      "private",
      "--",
      "/bin/bash",
      join(dir, "enter.sh"),
      join(dir, "mounts"),
      "/bin/bash",
      "-c",
      `export PATH=${join(dir, "tools")}:/usr/bin:/bin; cat ${join(dir, "target", "mine")}; echo; visible; command -v hidden || echo "no hidden"; pwd`,
    ]);
    expect(stdout).toBe("guest file\nok\nno hidden\n/\n");
    // Outside the sandbox nothing changed.
    expect(readFileSync(join(dir, "tools", "hidden"), "utf8")).toContain("echo ok");
    expect(() => readFileSync(join(dir, "target", "mine"))).toThrow();
  });
});
