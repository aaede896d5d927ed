/**
 * Test host for the warm-pool user-data (unit tests only): runs the real pool script, and later
 * the boot program as its unit would, under bash in a private mount namespace (the guest paths
 * bind-mounted from a temp dir), with recording stand-ins for `docker`, `systemctl` and
 * `shutdown` on PATH and an in-process IMDSv2 that serves the instance's user-data as it is now
 * (a test changes it as `ModifyInstanceAttribute` would). curl, sha256sum, gzip and timeout are
 * the machine's own.
 */
import { spawn } from "node:child_process";
import {
  createWriteStream,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { killMarked } from "./reap.js";

/** The stand-ins: each records its argv in `calls`; `docker pull` fails or hangs by image name. */
const STANDINS: Record<string, string> = {
  docker: `#!/bin/bash
{ printf 'docker'; printf ' %q' "$@"; printf '\\n'; } >>"$POOL_HOST_DIR/calls"
[ "$1" = pull ] && [ "$2" = -- ] || { echo "docker stand-in: only pull -- <image>" >&2; exit 2; }
case $3 in
  *missing*) echo "Error response from daemon: manifest for $3 not found" >&2; exit 1 ;;
  *hang*) exec sleep 600 ;;
  *) echo "pulled $3" ;;
esac
`,
  systemctl: `#!/bin/bash
{ printf 'systemctl'; printf ' %q' "$@"; printf '\\n'; } >>"$POOL_HOST_DIR/calls"
`,
  shutdown: `#!/bin/bash
{ printf 'shutdown'; printf ' %q' "$@"; printf '\\n'; } >>"$POOL_HOST_DIR/calls"
`,
};

/** A pool host: its guest directories, the stand-ins' record, and its IMDS. */
export class PoolTestHost {
  /** The host's own directory (`lib`, `state`, `units`, `console`, `calls`, logs). */
  readonly dir: string;
  /** Every IMDS request, as `METHOD path status`. */
  readonly imdsRequests: string[] = [];
  /** The user-data IMDS serves (`undefined`: none, 404). */
  userData: Buffer | undefined;
  /** Answer this many more IMDS requests with 500 (a metadata service not up yet). */
  imdsFailures = 0;
  #server: Server | undefined;

  constructor() {
    this.dir = mkdtempSync(join(tmpdir(), "nebula-pool-"));
    for (const sub of ["lib", "state", "units", "bin"]) mkdirSync(join(this.dir, sub));
    writeFileSync(join(this.dir, "console"), "");
    writeFileSync(join(this.dir, "calls"), "");
    for (const [name, text] of Object.entries(STANDINS))
      writeFileSync(join(this.dir, "bin", name), text, { mode: 0o755 });
  }

  /** `http://127.0.0.1:<port>/` once listening (the value of `AWS_EC2_METADATA_SERVICE_ENDPOINT`). */
  async imdsEndpoint(): Promise<string> {
    if (this.#server === undefined) {
      const tokens = new Set<string>();
      const server = createServer((req, res) => {
        const answer = (status: number, body: Buffer | string) => {
          this.imdsRequests.push(`${req.method} ${req.url} ${status}`);
          res.writeHead(status, { "content-type": "application/octet-stream" });
          res.end(body);
        };
        if (this.imdsFailures > 0) {
          this.imdsFailures--;
          return answer(500, "Internal Server Error");
        }
        if (req.method === "PUT" && req.url === "/latest/api/token") {
          if (req.headers["x-aws-ec2-metadata-token-ttl-seconds"] === undefined)
            return answer(400, "Bad Request");
          const token = `token-${tokens.size}`;
          tokens.add(token);
          return answer(200, token);
        }
        if (!tokens.has(String(req.headers["x-aws-ec2-metadata-token"])))
          return answer(401, "Unauthorized");
        if (req.url === "/latest/user-data" && this.userData !== undefined)
          return answer(200, this.userData);
        return answer(404, "Not Found");
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      this.#server = server;
    }
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}/`;
  }

  /**
   * Runs `argv` as root in the host's mount namespace with `env` (plus the stand-ins first on
   * PATH); its stdout and stderr go to `log`. Resolves with the exit code once every process
   * holding its output has closed it (a `tee` it started included).
   */
  async #run(argv: readonly string[], env: Record<string, string>, log: string): Promise<number> {
    const mounts = [
      "set -e",
      "mkdir -p /usr/local/lib/nebula /var/lib/nebula /etc/systemd/system",
      'mount --bind "$POOL_HOST_DIR/lib" /usr/local/lib/nebula',
      'mount --bind "$POOL_HOST_DIR/state" /var/lib/nebula',
      'mount --bind "$POOL_HOST_DIR/units" /etc/systemd/system',
      'mount --bind "$POOL_HOST_DIR/console" /dev/console',
      'exec "$@"',
    ].join("\n");
    const out = createWriteStream(join(this.dir, log), { flags: "a" });
    try {
      return await new Promise<number>((resolve, reject) => {
        const child = spawn(
          "unshare",
          ["--mount", "--propagation", "private", "bash", "-c", mounts, "bash", ...argv],
          {
            env: {
              ...env,
              PATH: `${join(this.dir, "bin")}:${env.PATH ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}`,
              POOL_HOST_DIR: this.dir,
            },
            stdio: ["ignore", "pipe", "pipe"],
            cwd: this.dir,
          },
        );
        child.stdout.pipe(out, { end: false });
        child.stderr.pipe(out, { end: false });
        child.on("error", reject);
        child.on("close", (code) => resolve(code ?? -1));
      });
    } finally {
      await new Promise((resolve) => out.end(resolve));
    }
  }

  /**
   * The first boot: IMDS serves `userData` (base64, as given to RunInstances; unless
   * `imdsServesUserData` is `false`: 404) and cloud-init runs it with bash and `env` (the endpoint
   * overrides a test gives; IMDS's is added). Output: `user-data.log`.
   */
  async firstBoot(
    userData: string,
    env: Record<string, string> = {},
    { imdsServesUserData = true }: { readonly imdsServesUserData?: boolean } = {},
  ): Promise<number> {
    const bytes = Buffer.from(userData, "base64");
    this.userData = imdsServesUserData ? bytes : undefined;
    writeFileSync(join(this.dir, "user-data"), bytes);
    const endpoint = await this.imdsEndpoint();
    return this.#run(
      ["bash", join(this.dir, "user-data")],
      { AWS_EC2_METADATA_SERVICE_ENDPOINT: endpoint, HOME: "/root", ...env },
      "user-data.log",
    );
  }

  /**
   * A later boot: runs the installed unit's `ExecStart` as systemd would, with a clean
   * environment (`PATH`, `LANG` and the unit's `Environment=` lines). Output: `unit.log`.
   */
  async bootAgain(): Promise<number> {
    const unit = readFileSync(join(this.dir, "units", "nebula-pool.service"), "utf8");
    const exec = /^ExecStart=(.*)$/m.exec(unit)?.[1] ?? "";
    const env: Record<string, string> = {
      PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
      LANG: "C.UTF-8",
    };
    for (const [, name, value] of unit.matchAll(/^Environment=([^=\n]+)=(.*)$/gm))
      env[name ?? ""] = value ?? "";
    return this.#run([exec], env, "unit.log");
  }

  /** The stand-ins' calls, one line each (`docker pull -- busybox`). */
  calls(): string[] {
    return readFileSync(join(this.dir, "calls"), "utf8").split("\n").filter(Boolean);
  }

  /** Whether `shutdown` was called (the host powered off). */
  poweredOff(): boolean {
    return this.calls().some((c) => c.startsWith("shutdown"));
  }

  /** A file of the guest's `/var/lib/nebula`, or `undefined` when absent. */
  state(name: string): string | undefined {
    try {
      return readFileSync(join(this.dir, "state", name), "utf8");
    } catch {
      return undefined;
    }
  }

  /** A file of this host's directory (`console`, `user-data.log`, `unit.log`, `units/…`, `lib/…`). */
  file(name: string): string {
    try {
      return readFileSync(join(this.dir, name), "utf8");
    } catch {
      return "";
    }
  }

  /**
   * Kills whatever of the host still runs (answers how many processes), stops IMDS, removes the
   * directory.
   */
  async close(): Promise<number> {
    const killed = await killMarked(`POOL_HOST_DIR=${this.dir}`);
    await new Promise<void>((resolve) =>
      this.#server === undefined ? resolve() : this.#server.close(() => resolve()),
    );
    rmSync(this.dir, { recursive: true, force: true });
    return killed;
  }
}
