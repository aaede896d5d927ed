/**
 * Reads a Pod container's output back from CloudWatch Logs, where Docker's `awslogs` driver on the
 * Pod's instance writes it: one log group (from the configuration), one stream per container run,
 * named `<namespace>/<pod>/<pod-uid>/<container>/<restart>` (see docs/contracts.md and
 * `@nebula/userdata`'s supervisor). Only `logs:GetLogEvents` is called.
 */

import {
  type CloudWatchLogsClient,
  GetLogEventsCommand,
  type GetLogEventsCommandInput,
} from "@aws-sdk/client-cloudwatch-logs";
import { z } from "zod";
import { ProviderError, toProviderError } from "./errors.js";
import {
  type ContainerRunRef,
  DEFAULT_LOG_POLL_MS,
  FollowOptionsSchema,
  GET_LOG_EVENTS_MAX_LIMIT,
  invalid,
  isAbort,
  isResourceNotFound,
  LinesOptionsSchema,
  type LogFollowOptions,
  type LogLine,
  type LogReadOptions,
  MAX_TAIL_LINES,
  type Page,
  parseLogEventsPage,
  pause,
  ReadOptionsSchema,
  type ReadState,
  SAME_MILLISECOND_PAGE,
  type TailStart,
} from "./log-events.js";

