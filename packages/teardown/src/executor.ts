/**
 * The executor: the I/O shell around the pure core. It reads a record from a
 * {@link TeardownStore}, observes the world through a caller-supplied function, asks the core for
 * the next step, writes it with compare-and-swap, and only then runs the step's effects through
 * the caller's handlers. It keeps no state between calls: everything lives in the store.
 *
 * @packageDocumentation
 */
import type {
  EffectDescription,
  StartInput,
  StepOutcome,
  StepResult,
  Teardown,
  TeardownTransition,
} from "./machine.js";
import { decodeRecord, encodeRecord, type TeardownRecord } from "./record.js";
import type { StoreSnapshot, TeardownStore } from "./store.js";

/** Machine-readable codes of {@link TeardownError}. */
export type TeardownErrorCode =
  /** The store could not be read or written (transport failure). */
  | "StoreFailed"
  /** The observation callback threw. */
  | "ObserveFailed"
  /** An effect handler threw or rejected. */
  | "EffectFailed"
  /** No handler is registered for an effect's kind. */
  | "NoHandler";

/** An operational failure the executor reports (it never throws it). */
export class TeardownError extends Error {
  /** Machine-readable code. */
  readonly code: TeardownErrorCode;
  override readonly name = "TeardownError";
  constructor(code: TeardownErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** What an effect handler receives besides the effect. */
interface EffectContext {
  /** The subject's key in the store. */
  readonly key: string;
  /** The record as written just before the effect was run. */
  readonly record: TeardownRecord;
}

/**
 * One handler per effect kind. A handler must be idempotent (it may run more than once for the
 * same phase, after a crash or a lost confirmation) and should treat "already done" (404, already
 * stopped) as success. Throwing or rejecting leaves the phase's action unconfirmed, to be claimed
 * and run again on the next tick.
 */
type EffectHandlers<E extends EffectDescription> = {
  readonly [K in E["kind"]]: (
    effect: Extract<E, { kind: K }>,
    ctx: EffectContext,
  ) => Promise<void> | void;
};

/** What the observation callback receives. */
export interface ObserveInput {
  /** The subject's key. */
  readonly key: string;
  /** The current record. */
  readonly record: TeardownRecord;
  /** The subject as the store returned it. */
  readonly subject: unknown;
}

/** Something observers may want to know: report it as a Kubernetes Event, a metric, a log line. */
export type TeardownEvent =
  /** A phase change was durably written. */
  | {
      readonly type: "transition";
      readonly key: string;
      readonly transition: TeardownTransition;
      readonly record: TeardownRecord;
    }
  /** A phase's action was claimed and its effects are about to run. */
  | {
      readonly type: "issuing";
      readonly key: string;
      readonly phase: string;
      readonly attempt: number;
      readonly effects: readonly EffectDescription[];
    }
  /** External holders keep the next phase from starting. */
  | { readonly type: "held"; readonly key: string; readonly waitingFor: string }
  /** Another writer changed the subject first; nothing was done, the next tick retries. */
  | { readonly type: "conflict"; readonly key: string; readonly phase: string }
  /** An effect, an observation or the store failed; the next tick retries. */
  | { readonly type: "error"; readonly key: string; readonly error: TeardownError }
  /** The stored record cannot be acted on. */
  | { readonly type: "invalid"; readonly key: string; readonly reason: string };

/** The result of one executor call. */
export type TickResult =
  /** The subject does not exist: nothing left to tear down. */
  | { readonly status: "absent" }
  /** The subject carries no record: no teardown in progress. */
  | { readonly status: "idle" }
  /** The record cannot be acted on (see `reason`); nothing was done. */
  | { readonly status: "invalid"; readonly reason: string }
  /** The record belongs to another incarnation of the subject (UID differs); nothing was done. */
  | { readonly status: "foreign"; readonly reason: string }
  /** Nothing to do until the observation or a deadline changes. */
  | {
      readonly status: "waiting" | "held";
      readonly record: TeardownRecord;
      readonly waitingFor: string;
    }
  /** Progress was written (and effects, if any, ran and were confirmed). */
  | { readonly status: "progressed"; readonly record: TeardownRecord }
  /** Every phase is done and the record was cleared. */
  | { readonly status: "complete"; readonly record: TeardownRecord }
  /** A compare-and-swap write lost; nothing else was done after it. */
  | { readonly status: "conflict" }
  /** Something failed; see `error`. The next tick retries. */
  | { readonly status: "error"; readonly error: TeardownError };

/** Options of {@link TeardownExecutor}. */
export interface ExecutorOptions<O, E extends EffectDescription, P> {
  /** The teardown, from `defineTeardown`. */
  readonly teardown: Teardown<O, E, P>;
  /** Where records live. */
  readonly store: TeardownStore;
  /** One handler per effect kind. */
  readonly handlers: EffectHandlers<E>;
  /** Observes the world for the current phase (instance state, whether objects still exist). */
  readonly observe: (input: ObserveInput) => Promise<NoInfer<O>> | NoInfer<O>;
  /** The clock, in milliseconds since the epoch. Default `Date.now`. */
  readonly now?: () => number;
  /** Receives every {@link TeardownEvent}. Must not throw (exceptions are swallowed). */
  readonly onEvent?: (event: TeardownEvent) => void;
}

/**
 * Runs a teardown against a store: `request` records the intent, `tick` moves it forward by one
 * step. Call `tick` from a reconcile loop; after a crash, a fresh executor resumes from the stored
 * record. Never throws: every failure is a {@link TickResult} and an event.
 *
 * Safety: effects run only after the write that claims them succeeded, so a writer that lost a
 * compare-and-swap never acts on its stale view; it returns `conflict` and the next tick re-reads.
 *
 * @example
 * ```ts
 * const executor = new TeardownExecutor({ teardown, store, handlers, observe });
 * await executor.request("default/web-0", { params, cause: "DeletionRequested" });
 * for (;;) {
 *   const result = await executor.tick("default/web-0");
 *   if (result.status === "complete" || result.status === "absent") break;
 *   await sleep(1000);
 * }
 * ```
 */
export class TeardownExecutor<O, E extends EffectDescription, P> {
  readonly #options: ExecutorOptions<O, E, P>;
  readonly #now: () => number;

  constructor(options: ExecutorOptions<O, E, P>) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Records the intent to tear the subject down (the first phase, written before any effect), then
   * runs that phase's action. If a teardown is already recorded, this is a {@link tick} instead, so
   * repeated requests resume rather than restart.
   */
  async request(key: string, input: StartInput): Promise<TickResult> {
    const snapshot = await this.#read(key);
    if ("status" in snapshot) return snapshot;
    if (!snapshot.found) return { status: "absent" };
    if (snapshot.record !== undefined) return this.#advance(key, snapshot);
    const uid = input.uid ?? snapshot.uid;
    const started = this.#options.teardown.start(
      uid === undefined ? input : { ...input, uid },
      this.#now(),
    );
    return this.#apply(key, snapshot, started, "");
  }

  /** Moves the subject's teardown forward by one step (at most one phase change). */
  async tick(key: string): Promise<TickResult> {
    const snapshot = await this.#read(key);
    if ("status" in snapshot) return snapshot;
    if (!snapshot.found) return { status: "absent" };
    if (snapshot.record === undefined) return { status: "idle" };
    return this.#advance(key, snapshot);
  }

  /**
   * Ticks until the teardown waits, completes, conflicts or fails, at most `maxTicks` times.
   * Handy where no reconcile loop exists (a CLI, a test); a controller calls {@link tick}.
   */
  async settle(key: string, maxTicks = 64): Promise<TickResult> {
    let result: TickResult = { status: "idle" };
    for (let i = 0; i < maxTicks; i++) {
      result = await this.tick(key);
      if (result.status !== "progressed") return result;
    }
    return result;
  }

  async #advance(
    key: string,
    snapshot: Extract<StoreSnapshot, { found: true }>,
  ): Promise<TickResult> {
    const decoded = decodeRecord(snapshot.record);
    if (!decoded.ok) return this.#invalid(key, decoded.reason);
    const record = decoded.record;
    if (record.uid !== undefined && snapshot.uid !== undefined && record.uid !== snapshot.uid) {
      return {
        status: "foreign",
        reason: `the record was written for UID ${record.uid}, but the subject is ${snapshot.uid}`,
      };
    }
    let observation: O;
    try {
      observation = await this.#options.observe({ key, record, subject: snapshot.subject });
    } catch (cause) {
      return this.#error(key, "ObserveFailed", `observing ${key} failed`, cause);
    }
    const outcome = this.#options.teardown.step(record, observation, this.#now());
    return this.#apply(key, snapshot, outcome, record.phase);
  }

