/**
 * Reads a Pod container's output back from CloudWatch Logs, where Docker's `awslogs` driver on the
 * Pod's instance writes it: one log group (from the configuration), one stream per container run,
 * named `<namespace>/<pod>/<pod-uid>/<container>/<restart>` (see docs/contracts.md and
 * `@nebula/userdata`'s supervisor). Only `logs:GetLogEvents` is called.
 */

import { setTimeout as sleep } from "node:timers/promises";
import {
  type CloudWatchLogsClient,
  GetLogEventsCommand,
  type GetLogEventsCommandInput,
} from "@aws-sdk/client-cloudwatch-logs";
import { z } from "zod";
import { ProviderError, toProviderError } from "./errors.js";

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

/** One line a container wrote (stdout or stderr), as CloudWatch Logs stores it. */
export interface LogLine {
  /** When the host's Docker read the line (the event's timestamp, millisecond precision). */
  timestamp: Date;
  /** The line, without its trailing newline. */
  message: string;
}

/** What part of a stream {@link CloudWatchContainerLogs.read} returns. */
export interface LogReadOptions {
  /** Only the last this many lines (of those at or after `since`). Default: every line. */
  tailLines?: number;
  /** Only lines whose timestamp is at or after this instant (inclusive lower bound). */
  since?: Date;
}

/** Options of {@link CloudWatchContainerLogs.follow}. */
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

/** Options of {@link CloudWatchContainerLogs}. */
export interface CloudWatchContainerLogsOptions {
  /** A CloudWatch Logs client for the Region of the log group. */
  client: CloudWatchLogsClient;
  /** The log group the hosts write to (`logs.group` of the provider's configuration). */
  group: string;
}

/** GetLogEvents returns at most 10,000 events per page (and at most 1 MB). */
const GET_LOG_EVENTS_MAX_LIMIT = 10_000;
/** Default of {@link LogFollowOptions.pollMs}. */
const DEFAULT_LOG_POLL_MS = 1000;

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
interface Page {
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

const ReadOptionsSchema = z.strictObject({
  tailLines: z.number().int().min(0).optional(),
  since: z.date().optional(),
});
const FollowOptionsSchema = ReadOptionsSchema.extend({
  signal: z.instanceof(AbortSignal),
  pollMs: z.number().int().min(1).max(3_600_000).optional(),
  done: z.custom<() => unknown>((value) => typeof value === "function").optional(),
});

function invalid(what: string, error: z.ZodError): ProviderError {
  return new ProviderError("InvalidRequest", `${what}: ${z.prettifyError(error)}`, {
    cause: error,
  });
}

/** True for the SDK error of a log group or stream that does not exist. */
function isResourceNotFound(error: unknown): boolean {
  return (
    typeof error === "object" &&
    error !== null &&
    (error as { name?: unknown }).name === "ResourceNotFoundException"
  );
}

/** An error thrown because `signal` aborted the request (the SDK's `AbortError`). */
function isAbort(error: unknown, signal: AbortSignal): boolean {
  return signal.aborted && error instanceof Error;
}

/** Resolves after `ms`, or as soon as `signal` aborts (never rejects). */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return sleep(ms, undefined, { signal }).catch(() => undefined);
}

/**
 * Reads the output of a Pod's containers from CloudWatch Logs, one stream per container run, for
 * `kubectl logs` (the virtual node's kubelet API). Needs `logs:GetLogEvents` on the group's
 * streams (see `policies/controller.json`).
 *
 * A stream that does not exist reads as `undefined` (the run never started, or wrote nothing
 * Docker could send). A log group that does not exist reads the same way: CloudWatch Logs names
 * both `ResourceNotFoundException`, and the group is created by the operator, not per Pod.
 *
 * @example
 * ```ts
 * const logs = new CloudWatchContainerLogs({ client: new CloudWatchLogsClient({}), group: "/nebula/prod" });
 * const ref = { namespace: "default", pod: "web", podUid: uid, container: "app", restart: 0 };
 * const last = await logs.read(ref, { tailLines: 100 });
 * for await (const line of logs.follow(ref, { signal, done: () => exited })) write(line.message);
 * ```
 */
export class CloudWatchContainerLogs {
  readonly #client: CloudWatchLogsClient;
  readonly #group: string;

