/**
 * The Nebula exit report: how an instance's host supervisor tells the controller what its
 * containers did (brief C2). This module is the single definition of the format. The writer
 * (`@nebula/userdata`'s host supervisor, in bash) and the reader (this package) both follow it,
 * and a round-trip test runs the real script against {@link decodeReportTags}.
 *
 * ## Format, version 1
 *
 * The report is a JSON document ({@link ExitReport}). Free text (termination and waiting
 * messages) is carried as standard base64 inside the JSON (`messageB64`), so that any bytes
 * survive and the writer never has to escape JSON strings.
 *
 * **Tag channel** (primary; one `CreateTags` call writes all of these together):
 * - `nebula:report` — the header: `v1 seq=<seq> chunks=<k> sha256=<h>`, where `<h>` is the first
 *   16 hex digits of the SHA-256 of the concatenated chunk values.
 * - `nebula:report:1` … `nebula:report:<k>` — the base64url (no padding) encoding of the JSON,
 *   cut into chunks of {@link REPORT_CHUNK_SIZE} characters. At most {@link REPORT_MAX_CHUNKS}
 *   chunks, so the report never uses more than {@link REPORT_TAG_BUDGET} of an instance's 50 tags.
 *   Stale higher-numbered chunks from an earlier, longer report are ignored (the header's `chunks`
 *   says how many to read).
 *
 * A final report written because the instance was being stopped from outside carries
 * `"stopRequested": true` at the top level (see {@link ExitReport}); the reader then does not
 * count the containers it stopped as crashes.
 *
 * To fit, the writer truncates each message in the tag channel to
 * `floor(REPORT_TAG_MESSAGE_BUDGET / number of containers)` bytes and sets `truncated: true` on
 * that container; if the report still does not fit it drops the messages; if it still does not
 * fit it drops `last`. The tag report always fits.
 *
 * **Console channel** (fallback): one line per report on the serial console,
 * `NEBULA-REPORT v1 <base64url(JSON)>`, with messages of up to {@link MAX_TERMINATION_MESSAGE_BYTES}
 * bytes. The controller reads it with `GetConsoleOutput` only for a stopped instance whose tags
 * hold no readable report; the line with the highest `seq` wins.
 *
 * @packageDocumentation
 */
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { z } from "zod";

/** The report format version this package writes and reads. */
export const REPORT_VERSION = 1;

/** Tag key of the report header. */
export const REPORT_TAG_KEY = "nebula:report";

/** Prefix of the report's chunk tags: `nebula:report:1`, `nebula:report:2`, ... */
export const REPORT_CHUNK_TAG_PREFIX = "nebula:report:";

/** Characters per chunk tag value (EC2 allows 256 per tag value). */
export const REPORT_CHUNK_SIZE = 256;

/** Maximum number of chunk tags. */
export const REPORT_MAX_CHUNKS = 16;

/** Tags the report may occupy on an instance: the header plus the chunks. */
export const REPORT_TAG_BUDGET = REPORT_MAX_CHUNKS + 1;

/** Bytes of termination/waiting message, shared by all containers, that the tag channel carries. */
export const REPORT_TAG_MESSAGE_BUDGET = 1024;

/** Kubernetes' own limit on a termination message, which the console channel carries whole. */
export const MAX_TERMINATION_MESSAGE_BYTES = 4096;

/** Marker that starts a report line on the serial console. */
export const CONSOLE_REPORT_MARKER = "NEBULA-REPORT";

const timestamp = z.iso.datetime({ offset: true });
const exitCode = z.number().int().min(-2147483648).max(2147483647);

/** A container's previous (or current) termination, as the host saw it in `docker inspect`. */
export const TerminationReport = z.looseObject({
  /** Exit code of the container's main process. */
  exitCode,
  /** Signal that killed it, when the exit code was over 128 and the kill was not an OOM. */
  signal: z.number().int().min(1).max(64).optional(),
  /** Kubelet reason: `Completed`, `Error`, `OOMKilled`, `ContainerCannotRun`, ... */
  reason: z.string().min(1).max(128),
  startedAt: timestamp.optional(),
  finishedAt: timestamp.optional(),
  /** The termination message, base64. */
  messageB64: z.base64().optional(),
});

