/**
 * Docker's `awslogs` log driver, as the instance-host simulator plays it for a guest's `docker`:
 * the log configuration check Docker's daemon makes on `docker create`, and a forwarder that
 * follows a container's podman log file (`k8s-file`) from its first byte and sends every line to
 * CloudWatch Logs, as Docker's driver would (one event per line, in order, batched and flushed at
 * least every 5 s and when the container's run ends).
 *
 * @packageDocumentation
 */

import { readFileSync } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import {
  CloudWatchLogsClient,
  CreateLogGroupCommand,
  CreateLogStreamCommand,
  PutLogEventsCommand,
} from "@aws-sdk/client-cloudwatch-logs";
import { z } from "zod";

/** CloudWatch Logs' per-event overhead in a PutLogEvents batch, in bytes. */
export const AWSLOGS_EVENT_OVERHEAD = 26;
/** At most this many events in one PutLogEvents call. */
export const AWSLOGS_MAX_BATCH_EVENTS = 10_000;
/** At most this many bytes (messages plus 26 bytes per event) in one PutLogEvents call. */
export const AWSLOGS_MAX_BATCH_BYTES = 1_048_576;
/** The longest event message Docker sends (256 KiB less the overhead); longer lines are split. */
export const AWSLOGS_MAX_EVENT_BYTES = 262_144 - AWSLOGS_EVENT_OVERHEAD;

/** The log drivers the simulator plays; Docker's others are refused as unregistered. */
const PLAYED_DRIVERS = ["json-file", "local", "none", "awslogs"] as const;
/** The options every driver accepts (Docker's `builtInLogOpts`). */
const BUILT_IN_OPTS = new Set(["mode", "max-buffer-size"]);
/** Each driver's options as Docker's validator knows them. */
const DRIVER_OPTS: Record<string, ReadonlySet<string>> = {
  "json-file": new Set([
    "max-file",
    "max-size",
    "compress",
    "labels",
    "labels-regex",
    "env",
    "env-regex",
    "tag",
  ]),
  local: new Set(["max-file", "max-size", "compress"]),
  none: new Set(),
  awslogs: new Set([
    "awslogs-region",
    "awslogs-endpoint",
    "awslogs-group",
    "awslogs-stream",
    "awslogs-create-group",
    "awslogs-create-stream",
    "awslogs-force-flush-interval-seconds",
    "awslogs-max-buffered-events",
    "awslogs-datetime-format",
    "awslogs-multiline-pattern",
    "awslogs-credentials-endpoint",
    "awslogs-format",
    "tag",
  ]),
};
/** awslogs options Docker knows but the simulator does not play: refused rather than ignored. */
const UNPLAYED_AWSLOGS_OPTS = new Set([
  "awslogs-datetime-format",
  "awslogs-multiline-pattern",
  "awslogs-credentials-endpoint",
  "awslogs-format",
  "tag",
]);

const BOOL = /^(1|t|T|TRUE|true|True|0|f|F|FALSE|false|False)$/;

/** The awslogs options the forwarder uses, parsed. */
export interface AwslogsOptions {
  /** `awslogs-group`. */
  readonly group: string;
  /** `awslogs-stream`; `undefined`: the container's full ID, as Docker names it. */
  readonly stream: string | undefined;
  /** `awslogs-region`; `undefined`: the instance's region (IMDS), as Docker on EC2 finds it. */
  readonly region: string | undefined;
  /** `awslogs-endpoint`. */
  readonly endpoint: string | undefined;
  /** `awslogs-create-group` (default `false`). */
  readonly createGroup: boolean;
  /** `awslogs-create-stream` (default `true`). */
  readonly createStream: boolean;
  /** `awslogs-force-flush-interval-seconds` in ms (default 5 000). */
  readonly flushIntervalMs: number;
}

const truthy = (value: string): boolean => /^(1|t|T|TRUE|true|True)$/.test(value);

