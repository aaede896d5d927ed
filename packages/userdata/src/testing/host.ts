/**
 * Test host for the generated user-data (unit tests only): runs the real script under bash in a
 * private mount namespace (the guest contract's paths bind-mounted from a temp dir), with recording
 * stand-ins for docker, aws, systemctl and shutdown on PATH and an in-process IMDSv2 + EC2 endpoint
 * that checks every CreateTags signature (SigV4) and keeps the instance's tags; the same endpoint
 * plays SQS (`AWS_ENDPOINT_URL_SQS`) for the doorbell's SendMessage, also signature-checked.
 */
import { spawn } from "node:child_process";
import { createHash, createHmac, type Hash, type Hmac } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { decodeConsoleOutput, decodeReportTags, type ExitReport } from "@nebula/state-mapping";
import { SignatureV4 } from "@smithy/signature-v4";
import { goQuote } from "../downward.js";
import { DEFAULT_SANDBOX_IMAGE } from "../options.js";
import type { RenderedUserData } from "../render.js";
import { killMarked } from "./reap.js";

const STANDINS = fileURLToPath(new URL("./standins", import.meta.url));
export const INSTANCE_ID = "i-0123456789abcdef0";
const REGION = "us-east-1";
export const HOST_IP = "10.0.0.7";
/** The instance role's credentials the test IMDS hands out. */
export const CREDS = {
  AccessKeyId: "ASIATESTKEY",
  SecretAccessKey: "test/secret+key",
  Token: "session-token",
};

/** A fake image: a bash script that plays the container's process. */
export interface FakeImage {
  /** Bash body run as the container process, with the container's argv as "$@" and its env. */
  readonly script: string;
  /** Pulls that fail before one succeeds (default 0). */
  readonly pullFailures?: number;
  /** `docker start` fails (the executable is missing). */
  readonly noStart?: boolean;
  /** Already on the host before boot (default false: it must be pulled). */
  readonly present?: boolean;
  /** The image's ENTRYPOINT / CMD, for the agent shim's lookup. */
  readonly entrypoint?: readonly string[];
  readonly cmd?: readonly string[];
  /** The image config's `User` (`docker inspect --format '{{.Config.User}}'`); default empty (root). */
  readonly user?: string;
}

export interface HostOptions {
  readonly images: Record<string, FakeImage>;
  /**
   * Put the aws CLI stand-in on PATH (default: no aws CLI, so the supervisor signs with curl +
   * openssl); `"broken"`: an aws on PATH that cannot run.
   */
  readonly awsCli?: boolean | "broken";
  /** CreateTags calls to the EC2 endpoint that fail (throttled) before they succeed. */
  readonly failCreateTags?: number;
  /** Throttle the first `times` CreateTags of the report with this `seq` (`RequestLimitExceeded`). */
  readonly failReport?: { readonly seq: number; readonly times: number };
  /** aws CLI stand-in calls that fail before they succeed. */
  readonly awsFailures?: number;
  /** The SQS endpoint answers every SendMessage (the doorbell) with `NonExistentQueue`. */
  readonly failDoorbell?: boolean;
  /** `fake` (default): the recording stand-in; `podman`: real podman + runc through a docker wrapper. */
  readonly docker?: "fake" | "podman";
  /** Extra environment for the guest (e.g. `NEBULA_PODMAN_ROOT`). */
  readonly env?: Record<string, string>;
  /**
   * With the fake docker: the guest's `/sys/fs/cgroup` is an empty directory of the test host
   * (so fake containers can leave an OOM record there); `v2` also marks it as the unified
   * hierarchy (`cgroup.controllers`). Default `v1`.
   */
  readonly cgroup?: "v1" | "v2";
  /**
   * What IMDS answers at `instance-life-cycle`, as EC2 does (`spot`, `on-demand`, or `scheduled`
   * for a Scheduled Instance). Default: not served (404), an IMDS that does not say.
   */
  readonly lifeCycle?: "spot" | "on-demand" | "scheduled";
}

const PODMAN_DOCKER = fileURLToPath(new URL("./podman/docker", import.meta.url));

