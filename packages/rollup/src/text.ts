/**
 * Small text helpers shared by the roll-ups (internal; not exported from the package). Sanitising
 * and cutting status text is `@nebula/state-mapping/text`'s: one copy for both packages.
 *
 * @packageDocumentation
 */

import { sanitize } from "@nebula/state-mapping/text";

export { sanitize, truncate } from "@nebula/state-mapping/text";

/** How many reason groups a message shows before summarising the rest. */
export const MAX_GROUPS = 3;

/** How many instance names a message shows before "... (N more)". */
export const MAX_NAMES = 3;

/** The longest representative instance message carried up, in characters. */
export const MAX_REPRESENTATIVE_MESSAGE_LENGTH = 1024;

/** Kubernetes' maximum length of a condition message. */
export const MAX_CONDITION_MESSAGE_LENGTH = 32768;

/** Compares strings by UTF-16 code units: the same order on every machine and in every locale. */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * `a, b, c, ... (N more)`: the first {@link MAX_NAMES} of `names` (already sorted) and how many
 * of `total` are left out. `total` may exceed `names.length` when some members have no name.
 */
export function listNames(names: readonly string[], total: number): string {
  const shown = names.slice(0, MAX_NAMES);
  const more = total - shown.length;
  return more > 0 ? `${[...shown, "..."].join(", ")} (${more} more)` : shown.join(", ");
}

/** The message as a sentence: trimmed, ending in `.`, `!` or `?` (a `.` is added otherwise). */
export function asSentence(message: string): string {
  const trimmed = message.trim();
  if (trimmed === "") return "";
  return /[.!?]$/.test(trimmed) ? trimmed : `${trimmed}.`;
}

/** A count Kubernetes and people accept: a finite, non-negative integer (anything else is 0). */
export function toCount(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0
    ? Math.min(Math.floor(value), Number.MAX_SAFE_INTEGER)
    : 0;
}

/**
 * Plain text from an optional string: {@link sanitize}d and trimmed, `""` when absent or not a
 * string.
 */
export function toText(value: unknown): string {
  return typeof value === "string" ? sanitize(value).trim() : "";
}

/** A name for a message: {@link sanitize}d, on one line, `""` when not a string. */
export function toName(value: unknown): string {
  return typeof value === "string" ? sanitize(value).replace(/[\t\n\r]/g, " ") : "";
}
