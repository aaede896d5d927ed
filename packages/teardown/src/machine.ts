/**
 * The pure core: teardown definitions as ordered phases, and the functions that move a durable
 * {@link TeardownRecord} forward. No clock reads (time is a parameter), no I/O, no exceptions on
 * data: a bad record or a throwing definition callback gives an `invalid` result with a reason.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { COMPLETE_PHASE, RECORD_VERSION, RecordParams, type TeardownRecord } from "./record.js";

/** A JSON value, as carried by records, effects and subject patches. */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | JsonValue[]
  | { [key: string]: JsonValue };

/**
 * A change to the subject itself, as a JSON merge patch (RFC 7386), applied by the store in the
 * same compare-and-swap write that records a phase change. Use it when entering a phase must flip
 * the subject atomically with the record (OpenShell suspends its workload this way).
 */
export type SubjectPatch = { [key: string]: JsonValue };

/** An effect description: a plain object with a `kind`, executed by the caller's handler for that kind. */
export interface EffectDescription {
  /** Which handler runs it, for example `"StopInstance"`. */
  readonly kind: string;
}

/** What a phase's callbacks see: the parsed parameters and the current record. */
interface PhaseContext<P> {
  /** The teardown's durable parameters, parsed with the definition's schema. */
  readonly params: P;
  /** The record as it stands (for an entering phase: the record being entered). */
  readonly record: TeardownRecord;
}

/** What happens when a phase's deadline passes before its observation says it is done. */
type DeadlineAction =
  /** Go on to the next phase anyway (reported as a `DeadlineExpired` transition). */
  | "advance"
  /** Issue the phase's action again and start a fresh deadline when it is confirmed. */
  | "reissue";

/** A phase's deadline. */
interface PhaseDeadline<P> {
  /**
   * The budget in milliseconds, counted from the durably recorded start of the phase's action:
   * the claim written before its effects ran (`claimedAt`; the latest claim when the action had
   * to be issued again), or, for a phase without an action, from when it was entered. The time
   * the effects took counts against it. The deadline is fixed in the record when the action is
   * confirmed, so a restart never resets it. Negative or non-finite values count as 0.
   */
  readonly afterMs: (ctx: PhaseContext<P>) => number;
  /** What to do when it passes. */
  readonly onExpiry: DeadlineAction;
}

/**
 * Lets external participants hold the entry into a phase, like Cluster API's pre-drain and
 * pre-terminate hook annotations: while `holders` lists anyone, the teardown waits in the
 * previous phase, at most `timeoutMs` from when the hold was first seen (recorded durably).
 */
interface PhaseHold<O, P> {
  /** The participants currently holding this phase, read from the observation. */
  readonly holders: (observation: O) => readonly string[];
  /** How long a hold may last, in milliseconds, before the teardown goes on (`HoldExpired`). */
  readonly timeoutMs: (ctx: PhaseContext<P>) => number;
}

/** One phase of a teardown. */
interface PhaseDefinition<O, E extends EffectDescription, P> {
  /** Unique name, recorded durably (keep it stable across releases): `stopping`, `releasing`. */
  readonly name: string;
  /** What the phase waits for, for people: `"the instance to stop"`. Shown by `describe`. */
  readonly waitsFor: string;
  /** When it returns true, the phase is passed over (recorded in the transition's `skipped`). */
  readonly skip?: (ctx: PhaseContext<P>) => boolean;
  /**
   * The idempotent action that begins the phase: effect descriptions, run in order by the
   * executor after the write that claims them. Issued at least once; issued again after a crash
   * that happened before it was confirmed, or when a `reissue` deadline passes.
   */
  readonly action?: (ctx: PhaseContext<P>) => readonly E[];
  /** A change to the subject, written in the same compare-and-swap write that enters the phase. */
  readonly subject?: (ctx: PhaseContext<P>) => SubjectPatch | undefined;
  /** Whether the observation says the phase is done. Default: done as soon as its action is confirmed. */
  readonly isDone?: (observation: O, ctx: PhaseContext<P>) => boolean;
  /** Optional deadline and what happens when it passes. Without one, the phase waits forever. */
  readonly deadline?: PhaseDeadline<P>;
  /** Optional external holds on entering this phase. */
  readonly hold?: PhaseHold<O, P>;
}

/**
 * A teardown: ordered phases over an observation type `O`, emitting effects `E`, with durable
 * parameters `P`.
 */