/**
 * A directory of symlinks to the system's tools minus `aws`, so "no aws CLI on this host" is real
 * even where Debian's awscli is installed. Built once per process.
 */
function systemPathWithoutAws(): string {
  const dir = join(tmpdir(), "nebula-userdata-syspath");
  if (existsSync(dir)) return dir;
  const building = mkdtempSync(join(tmpdir(), "nebula-userdata-syspath-"));
  for (const from of [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
  ]) {
    if (!existsSync(from)) continue;
    for (const name of readdirSync(from)) {
      if (name === "aws" || existsSync(join(building, name))) continue;
      try {
        symlinkSync(join(from, name), join(building, name));
      } catch {}
    }
  }
  try {
    renameSync(building, dir); // atomic: parallel workers race, one wins
  } catch {
    rmSync(building, { recursive: true, force: true });
  }
  return dir;
}

const key = (image: string) => image.replace(/[^A-Za-z0-9._-]/g, "_");

/** A doorbell the SQS endpoint received: a signed `SendMessage` (JSON protocol). */
export interface Doorbell {
  /** The request's `QueueUrl`. */
  readonly queueUrl: string;
  /** The request's `MessageBody`, as sent. */
  readonly body: string;
  /** Tag writes the EC2 endpoint had accepted when it arrived. */
  readonly afterTagWrites: number;
  /** Whether the host had powered off when it arrived. */
  readonly afterPowerOff: boolean;
}

/** One running guest. */
export class TestHost {
  readonly dir: string;
  /** Every tag write the EC2 endpoint (or the aws stand-in) accepted, in order. */
  readonly tagWrites: Record<string, string>[] = [];
  /** The instance's tags, merged as EC2 merges them. */
  readonly tags: Record<string, string> = {};
  /** Every SendMessage the SQS endpoint received with a good signature, in order (failed ones too). */
  readonly doorbells: Doorbell[] = [];
  /** How many times IMDS handed out the role's credentials. */
  credentialReads = 0;
  /**
   * Every metadata path IMDS was asked for (what follows `/latest/meta-data/`, e.g.
   * `spot/instance-action`), in order, whatever it answered (a refused token too).
   */
  readonly imdsReads: string[] = [];
  private server: Server | undefined;
  private failTags: number;
  private failedReport = 0;
  private rejected = 0;
  private spotNotice: string | undefined;
  private rebalance: string | undefined;
  private readonly instanceTags = new Map<string, string>();

  constructor(private readonly options: HostOptions) {
    this.dir = mkdtempSync(join(tmpdir(), "nebula-userdata-"));
    this.failTags = options.failCreateTags ?? 0;
    for (const sub of ["lib", "state", "run", "units", "docker/images", "bin", "cgroup"])
      mkdirSync(join(this.dir, sub), { recursive: true });
    if (options.cgroup === "v2")
      writeFileSync(join(this.dir, "cgroup/cgroup.controllers"), "memory\n");
    writeFileSync(join(this.dir, "console"), "");
    writeFileSync(join(this.dir, "calls"), "");
    const standins = ["docker", "systemctl", "shutdown", ...(options.awsCli ? ["aws"] : [])];
    // curl and openssl run for real, through a stand-in that records their arguments.
    for (const name of ["curl", "openssl"]) {
      const real = systemPathWithoutAws()
        .split(":")
        .map((dir) => join(dir, name))
        .find((path) => existsSync(path));
      if (real !== undefined)
        writeFileSync(
          join(this.dir, "bin", name),
          `#!/bin/bash\n{ printf '%s' ${name}; printf ' %q' "$@"; printf '\\n'; } >>"$FAKE_HOST_DIR/argv"\nexec ${real} "$@"\n`,
          { mode: 0o755 },
        );
    }
    // With real podman the IMDS block rule is real too; with the fake docker, iptables records.
    if (options.docker !== "podman") standins.push("iptables", "ip6tables");
    for (const name of standins) {
      const source =
        name === "docker" && options.docker === "podman" ? PODMAN_DOCKER : join(STANDINS, name);
      writeFileSync(join(this.dir, "bin", name), readFileSync(source), { mode: 0o755 });
    }
    if (options.awsCli === "broken") writeFileSync(join(this.dir, "aws-broken"), "");
    if (options.awsFailures) writeFileSync(join(this.dir, "aws-fail"), String(options.awsFailures));
    const images: Record<string, FakeImage> = {
      // The Pod sandbox: holds the network namespace until it is removed.
      [DEFAULT_SANDBOX_IMAGE]: {
        script: "trap 'exit 0' TERM\nwhile :; do sleep 1 & wait $!; done\n",
        present: true,
      },
      ...options.images,
    };
    for (const [image, spec] of Object.entries(images)) {
      const base = join(this.dir, "docker/images", key(image));
      writeFileSync(`${base}.sh`, spec.script);
      if (spec.pullFailures) writeFileSync(`${base}.pullfail`, String(spec.pullFailures));
      if (spec.noStart) writeFileSync(`${base}.nostart`, "");
      if (spec.present) {
        mkdirSync(join(this.dir, "docker/present"), { recursive: true });
        writeFileSync(join(this.dir, "docker/present", key(image)), "");
      }
      const quoted = (list: readonly string[]) => list.map((s) => `${goQuote(s)}\n`).join("");
      if (spec.entrypoint) writeFileSync(`${base}.entrypoint`, quoted(spec.entrypoint));
      if (spec.cmd) writeFileSync(`${base}.cmd`, quoted(spec.cmd));
      if (spec.user !== undefined) writeFileSync(`${base}.user`, `${spec.user}\n`);
    }
  }

