import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { TestPeerError } from "../errors.js";

const run = promisify(execFile);

/** The image every guest can run: a busybox-static rootfs (`sh`, `sleep`, `echo`, ...). */
export const GUEST_BUSYBOX_IMAGE = "localhost/nebula-sim/busybox:latest";

/** Other names of {@link GUEST_BUSYBOX_IMAGE}, so Pods that say `busybox` run it offline. */
export const GUEST_BUSYBOX_ALIASES = ["docker.io/library/busybox:latest"] as const;

/**
 * The scripted-OOM image. A container of it runs for `NEBULA_SIM_OOM_AFTER` seconds (default 1,
 * settable with `-e`), then its process dies by SIGKILL (exit code 137), and the guest's `docker`
 * reports `State.OOMKilled=true`, as Docker does for a real OOM kill, which this kernel's
 * sandbox cannot produce. Its command and entrypoint cannot be overridden.
 */
export const GUEST_OOMKILL_IMAGE = "localhost/nebula-sim/oomkill:latest";

/**
 * The Pod sandbox image: sleeps until it is removed, holding the Pod's network namespace. Also
 * tagged as `@nebula/userdata`'s default sandbox image, so rendered user-data runs offline.
 */
export const GUEST_PAUSE_IMAGE = "localhost/nebula-sim/pause:latest";

/** Other names of {@link GUEST_PAUSE_IMAGE}: the default Pod sandbox image of `@nebula/userdata`. */
export const GUEST_PAUSE_ALIASES = ["registry.k8s.io/pause:3.10"] as const;

/** A file to put in a test image: its content, and its mode (default `0o644`, `0o755` when it starts with `#!`). */
export type TestImageFile =
  | string
  | Buffer
  | { readonly content: string | Buffer; readonly mode: number };

const TestImageSpecSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9][a-z0-9._/-]*(:[\w.-]+)?$/),
  files: z.record(z.string().regex(/^\/[^\0]+$/), z.any()).optional(),
  entrypoint: z.array(z.string()).optional(),
  cmd: z.array(z.string()).optional(),
  env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).optional(),
  workdir: z.string().startsWith("/").optional(),
  labels: z.record(z.string().regex(/^[\w.:/-]+$/), z.string()).optional(),
  aliases: z.array(z.string()).optional(),
  busybox: z.string().optional(),
});

/** What {@link buildTestImage} builds: a busybox-static rootfs plus your files and settings. */
export interface TestImageSpec {
  /** Image name, e.g. `nebula-test/exit-3` (stored as `localhost/nebula-test/exit-3:latest`). */
  name: string;
  /** Files to add, by absolute path in the image. */
  files?: Record<string, TestImageFile>;
  /** `ENTRYPOINT`, exec form. */
  entrypoint?: string[];
  /** `CMD`, exec form. Default `["sh"]` when there is no entrypoint. */
  cmd?: string[];
  /** `ENV` entries. */
  env?: Record<string, string>;
  /** `WORKDIR`. */
  workdir?: string;
  /** `LABEL` entries. */
  labels?: Record<string, string>;
  /** Extra names to tag the image with (e.g. `docker.io/library/busybox:latest`). */
  aliases?: string[];
  /** The static busybox to copy in. Default `/bin/busybox`. */
  busybox?: string;
}

function qualified(name: string): string {
  const withTag = /:[\w.-]+$/.test(name.split("/").at(-1) ?? "") ? name : `${name}:latest`;
  return withTag.split("/")[0]?.includes(".") || withTag.startsWith("localhost/")
    ? withTag
    : `localhost/${withTag}`;
}

function fileBytes(file: TestImageFile): { content: Buffer; mode: number } {
  if (typeof file === "string" || Buffer.isBuffer(file)) {
    const content = Buffer.from(file);
    return { content, mode: content.subarray(0, 2).toString() === "#!" ? 0o755 : 0o644 };
  }
  return { content: Buffer.from(file.content), mode: file.mode };
}

/**
 * Builds a container image offline for scenario tests: a busybox-static rootfs with your files,
 * imported with `podman import` (no registry, no network). Idempotent: an image with the same
 * spec (and the same busybox) is not rebuilt. Returns the image's full name.
 *
 * Use it in a test's `beforeAll` for images a Pod under test names, e.g. one whose entrypoint
 * exits with a given code or writes a termination message.
 *
 * @example
 * ```ts
 * const image = await buildTestImage({
 *   name: "nebula-test/exit-3",
 *   files: { "/app.sh": "#!/bin/sh\necho bye >/dev/termination-log\nexit 3\n" },
 *   entrypoint: ["/app.sh"],
 * });
 * ```
 */
