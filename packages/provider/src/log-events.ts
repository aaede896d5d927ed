/**
 * GetLogEvents at the boundary, for `CloudWatchContainerLogs`: the call's limits, its answer parsed
 * with zod, the readers' option schemas and the small helpers their loops share.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { ProviderError } from "./errors.js";

/** One run of one container of one Pod: what names its log stream. */
export interface ContainerRunRef {
  /** The Pod's namespace. */
  namespace: string;
  /** The Pod's name. */
  pod: string;
  /** The Pod's UID (`metadata.uid`). */
  podUid: string;
  /** The container's name. */
  container: string;
  /** 0 for the container's first run, then its restart count (`restartCount` in the Pod's status). */
  restart: number;
}

/** What part of a stream `CloudWatchContainerLogs.read` and `CloudWatchContainerLogs.lines` return. */
export interface LogReadOptions {
  /**
   * Only the last this many lines (of those at or after `since`). Default: every line. At most
   * 100,000 (more is read as 100,000): the tail is found by reading the stream backwards, one
   * `GetLogEvents` call per 10,000 lines, against an account-wide quota (see
   * {@link CloudWatchContainerLogs.lines}).
   */
  tailLines?: number;
  /** Only lines whose timestamp is at or after this instant (inclusive lower bound). */
  since?: Date;
}

/** Options of `CloudWatchContainerLogs.follow`. */
export interface LogFollowOptions extends LogReadOptions {
  /** Ends the iteration (without an error) when aborted; an in-flight request is cancelled. */
  signal: AbortSignal;
  /** Milliseconds between two polls for new lines, and for a stream that does not exist yet. Default 1000. */
  pollMs?: number;
  /**
   * Asked before every poll: `true` ends the iteration once that poll finds nothing new (the
   * stream is drained, or does not exist), so every line written before `done()` turned true is
   * read. Typically "the container's run has ended" (Docker flushes its last lines at the exit);
   * CloudWatch Logs may show an event a few seconds after `PutLogEvents` returned, so a caller
   * that must not lose the last lines answers `true` only a few seconds after the exit.
   */
  done?: () => boolean | Promise<boolean>;
}

/** One line a container wrote (stdout or stderr), as CloudWatch Logs stores it. */
export interface LogLine {
  /** When the host's Docker read the line (the event's timestamp, millisecond precision). */
  timestamp: Date;
  /** The line, without its trailing newline. */
  message: string;
}

/** GetLogEvents returns at most 10,000 events per page (and at most 1 MB). */
export const GET_LOG_EVENTS_MAX_LIMIT = 10_000;
/** Default of `LogFollowOptions.pollMs`. */
export const DEFAULT_LOG_POLL_MS = 1000;
/**
 * The most lines a tail reads (a `tailLines` above it reads this many). Finding
 * where the tail starts costs one GetLogEvents call per 10,000 lines read backwards, then as many
 * forwards, and GetLogEvents has an account-wide quota (10 requests per second per account and
 * Region in the CloudWatch Logs user guide's quota table) shared by every reader: an unbounded
 * `kubectl logs --tail` could take every virtual node's log reads down for minutes. 100,000 lines
 * is 20 calls at most, and more than a terminal shows.
 */
export const MAX_TAIL_LINES = 100_000;
/** Page size of the backward reads that count the lines sharing the tail's first millisecond. */
export const SAME_MILLISECOND_PAGE = 1000;

const LogEventSchema = z.object({
  timestamp: z.number().finite(),
  message: z.string(),
});
const GetLogEventsOutputSchema = z.object({
  events: z.array(z.unknown()).optional(),
  nextForwardToken: z.string().min(1).optional(),
  nextBackwardToken: z.string().min(1).optional(),
});

/** One page of GetLogEvents, parsed. */
export interface Page {
  lines: LogLine[];
  forward: string | undefined;
  backward: string | undefined;
}

/**
 * Parses one GetLogEvents answer at the boundary: an event without a numeric timestamp or a
 * string message is skipped (it cannot be shown as a log line); a message's trailing newline, if
 * a writer left one, is removed. Throws a {@link ProviderError} (`Unknown`) when the answer's
 * shape is not GetLogEvents' at all.
 */
export function parseLogEventsPage(output: unknown): Page {
  const parsed = GetLogEventsOutputSchema.safeParse(output);
  if (!parsed.success) {
    throw new ProviderError(
      "Unknown",
      `GetLogEvents answered with an unexpected shape: ${z.prettifyError(parsed.error)}`,
      { cause: parsed.error },
    );
  }
  const lines: LogLine[] = [];
  for (const raw of parsed.data.events ?? []) {
    const event = LogEventSchema.safeParse(raw);
    if (!event.success) continue;
    lines.push({
      timestamp: new Date(event.data.timestamp),
      message: event.data.message.replace(/\r?\n$/, ""),
    });
  }
  return {
    lines,
    forward: parsed.data.nextForwardToken,
    backward: parsed.data.nextBackwardToken,
  };
}

export const ReadOptionsSchema = z.strictObject({
  tailLines: z.number().int().min(0).optional(),
  since: z.date().optional(),
});
export const LinesOptionsSchema = ReadOptionsSchema.extend({
  signal: z.instanceof(AbortSignal).optional(),
});
export const FollowOptionsSchema = ReadOptionsSchema.extend({
  signal: z.instanceof(AbortSignal),
  pollMs: z.number().int().min(1).max(3_600_000).optional(),
  done: z.custom<() => unknown>((value) => typeof value === "function").optional(),
});

export function invalid(what: string, error: z.ZodError): ProviderError {
  return new ProviderError("InvalidRequest", `${what}: ${z.prettifyError(error)}`, {
    cause: error,
  });
}

/** True for the SDK error of a log group or stream that does not exist. */
export function isResourceNotFound(error: unknown): boolean {
  return (
    typeof error === "object" &&
    error !== null &&
    (error as { name?: unknown }).name === "ResourceNotFoundException"
  );
}

/** An error thrown because `signal` aborted the request (the SDK's `AbortError`). */
export function isAbort(error: unknown, signal: AbortSignal): boolean {
  return signal.aborted && error instanceof Error;
}

/** Resolves after `ms`, or as soon as `signal` aborts (never rejects). */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  return sleep(ms, undefined, { signal }).catch(() => undefined);
}

/** What a read has seen, shared with its caller (a follow polls on from it). */
export interface ReadState {
  /** The forward token after the last page read: where the next poll starts. */
  token: string | undefined;
  /**
   * The `startTime` the token was read with, for the reads that go on from it: a token may count
   * its position among the events at or after it (moto's do).
   */
  startTime: number | undefined;
  /** Whether the stream exists (known after the first page). */
  exists: boolean;
  /** Lines yielded so far. */
  yielded: number;
}

/** Where a tail starts: no stream; at the end (`tailLines` 0); or the first line at `startTime` after `skip` of that millisecond. */
export type TailStart =
  | { readonly kind: "missing" }
  | { readonly kind: "end"; readonly forward: string | undefined }
  | { readonly kind: "from"; readonly startTime: number | undefined; readonly skip: number };