  /** Runs the user-data (gunzipping it first when gzipped, as cloud-init does) and returns once it exits. */
  async boot(rendered: RenderedUserData): Promise<number> {
    let bytes = Buffer.from(rendered.userData, "base64");
    if (bytes[0] === 0x1f && bytes[1] === 0x8b) bytes = gunzipSync(bytes);
    writeFileSync(join(this.dir, "user-data"), bytes);
    const port = await this.listen();
    const mounts = [
      "set -e",
      "mkdir -p /usr/local/lib/nebula /var/lib/nebula /etc/systemd/system /run/nebula",
      'mount --bind "$FAKE_HOST_DIR/lib" /usr/local/lib/nebula',
      'mount --bind "$FAKE_HOST_DIR/run" /run/nebula',
      'mount --bind "$FAKE_HOST_DIR/state" /var/lib/nebula',
      'mount --bind "$FAKE_HOST_DIR/units" /etc/systemd/system',
      'mount --bind "$FAKE_HOST_DIR/console" /dev/console',
      ...(this.options.docker === "podman"
        ? []
        : ['mount --bind "$FAKE_HOST_DIR/cgroup" /sys/fs/cgroup']),
      'exec bash "$FAKE_HOST_DIR/user-data" >"$FAKE_HOST_DIR/user-data.log" 2>&1',
    ].join("\n");
    const env: Record<string, string> = {
      PATH: `${join(this.dir, "bin")}:${systemPathWithoutAws()}`,
      HOME: this.dir,
      FAKE_HOST_DIR: this.dir,
      FAKE_DOCKER_DIR: join(this.dir, "docker"),
      AWS_EC2_METADATA_SERVICE_ENDPOINT: `http://127.0.0.1:${port}`,
      AWS_ENDPOINT_URL_EC2: `http://127.0.0.1:${port}`,
      AWS_ENDPOINT_URL_SQS: `http://127.0.0.1:${port}`,
      ...this.options.env,
    };
    return await new Promise((resolve, reject) => {
      const child = spawn(
        "unshare",
        ["--mount", "--propagation", "private", "bash", "-c", mounts],
        // cwd: the guest's own directory (conmon, for one, drops files such as `oom` into its cwd).
        { env, stdio: "ignore", cwd: this.dir },
      );
      child.on("error", reject);
      child.on("exit", (code) => resolve(code ?? -1));
    });
  }

  /** Resolves when the supervisor has exited (or rejects after `limitMs`, with its log). */
  async finished(limitMs = 90_000): Promise<number> {
    await this.until(() => existsSync(join(this.dir, "supervisor.rc")), limitMs);
    return Number(readFileSync(join(this.dir, "supervisor.rc"), "utf8").trim());
  }