export interface TeardownDefinition<O, E extends EffectDescription, P> {
  /** Name recorded in every record (`def`); a record of another definition is refused. */
  readonly name: string;
  /** zod schema of the durable parameters; its output must be JSON (it is stored in the record). */
  readonly params: z.ZodType<P>;
  /** The phases, in the order they must run. At least one; names unique. */
  readonly phases: readonly PhaseDefinition<O, E, P>[];
  /** A change to the subject, written together with clearing the record when the teardown completes. */
  readonly complete?: (ctx: PhaseContext<P>) => SubjectPatch | undefined;
  /**
   * How long to wait, after claim number `attempt`, before an unconfirmed action (its effects
   * failed, or the process died before confirming) is claimed again. Default
   * {@link defaultRetryBackoffMs}: 1 s, doubling, capped at 60 s. The back-off keeps a failing
   * effect from turning every reconcile (or every watch event caused by the claim's own write)
   * into another write.
   */
  readonly retryBackoffMs?: (attempt: number) => number;
  /**
   * Keep the completed record (phase `complete`) instead of clearing it, so that a later request
   * on the same subject finds the teardown finished and never starts it again. Default `false`.
   */
  readonly keepCompleted?: boolean;
}

/**
 * The default retry back-off of an unconfirmed action: 1 s after the first claim, doubling,
 * capped at 60 s.
 */
function defaultRetryBackoffMs(attempt: number): number {
  return Math.min(1000 * 2 ** Math.max(0, Math.min(attempt - 1, 16)), 60_000);
}

/** Why a phase changed. */
type TransitionReason =
  /** The teardown was requested and its first phase entered. */
  | "Started"
  /** The previous phase's observation said done. */
  | "Done"
  /** The previous phase's deadline passed (`onExpiry: "advance"`). */
  | "DeadlineExpired"
  /** External holders did not release the phase within the hold timeout. */
  | "HoldExpired";

/** A phase change, as reported to observers (Kubernetes Events, metrics, logs). */
export interface TeardownTransition {
  /** Phase left, or `null` when the teardown starts. */
  readonly from: string | null;
  /** Phase entered, or `"complete"`. */
  readonly to: string;
  /** Why. */
  readonly reason: TransitionReason;
  /** Phases passed over on the way (their `skip` said so). */
  readonly skipped: readonly string[];
  /** When, as handed to the core. */
  readonly at: number;
}

/** How a step left the teardown. */
type StepStatus =
  /** Entered a new phase (see `transitions`). */
  | "advanced"
  /** The phase's action is claimed for (re)execution: run `effects`, then `acknowledge`. */
  | "issuing"
  /** Waiting for the phase's observation or deadline; nothing to write. */
  | "waiting"
  /** Waiting for external holders (the first time, `write` records when the hold began). */
  | "held"
  /** Every phase is done: clear the record. */
  | "complete";

/**
 * The result of a step: what to write (with compare-and-swap, on the version that was read), then
 * which effects to run, only if the write succeeded.
 */
export interface StepResult<E extends EffectDescription> {
  /** Discriminant. */
  readonly kind: "step";
  /** What happened. */
  readonly status: StepStatus;
  /** `none`: nothing to write; `update`: write `record`; `clear`: remove the record (teardown done). */
  readonly write: "none" | "update" | "clear";
  /** The next record (for `clear`, the completed record, for reporting). */
  readonly record: TeardownRecord;
  /** Subject change to apply in the same write, if any. */
  readonly subject?: SubjectPatch;
  /** Effects to run after the write succeeded, in order. Never non-empty when `write` is `none`. */
  readonly effects: readonly E[];
  /** Phase changes made by this step. */
  readonly transitions: readonly TeardownTransition[];
  /** What the teardown waits for now (for `waiting`, `held` and `issuing`). */
  readonly waitingFor: string;
}

/** A record the machine cannot act on (another definition, unknown phase, bad parameters). */
interface InvalidStep {
  /** Discriminant. */
  readonly kind: "invalid";
  /** Why, for people. */
  readonly reason: string;
}

/** What the pure functions return: a step, or a reason the record cannot be acted on. */
export type StepOutcome<E extends EffectDescription> = StepResult<E> | InvalidStep;

/** How a teardown starts. */
export interface StartInput {
  /** Parameters, parsed with the definition's schema (defaults applied and then recorded). */
  readonly params: unknown;
  /** Why, CamelCase: `DeletionRequested`, `TerminalReportRecorded`. */
  readonly cause: string;
  /** UID of the subject the record is written on, when it has one. */
  readonly uid?: string;
}