const AwslogsOptionsSchema = z.record(z.string(), z.string()).transform((opts): AwslogsOptions => {
  const seconds = opts["awslogs-force-flush-interval-seconds"];
  return {
    group: opts["awslogs-group"] ?? "",
    stream: opts["awslogs-stream"] || undefined,
    region: opts["awslogs-region"] || undefined,
    endpoint: opts["awslogs-endpoint"] || undefined,
    createGroup: truthy(opts["awslogs-create-group"] ?? "false"),
    createStream: truthy(opts["awslogs-create-stream"] ?? "true"),
    flushIntervalMs: seconds === undefined ? 5_000 : Number(seconds) * 1000,
  };
});

/** The outcome of {@link checkLogConfig}: podman's flags, or Docker's error message. */
export type LogConfigCheck =
  | {
      readonly ok: true;
      /** The driver that applies (`json-file` when none was given). */
      readonly driver: string;
      /** The options as `key → value`. */
      readonly options: Readonly<Record<string, string>>;
    }
  | {
      readonly ok: false /** Docker's daemon's message, without the CLI's prefix. */;
      readonly message: string;
    };

/**
 * Checks a container's `--log-driver` and `--log-opt`s as Docker's daemon does on create
 * (`logger.ValidateLogOpts` and the driver's own validator), with the same messages. Drivers that
 * the simulator does not play are refused as unregistered, and the awslogs options it does not play
 * (multi-line patterns, the EMF format, a credentials endpoint, `tag`) are refused by name.
 *
 * @param driver - the `--log-driver` value; `undefined` or `""`: Docker's default, `json-file`.
 * @param opts - the `--log-opt` values, each `key=value`.
 * @example
 * ```ts
 * checkLogConfig("awslogs", ["awslogs-group=g", "awslogs-bogus=1"]);
 * // { ok: false, message: "unknown log opt 'awslogs-bogus' for awslogs log driver" }
 * ```
 */
export function checkLogConfig(
  driver: string | undefined,
  opts: readonly string[],
): LogConfigCheck {
  const name = driver === undefined || driver === "" ? "json-file" : driver;
  const options: Record<string, string> = {};
  for (const opt of opts) {
    const eq = opt.indexOf("=");
    if (eq <= 0) return { ok: false, message: `invalid key value pair format in log opt: ${opt}` };
    options[opt.slice(0, eq)] = opt.slice(eq + 1);
  }
  const mode = options.mode ?? "";
  if (!["", "blocking", "non-blocking"].includes(mode))
    return { ok: false, message: `logger: logging mode not supported: ${mode}` };
  if (options["max-buffer-size"] !== undefined && mode !== "non-blocking")
    return {
      ok: false,
      message: "logger: max-buffer-size option is only supported with 'mode=non-blocking'",
    };
  if (name === "none") return { ok: true, driver: name, options };
  const known = DRIVER_OPTS[name];
  if (known === undefined || !(PLAYED_DRIVERS as readonly string[]).includes(name))
    return {
      ok: false,
      message: `logger: no log driver named '${name}' is registered (the instance-host simulator plays ${PLAYED_DRIVERS.join(", ")})`,
    };
  for (const key of Object.keys(options)) {
    if (BUILT_IN_OPTS.has(key)) continue;
    if (!known.has(key))
      return { ok: false, message: `unknown log opt '${key}' for ${name} log driver` };
  }
  if (name !== "awslogs") return { ok: true, driver: name, options };
  for (const key of Object.keys(options))
    if (UNPLAYED_AWSLOGS_OPTS.has(key))
      return {
        ok: false,
        message: `log opt '${key}' of the awslogs log driver is not played by the instance-host simulator`,
      };
  if ((options["awslogs-group"] ?? "") === "")
    return { ok: false, message: "must specify a value for log opt 'awslogs-group'" };
  for (const key of ["awslogs-create-group", "awslogs-create-stream"]) {
    const value = options[key];
    if (value !== undefined && !BOOL.test(value))
      return {
        ok: false,
        message: `must specify valid value for log opt '${key}': strconv.ParseBool: parsing "${value}": invalid syntax`,
      };
  }
  for (const key of ["awslogs-force-flush-interval-seconds", "awslogs-max-buffered-events"]) {
    const value = options[key];
    if (value !== undefined && !(/^\d+$/.test(value) && Number(value) > 0))
      return {
        ok: false,
        message: `must specify a positive integer for log opt '${key}': ${value}`,
      };
  }
  const endpoint = options["awslogs-endpoint"];
  if (endpoint !== undefined && !z.url().safeParse(endpoint).success)
    return { ok: false, message: `invalid value for log opt 'awslogs-endpoint': ${endpoint}` };
  return { ok: true, driver: name, options };
}