  /** Polls `check` every 50 ms; rejects with the supervisor log when `limitMs` passes first. */
  async until(check: () => boolean, limitMs = 60_000): Promise<void> {
    const start = Date.now();
    while (!check()) {
      if (Date.now() - start > limitMs) {
        throw new Error(
          `test host: condition not met in ${limitMs} ms\n--- supervisor log ---\n${this.supervisorLog()}\n--- calls ---\n${this.calls().join("\n")}`,
        );
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /**
   * From now on every CreateTags fails: the EC2 endpoint refuses it and each aws stand-in call
   * takes `awsSeconds` before it fails (a CLI waiting on a slow network).
   */
  failTagsFromNow(awsSeconds: number): void {
    this.failTags = Number.POSITIVE_INFINITY;
    writeFileSync(join(this.dir, "aws-slow"), String(awsSeconds));
  }

  /**
   * From now on IMDS serves this instance tag under `tags/instance/<key>`, as EC2 does with
   * `InstanceMetadataTags=enabled` (the controller writes `nebula:stop-grace-seconds` before a stop).
   */
  tagInstance(key: string, value: string): void {
    this.instanceTags.set(key, value);
  }

  /**
   * From now on IMDS serves a Spot interruption notice (`spot/instance-action`), as EC2 does two
   * minutes before it acts: `{"action": action, "time": at}`.
   */
  raiseSpotNotice(action: "terminate" | "stop" | "hibernate", at: Date): void {
    this.spotNotice = JSON.stringify({ action, time: at.toISOString().replace(/\.\d{3}Z$/, "Z") });
  }

  /**
   * From now on IMDS serves a rebalance recommendation (`events/recommendations/rebalance`), as
   * EC2 does when a Spot instance is at elevated risk of interruption: `{"noticeTime": at}`.
   */
  raiseRebalance(at: Date): void {
    this.rebalance = JSON.stringify({ noticeTime: at.toISOString().replace(/\.\d{3}Z$/, "Z") });
  }

  /** Epoch seconds (fractional) at which the docker stand-in received each `docker stop`. */
  stopTimes(): number[] {
    const file = join(this.dir, "docker/stop-times");
    if (!existsSync(file)) return [];
    return readFileSync(file, "utf8").trim().split("\n").map(Number);
  }

  /** Epoch seconds (fractional) at which each aws stand-in call started, in order. */
  awsStarts(): number[] {
    const dir = join(this.dir, "aws-started");
    if (!existsSync(dir)) return [];
    return readdirSync(dir)
      .sort()
      .map((f) => Number(readFileSync(join(dir, f), "utf8")));
  }

  /** Sends SIGTERM to the supervisor, as systemd does when the instance is stopped. */
  terminate(): void {
    process.kill(Number(readFileSync(join(this.dir, "supervisor.pid"), "utf8")), "SIGTERM");
  }

  /** docker / systemctl / shutdown invocations, one line each, `%q`-quoted. */
  calls(): string[] {
    const lines = readFileSync(join(this.dir, "calls"), "utf8").split("\n");
    const docker = existsSync(join(this.dir, "docker/calls"))
      ? readFileSync(join(this.dir, "docker/calls"), "utf8").split("\n")
      : [];
    return [...lines, ...docker].filter((l) => l !== "");
  }

  /** docker calls of one command for the Pod's containers (those about the Pod sandbox left out). */
  dockerCalls(command: string): string[] {
    const sandbox = this.sandboxCalls();
    return this.calls().filter(
      (l) =>
        (l.startsWith(`docker ${command} `) || l === `docker ${command}`) && !sandbox.includes(l),
    );
  }

  /** The fake docker's id of the Pod sandbox container, once created. */
  sandboxId(): string | undefined {
    const file = join(this.dir, "docker/sandbox-id");
    return existsSync(file) ? readFileSync(file, "utf8") : undefined;
  }

  /** docker calls about the Pod sandbox (its name, image or id). */
  sandboxCalls(): string[] {
    const id = this.sandboxId();
    return this.calls().filter(
      (l) =>
        l.startsWith("docker ") &&
        (l.includes("nebula-sandbox") ||
          l.includes(DEFAULT_SANDBOX_IMAGE) ||
          (id !== undefined && l.includes(id) && !l.includes(`--network=container:${id}`))),
    );
  }

  /** The fake docker's directory of the Pod's first workload container (removed or not). */
  workloadDir(): string {
    const dir = join(this.dir, "docker");
    const id = this.sandboxId() ?? "-";
    const removed = readdirSync(dir).find((f) => f.startsWith("removed-") && !f.endsWith(id));
    if (removed) return join(dir, removed);
    return join(dir, "c", readdirSync(join(dir, "c")).find((f) => f !== id) ?? "");
  }

  /** The argv the aws stand-in got, per call. */
  awsCalls(): string[][] {
    const dir = join(this.dir, "aws-calls");
    if (!existsSync(dir)) return [];
    return readdirSync(dir)
      .sort()
      .map((f) => readFileSync(join(dir, f), "utf8").split("\0").slice(0, -1));
  }

  /** How many times the aws stand-in was asked its version (whether the CLI runs). */
  awsVersionCalls(): number {
    const file = join(this.dir, "aws-version-calls");
    return existsSync(file) ? readFileSync(file, "utf8").split("\n").length - 1 : 0;
  }

  poweredOff(): boolean {
    return existsSync(join(this.dir, "powered-off"));
  }

  supervisorLog(): string {
    const file = join(this.dir, "supervisor.log");
    return existsSync(file) ? readFileSync(file, "utf8") : "(no supervisor log)";
  }

  consoleText(): string {
    return readFileSync(join(this.dir, "console"), "utf8");
  }

  /** Every report line on the console, decoded by `@nebula/state-mapping`, in order. */
  consoleReports(): ExitReport[] {
    return this.consoleText()
      .split("\n")
      .filter((l) => l.startsWith("NEBULA-REPORT "))
      .map((line) => {
        const read = decodeConsoleOutput(line);
        if (read.kind !== "report")
          throw new Error(
            `unreadable console report: ${JSON.stringify(read)} in ${line.slice(0, 120)}`,
          );
        return read.report;
      });
  }

  /**
   * Every report written to the tags, decoded by `@nebula/state-mapping` after each write: the
   * writes the EC2 endpoint accepted (`ec2`), or those of the aws stand-in (`aws`; the default when
   * the stand-in is on PATH and never fails).
   */
  tagReports(
    source: "ec2" | "aws" = this.options.awsCli === true && !this.options.awsFailures
      ? "aws"
      : "ec2",
  ): ExitReport[] {
    const writes = source === "aws" ? this.awsTagWrites() : this.tagWrites;
    const merged: Record<string, string> = {};
    return writes.map((write) => {
      Object.assign(merged, write);
      const read = decodeReportTags(merged);
      if (read.kind !== "report") throw new Error(`unreadable tag report: ${JSON.stringify(read)}`);
      return read.report;
    });
  }

  /** Tags per aws stand-in call that succeeded (the failed ones are left out, as EC2 would). */
  private awsTagWrites(): Record<string, string>[] {
    const failed = this.options.awsFailures ?? 0;
    return this.awsCalls()
      .slice(failed)
      .map((argv) => {
        const json = argv[argv.indexOf("--tags") + 1] ?? "[]";
        const tags = JSON.parse(json) as { Key: string; Value: string }[];
        return Object.fromEntries(tags.map((t) => [t.Key, t.Value]));
      });
  }

  /** The arguments curl and openssl ran with, one line each (`%q`-quoted, as bash prints them). */
  argv(): string[] {
    const file = join(this.dir, "argv");
    return existsSync(file) ? readFileSync(file, "utf8").split("\n").slice(0, -1) : [];
  }

  /** Requests the endpoint refused because their signature did not verify. */
  badSignatures(): number {
    return this.rejected;
  }

  /** Kills what is left (after a failed test) and stops the endpoint. */
  async close(): Promise<void> {
    // Every process of this guest, not only the supervisor: a `docker run` it had started would
    // otherwise go on and create its container after the suite's clean-up (testing/reap.ts).
    await killMarked(`FAKE_HOST_DIR=${this.dir}`);
    const containers = join(this.dir, "docker/c");
    if (existsSync(containers)) {
      for (const id of readdirSync(containers)) {
        const pidFile = join(containers, id, "pid");
        if (existsSync(pidFile) && !existsSync(join(containers, id, "exit"))) {
          try {
            process.kill(Number(readFileSync(pidFile, "utf8")), "SIGKILL");
          } catch {}
        }
      }
    }
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
    rmSync(this.dir, { recursive: true, force: true });
  }

  private handling: Promise<void> = Promise.resolve();

  private async listen(): Promise<number> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        // One request at a time, in the order they arrived (the signature check is async).
        this.handling = this.handling
          .then(() => this.handle(req, body))
          .catch((e: unknown): [number, string] => [500, String(e)])
          .then(([status, text]) => {
            res.writeHead(status, { "Content-Type": "text/plain" });
            res.end(text);
          });
      });
    });
    await new Promise<void>((r) => this.server?.listen(0, "127.0.0.1", r));
    return (this.server.address() as AddressInfo).port;
  }

  private async handle(req: IncomingMessage, body: string): Promise<[number, string]> {
    const url = req.url ?? "/";
    if (req.method === "PUT" && url === "/latest/api/token") return [200, "imds-token"];
    if (url.startsWith("/latest/meta-data/")) {
      const path = url.slice("/latest/meta-data/".length);
      this.imdsReads.push(path);
      if (req.headers["x-aws-ec2-metadata-token"] !== "imds-token") return [401, "missing token"];
      const meta: Record<string, string> = {
        "instance-id": INSTANCE_ID,
        "placement/region": REGION,
        "local-ipv4": HOST_IP,
        ...(this.options.lifeCycle === undefined
          ? {}
          : { "instance-life-cycle": this.options.lifeCycle }),
        ...(this.spotNotice === undefined ? {} : { "spot/instance-action": this.spotNotice }),
        ...(this.rebalance === undefined
          ? {}
          : { "events/recommendations/rebalance": this.rebalance }),
        ...Object.fromEntries([...this.instanceTags].map(([k, v]) => [`tags/instance/${k}`, v])),
        "iam/security-credentials/": "nebula-host",
        "iam/security-credentials/nebula-host": JSON.stringify(
          { Code: "Success", ...CREDS, Expiration: "2099-01-01T00:00:00Z" },
          null,
          2,
        ),
      };
      const value = meta[path];
      if (path === "iam/security-credentials/nebula-host") this.credentialReads++;
      return value === undefined ? [404, "not found"] : [200, value];
    }
    if (req.method === "POST" && url === "/" && req.headers["x-amz-target"] !== undefined) {
      if (
        req.headers["x-amz-target"] !== "AmazonSQS.SendMessage" ||
        req.headers["content-type"] !== "application/x-amz-json-1.0" ||
        !(await this.verify(req, body, "sqs"))
      ) {
        this.rejected++;
        return [403, '{"__type":"com.amazon.coral.service#IncompleteSignatureException"}'];
      }
      const request = JSON.parse(body) as { QueueUrl: string; MessageBody: string };
      this.doorbells.push({
        queueUrl: request.QueueUrl,
        body: request.MessageBody,
        afterTagWrites: this.tagWrites.length,
        afterPowerOff: this.poweredOff(),
      });
      if (this.options.failDoorbell)
        return [
          400,
          '{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"The specified queue does not exist."}',
        ];
      const md5 = createHash("md5").update(request.MessageBody, "utf8").digest("hex");
      return [
        200,
        JSON.stringify({ MD5OfMessageBody: md5, MessageId: `m-${this.doorbells.length}` }),
      ];
    }
    if (req.method === "POST" && url === "/") {
      if (!(await this.verify(req, body, "ec2"))) {
        this.rejected++;
        return [
          403,
          "<Response><Errors><Error><Code>SignatureDoesNotMatch</Code></Error></Errors></Response>",
        ];
      }
      const seq = /seq=(\d+)/.exec(new URLSearchParams(body).get("Tag.1.Value") ?? "")?.[1];
      const failReport = this.options.failReport;
      if (failReport && Number(seq) === failReport.seq && this.failedReport < failReport.times) {
        this.failedReport++;
        this.failTags++;
      }
      if (this.failTags > 0) {
        this.failTags--;
        return [
          503,
          "<Response><Errors><Error><Code>RequestLimitExceeded</Code></Error></Errors></Response>",
        ];
      }
      const form = new URLSearchParams(body);
      if (form.get("Action") !== "CreateTags" || form.get("ResourceId.1") !== INSTANCE_ID)
        return [400, "bad request"];
      const write: Record<string, string> = {};
      for (let i = 1; form.has(`Tag.${i}.Key`); i++)
        write[form.get(`Tag.${i}.Key`) ?? ""] = form.get(`Tag.${i}.Value`) ?? "";
      this.tagWrites.push(write);
      Object.assign(this.tags, write);
      return [200, "<CreateTagsResponse><return>true</return></CreateTagsResponse>"];
    }
    return [404, "not found"];
  }

  /**
   * Checks the SigV4 signature of a request to `service` (CreateTags: `ec2`; SendMessage: `sqs`)
   * by signing the same request with the AWS SDK's own signer (`@smithy/signature-v4`) at the
   * request's `X-Amz-Date` over the headers it says it signed, and comparing.
   */
  private async verify(req: IncomingMessage, body: string, service: string): Promise<boolean> {
    const auth = String(req.headers.authorization ?? "");
    const match =
      /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([a-z0-9]+)\/aws4_request, SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$/.exec(
        auth,
      );
    if (!match) return false;
    const [, accessKey, , region, scoped, signedHeaders = "", signature] =
      match as unknown as string[];
    if (accessKey !== CREDS.AccessKeyId || region !== REGION || scoped !== service) return false;
    if (req.headers["x-amz-security-token"] !== CREDS.Token) return false;
    const names = signedHeaders.split(";");
    // The token, and for SQS's JSON protocol the action in X-Amz-Target, must be signed too.
    if (!names.includes("x-amz-security-token")) return false;
    if (service === "sqs" && !names.includes("x-amz-target")) return false;
    const amzDate = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(
      String(req.headers["x-amz-date"] ?? ""),
    );
    if (!amzDate) return false;
    const [, y, mo, d, h, mi, sec] = amzDate;
    const headers = Object.fromEntries(names.map((n) => [n, String(req.headers[n] ?? "")]));
    const signer = new SignatureV4({
      service,
      region: REGION,
      credentials: {
        accessKeyId: CREDS.AccessKeyId,
        secretAccessKey: CREDS.SecretAccessKey,
        sessionToken: CREDS.Token,
      },
      sha256: NodeSha256,
      applyChecksum: false,
    });
    const signed = await signer.sign(
      {
        method: "POST",
        protocol: "http:",
        hostname: "127.0.0.1",
        path: "/",
        query: {},
        headers,
        body,
      },
      { signingDate: new Date(`${y}-${mo}-${d}T${h}:${mi}:${sec}Z`) },
    );
    const expected = String((signed.headers as Record<string, string>).authorization ?? "");
    return (
      expected ===
      `AWS4-HMAC-SHA256 Credential=${accessKey}/${y}${mo}${d}/${region}/${service}/aws4_request, SignedHeaders=${signedHeaders}, Signature=${signature}`
    );
  }
}

/** SHA-256 and HMAC-SHA-256 from node:crypto, in the shape the SDK's signer takes. */
class NodeSha256 {
  readonly #hash: Hash | Hmac;
  constructor(secret?: string | ArrayBuffer | ArrayBufferView) {
    this.#hash = secret === undefined ? createHash("sha256") : createHmac("sha256", bytes(secret));
  }
  update(chunk: string | ArrayBuffer | ArrayBufferView): void {
    this.#hash.update(bytes(chunk));
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.#hash.digest());
  }
  reset(): void {}
}

function bytes(data: string | ArrayBuffer | ArrayBufferView): Buffer {
  if (typeof data === "string") return Buffer.from(data, "utf8");
  if (ArrayBuffer.isView(data)) return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return Buffer.from(data);
}
