/**
 * Small text helpers shared by the roll-ups (internal; not exported from the package).
 *
 * @packageDocumentation
 */

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

/**
 * ANSI escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ST`, and two-character
 * `ESC x` sequences), as a terminal would interpret them.
 */
const ANSI_ESCAPE =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
  /\u001b(?:\[[0-?]*[ -/]*[@-~]|\][^\u0007\u001b]*(?:\u0007|\u001b\\|$)|[@-Z\\-_])|\u009b[0-?]*[ -/]*[@-~]/g;

/**
 * Control characters (C0 but tab, line feed and carriage return; DEL; C1) and the Unicode
 * bidirectional overrides and isolates, which can make text display as something it is not.
 */
const CONTROL =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
  /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** Anything {@link sanitize} would change: most text has none, and is returned as it is. */
const SUSPECT =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: a quick test before the replacements.
  /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\ud800-\udfff]/;

/**
 * Text fit for a status: lone surrogates become U+FFFD (what the API server's JSON decoder would
 * make of them, so the stored text equals what was written), ANSI escape sequences are removed,
 * and other control characters and bidirectional overrides are dropped. Tabs and line breaks
 * stay. Idempotent.
 */
export function sanitize(text: string): string {
  if (!SUSPECT.test(text)) return text;
  return text.replace(LONE_SURROGATE, "\ufffd").replace(ANSI_ESCAPE, "").replace(CONTROL, "");
}

/** Grapheme segmenter, made on first use (only long text is cut). */
let graphemes: Intl.Segmenter | undefined;

/**
 * Cuts `text` to at most `max` code points (Kubernetes counts a message's length in code
 * points), ending in `...` when cut. The cut falls on a grapheme boundary, so no emoji,
 * combining accent or surrogate pair is split: cutting again, or storing the result through the
 * API server's JSON, changes nothing.
 */
export function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  let points = 0;
  for (const _ of text) points++;
  if (points <= max) return text;
  const budget = Math.max(0, max - 3);
  graphemes ??= new Intl.Segmenter("en", { granularity: "grapheme" });
  let end = 0;
  let used = 0;
  for (const { segment, index } of graphemes.segment(text)) {
    let size = 0;
    for (const _ of segment) size++;
    if (used + size > budget) break;
    used += size;
    end = index + segment.length;
  }
  return `${text.slice(0, end)}...`;
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