export async function buildTestImage(spec: TestImageSpec): Promise<string> {
  const parsed = TestImageSpecSchema.safeParse(spec);
  if (!parsed.success) {
    throw new TestPeerError("InvalidOptions", `buildTestImage: ${z.prettifyError(parsed.error)}`, {
      cause: parsed.error,
    });
  }
  const name = qualified(spec.name);
  const busybox = spec.busybox ?? "/bin/busybox";
  let busyboxBytes: Buffer;
  try {
    busyboxBytes = readFileSync(busybox);
  } catch (cause) {
    throw new TestPeerError(
      "PrerequisiteMissing",
      `no static busybox at ${busybox} (Debian: busybox-static)`,
      { cause },
    );
  }
  const files = Object.entries(spec.files ?? {}).map(
    ([path, file]) => [path, fileBytes(file)] as const,
  );
  const hash = createHash("sha256");
  hash.update(busyboxBytes);
  hash.update(
    JSON.stringify({
      ...spec,
      files: files.map(([p, f]) => [p, f.mode, f.content.toString("base64")]),
    }),
  );
  const digest = hash.digest("hex").slice(0, 24);
  try {
    const { stdout } = await run("podman", [
      "image",
      "inspect",
      "--format",
      '{{index .Labels "nebula-sim.hash"}}',
      name,
    ]);
    if (stdout.trim() === digest) {
      for (const alias of spec.aliases ?? []) await run("podman", ["tag", name, alias]);
      return name;
    }
  } catch {
    // Not there yet.
  }
  const work = mkdtempSync(join(tmpdir(), "nebula-image-"));
  try {
    const root = join(work, "rootfs");
    for (const dir of [
      "bin",
      "sbin",
      "usr/bin",
      "usr/sbin",
      "etc",
      "root",
      "tmp",
      "proc",
      "sys",
      "dev",
      "var/log",
    ]) {
      mkdirSync(join(root, dir), { recursive: true });
    }
    chmodSync(join(root, "tmp"), 0o1777);
    writeFileSync(join(root, "bin/busybox"), busyboxBytes);
    chmodSync(join(root, "bin/busybox"), 0o755);
    const { stdout: list } = await run(busybox, ["--list-full"]);
    for (const applet of list.split("\n")) {
      if (applet === "" || applet === "bin/busybox") continue;
      mkdirSync(join(root, dirname(applet)), { recursive: true });
      try {
        symlinkSync("/bin/busybox", join(root, applet));
      } catch {
        // Listed twice.
      }
    }
    writeFileSync(
      join(root, "etc/passwd"),
      "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    );
    writeFileSync(join(root, "etc/group"), "root:x:0:\nnogroup:x:65534:\n");
    for (const [path, file] of files) {
      const target = join(root, path);
      mkdirSync(dirname(target), { recursive: true });
      rmSync(target, { force: true });
      writeFileSync(target, file.content);
      chmodSync(target, file.mode);
    }
    const tarball = join(work, "rootfs.tar");
    await run("tar", [
      "--numeric-owner",
      "--owner=0",
      "--group=0",
      "-C",
      root,
      "-cf",
      tarball,
      ".",
    ]);
    const changes: string[] = [];
    if (spec.entrypoint !== undefined)
      changes.push(`ENTRYPOINT ${JSON.stringify(spec.entrypoint)}`);
    const cmd = spec.cmd ?? (spec.entrypoint === undefined ? ["sh"] : undefined);
    if (cmd !== undefined) changes.push(`CMD ${JSON.stringify(cmd)}`);
    for (const [key, value] of Object.entries(spec.env ?? {})) changes.push(`ENV ${key}=${value}`);
    if (spec.workdir !== undefined) changes.push(`WORKDIR ${spec.workdir}`);
    for (const [key, value] of Object.entries({ ...spec.labels, "nebula-sim.hash": digest })) {
      changes.push(`LABEL ${key}=${JSON.stringify(value)}`);
    }
    await run("podman", ["import", ...changes.flatMap((c) => ["--change", c]), tarball, name]);
    for (const alias of spec.aliases ?? []) await run("podman", ["tag", name, alias]);
    return name;
  } catch (cause) {
    if (cause instanceof TestPeerError) throw cause;
    throw new TestPeerError(
      "ImageBuildFailed",
      `podman import of ${name} failed: ${String(cause)}`,
      { cause },
    );
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const OOMKILL_SCRIPT = `#!/bin/sh
# Scripted OOM kill of the Nebula instance-host simulator: run, then die by SIGKILL (exit 137).
# The guest's docker marks the container OOMKilled when it starts it.
echo "oomkill: allocating until the OOM killer comes (in \${NEBULA_SIM_OOM_AFTER:-1}s)"
sh -c "sleep \${NEBULA_SIM_OOM_AFTER:-1}; kill -9 \\$\\$"
exit $?
`;

/** The images every guest has, by role. */
export interface GuestImages {
  /** {@link GUEST_BUSYBOX_IMAGE}. */
  readonly busybox: string;
  /** {@link GUEST_OOMKILL_IMAGE}. */
  readonly oomkill: string;
  /** {@link GUEST_PAUSE_IMAGE}. */
  readonly pause: string;
}

/**
 * Imports the images every guest has (idempotent): {@link GUEST_BUSYBOX_IMAGE} (also tagged
 * `docker.io/library/busybox:latest`), the scripted {@link GUEST_OOMKILL_IMAGE} and the Pod sandbox
 * {@link GUEST_PAUSE_IMAGE} (also tagged `registry.k8s.io/pause:3.10`).
 * {@link startInstanceHosts} calls it; call it yourself only to use the images without guests.
 *
 * @param busybox - the static busybox to use (default `/bin/busybox`).
 * @example
 * ```ts
 * const { busybox } = await ensureGuestImages();
 * ```
 */
export async function ensureGuestImages(busybox = "/bin/busybox"): Promise<GuestImages> {
  const base = await buildTestImage({
    name: GUEST_BUSYBOX_IMAGE,
    busybox,
    aliases: [...GUEST_BUSYBOX_ALIASES],
  });
  const oomkill = await buildTestImage({
    name: GUEST_OOMKILL_IMAGE,
    busybox,
    files: { "/nebula-sim/oomkill": OOMKILL_SCRIPT },
    entrypoint: ["/bin/sh", "/nebula-sim/oomkill"],
    cmd: [],
    labels: { "nebula-sim.outcome": "oomkill" },
  });
  const pause = await buildTestImage({
    name: GUEST_PAUSE_IMAGE,
    busybox,
    entrypoint: ["/bin/sleep", "2147483647"],
    cmd: [],
    aliases: [...GUEST_PAUSE_ALIASES],
  });
  return { busybox: base, oomkill, pause };
}