/** Parses checked awslogs options (see {@link checkLogConfig}) into what the forwarder uses. */
export function parseAwslogsOptions(opts: readonly string[]): AwslogsOptions {
  const record = Object.fromEntries(
    opts.map((opt) => [opt.slice(0, opt.indexOf("=")), opt.slice(opt.indexOf("=") + 1)]),
  );
  return AwslogsOptionsSchema.parse(record);
}

/** One line of container output, as the forwarder sends it. */
export interface LogLine {
  /** `stdout` or `stderr`. */
  readonly stream: "stdout" | "stderr";
  /** Milliseconds since the epoch: when conmon read the line's last part. */
  readonly timestamp: number;
  /** The line without its newline. */
  readonly message: Buffer;
}

function parseTimestamp(text: string): number {
  // RFC 3339 with nanoseconds (`2026-12-01T04:24:13.301027178+00:00`): keep milliseconds.
  const ms = Date.parse(text.replace(/(\.\d{3})\d*/, "$1"));
  return Number.isNaN(ms) ? Date.now() : ms;
}

/**
 * Turns podman's `k8s-file` container log (`<RFC 3339 time> <stdout|stderr> <F|P> <content>`, one
 * record a line, `P` records being parts of a longer line) back into the container's lines, in the
 * order conmon wrote them. Feed it the file's bytes in pieces of any size; {@link K8sFileLines.end}
 * returns the unfinished lines of a run that ended (output without a final newline), as Docker
 * sends them.
 */
export class K8sFileLines {
  #rest: Buffer = Buffer.alloc(0);
  readonly #partial: Record<"stdout" | "stderr", { parts: Buffer[]; timestamp: number }> = {
    stdout: { parts: [], timestamp: 0 },
    stderr: { parts: [], timestamp: 0 },
  };

  /** Consumes more of the file; returns the lines it completed. */
  push(chunk: Buffer): LogLine[] {
    const data = this.#rest.length === 0 ? chunk : Buffer.concat([this.#rest, chunk]);
    const lines: LogLine[] = [];
    let start = 0;
    for (;;) {
      const nl = data.indexOf(10, start);
      if (nl < 0) break;
      const line = this.#record(data.subarray(start, nl));
      if (line !== undefined) lines.push(line);
      start = nl + 1;
    }
    this.#rest = Buffer.from(data.subarray(start));
    return lines;
  }

  #record(record: Buffer): LogLine | undefined {
    const s1 = record.indexOf(32);
    const s2 = s1 < 0 ? -1 : record.indexOf(32, s1 + 1);
    if (s2 < 0) return undefined;
    const s3 = record.indexOf(32, s2 + 1);
    const timestamp = parseTimestamp(record.subarray(0, s1).toString("latin1"));
    const stream = record.subarray(s1 + 1, s2).toString("latin1");
    if (stream !== "stdout" && stream !== "stderr") return undefined;
    const tag = record.subarray(s2 + 1, s3 < 0 ? record.length : s3).toString("latin1");
    const content = s3 < 0 ? Buffer.alloc(0) : record.subarray(s3 + 1);
    const partial = this.#partial[stream];
    partial.parts.push(Buffer.from(content));
    partial.timestamp = timestamp;
    if (tag.split(":").includes("P")) return undefined;
    return this.#take(stream);
  }

  #take(stream: "stdout" | "stderr"): LogLine {
    const partial = this.#partial[stream];
    const message =
      partial.parts.length === 1 ? (partial.parts[0] as Buffer) : Buffer.concat(partial.parts);
    partial.parts = [];
    return { stream, timestamp: partial.timestamp, message };
  }

  /** The run ended: returns its unfinished lines (stdout's, then stderr's) and forgets them. */
  end(): LogLine[] {
    const lines: LogLine[] = [];
    for (const stream of ["stdout", "stderr"] as const)
      if (this.#partial[stream].parts.length > 0) lines.push(this.#take(stream));
    this.#rest = Buffer.alloc(0);
    return lines;
  }
}