/** A readable summary of where a teardown stands, from {@link Teardown.describe}. */
interface TeardownSummary {
  /** Current phase, or `"complete"`. */
  readonly phase: string;
  /** 1-based position of the phase and the number of phases. */
  readonly position: { readonly index: number; readonly of: number };
  /** When the phase was entered (ms) and how long ago. */
  readonly since: number;
  /** Milliseconds in the current phase (0 if `now` is earlier). */
  readonly elapsedMs: number;
  /** The deadline, when one is set. */
  readonly deadline?: number;
  /** Milliseconds until the deadline (negative once overdue). */
  readonly remainingMs?: number;
  /** True when the deadline has passed. */
  readonly overdue: boolean;
  /** Whether the phase's action has been confirmed done. */
  readonly actionConfirmed: boolean;
  /** How many times the action has been claimed. */
  readonly attempt: number;
  /** What the phase waits for. */
  readonly waitingFor: string;
  /** One line for people, e.g. for `kubectl describe` or a log. */
  readonly text: string;
}

/** A teardown definition turned into pure functions over records. */
export interface Teardown<O, E extends EffectDescription, P> {
  /** The definition. */
  readonly definition: TeardownDefinition<O, E, P>;
  /**
   * Starts a teardown: the record that enters its first phase, and that phase's action. Write the
   * record first (intent before any side effect), run the effects only if the write succeeded.
   */
  start(input: StartInput, now: number): StepOutcome<E>;
  /** Moves a record forward given an observation of the world at `now`. Pure and total. */
  step(record: TeardownRecord, observation: O, now: number): StepOutcome<E>;
  /**
   * Marks the current phase's action confirmed (every effect succeeded) at `now` (`issuedAt`) and
   * fixes its deadline: the recorded claim time (`claimedAt`, written before the effects ran) plus
   * the phase's budget, so a confirmation that comes late does not extend the deadline. A no-op
   * `write: "none"` result when it already is confirmed.
   */
  acknowledge(record: TeardownRecord, now: number): StepOutcome<E>;
  /**
   * Records that the current phase's effects ran and failed (`failures` + 1), so that an
   * `advance` deadline can go on without them. `write: "none"` for a complete or confirmed record.
   */
  fail(record: TeardownRecord, now: number): StepOutcome<E>;
  /** A readable summary of where the teardown stands. Total. */
  describe(record: TeardownRecord, now: number): TeardownSummary;
}

/** Thrown by {@link defineTeardown} for a definition that cannot work (a programming error). */
export class TeardownDefinitionError extends Error {
  /** Machine-readable code. */
  readonly code: "NoPhases" | "DuplicatePhase" | "ReservedPhaseName";
  override readonly name = "TeardownDefinitionError";
  constructor(
    code: TeardownDefinitionError["code"],
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.code = code;
  }
}

/**
 * Turns a teardown definition into its pure functions.
 *
 * Use it once per definition, at module level. Throws {@link TeardownDefinitionError} for a
 * definition without phases, with duplicate phase names, or with a phase named `complete`.
 *
 * @example
 * ```ts
 * const teardown = defineTeardown({
 *   name: "example.dev/job",
 *   params: z.object({ jobId: z.string() }),
 *   phases: [
 *     {
 *       name: "cancelling",
 *       waitsFor: "the job to stop",
 *       action: ({ params }) => [{ kind: "CancelJob", jobId: params.jobId }],
 *       isDone: (o: { running: boolean }) => !o.running,
 *       deadline: { afterMs: () => 60_000, onExpiry: "advance" },
 *     },
 *   ],
 * });
 * const started = teardown.start({ params: { jobId: "j-1" }, cause: "UserRequested" }, 0);
 * ```
 */
