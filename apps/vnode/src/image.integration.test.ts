import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const appDir = fileURLToPath(new URL("..", import.meta.url));
const podman = ["--runtime", "/usr/sbin/runc", "--cgroup-manager=cgroupfs"];
const base = "localhost/nebula-test/vnode-node-base:latest";
const image = "localhost/nebula-test/nebula-vnode:test";

/**
 * A distroless-shaped base assembled offline from this machine's Node.js: the binary at
 * /nodejs/bin/node and the shared libraries it links (from `ldd`), nothing else.
 */
async function assembleBase(dir: string): Promise<void> {
  const root = join(dir, "rootfs");
  mkdirSync(join(root, "nodejs/bin"), { recursive: true });
  mkdirSync(join(root, "tmp"), { recursive: true });
  copyFileSync(process.execPath, join(root, "nodejs/bin/node"));
  const { stdout } = await run("ldd", [process.execPath]);
  for (const lib of stdout.match(/\/[^\s]+\.so[^\s]*/g) ?? []) {
    mkdirSync(join(root, dirname(lib)), { recursive: true });
    copyFileSync(lib, join(root, lib));
  }
  await run("sh", ["-c", `tar -C '${root}' -c . | podman ${podman.join(" ")} import - ${base}`]);
}

describe("the container image (apps/vnode/Dockerfile)", () => {
  const dir = mkdtempSync(join(tmpdir(), "nebula-vnode-image-"));
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    await run("podman", [...podman, "rmi", "-f", image, base]).catch(() => undefined);
  });

  it("builds offline on a base assembled here and runs --help as a non-root user", async () => {
    await assembleBase(dir);
    await run(
      "podman",
      [
        ...podman,
        "build",
        "--pull=never",
        "--build-arg",
        `BASE=${base}`,
        "-t",
        image,
        "-f",
        join(appDir, "Dockerfile"),
        appDir,
      ],
      { maxBuffer: 16 * 1024 * 1024 },
    );
    // This sandbox refuses the runtime's default rlimits: pass the host's own hard limits (runc
    // may not raise one above the caller's; conmon caps processes at kernel.pid_max).
    const limits = (
      await run("bash", [
        "-c",
        "n=$(ulimit -Hn); [[ $n == unlimited ]] && n=1048576; u=$(ulimit -Hu); m=$(cat /proc/sys/kernel/pid_max); [[ $u == unlimited || $u -gt $m ]] && u=$m; ((u > 65536)) && u=65536; echo $n; echo $u",
      ])
    ).stdout
      .trim()
      .split("\n");
    const help = await run("podman", [
      ...podman,
      "run",
      "--rm",
      "--network=none",
      "--ulimit",
      `nofile=1024:${limits[0]}`,
      "--ulimit",
      `nproc=${limits[1]}:${limits[1]}`,
      image,
      "--help",
    ]);
    expect(help.stdout).toMatch(/^Usage: nebula-vnode/);
    expect(help.stdout).toContain("--node-name");
    const user = await run("podman", [
      ...podman,
      "image",
      "inspect",
      "--format",
      "{{.Config.User}}",
      image,
    ]);
    expect(user.stdout.trim()).toBe("65532:65532");
  });
});