/** One container's state in a report. */
export const ContainerReport = z.looseObject({
  /** The Pod's container name. */
  name: z.string().min(1).max(253),
  /** True for an init container. */
  init: z.boolean().default(false),
  state: z.enum(["waiting", "running", "terminated"]),
  /** Restarts in place so far. */
  restarts: z.number().int().min(0),
  /**
   * For `waiting`: `ContainerCreating`, `PodInitializing`, `CrashLoopBackOff`, `ErrImagePull`,
   * `ImagePullBackOff`, `CreateContainerConfigError`. For `terminated`: the termination reason.
   */
  reason: z.string().min(1).max(128).optional(),
  /** Waiting or termination message, base64. */
  messageB64: z.base64().optional(),
  /** For `terminated`: the exit code. */
  exitCode: exitCode.optional(),
  /** For `terminated`: the signal, when killed by one (not for OOM kills). */
  signal: z.number().int().min(1).max(64).optional(),
  /** For `running` and `terminated`: when the current run started. */
  startedAt: timestamp.optional(),
  /** For `terminated`: when it ended. */
  finishedAt: timestamp.optional(),
  /** Runtime container ID, as `docker://<id>` or bare id. */
  containerID: z.string().max(256).optional(),
  /** Image digest or ID the runtime resolved. */
  imageID: z.string().max(256).optional(),
  /** The previous termination, for a container that restarted. */
  last: TerminationReport.optional(),
  /** True when a message was shortened to fit this channel. */
  truncated: z.boolean().optional(),
});

/** The whole report. Unknown fields from future writers are kept, not rejected. */
export const ExitReport = z.looseObject({
  /** Format version: {@link REPORT_VERSION}. */
  v: z.literal(REPORT_VERSION),
  /** Strictly increasing per instance; a report with a lower `seq` never replaces a newer one. */
  seq: z.number().int().min(0),
  /** Host time the report was written (informational; the controller never trusts it for ordering). */
  time: timestamp,
  /** True when the supervisor has finished: no container will run again on this instance. */
  final: z.boolean(),
  containers: z.array(ContainerReport),
  /** Containers left out of this channel because even without messages they did not fit. */
  containersOmitted: z.number().int().min(1).optional(),
  /**
   * `true` when the supervisor is stopping because it received a SIGTERM it did not initiate (a
   * shutdown it did not start: a Spot interruption, a `StopInstances`/`TerminateInstances` call,
   * an EC2 stop). Absent otherwise, including when the supervisor powers the instance off itself
   * after a terminal state. Its containers that were still running were stopped with
   * `docker stop`, so their exit (143 / signal 15, or 137 after the grace period) is not theirs.
   */
  stopRequested: z.boolean().optional(),
});

/** A parsed exit report. */
export type ExitReport = z.infer<typeof ExitReport>;
/** One container's entry in an {@link ExitReport}. */
export type ContainerReport = z.infer<typeof ContainerReport>;
/** A termination inside a {@link ContainerReport}. */
export type TerminationReport = z.infer<typeof TerminationReport>;

/**
 * What reading a report gave: a report, no report at all, or something that could not be read
 * (with a reason a person can act on). Never an exception.
 */
export type ReportReadResult =
  | { readonly kind: "report"; readonly report: ExitReport }
  | { readonly kind: "absent" }
  | { readonly kind: "unreadable"; readonly message: string };

const HEADER = /^v(\d+) seq=(\d+) chunks=(\d+) sha256=([0-9a-f]{16})$/;

/**
 * Reads the report from an instance's tags. Total: any input gives a result.
 *
 * @param tags - the instance's tags, as `{ Key, Value }` pairs (the shape `DescribeInstances`
 *   returns) or a plain key→value record.
 */