/**
 * Splits a line into event messages of at most {@link AWSLOGS_MAX_EVENT_BYTES} bytes, as Docker
 * does for lines longer than its buffer (cutting before a UTF-8 character that would not fit).
 */
export function splitLogMessage(message: Buffer): string[] {
  if (message.length <= AWSLOGS_MAX_EVENT_BYTES) return [message.toString("utf8")];
  const parts: string[] = [];
  let start = 0;
  while (start < message.length) {
    let end = Math.min(start + AWSLOGS_MAX_EVENT_BYTES, message.length);
    // Back off from the middle of a multi-byte character (continuation bytes are 10xxxxxx).
    if (end < message.length) {
      let back = end;
      while (back > start && ((message[back] ?? 0) & 0xc0) === 0x80) back--;
      if (back > start) end = back;
    }
    parts.push(message.subarray(start, end).toString("utf8"));
    start = end;
  }
  return parts;
}

/** One CloudWatch Logs event. */
export interface LogEvent {
  /** Milliseconds since the epoch. */
  readonly timestamp: number;
  /** The message. */
  readonly message: string;
}

/**
 * Cuts events into PutLogEvents batches within CloudWatch Logs' limits: at most
 * {@link AWSLOGS_MAX_BATCH_EVENTS} events and {@link AWSLOGS_MAX_BATCH_BYTES} bytes, counting
 * {@link AWSLOGS_EVENT_OVERHEAD} bytes per event, in the order added.
 */
export class LogEventBatcher {
  #current: LogEvent[] = [];
  #bytes = 0;
  readonly #full: LogEvent[][] = [];