export function defineTeardown<O, E extends EffectDescription, P>(
  definition: TeardownDefinition<O, E, P>,
): Teardown<O, E, P> {
  if (definition.phases.length === 0) {
    throw new TeardownDefinitionError("NoPhases", `teardown ${definition.name} has no phases`);
  }
  const seen = new Set<string>();
  for (const phase of definition.phases) {
    if (phase.name === COMPLETE_PHASE) {
      throw new TeardownDefinitionError(
        "ReservedPhaseName",
        `teardown ${definition.name}: "${COMPLETE_PHASE}" is reserved`,
      );
    }
    if (seen.has(phase.name)) {
      throw new TeardownDefinitionError(
        "DuplicatePhase",
        `teardown ${definition.name}: phase "${phase.name}" is declared twice`,
      );
    }
    seen.add(phase.name);
  }
  const phases = definition.phases;
  const backoff = definition.retryBackoffMs ?? defaultRetryBackoffMs;

  const parseParams = (raw: unknown): { ok: true; params: P } | { ok: false; reason: string } => {
    const parsed = definition.params.safeParse(raw);
    if (!parsed.success) {
      return { ok: false, reason: `parameters are invalid: ${z.prettifyError(parsed.error)}` };
    }
    return { ok: true, params: parsed.data };
  };

  /** Enters the first non-skipped phase at or after `target`, or completes. */
  const enter = (
    base: TeardownRecord,
    params: P,
    target: number,
    reason: TransitionReason,
    now: number,
  ): StepResult<E> => {
    const skipped: string[] = [];
    const from = base.phase === "" ? null : base.phase;
    let idx = target;
    while (idx < phases.length) {
      const phase = phases[idx] as PhaseDefinition<O, E, P>;
      const probe: TeardownRecord = { ...base, phase: phase.name, idx };
      if (!phase.skip?.({ params, record: probe })) break;
      skipped.push(phase.name);
      idx++;
    }
    if (idx >= phases.length) {
      const record = withoutUndefined<TeardownRecord>({
        ...base,
        phase: COMPLETE_PHASE,
        idx: phases.length,
        since: now,
        attempt: 0,
        claimedAt: undefined,
        issuedAt: undefined,
        deadline: undefined,
        heldSince: undefined,
        failures: undefined,
      });
      const subject = definition.complete?.({ params, record });
      return {
        kind: "step",
        status: "complete",
        write: definition.keepCompleted ? "update" : "clear",
        record,
        ...(subject ? { subject } : {}),
        effects: [],
        transitions: [{ from, to: COMPLETE_PHASE, reason, skipped, at: now }],
        waitingFor: "nothing",
      };
    }
    const phase = phases[idx] as PhaseDefinition<O, E, P>;
    const entering = withoutUndefined<TeardownRecord>({
      ...base,
      phase: phase.name,
      idx,
      since: now,
      attempt: 0,
      claimedAt: undefined,
      issuedAt: undefined,
      deadline: undefined,
      heldSince: undefined,
      failures: undefined,
    });
    const ctx = { params, record: entering };
    const effects = phase.action?.(ctx) ?? [];
    const subject = phase.subject?.(ctx);
    const record =
      effects.length === 0
        ? confirm(entering, phase, params, now)
        : { ...entering, attempt: 1, claimedAt: now };
    return {
      kind: "step",
      status: "advanced",
      write: "update",
      record,
      ...(subject ? { subject } : {}),
      effects,
      transitions: [{ from, to: phase.name, reason, skipped, at: now }],
      waitingFor: phase.waitsFor,
    };
  };

  /**
   * Marks the phase's action confirmed at `now` and fixes its deadline. The deadline counts from
   * the claim (`claimedAt`, written durably before the effects ran), not from `now`: the time the
   * effects took (a slow `StopInstances`, a retry inside a handler) is part of the budget, and the
   * clock started when the intent was recorded. A record without a claim (a phase without an
   * action, entered at `now`) counts from `now`.
   */
  const confirm = (
    record: TeardownRecord,
    phase: PhaseDefinition<O, E, P>,
    params: P,
    now: number,
  ): TeardownRecord => {
    const budget = phase.deadline ? clampMs(phase.deadline.afterMs({ params, record })) : undefined;
    const from = record.claimedAt ?? now;
    return withoutUndefined<TeardownRecord>({
      ...record,
      claimedAt: undefined,
      issuedAt: now,
      failures: undefined,
      deadline: budget === undefined ? undefined : clampTime(from + budget),
    });
  };

  /** Resolves the record's current phase and parameters, or says why it cannot. */
  const resolve = (
    record: TeardownRecord,
  ):
    | { ok: true; phase: PhaseDefinition<O, E, P> | undefined; params: P }
    | { ok: false; reason: string } => {
    if (record.def !== definition.name) {
      return {
        ok: false,
        reason: `the record belongs to teardown "${record.def}", not "${definition.name}"`,
      };
    }
    const params = parseParams(record.params);
    if (!params.ok) return params;
    if (record.phase === COMPLETE_PHASE)
      return { ok: true, phase: undefined, params: params.params };
    const phase = phases[record.idx];
    if (phase === undefined || phase.name !== record.phase) {
      return {
        ok: false,
        reason: `phase "${record.phase}" at position ${record.idx} is not part of teardown "${definition.name}"`,
      };
    }
    return { ok: true, phase, params: params.params };
  };

  const guarded = (fn: () => StepOutcome<E>): StepOutcome<E> => {
    try {
      return fn();
    } catch (error) {
      return {
        kind: "invalid",
        reason: `a callback of teardown "${definition.name}" threw: ${error instanceof Error ? error.message : String(error)}`,
      };
    }
  };

  const wait = (
    record: TeardownRecord,
    status: "waiting" | "held",
    waitingFor: string,
    write: "none" | "update" = "none",
  ): StepResult<E> => ({
    kind: "step",
    status,
    write,
    record,
    effects: [],
    transitions: [],
    waitingFor,
  });

  const claim = (
    record: TeardownRecord,
    phase: PhaseDefinition<O, E, P>,
    params: P,
    now: number,
  ): StepResult<E> => {
    const next = withoutUndefined<TeardownRecord>({
      ...record,
      attempt: record.attempt + 1,
      claimedAt: now,
      issuedAt: undefined,
      deadline: undefined,
    });
    const effects = phase.action?.({ params, record: next }) ?? [];
    return {
      kind: "step",
      status: "issuing",
      write: "update",
      record: effects.length === 0 ? confirm(next, phase, params, now) : next,
      effects,
      transitions: [],
      waitingFor: phase.waitsFor,
    };
  };

  const advance = (
    record: TeardownRecord,
    observation: O,
    params: P,
    reason: TransitionReason,
    now: number,
  ): StepResult<E> => {
    // Holds apply to the next phase that will actually be entered.
    let next = record.idx + 1;
    while (next < phases.length) {
      const phase = phases[next] as PhaseDefinition<O, E, P>;
      if (!phase.skip?.({ params, record: { ...record, phase: phase.name, idx: next } })) break;
      next++;
    }
    const target = phases[next];
    if (target?.hold) {
      const holders = target.hold.holders(observation);
      if (holders.length > 0) {
        const waitingFor = `holders of "${target.name}" to release it: ${holders.join(", ")}`;
        if (record.heldSince === undefined) {
          return wait({ ...record, heldSince: now }, "held", waitingFor, "update");
        }
        const limit = clampMs(target.hold.timeoutMs({ params, record }));
        if (now < record.heldSince + limit) return wait(record, "held", waitingFor);
        return enter(record, params, record.idx + 1, "HoldExpired", now);
      }
    }
    return enter(record, params, record.idx + 1, reason, now);
  };

  return {
    definition,
    start(input, now) {
      return guarded(() => {
        const params = parseParams(input.params);
        if (!params.ok) return { kind: "invalid", reason: params.reason };
        const json = RecordParams.safeParse(params.params);
        if (!json.success) {
          return { kind: "invalid", reason: "parameters must be a JSON object" };
        }
        const base = withoutUndefined<TeardownRecord>({
          v: RECORD_VERSION,
          def: definition.name,
          cause: input.cause,
          uid: input.uid,
          startedAt: now,
          phase: "",
          idx: 0,
          since: now,
          attempt: 0,
          params: json.data,
        });
        return enter(base, params.params, 0, "Started", now);
      });
    },

    step(record, observation, now) {
      return guarded(() => {
        const resolved = resolve(record);
        if (!resolved.ok) return { kind: "invalid", reason: resolved.reason };
        const { phase, params } = resolved;
        if (phase === undefined) {
          return {
            ...wait(record, "waiting", "nothing", "none"),
            status: "complete",
            write: definition.keepCompleted ? "none" : "clear",
          };
        }
        if (record.issuedAt === undefined) {
          // An action that never succeeds still has a deadline: an `advance` phase whose effects
          // were run and failed goes on once its budget, counted from when the phase was entered
          // (its first claim), has passed. A claim that was never run (a crash) does not count.
          if (phase.deadline?.onExpiry === "advance" && (record.failures ?? 0) > 0) {
            const budget = clampMs(phase.deadline.afterMs({ params, record }));
            if (now >= record.since + budget) {
              return advance(record, observation, params, "DeadlineExpired", now);
            }
          }
          const retryAt = (record.claimedAt ?? 0) + clampMs(backoff(record.attempt));
          if (record.claimedAt !== undefined && now < retryAt) {
            return wait(
              record,
              "waiting",
              `its action to be confirmed (attempt ${record.attempt}; next try at ${isoTime(retryAt)})`,
            );
          }
          return claim(record, phase, params, now);
        }
        const done = phase.isDone ? phase.isDone(observation, { params, record }) : true;
        if (done) return advance(record, observation, params, "Done", now);
        if (record.deadline !== undefined && now >= record.deadline) {
          if (phase.deadline?.onExpiry === "reissue") return claim(record, phase, params, now);
          return advance(record, observation, params, "DeadlineExpired", now);
        }
        return wait(record, "waiting", phase.waitsFor);
      });
    },

    acknowledge(record, now) {
      return guarded(() => {
        const resolved = resolve(record);
        if (!resolved.ok) return { kind: "invalid", reason: resolved.reason };
        const { phase, params } = resolved;
        if (phase === undefined || record.issuedAt !== undefined) {
          return wait(record, "waiting", phase?.waitsFor ?? "nothing");
        }
        return {
          ...wait(confirm(record, phase, params, now), "waiting", phase.waitsFor, "update"),
        };
      });
    },

    fail(record, _now) {
      return guarded(() => {
        const resolved = resolve(record);
        if (!resolved.ok) return { kind: "invalid", reason: resolved.reason };
        const { phase } = resolved;
        if (phase === undefined || record.issuedAt !== undefined) {
          return wait(record, "waiting", phase?.waitsFor ?? "nothing");
        }
        const next = { ...record, failures: (record.failures ?? 0) + 1 };
        return wait(next, "waiting", phase.waitsFor, "update");
      });
    },

    describe(record, now) {
      return describeRecord(record, now, phases);
    },
  };
}

