/**
 * The apps' container images (apps/<name>/Dockerfile), built and run offline with this machine's
 * podman: no registry is reachable, so the Dockerfile's `BASE` (a distroless Node.js image in
 * production) is a base assembled here from this machine's Node.js.
 */
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** podman's global flags for the tests: runc, and cgroupfs (no systemd in this sandbox). */
export const PODMAN_FLAGS: readonly string[] = [
  "--runtime",
  "/usr/sbin/runc",
  "--cgroup-manager=cgroupfs",
];

/** An app image built by {@link buildAppImage}. */
export interface AppImage {
  /** The image's name, `localhost/nebula-test/<name>:test`. */
  readonly image: string;
  /** The base it was built on. */
  readonly base: string;
  /** Removes both images. */
  remove(): Promise<void>;
}

/**
 * Builds `<appDir>/Dockerfile` offline as `localhost/nebula-test/<name>:test`, on a
 * distroless-shaped base assembled from this machine's Node.js: the binary at
 * `/nodejs/bin/node` and the shared libraries it links (from `ldd`), nothing else.
 */
export async function buildAppImage(appDir: string, name: string): Promise<AppImage> {
  const base = `localhost/nebula-test/${name}-node-base:latest`;
  const image = `localhost/nebula-test/${name}:test`;
  const dir = mkdtempSync(join(tmpdir(), `nebula-${name}-image-`));
  try {
    const root = join(dir, "rootfs");
    mkdirSync(join(root, "nodejs/bin"), { recursive: true });
    mkdirSync(join(root, "tmp"), { recursive: true });
    copyFileSync(process.execPath, join(root, "nodejs/bin/node"));
    const { stdout } = await run("ldd", [process.execPath]);
    for (const lib of stdout.match(/\/[^\s]+\.so[^\s]*/g) ?? []) {
      mkdirSync(join(root, dirname(lib)), { recursive: true });
      copyFileSync(lib, join(root, lib));
    }
    await run("sh", [
      "-c",
      `tar -C '${root}' -c . | podman ${PODMAN_FLAGS.join(" ")} import - ${base}`,
    ]);
    await run(
      "podman",
      [
        ...PODMAN_FLAGS,
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
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return {
    image,
    base,
    remove: async () => {
      await run("podman", [...PODMAN_FLAGS, "rmi", "-f", image, base]).catch(() => undefined);
    },
  };
}

/**
 * `--ulimit` flags for `podman run` within this host's hard limits: this sandbox refuses the
 * runtime's defaults (runc may not raise a limit above the caller's, and conmon caps processes at
 * `kernel.pid_max`).
 */
export async function containerLimits(): Promise<string[]> {
  const { stdout } = await run("bash", [
    "-c",
    "n=$(ulimit -Hn); [[ $n == unlimited ]] && n=1048576; u=$(ulimit -Hu); m=$(cat /proc/sys/kernel/pid_max); [[ $u == unlimited || $u -gt $m ]] && u=$m; ((u > 65536)) && u=65536; echo $n; echo $u",
  ]);
  const [files, processes] = stdout.trim().split("\n");
  return ["--ulimit", `nofile=1024:${files}`, "--ulimit", `nproc=${processes}:${processes}`];
}