  /** Adds an event (its message at most {@link AWSLOGS_MAX_EVENT_BYTES} bytes). */
  add(event: LogEvent): void {
    const size = Buffer.byteLength(event.message) + AWSLOGS_EVENT_OVERHEAD;
    if (
      this.#current.length > 0 &&
      (this.#current.length >= AWSLOGS_MAX_BATCH_EVENTS ||
        this.#bytes + size > AWSLOGS_MAX_BATCH_BYTES)
    ) {
      this.#full.push(this.#current);
      this.#current = [];
      this.#bytes = 0;
    }
    this.#current.push(event);
    this.#bytes += size;
  }

  /** The batches that are full (taken). */
  takeFull(): LogEvent[][] {
    return this.#full.splice(0);
  }

  /** Every batch, the last one possibly short (taken). */
  takeAll(): LogEvent[][] {
    const all = this.#full.splice(0);
    if (this.#current.length > 0) all.push(this.#current);
    this.#current = [];
    this.#bytes = 0;
    return all;
  }

  /** Whether an event waits to be sent. */
  get pending(): boolean {
    return this.#full.length > 0 || this.#current.length > 0;
  }
}

const ImdsCredentialsSchema = z.object({
  AccessKeyId: z.string().min(1),
  SecretAccessKey: z.string().min(1),
  Token: z.string().optional(),
  Expiration: z.string().optional(),
});

/** AWS credentials with an optional expiry. */
interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  expiration?: Date;
}

/**
 * A credential provider that reads the instance role's credentials from a guest's IMDSv2, as a
 * Docker daemon on the instance does (token, role name, then the role's credentials); cached
 * until five minutes before they expire.
 *
 * @param endpoint - the guest's IMDS, e.g. `http://127.0.0.1:41234/`.
 */
export function imdsCredentials(endpoint: string): () => Promise<Credentials> {
  const base = endpoint.replace(/\/+$/, "");
  let cached: Credentials | undefined;
  return async () => {
    if (
      cached !== undefined &&
      (cached.expiration === undefined || cached.expiration.getTime() - Date.now() > 300_000)
    )
      return cached;
    const token = await (
      await fetch(`${base}/latest/api/token`, {
        method: "PUT",
        headers: { "x-aws-ec2-metadata-token-ttl-seconds": "21600" },
      })
    ).text();
    const headers = { "x-aws-ec2-metadata-token": token };
    const list = await fetch(`${base}/latest/meta-data/iam/security-credentials/`, { headers });
    const role = (await list.text()).split("\n")[0] ?? "";
    if (!list.ok || role === "")
      throw new Error(
        "NoCredentialProviders: no valid providers in chain (the instance has no IAM role in IMDS)",
      );
    const response = await fetch(`${base}/latest/meta-data/iam/security-credentials/${role}`, {
      headers,
    });
    const parsed = ImdsCredentialsSchema.parse(await response.json());
    cached = {
      accessKeyId: parsed.AccessKeyId,
      secretAccessKey: parsed.SecretAccessKey,
      ...(parsed.Token === undefined ? {} : { sessionToken: parsed.Token }),
      ...(parsed.Expiration === undefined ? {} : { expiration: new Date(parsed.Expiration) }),
    };
    return cached;
  };
}

/** What one forwarder needs. */
export interface AwslogsForwarderSettings {
  /** The podman container ID (the default stream name). */
  readonly containerId: string;
  /** The container's `k8s-file` log (podman's `HostConfig.LogConfig.Path`). */
  readonly logPath: string;
  /** The byte offset where this run's output starts (the end of the previous run's). */
  readonly offset: number;
  /** The checked awslogs options. */
  readonly options: AwslogsOptions;
  /** The region when the options name none. */
  readonly defaultRegion: string;
  /** The endpoint when the options name none. */
  readonly defaultEndpoint: string;
  /** The credentials the daemon uses. */
  readonly credentials: () => Promise<Credentials>;
  /** Where the forwarder reports what went wrong (the guest's `events.log`). */
  readonly report: (line: string) => void;
  /** How often the log file is read (ms). Default 200. */
  readonly pollMs?: number;
}

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Whether a process is gone (absent, or a zombie waiting to be reaped). */
function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
  } catch {
    return true;
  }
}

/**
 * Forwards one container run's output to CloudWatch Logs, as Docker's awslogs driver does.
 * {@link AwslogsForwarder.open} creates the group (if asked) and the stream, and opens the log file
 * (creating it, so that a container removed the moment it exits still leaves it readable);
 * {@link AwslogsForwarder.follow} then reads it from the run's first byte until the container's
 * conmon is gone, and sends the rest; {@link AwslogsForwarder.finish} ends it early (after a final
 * read and flush).
 */
export class AwslogsForwarder {
  readonly #settings: AwslogsForwarderSettings;
  readonly #client: CloudWatchLogsClient;
  readonly #group: string;
  readonly #stream: string;
  readonly #file: FileHandle;
  readonly #lines = new K8sFileLines();
  readonly #batcher = new LogEventBatcher();
  #offset: number;
  #lastTimestamp = 0;
  #stop = false;
  #done: Promise<number> | undefined;
  #sent = 0;

  private constructor(
    settings: AwslogsForwarderSettings,
    client: CloudWatchLogsClient,
    file: FileHandle,
  ) {
    this.#settings = settings;
    this.#client = client;
    this.#file = file;
    this.#offset = settings.offset;
    this.#group = settings.options.group;
    this.#stream = settings.options.stream ?? settings.containerId;
  }

