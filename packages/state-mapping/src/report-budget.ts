/**
 * How a report is fitted into the tag channel: one shared message budget spent on the most useful
 * text first, every cut on a UTF-8 character boundary, and a top-level `cut` mark whenever
 * anything was shortened or left out (the console line then carries the whole report). The host
 * writer (`@nebula/userdata`'s supervisor, in bash) applies exactly these rules; a round-trip test
 * compares the two.
 *
 * @packageDocumentation
 */
import { Buffer } from "node:buffer";

/**
 * Bytes of message text, shared by all messages of all containers, that the tag channel carries
 * before it falls back to smaller budgets ({@link TAG_BUDGET_STEPS}).
 */
export const REPORT_TAG_MESSAGE_BUDGET = 1024;

/**
 * The message budgets tried in order until the tag report fits: the full budget, then halves,
 * then no messages at all. After that `last` and the boot timings are dropped, then trailing
 * containers.
 */
export const TAG_BUDGET_STEPS: readonly number[] = [REPORT_TAG_MESSAGE_BUDGET, 512, 256, 0];

/** Waiting reasons that say nothing went wrong (a container on its way to start). */
const QUIET_WAITING: ReadonlySet<string> = new Set(["ContainerCreating", "PodInitializing"]);

/** The fields of a container entry this module reads. */
export interface BudgetContainer {
  readonly state: string;
  readonly reason?: string | undefined;
  readonly exitCode?: number | undefined;
  readonly messageB64?: string | undefined;
  readonly last?:
    | { readonly exitCode: number; readonly messageB64?: string | undefined }
    | undefined;
}

/** One message of a report: whose, which, and from which end it is kept when cut. */
export interface MessageSlot {
  /** Index of the container in the report. */
  readonly container: number;
  /** `current`: the container's own message; `last`: its previous termination's. */
  readonly which: "current" | "last";
  /** Lower is more useful: 0 a failing container's current message, 1 its previous exit's, 2 and 3 the same for healthy containers. */
  readonly rank: number;
  /**
   * `tail` for termination messages (the error is at the end, and the kubelet keeps the end),
   * `head` for waiting messages (they start with what went wrong).
   */
  readonly keep: "head" | "tail";
  /** Length of the decoded message in bytes. */
  readonly bytes: number;
}

/**
 * True when the container is failing: terminated with a non-zero code, waiting for a reason other
 * than starting up, or restarted after a non-zero exit.
 */
function isFailing(container: BudgetContainer): boolean {
  if (container.state === "terminated" && (container.exitCode ?? 0) !== 0) return true;
  if (
    container.state === "waiting" &&
    container.reason !== undefined &&
    !QUIET_WAITING.has(container.reason)
  )
    return true;
  return container.last !== undefined && container.last.exitCode !== 0;
}

/**
 * The report's messages, most useful first: by rank (a failing container's current message, then
 * its previous exit's, then the healthy containers' current and previous messages), then by
 * container order.
 */
export function messageSlots(containers: readonly BudgetContainer[]): MessageSlot[] {
  const slots: MessageSlot[] = [];
  containers.forEach((c, i) => {
    const failing = isFailing(c);
    if (c.messageB64 !== undefined) {
      slots.push({
        container: i,
        which: "current",
        rank: failing ? 0 : 2,
        keep: c.state === "waiting" ? "head" : "tail",
        bytes: b64Bytes(c.messageB64),
      });
    }
    if (c.last?.messageB64 !== undefined) {
      slots.push({
        container: i,
        which: "last",
        rank: failing ? 1 : 3,
        keep: "tail",
        bytes: b64Bytes(c.last.messageB64),
      });
    }
  });
  return slots.sort((a, b) => a.rank - b.rank || a.container - b.container);
}

/**
 * Spends `budget` bytes on the slots in order: each message is kept whole while it fits; the first
 * one that does not is cut to what is left (on a character boundary), and every later one is
 * dropped. Returns the bytes to keep per slot (same order); a value below the slot's size is a cut.
 */
export function allocate(slots: readonly MessageSlot[], budget: number): number[] {
  let left = budget;
  return slots.map((slot) => {
    if (slot.bytes <= left) {
      left -= slot.bytes;
      return slot.bytes;
    }
    const keep = left;
    left = 0;
    return keep;
  });
}

/**
 * The first at most `max` bytes of `bytes`, ending on a UTF-8 character boundary (a cut never
 * splits a character, so no U+FFFD appears when the text is decoded).
 */
export function utf8Head(bytes: Uint8Array, max: number): Uint8Array {
  if (!(bytes instanceof Uint8Array)) return new Uint8Array(0);
  const limit = byteLimit(max);
  if (bytes.length <= limit) return bytes;
  let n = limit;
  // A boundary is where the next byte is not a continuation byte (10xxxxxx).
  // At most 3 steps: a character is at most 4 bytes (invalid text is cut where it is).
  for (let back = 0; n > 0 && back < 3 && isContinuation(bytes[n]); back++) n--;
  return bytes.subarray(0, n);
}

/** The last at most `max` bytes of `bytes`, starting on a UTF-8 character boundary. */
export function utf8Tail(bytes: Uint8Array, max: number): Uint8Array {
  if (!(bytes instanceof Uint8Array)) return new Uint8Array(0);
  const limit = byteLimit(max);
  if (bytes.length <= limit) return bytes;
  let start = bytes.length - limit;
  for (let ahead = 0; start < bytes.length && ahead < 3 && isContinuation(bytes[start]); ahead++)
    start++;
  return bytes.subarray(start);
}

/** A byte count from any `max`: a whole number ≥ 0 (anything else, NaN included, is 0). */
function byteLimit(max: unknown): number {
  return typeof max === "number" && max > 0 ? Math.floor(max) : 0;
}

/** Cuts a base64 message to `max` decoded bytes from the given end; `undefined` when nothing is left. */
export function cutMessage(b64: string, max: number, keep: "head" | "tail"): string | undefined {
  const bytes = Buffer.from(b64, "base64");
  const kept = keep === "head" ? utf8Head(bytes, max) : utf8Tail(bytes, max);
  return kept.length === 0 ? undefined : Buffer.from(kept).toString("base64");
}

function isContinuation(byte: number | undefined): boolean {
  return byte !== undefined && (byte & 0xc0) === 0x80;
}

/** Decoded length of standard base64 text. */
function b64Bytes(b64: string): number {
  const pad = b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0;
  return Math.floor((b64.length * 3) / 4) - pad;
}