  async #apply(
    key: string,
    snapshot: Extract<StoreSnapshot, { found: true }>,
    outcome: StepOutcome<E>,
    phase: string,
  ): Promise<TickResult> {
    if (outcome.kind === "invalid") return this.#invalid(key, outcome.reason);
    if (outcome.write === "none" && outcome.status === "complete") {
      return { status: "complete", record: outcome.record };
    }
    if (outcome.write === "none") {
      if (outcome.status === "held")
        this.#emit({ type: "held", key, waitingFor: outcome.waitingFor });
      return {
        status: outcome.status === "held" ? "held" : "waiting",
        record: outcome.record,
        waitingFor: outcome.waitingFor,
      };
    }
    const written = await this.#write(key, outcome, snapshot.version, snapshot.uid, phase);
    if (written.status !== "written") return written.result;
    for (const transition of outcome.transitions) {
      this.#emit({ type: "transition", key, transition, record: outcome.record });
    }
    if (outcome.write === "clear" || outcome.status === "complete") {
      return { status: "complete", record: outcome.record };
    }
    if (outcome.status === "held") {
      this.#emit({ type: "held", key, waitingFor: outcome.waitingFor });
      return { status: "held", record: outcome.record, waitingFor: outcome.waitingFor };
    }
    if (outcome.effects.length === 0) return { status: "progressed", record: outcome.record };
    return this.#runEffects(key, outcome, written.version, snapshot.uid);
  }

  async #runEffects(
    key: string,
    step: StepResult<E>,
    version: string,
    uid: string | undefined,
  ): Promise<TickResult> {
    const { record } = step;
    this.#emit({
      type: "issuing",
      key,
      phase: record.phase,
      attempt: record.attempt,
      effects: step.effects,
    });
    let failure: TeardownError | undefined;
    for (const effect of step.effects) {
      const handler = (
        this.#options.handlers as unknown as Record<
          string,
          ((effect: E, ctx: EffectContext) => Promise<void> | void) | undefined
        >
      )[effect.kind];
      if (handler === undefined) {
        failure ??= this.#report(key, "NoHandler", `no handler for effect ${effect.kind}`);
        continue;
      }
      try {
        await handler(effect, { key, record });
      } catch (cause) {
        // Keep going: effects of one phase are independent, and each failure is reported.
        failure ??= this.#report(
          key,
          "EffectFailed",
          `effect ${effect.kind} of phase ${record.phase} failed`,
          cause,
        );
      }
    }
    if (failure) {
      // Durable proof that the action was attempted and refused (its deadline may then pass it).
      const failed = this.#options.teardown.fail(record, this.#now());
      if (failed.kind === "step" && failed.write === "update") {
        await this.#write(key, failed, version, uid, record.phase);
      }
      return { status: "error", error: failure };
    }
    const confirmed = this.#options.teardown.acknowledge(record, this.#now());
    if (confirmed.kind === "invalid") return this.#invalid(key, confirmed.reason);
    if (confirmed.write === "none") return { status: "progressed", record };
    const written = await this.#write(key, confirmed, version, uid, record.phase);
    if (written.status !== "written") return written.result;
    return { status: "progressed", record: confirmed.record };
  }

  async #read(key: string): Promise<StoreSnapshot | { status: "error"; error: TeardownError }> {
    try {
      return await this.#options.store.read(key);
    } catch (cause) {
      return this.#error(key, "StoreFailed", `reading ${key} failed`, cause);
    }
  }

  async #write(
    key: string,
    step: StepResult<E>,
    version: string,
    uid: string | undefined,
    phase: string,
  ): Promise<{ status: "written"; version: string } | { status: "failed"; result: TickResult }> {
    try {
      const change =
        step.write === "clear"
          ? { record: null, ...(step.subject ? { subject: step.subject } : {}) }
          : {
              record: encodeRecord(step.record),
              ...(step.subject ? { subject: step.subject } : {}),
            };
      const outcome = await this.#options.store.write(key, change, version, uid);
      if (outcome.status === "written") return outcome;
      if (outcome.status === "gone") {
        // The subject vanished (or was replaced) under us; with `clear` that is completion.
        return step.write === "clear" || step.status === "complete"
          ? { status: "failed", result: { status: "complete", record: step.record } }
          : { status: "failed", result: { status: "absent" } };
      }
      this.#emit({ type: "conflict", key, phase: phase || step.record.phase });
      return { status: "failed", result: { status: "conflict" } };
    } catch (cause) {
      return {
        status: "failed",
        result: this.#error(key, "StoreFailed", `writing ${key} failed`, cause),
      };
    }
  }

  #invalid(key: string, reason: string): TickResult {
    this.#emit({ type: "invalid", key, reason });
    return { status: "invalid", reason };
  }

  #report(key: string, code: TeardownErrorCode, message: string, cause?: unknown): TeardownError {
    const error = new TeardownError(code, message, { cause });
    this.#emit({ type: "error", key, error });
    return error;
  }

  #error(
    key: string,
    code: TeardownErrorCode,
    message: string,
    cause?: unknown,
  ): { status: "error"; error: TeardownError } {
    return { status: "error", error: this.#report(key, code, message, cause) };
  }

  #emit(event: TeardownEvent): void {
    try {
      this.#options.onEvent?.(event);
    } catch {
      // Observers must not break the teardown.
    }
  }
}
