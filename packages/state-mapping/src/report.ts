/**
 * The Nebula exit report: how an instance's host supervisor tells the controller what its
 * containers did (docs/contracts.md#the-exit-report). This module is the single definition of the format. The writer
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
 * To fit, the writer spends one shared budget of {@link REPORT_TAG_MESSAGE_BUDGET} bytes on the
 * messages of all containers, most useful first (a failing container's current message, then
 * its previous exit's, then the healthy containers'; see `report-budget.ts`), keeping whole
 * messages while they fit and cutting the first that does not (termination messages keep their
 * end, waiting messages their start; every cut on a UTF-8 character boundary). If the report
 * still does not fit it retries with 512, 256 and 0 bytes, then drops `last` and the boot timings,
 * then trailing containers. Every container that lost text gets `truncated: true`, and the report
 * gets `cut: true`: the controller then reads the console line, which carries everything.
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
import {
  allocate,
  cutMessage,
  messageSlots,
  REPORT_TAG_MESSAGE_BUDGET,
  TAG_BUDGET_STEPS,
} from "./report-budget.js";

export { REPORT_TAG_MESSAGE_BUDGET, TAG_BUDGET_STEPS };

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

/**
 * Kubernetes' own limit on a termination message: the writer keeps the last this many bytes of the
 * termination-message file (on a character boundary), and the console channel carries them whole.
 */
export const MAX_TERMINATION_MESSAGE_BYTES = 4096;

/** With `FallbackToLogsOnError`: at most this many bytes of the log's end become the message. */
export const LOG_FALLBACK_MAX_BYTES = 2048;

/** With `FallbackToLogsOnError`: at most this many of the log's last lines become the message. */
export const LOG_FALLBACK_MAX_LINES = 80;

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
  /**
   * For `running`, when the container has probes: its startup probe succeeded (or it has none).
   * Absent in reports of containers without probes, which count as started while running.
   */
  started: z.boolean().optional(),
  /**
   * For `running`, when the container has probes: its readiness probe (after startup) passes.
   * Absent in reports of containers without probes, which count as ready while running.
   */
  ready: z.boolean().optional(),
  /** Runtime container ID, as `docker://<id>` or bare id. */
  containerID: z.string().max(256).optional(),
  /** Image digest or ID the runtime resolved. */
  imageID: z.string().max(256).optional(),
  /** The previous termination, for a container that restarted. */
  last: TerminationReport.optional(),
  /** True when a message was shortened or left out to fit this channel. */
  truncated: z.boolean().optional(),
  /** When the supervisor started pulling this container's image (the first pull of this boot). */
  pullStartedAt: timestamp.optional(),
  /** When that pull ended, successfully or not. */
  pullFinishedAt: timestamp.optional(),
  /** When the container first started on this boot (its later restarts do not move it). */
  firstStartedAt: timestamp.optional(),
  /** True on the container whose restarts hit the Pod's restart limit: its exit ended the Pod. */
  restartLimitReached: z.boolean().optional(),
  /**
   * Why the supervisor stopped this container, when it did and the exit is therefore not the
   * container's own: `RestartLimit` (another container hit the restart limit), `SpotInterruption`,
   * or `StopRequested` (the instance was being stopped from outside).
   */
  stoppedBecause: z.enum(["RestartLimit", "SpotInterruption", "StopRequested"]).optional(),
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
  /** When the supervisor received the stop (SIGTERM or the Spot notice), recorded before anything else. */
  stopRequestedAt: timestamp.optional(),
  /**
   * The Spot interruption notice the supervisor saw on IMDS (`spot/instance-action`): it stopped
   * the containers within the two-minute warning and wrote this final report.
   */
  interruption: z
    .looseObject({
      /** `spot`: the only kind so far. */
      kind: z.literal("spot"),
      /** The notice's `action`: `terminate`, `stop` or `hibernate`. */
      action: z.string().min(1).max(32),
      /** The notice's `time`: when EC2 acts. */
      time: timestamp.optional(),
    })
    .optional(),
  /**
   * The rebalance recommendation the supervisor saw on IMDS (`events/recommendations/rebalance`):
   * EC2 says this Spot instance is at elevated risk of interruption. Informational: nothing was
   * stopped for it.
   */
  rebalance: z
    .looseObject({
      /** The recommendation's `noticeTime`. */
      time: timestamp,
    })
    .optional(),
  /** Present when a container's restarts hit the Pod's restart limit, which ended the Pod. */
  restartLimit: z
    .looseObject({
      /** The container that hit it. */
      container: z.string().min(1).max(253),
      /** The limit (annotation `nebula.dev/restart-limit`, or the default). */
      limit: z.number().int().min(0),
    })
    .optional(),
  /** When the host supervisor started on this boot (the first step of the boot timeline). */
  supervisorStartedAt: timestamp.optional(),
  /**
   * True when this channel's copy was shortened (messages cut or dropped, `last` or timings
   * dropped, containers omitted): the console line carries the whole report.
   */
  cut: z.boolean().optional(),
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
 * already base64-decoded to text). A report line starts with the marker (nothing before it on its
 * line). Lines that are not reports, or that are damaged, are skipped;
 * the report with the highest `seq` wins, among those whose `seq` is at most `maxSeq` when given
 * (a line past it, such as a forged one far ahead, cannot shadow the genuine ones). Total.
 */