  /**
   * Prepares a run's forwarding, as Docker's driver does when the container starts: CreateLogGroup
   * (with `awslogs-create-group=true`), CreateLogStream ("already exists" is fine).
   *
   * @throws Error with the service's message when the group or stream cannot be had (the start fails).
   */
  static async open(settings: AwslogsForwarderSettings): Promise<AwslogsForwarder> {
    const { options } = settings;
    const client = new CloudWatchLogsClient({
      region: options.region ?? settings.defaultRegion,
      endpoint: options.endpoint ?? settings.defaultEndpoint,
      credentials: settings.credentials,
      maxAttempts: 3,
    });
    const stream = options.stream ?? settings.containerId;
    try {
      if (options.createGroup) {
        await client
          .send(new CreateLogGroupCommand({ logGroupName: options.group }))
          .catch((error: unknown) => {
            if ((error as { name?: string }).name !== "ResourceAlreadyExistsException") throw error;
          });
      }
      if (options.createStream) {
        await client
          .send(new CreateLogStreamCommand({ logGroupName: options.group, logStreamName: stream }))
          .catch((error: unknown) => {
            if ((error as { name?: string }).name !== "ResourceAlreadyExistsException") throw error;
          });
      }
      const file = await open(settings.logPath, "a+");
      return new AwslogsForwarder(settings, client, file);
    } catch (error) {
      client.destroy();
      const e = error as { name?: string; message?: string };
      throw new Error(
        `failed to create Cloudwatch log stream: ${e.name ?? "Error"}: ${e.message ?? String(error)}`,
        { cause: error },
      );
    }
  }

  /** The stream's name. */
  get stream(): string {
    return this.#stream;
  }

  /** Events sent so far. */
  get sent(): number {
    return this.#sent;
  }

  /**
   * Follows the run until its conmon (`conmonPid`; `undefined` or 0: already gone) exits or
   * {@link AwslogsForwarder.finish} is called; resolves with the file offset where the run's output ends.
   */
  follow(conmonPid: number | undefined): Promise<number> {
    this.#done ??= this.#follow(conmonPid);
    return this.#done;
  }

  /** Ends the forwarding after a final read and flush; resolves with the end offset. */
  finish(): Promise<number> {
    this.#stop = true;
    return this.follow(undefined);
  }

  async #follow(conmonPid: number | undefined): Promise<number> {
    const pollMs = this.#settings.pollMs ?? 200;
    const flushMs = this.#settings.options.flushIntervalMs;
    let lastFlush = Date.now();
    try {
      for (;;) {
        const gone =
          this.#stop || conmonPid === undefined || conmonPid <= 0 || processGone(conmonPid);
        await this.#readToEnd();
        await this.#send(this.#batcher.takeFull());
        if (gone) break;
        if (this.#batcher.pending && Date.now() - lastFlush >= flushMs) {
          await this.#send(this.#batcher.takeAll());
          lastFlush = Date.now();
        }
        await delay(pollMs);
      }
      // conmon has written everything before it exited; read once more after a pause, for safety.
      await delay(50);
      await this.#readToEnd();
      for (const line of this.#lines.end()) this.#addLine(line);
      await this.#send(this.#batcher.takeAll());
    } catch (error) {
      this.#settings.report(`awslogs ${this.#stream}: forwarding stopped: ${String(error)}`);
    } finally {
      await this.#file.close().catch(() => undefined);
      this.#client.destroy();
    }
    return this.#offset;
  }

  async #readToEnd(): Promise<void> {
    const buffer = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      const { bytesRead } = await this.#file.read(buffer, 0, buffer.length, this.#offset);
      if (bytesRead === 0) return;
      this.#offset += bytesRead;
      for (const line of this.#lines.push(buffer.subarray(0, bytesRead))) this.#addLine(line);
    }
  }

  #addLine(line: LogLine): void {
    const timestamp = Math.max(line.timestamp, this.#lastTimestamp);
    this.#lastTimestamp = timestamp;
    for (const message of splitLogMessage(line.message)) this.#batcher.add({ timestamp, message });
  }

  async #send(batches: LogEvent[][]): Promise<void> {
    for (const batch of batches) {
      try {
        await this.#client.send(
          new PutLogEventsCommand({
            logGroupName: this.#group,
            logStreamName: this.#stream,
            logEvents: batch,
          }),
        );
        this.#sent += batch.length;
      } catch (error) {
        // Docker logs the failure and drops the batch; so does the simulator (in events.log).
        this.#settings.report(
          `awslogs ${this.#stream}: PutLogEvents of ${batch.length} events failed: ${String(error)}`,
        );
      }
    }
  }
}