/** Options of {@link CloudWatchContainerLogs}. */
export interface CloudWatchContainerLogsOptions {
  /** A CloudWatch Logs client for the Region of the log group. */
  client: CloudWatchLogsClient;
  /** The log group the hosts write to (`logs.group` of the provider's configuration). */
  group: string;
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
 * {@link CloudWatchContainerLogs.lines} and {@link CloudWatchContainerLogs.follow} hold one
 * GetLogEvents page (at most 1 MB) at a time, whatever the stream's size; {@link
 * CloudWatchContainerLogs.read} collects the lines into an array (for small reads).
 *
 * @example
 * ```ts
 * const logs = new CloudWatchContainerLogs({ client: new CloudWatchLogsClient({}), group: "/nebula/prod" });
 * const ref = { namespace: "default", pod: "web", podUid: uid, container: "app", restart: 0 };
 * const last = await logs.read(ref, { tailLines: 100 });
 * for await (const line of logs.lines(ref, { since, signal })) write(line.message);
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
   * at or after `since`, collected from {@link CloudWatchContainerLogs.lines} into one array (the
   * whole answer in memory: a caller that passes the lines on, as `kubectl logs` does, iterates
   * `lines` instead). Resolves `undefined` when the stream does not exist; throws a
   * {@link ProviderError} (the SDK error as `cause`) for any other failure.
   */
  async read(ref: ContainerRunRef, options: LogReadOptions = {}): Promise<LogLine[] | undefined> {
    const parsed = ReadOptionsSchema.safeParse(options);
    if (!parsed.success) throw invalid("CloudWatchContainerLogs.read options", parsed.error);
    const state: ReadState = { token: undefined, startTime: undefined, exists: false, yielded: 0 };
    const lines: LogLine[] = [];
    for await (const line of this.#read(ref, parsed.data, undefined, state)) lines.push(line);
    return state.exists ? lines : undefined;
  }

  /**
   * The lines {@link CloudWatchContainerLogs.read} returns, streamed: one GetLogEvents page is
   * asked for only when the caller asks for the line after the previous page's last, so no more
   * than one page (at most 1 MB or 10,000 events) is held besides what the caller keeps, and a
   * caller that stops iterating (`break`) stops the reading. `tailLines` (at most 100,000) reads
   * backwards from the end (`startFromHead: false`), counting the lines without keeping them, until
   * it has that many; the tail is then read forwards from its first line, so memory does not grow
   * with the tail either (it costs the tail's pages twice). A stream that does not exist yields
   * nothing. Ends without an error when `signal` aborts (the in-flight request is cancelled);
   * other failures are thrown as {@link ProviderError}.
   */
  async *lines(
    ref: ContainerRunRef,
    options: LogReadOptions & { signal?: AbortSignal } = {},
  ): AsyncGenerator<LogLine> {
    const parsed = LinesOptionsSchema.safeParse(options);
    if (!parsed.success) throw invalid("CloudWatchContainerLogs.lines options", parsed.error);
    const { signal } = options;
    const state: ReadState = { token: undefined, startTime: undefined, exists: false, yielded: 0 };
    try {
      yield* this.#read(ref, parsed.data, signal, state);
    } catch (error) {
      if (signal !== undefined && isAbort(error, signal)) return;
      throw error;
    }
  }

  /**
   * What {@link CloudWatchContainerLogs.lines} yields, then every line written after it, in
   * order, as it arrives (one poll every `pollMs`, each draining the stream forward a page at a
   * time). Waits for a stream that does not exist yet. Ends when `signal` aborts, or when a poll
   * finds nothing new after `done()` answered `true`. Failures other than a missing stream are
   * thrown as {@link ProviderError}.
   */
  async *follow(ref: ContainerRunRef, options: LogFollowOptions): AsyncGenerator<LogLine> {
    const parsed = FollowOptionsSchema.safeParse(options);
    if (!parsed.success) throw invalid("CloudWatchContainerLogs.follow options", parsed.error);
    const { signal, done } = options;
    const pollMs = parsed.data.pollMs ?? DEFAULT_LOG_POLL_MS;
    const since = parsed.data.since;
    const finished = async () => done !== undefined && (await done());
    const state: ReadState = { token: undefined, startTime: undefined, exists: false, yielded: 0 };

    // Until the stream exists: nothing to tail, so once it appears every line is new.
    let tail = parsed.data.tailLines;
    for (;;) {
      if (signal.aborted) return;
      // Asked before the read: a run that ended before it left nothing the read did not see.
      const ended = await finished();
      try {
        yield* this.#read(ref, { tailLines: tail, since }, signal, state);
      } catch (error) {
        if (isAbort(error, signal)) return;
        throw error;
      }
      if (state.exists) break;
      // The stream did not exist: whatever appears later is after the follow started.
      tail = undefined;
      if (ended) return;
      await pause(pollMs, signal);
    }

    for (;;) {
      if (signal.aborted) return;
      const ended = await finished();
      const before = state.yielded;
      try {
        yield* this.#forward(
          ref,
          {
            startTime: state.token === undefined ? since?.getTime() : state.startTime,
            skip: 0,
            token: state.token,
          },
          signal,
          state,
        );
      } catch (error) {
        if (isAbort(error, signal)) return;
        throw error;
      }
      if (state.yielded === before && ended) return;
      await pause(pollMs, signal);
    }
  }

  /** A read (every line, or a tail, at or after `since`), streamed; `state` says what it saw. */
  async *#read(
    ref: ContainerRunRef,
    options: { tailLines?: number | undefined; since?: Date | undefined },
    signal: AbortSignal | undefined,
    state: ReadState,
  ): AsyncGenerator<LogLine> {
    const since = options.since?.getTime();
    if (options.tailLines === undefined) {
      yield* this.#forward(ref, { startTime: since, skip: 0, token: undefined }, signal, state);
      return;
    }
    const tailLines = Math.min(options.tailLines, MAX_TAIL_LINES);
    const start = await this.#tailStart(ref, tailLines, since, signal);
    if (start.kind === "missing") {
      state.exists = false;
      return;
    }
    state.exists = true;
    if (start.kind === "end") {
      state.token = start.forward;
      state.startTime = since;
      return;
    }
    yield* this.#forward(
      ref,
      { startTime: start.startTime, skip: start.skip, token: undefined },
      signal,
      state,
    );
  }

  /**
   * Reads forwards, one page per step, until the forward token repeats (GetLogEvents' end of
   * stream): from `token`, or from the first line at or after `startTime` once `skip` lines of
   * exactly that millisecond are passed over. A page is asked for only when its lines are wanted.
   */
  async *#forward(
    ref: ContainerRunRef,
    from: { startTime: number | undefined; skip: number; token: string | undefined },
    signal: AbortSignal | undefined,
    state: ReadState,
  ): AsyncGenerator<LogLine> {
    let token = from.token;
    let skip = from.skip;
    for (;;) {
      const page = await this.#page(
        ref,
        { startTime: from.startTime, startFromHead: true, token },
        signal,
      );
      if (page === undefined) {
        // No stream at the first page; deleted while read after it: what was read stands.
        if (token === undefined) state.exists = false;
        return;
      }
      state.exists = true;
      const same = page.forward === undefined || page.forward === token;
      const next = page.forward ?? token;
      for (const line of page.lines) {
        if (skip > 0 && line.timestamp.getTime() === from.startTime) {
          skip -= 1;
          continue;
        }
        skip = 0;
        state.yielded += 1;
        yield line;
      }
      token = next;
      state.token = next;
      state.startTime = from.startTime;
      if (same || signal?.aborted) return;
    }
  }

  /**
   * Where the last `tailLines` lines (at or after `since`) start: read backwards from the end,
   * pages of at most the lines still missing, counting without keeping. The tail's first line is
   * named by its millisecond and how many lines of that millisecond come before it (several lines
   * may share one), which a forward read from that millisecond skips.
   */
  async #tailStart(
    ref: ContainerRunRef,
    tailLines: number,
    since: number | undefined,
    signal: AbortSignal | undefined,
  ): Promise<TailStart> {
    if (tailLines === 0) {
      // Nothing to yield: only where a follow continues from (the end).
      const page = await this.#page(
        ref,
        { startTime: since, startFromHead: false, limit: 1 },
        signal,
      );
      return page === undefined ? { kind: "missing" } : { kind: "end", forward: page.forward };
    }
    let newer = 0; // lines after the page being read
    let token: string | undefined;
    for (;;) {
      const limit = Math.min(GET_LOG_EVENTS_MAX_LIMIT, tailLines - newer);
      const page = await this.#page(
        ref,
        { startTime: since, startFromHead: false, token, limit },
        signal,
      );
      if (page === undefined) {
        // No stream; or deleted under us: whatever is left is read from the start.
        return token === undefined
          ? { kind: "missing" }
          : { kind: "from", startTime: since, skip: 0 };
      }
      const lines = page.lines;
      if (newer + lines.length >= tailLines) {
        const first = lines.length - (tailLines - newer);
        const at = (lines[first] as LogLine).timestamp.getTime();
        let skip = 0;
        while (skip < first && lines[first - 1 - skip]?.timestamp.getTime() === at) skip += 1;
        if (skip === first && page.backward !== undefined && page.backward !== token) {
          skip += await this.#sameMillisecondBefore(ref, at, since, page.backward, signal);
        }
        return { kind: "from", startTime: at, skip };
      }
      newer += lines.length;
      const same = page.backward === undefined || page.backward === token;
      token = page.backward ?? token;
      // The head: the stream (since `since`) has fewer lines than the tail, all of it is read.
      if (same) return { kind: "from", startTime: since, skip: 0 };
    }
  }

  /** How many lines of millisecond `at` come before backward token `token` (reading backwards). */
  async #sameMillisecondBefore(
    ref: ContainerRunRef,
    at: number,
    since: number | undefined,
    token: string,
    signal: AbortSignal | undefined,
  ): Promise<number> {
    let count = 0;
    let current = token;
    for (;;) {
      const page = await this.#page(
        ref,
        { startTime: since, startFromHead: false, token: current, limit: SAME_MILLISECOND_PAGE },
        signal,
      );
      if (page === undefined) return count;
      let i = page.lines.length - 1;
      while (i >= 0 && page.lines[i]?.timestamp.getTime() === at) {
        count += 1;
        i -= 1;
      }
      if (i >= 0) return count; // an older millisecond: no more before
      if (page.backward === undefined || page.backward === current) return count;
      current = page.backward;
    }
  }

  /** One GetLogEvents call, parsed; undefined when the stream (or group) does not exist. */
  async #page(
    ref: ContainerRunRef,
    options: {
      startTime?: number | undefined;
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
      ...(options.startTime === undefined ? {} : { startTime: options.startTime }),
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