export function decodeConsoleOutput(output: unknown, maxSeq?: number): ReportReadResult {
  if (typeof output !== "string") return { kind: "absent" };
  let best: ExitReport | undefined;
  let damaged = 0;
  let beyond = 0;
  // Only a marker at the start of a line counts: text that merely contains it (a log line quoting
  // a report, a forged report after a prefix) is not a report.
  const line = new RegExp(`^${CONSOLE_REPORT_MARKER} v(\\d+) ([A-Za-z0-9_-]+)(?=\\s|$)`, "gm");
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
    if (maxSeq !== undefined && parsed.report.seq > maxSeq) {
      beyond++;
      continue;
    }
    if (best === undefined || parsed.report.seq > best.seq) best = parsed.report;
  }
  if (best) return { kind: "report", report: best };
  if (beyond > 0)
    return {
      kind: "unreadable",
      message: `${beyond} console report line(s) have a seq past the ${maxSeq} accepted now`,
    };
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
  const fits = (r: ExitReport) => {
    const body = base64url(JSON.stringify(r));
    return body.length <= limit ? body : undefined;
  };
  let fitted: ExitReport = report;
  for (const budget of TAG_BUDGET_STEPS) {
    fitted = spendBudget(report, budget);
    const body = fits(fitted);
    if (body !== undefined) return body;
  }
  // Not even without messages: drop what is only useful detail, then trailing containers.
  const lean: ExitReport = {
    ...fitted,
    cut: true,
    containers: fitted.containers.map((c) => {
      const {
        last: _last,
        pullStartedAt: _pullStarted,
        pullFinishedAt: _pullFinished,
        firstStartedAt: _firstStarted,
        ...rest
      } = c;
      return rest;
    }),
  };
  const body = fits(lean);
  if (body !== undefined) return body;
  for (let count = lean.containers.length - 1; count >= 0; count--) {
    const kept = fits({
      ...lean,
      containers: lean.containers.slice(0, count),
      containersOmitted: lean.containers.length - count,
    });
    if (kept !== undefined) return kept;
  }
  return base64url(JSON.stringify({ ...lean, containers: [] }));
}

/** The report with its messages cut to one shared budget, most useful first. */
function spendBudget(report: ExitReport, budget: number): ExitReport {
  const slots = messageSlots(report.containers);
  const keep = allocate(slots, budget);
  const containers = report.containers.map((c) => ({
    ...c,
    ...(c.last ? { last: { ...c.last } } : {}),
  }));
  let cut = false;
  slots.forEach((slot, i) => {
    const bytes = keep[i] ?? 0;
    if (bytes >= slot.bytes) return;
    cut = true;
    const c = containers[slot.container];
    if (c === undefined) return;
    c.truncated = true;
    const target = slot.which === "current" ? c : c.last;
    if (target?.messageB64 === undefined) return;
    const value = cutMessage(target.messageB64, bytes, slot.keep);
    if (value === undefined) delete target.messageB64;
    else target.messageB64 = value;
  });
  return cut ? { ...report, cut: true, containers } : { ...report, containers };
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