  /** @param options - the client and the log group. */
  constructor(options: CloudWatchContainerLogsOptions) {
    const group = z
      .string()
      .min(1)
      .max(512)
      .regex(/^[.\-_/#A-Za-z0-9]+$/, "must be a CloudWatch Logs group name")
      .safeParse(options.group);
    if (!group.success) throw invalid("CloudWatchContainerLogs group", group.error);
    this.#client = options.client;
    this.#group = group.data;
  }

  /**
   * The log stream of one container run: `<namespace>/<pod>/<pod-uid>/<container>/<restart>`, as
   * the host supervisor names it in Docker's `awslogs-stream` option.
   */
  static streamName(ref: ContainerRunRef): string {
    return `${ref.namespace}/${ref.pod}/${ref.podUid}/${ref.container}/${ref.restart}`;
  }

  /**
   * The lines of one container run, oldest first: every line, or the last `tailLines`, of those
   * at or after `since`. Reads the whole stream page by page (any size). Resolves `undefined`
   * when the stream does not exist; throws a {@link ProviderError} (the SDK error as `cause`) for
   * any other failure.
   */
  async read(ref: ContainerRunRef, options: LogReadOptions = {}): Promise<LogLine[] | undefined> {
    const parsed = ReadOptionsSchema.safeParse(options);
    if (!parsed.success) throw invalid("CloudWatchContainerLogs.read options", parsed.error);
    const result = await this.#initial(ref, parsed.data, undefined);
    return result?.lines;
  }

  /**
   * What {@link read} returns, then every line written after it, in order, as it arrives (one
   * poll every `pollMs`, each draining the stream forward). Waits for a stream that does not exist
   * yet. Ends when `signal` aborts, or when a poll finds nothing new after `done()` answered
   * `true`. Failures other than a missing stream are thrown as {@link ProviderError}.
   */
  async *follow(ref: ContainerRunRef, options: LogFollowOptions): AsyncGenerator<LogLine> {
    const parsed = FollowOptionsSchema.safeParse(options);
    if (!parsed.success) throw invalid("CloudWatchContainerLogs.follow options", parsed.error);
    const { signal, done } = options;
    const pollMs = parsed.data.pollMs ?? DEFAULT_LOG_POLL_MS;
    const since = parsed.data.since;
    const finished = async () => done !== undefined && (await done());

    // Until the stream exists: nothing to tail, so once it appears every line is new.
    let initial: { lines: LogLine[]; forward: string | undefined } | undefined;
    let tail = parsed.data.tailLines;
    for (;;) {
      if (signal.aborted) return;
      // Asked before the read: a run that ended before it left nothing the read did not see.
      const ended = await finished();
      try {
        initial = await this.#initial(ref, { tailLines: tail, since }, signal);
      } catch (error) {
        if (isAbort(error, signal)) return;
        throw error;
      }
      if (initial !== undefined) break;
      // The stream did not exist: whatever appears later is after the follow started.
      tail = undefined;
      if (ended) return;
      await pause(pollMs, signal);
    }
    for (const line of initial.lines) yield line;

    let token = initial.forward;
    for (;;) {
      if (signal.aborted) return;
      const ended = await finished();
      let found = 0;
      try {
        for (;;) {
          const page = await this.#page(ref, { since, startFromHead: true, token }, signal);
          if (page === undefined) break; // deleted under us: nothing new
          for (const line of page.lines) yield line;
          found += page.lines.length;
          const same = page.forward === undefined || page.forward === token;
          token = page.forward ?? token;
          if (same || signal.aborted) break;
        }
      } catch (error) {
        if (isAbort(error, signal)) return;
        throw error;
      }
      if (found === 0 && ended) return;
      await pause(pollMs, signal);
    }
  }

  /** The initial read: its lines and the forward token to continue from; undefined: no stream. */
  async #initial(
    ref: ContainerRunRef,
    options: { tailLines?: number | undefined; since?: Date | undefined },
    signal: AbortSignal | undefined,
  ): Promise<{ lines: LogLine[]; forward: string | undefined } | undefined> {
    const { tailLines, since } = options;
    if (tailLines === undefined) {
      // Forward from the head until the token repeats (GetLogEvents' end of stream).
      const lines: LogLine[] = [];
      let token: string | undefined;
      for (;;) {
        const page = await this.#page(ref, { since, startFromHead: true, token }, signal);
        // Undefined on the first page: no stream; later: deleted while read, keep what was read.
        if (page === undefined) return token === undefined ? undefined : { lines, forward: token };
        lines.push(...page.lines);
        const same = page.forward === undefined || page.forward === token;
        token = page.forward ?? token;
        if (same) return { lines, forward: token };
      }
    }
    // Backward from the end, newest page first, until enough lines or the head.
    const pages: LogLine[][] = [];
    let count = 0;
    let forward: string | undefined;
    let token: string | undefined;
    let first = true;
    while (first || count < tailLines) {
      const limit = Math.max(1, Math.min(GET_LOG_EVENTS_MAX_LIMIT, tailLines - count));
      const page = await this.#page(ref, { since, startFromHead: false, token, limit }, signal);
      if (page === undefined) {
        if (first) return undefined;
        break;
      }
      if (first) forward = page.forward;
      first = false;
      pages.unshift(page.lines);
      count += page.lines.length;
      const same = page.backward === undefined || page.backward === token;
      token = page.backward ?? token;
      if (same || tailLines === 0) break;
    }
    const lines = pages.flat();
    return { lines: lines.slice(Math.max(0, lines.length - tailLines)), forward };
  }

  /** One GetLogEvents call, parsed; undefined when the stream (or group) does not exist. */
  async #page(
    ref: ContainerRunRef,
    options: {
      since?: Date | undefined;
      startFromHead: boolean;
      token?: string | undefined;
      limit?: number;
    },
    signal: AbortSignal | undefined,
  ): Promise<Page | undefined> {
    const input: GetLogEventsCommandInput = {
      logGroupName: this.#group,
      logStreamName: CloudWatchContainerLogs.streamName(ref),
      startFromHead: options.startFromHead,
      ...(options.since === undefined ? {} : { startTime: options.since.getTime() }),
      ...(options.token === undefined ? {} : { nextToken: options.token }),
      ...(options.limit === undefined ? {} : { limit: options.limit }),
    };
    let output: unknown;
    try {
      output = await this.#client.send(
        new GetLogEventsCommand(input),
        signal === undefined ? {} : { abortSignal: signal },
      );
    } catch (error) {
      if (isResourceNotFound(error)) return undefined;
      if (signal?.aborted) throw error;
      throw toProviderError(
        error,
        `GetLogEvents of stream ${input.logStreamName} in log group ${this.#group}`,
      );
    }
    return parseLogEventsPage(output);
  }
}