function describeRecord(
  record: TeardownRecord,
  now: number,
  phases: readonly { readonly name: string; readonly waitsFor: string }[],
): TeardownSummary {
  const phase = phases[record.idx];
  const complete = record.phase === COMPLETE_PHASE;
  const known = phase !== undefined && phase.name === record.phase;
  const waitingFor = complete
    ? "nothing"
    : !known
      ? "unknown (the phase is not part of this teardown)"
      : record.issuedAt === undefined
        ? `its action to be confirmed (attempt ${record.attempt})`
        : phase.waitsFor;
  const elapsedMs = Math.max(0, now - record.since);
  const parts = [
    `${record.phase} (${Math.min(record.idx + 1, phases.length)}/${phases.length}) for ${formatDuration(elapsedMs)} since ${isoTime(record.since)}`,
    `waiting for ${waitingFor}`,
  ];
  let remainingMs: number | undefined;
  if (record.deadline !== undefined) {
    remainingMs = record.deadline - now;
    parts.push(
      remainingMs >= 0
        ? `deadline in ${formatDuration(remainingMs)} (${isoTime(record.deadline)})`
        : `deadline passed ${formatDuration(-remainingMs)} ago (${isoTime(record.deadline)})`,
    );
  }
  if (record.heldSince !== undefined) parts.push(`held since ${isoTime(record.heldSince)}`);
  parts.push(`cause ${record.cause}`);
  return withoutUndefined({
    phase: record.phase,
    position: { index: Math.min(record.idx + 1, phases.length), of: phases.length },
    since: record.since,
    elapsedMs,
    deadline: record.deadline,
    remainingMs,
    overdue: remainingMs !== undefined && remainingMs < 0,
    actionConfirmed: record.issuedAt !== undefined,
    attempt: record.attempt,
    waitingFor,
    text: parts.join("; "),
  }) as TeardownSummary;
}

function isoTime(ms: number): string {
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? `${ms}ms` : date.toISOString();
}

/** `1h2m3s`, `45s`, `250ms`. */
function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  let seconds = Math.floor(ms / 1000);
  const hours = Math.floor(seconds / 3600);
  seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60);
  seconds -= minutes * 60;
  return `${hours ? `${hours}h` : ""}${hours || minutes ? `${minutes}m` : ""}${seconds}s`;
}

function clampMs(value: number): number {
  return Number.isFinite(value) && value > 0 ? Math.min(Math.floor(value), 8.64e15) : 0;
}

function clampTime(value: number): number {
  return Math.min(Math.max(0, Math.floor(value)), 8.64e15);
}

/** Drops keys whose value is `undefined` (records must not carry them under exactOptionalPropertyTypes). */
function withoutUndefined<T extends object>(value: { [K in keyof T]: T[K] | undefined }): T {
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) if (v !== undefined) out[key] = v;
  return out as T;
}