export function decodeReportTags(tags: unknown): ReportReadResult {
  const map = toTagMap(tags);
  const header = map.get(REPORT_TAG_KEY);
  if (header === undefined) return { kind: "absent" };
  const match = HEADER.exec(header);
  if (!match) return { kind: "unreadable", message: `report header ${quote(header)} is malformed` };
  const [, version, , count, digest] = match;
  if (Number(version) !== REPORT_VERSION) {
    return {
      kind: "unreadable",
      message: `report version v${version} is not supported (this reader knows v${REPORT_VERSION})`,
    };
  }
  const chunks = Number(count);
  if (chunks < 1 || chunks > REPORT_MAX_CHUNKS) {
    return {
      kind: "unreadable",
      message: `report header announces ${chunks} chunks (1 to ${REPORT_MAX_CHUNKS} allowed)`,
    };
  }
  let body = "";
  for (let i = 1; i <= chunks; i++) {
    const chunk = map.get(`${REPORT_CHUNK_TAG_PREFIX}${i}`);
    if (chunk === undefined) {
      return { kind: "unreadable", message: `report chunk ${i} of ${chunks} is missing` };
    }
    body += chunk;
  }
  if (sha256Prefix(body) !== digest) {
    return {
      kind: "unreadable",
      message: "report chunks do not match the header's checksum (a partial or mixed write)",
    };
  }
  return parseReportBody(body);
}

/**
 * Encodes a report into the tag channel's key→value pairs, applying the truncation rules of the
 * format so the result always fits {@link REPORT_TAG_BUDGET}. The host writer implements the same
 * rules in bash; this function is the reference, used by tests and by tools.
 */
export function encodeReportTags(report: ExitReport): Record<string, string> {
  let body: string;
  let seq: string;
  try {
    body = fitToTagBudget(report);
    seq = `${report.seq}`;
  } catch {
    return {}; // Total: what cannot be encoded gives no tags.
  }
  const chunks: string[] = [];
  for (let i = 0; i < body.length; i += REPORT_CHUNK_SIZE) {
    chunks.push(body.slice(i, i + REPORT_CHUNK_SIZE));
  }
  const tags: Record<string, string> = {
    [REPORT_TAG_KEY]: `v${REPORT_VERSION} seq=${seq} chunks=${chunks.length} sha256=${sha256Prefix(body)}`,
  };
  chunks.forEach((chunk, i) => {
    tags[`${REPORT_CHUNK_TAG_PREFIX}${i + 1}`] = chunk;
  });
  return tags;
}

/** Encodes a report as one serial-console line (without the trailing newline). */
export function encodeConsoleLine(report: ExitReport): string {
  try {
    return `${CONSOLE_REPORT_MARKER} v${REPORT_VERSION} ${base64url(JSON.stringify(report))}`;
  } catch {
    return ""; // Total: what cannot be encoded gives no line.
  }
}

/**
 * Finds the newest readable report in serial-console output (as `GetConsoleOutput` returns it,
 * already base64-decoded to text). Lines that are not reports, or that are damaged, are skipped;
 * the report with the highest `seq` wins. Total.
 */
export function decodeConsoleOutput(output: unknown): ReportReadResult {
  if (typeof output !== "string") return { kind: "absent" };
  let best: ExitReport | undefined;
  let damaged = 0;
  const line = new RegExp(`${CONSOLE_REPORT_MARKER} v(\\d+) ([A-Za-z0-9_-]+)`, "g");
  for (const match of output.matchAll(line)) {
    if (Number(match[1]) !== REPORT_VERSION) {
      damaged++;
      continue;
    }
    const parsed = parseReportBody(match[2] ?? "");
    if (parsed.kind !== "report") {
      damaged++;
      continue;
    }
    if (best === undefined || parsed.report.seq > best.seq) best = parsed.report;
  }
  if (best) return { kind: "report", report: best };
  if (damaged > 0)
    return { kind: "unreadable", message: `${damaged} console report line(s) could not be read` };
  return { kind: "absent" };
}

