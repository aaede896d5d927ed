/**
 * The durable teardown record: everything needed to resume a teardown after a crash, and nothing
 * else. It is persisted as one compact JSON string (a Kubernetes annotation value, for example),
 * parsed with zod on every read, and versioned by its `v` field.
 *
 * @packageDocumentation
 */
import { z } from "zod";

/** The record format version this package writes and reads. */
export const RECORD_VERSION = 1;

/**
 * A record's durable parameters: identities and settings fixed when the teardown starts
 * (instance IDs, UIDs, grace periods). JSON values only; each teardown definition narrows them
 * with its own zod schema.
 */
export const RecordParams = z.record(z.string(), z.json());

const millis = z.number().int().min(0).max(8.64e15);

/**
 * The zod schema of a teardown record, format version 1.
 *
 * Times are milliseconds since the Unix epoch, as handed to the pure core by its caller (the core
 * never reads a clock). Unknown fields are rejected, so a record written by a newer, incompatible
 * writer reads as invalid instead of being half-understood.
 */
export const TeardownRecord = z.strictObject({
  /** Format version: {@link RECORD_VERSION}. */
  v: z.literal(RECORD_VERSION),
  /** Name of the teardown definition that wrote the record (for example `nebula.dev/pod`). */
  def: z.string().min(1).max(128),
  /** Why the teardown started, in CamelCase (for example `DeletionRequested`). */
  cause: z.string().min(1).max(128),
  /** UID of the subject the record belongs to; a store refuses to act on another object's record. */
  uid: z.string().min(1).max(128).optional(),
  /** When the teardown was requested (the intent was first recorded). */
  startedAt: millis,
  /** Name of the current phase, or `"complete"` once every phase is done. */
  phase: z.string().min(1).max(63),
  /** Index of the current phase in the definition (never decreases). */
  idx: z.number().int().min(0).max(1000),
  /** When the current phase was durably entered. */
  since: millis,
  /** How many times the current phase's action has been claimed for execution. */
  attempt: z.number().int().min(0),
  /**
   * When the action was last claimed (written before its effects run); an unconfirmed claim is
   * retried only after a back-off. Cleared on confirmation, when the deadline is fixed from it.
   */
  claimedAt: millis.optional(),
  /**
   * When the current phase's action was confirmed done (every effect succeeded), or, for a phase
   * without an action, when it was entered. Absent while the action still has to be (re)issued.
   */
  issuedAt: millis.optional(),
  /**
   * The current phase's deadline, fixed when its action was confirmed: the claim time
   * (`claimedAt`, recorded before the effects ran) plus the phase's budget; for a phase without an
   * action, its entry time plus the budget.
   */
  deadline: millis.optional(),
  /**
   * How many times the current phase's effects were run and failed since it was entered (reported
   * durably by the executor): proof that the action was really attempted, which an `advance`
   * deadline needs before it goes on without the action ever succeeding.
   */
  failures: z.number().int().min(0).optional(),
  /** When external holders were first seen holding the next phase (hooks). */
  heldSince: millis.optional(),
  /** Durable parameters of this teardown. */
  params: RecordParams,
});

/** A parsed teardown record. */
export type TeardownRecord = z.infer<typeof TeardownRecord>;

/** The phase name a record carries once every phase is done. */
export const COMPLETE_PHASE = "complete";

/**
 * What decoding a stored record gave: a record, or a reason it could not be read. Never an
 * exception.
 */
export type RecordReadResult =
  | { readonly ok: true; readonly record: TeardownRecord }
  | { readonly ok: false; readonly reason: string };

/**
 * Serializes a record to the compact JSON string that gets stored (no whitespace, absent optional
 * fields omitted).
 *
 * @example
 * ```ts
 * store.write(key, { record: encodeRecord(record) }, version);
 * ```
 */
export function encodeRecord(record: TeardownRecord): string {
  return JSON.stringify(record);
}

/**
 * Parses a stored record string. Total: any input, including `undefined`, malformed JSON, a record
 * of a future format version or a record with unknown fields, gives a result with a reason.
 */
export function decodeRecord(text: unknown): RecordReadResult {
  if (typeof text !== "string") {
    return { ok: false, reason: `the stored record is a ${typeof text}, not a string` };
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, reason: "the stored record is not valid JSON" };
  }
  if (typeof json === "object" && json !== null && "v" in json && json.v !== RECORD_VERSION) {
    return {
      ok: false,
      reason: `the stored record has format version ${String(json.v)}; this reader knows ${RECORD_VERSION}`,
    };
  }
  const parsed = TeardownRecord.safeParse(json);
  if (!parsed.success) {
    return { ok: false, reason: `the stored record is invalid: ${z.prettifyError(parsed.error)}` };
  }
  return { ok: true, record: parsed.data };
}