/** Decodes a base64url JSON body and validates it. Total. */
function parseReportBody(body: string): ReportReadResult {
  if (!/^[A-Za-z0-9_-]*$/.test(body)) {
    return { kind: "unreadable", message: "report body is not base64url" };
  }
  let json: unknown;
  try {
    json = JSON.parse(fromBase64url(body));
  } catch {
    return { kind: "unreadable", message: "report body is not valid JSON" };
  }
  const parsed = ExitReport.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.length ? issue.path.join(".") : "report";
    return { kind: "unreadable", message: `report field ${where}: ${issue?.message ?? "invalid"}` };
  }
  return { kind: "report", report: parsed.data };
}

function fitToTagBudget(report: ExitReport): string {
  const limit = REPORT_CHUNK_SIZE * REPORT_MAX_CHUNKS;
  const perContainer = Math.floor(
    REPORT_TAG_MESSAGE_BUDGET / Math.max(1, report.containers.length),
  );
  const attempts: ExitReport[] = [
    { ...report, containers: report.containers.map((c) => truncateMessages(c, perContainer)) },
    { ...report, containers: report.containers.map((c) => truncateMessages(c, 0)) },
    {
      ...report,
      containers: report.containers.map((c) => {
        const { last: _last, ...rest } = truncateMessages(c, 0);
        return rest;
      }),
    },
  ];
  for (const attempt of attempts) {
    const body = base64url(JSON.stringify(attempt));
    if (body.length <= limit) return body;
  }
  // Too many containers even without messages: keep the ones that fit, mark the cut.
  const minimal = attempts[attempts.length - 1] ?? report;
  const kept: ContainerReport[] = [];
  for (const container of minimal.containers) {
    const candidate = {
      ...minimal,
      containersOmitted: minimal.containers.length - kept.length - 1,
      containers: [...kept, container],
    };
    if (base64url(JSON.stringify(candidate)).length > limit) break;
    kept.push(container);
  }
  return base64url(
    JSON.stringify({
      ...minimal,
      containersOmitted: minimal.containers.length - kept.length,
      containers: kept,
    }),
  );
}

function truncateMessages(container: ContainerReport, maxBytes: number): ContainerReport {
  let truncated = container.truncated ?? false;
  const cut = (b64: string | undefined): string | undefined => {
    if (b64 === undefined) return undefined;
    const bytes = Buffer.from(b64, "base64");
    if (bytes.length <= maxBytes) return b64;
    truncated = true;
    return maxBytes === 0 ? undefined : bytes.subarray(0, maxBytes).toString("base64");
  };
  const next: ContainerReport = { ...container };
  const message = cut(container.messageB64);
  if (message === undefined) delete next.messageB64;
  else next.messageB64 = message;
  if (container.last) {
    const last = { ...container.last };
    const lastMessage = cut(container.last.messageB64);
    if (lastMessage === undefined) delete last.messageB64;
    else last.messageB64 = lastMessage;
    next.last = last;
  }
  if (truncated) next.truncated = true;
  return next;
}

function toTagMap(tags: unknown): Map<string, string> {
  const map = new Map<string, string>();
  if (Array.isArray(tags)) {
    for (const tag of tags) {
      if (tag && typeof tag === "object") {
        const { Key, Value } = tag as { Key?: unknown; Value?: unknown };
        if (typeof Key === "string" && typeof Value === "string") map.set(Key, Value);
      }
    }
  } else if (tags && typeof tags === "object") {
    for (const [key, value] of Object.entries(tags)) {
      if (typeof value === "string") map.set(key, value);
    }
  }
  return map;
}

/** First 16 hex digits of the SHA-256 of `text` (UTF-8), as the header carries it. */
function sha256Prefix(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex").slice(0, 16);
}

function base64url(text: string): string {
  return Buffer.from(text, "utf8").toString("base64url");
}

function fromBase64url(text: string): string {
  return Buffer.from(text, "base64url").toString("utf8");
}

function quote(text: string): string {
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}...` : text);
}
