/**
 * Text that reaches a Pod status or a roll-up message: sanitised (no control characters, no ANSI
 * escapes, no bidirectional overrides, no lone surrogates) and cut on grapheme boundaries, so
 * that storing it through the API server's JSON changes nothing and an unchanged world writes
 * nothing. Internal; not exported from the package.
 *
 * @packageDocumentation
 */

/**
 * ANSI escape sequences (CSI `ESC [ ... final`, OSC `ESC ] ... BEL|ST`, two-character `ESC x`
 * sequences, and the one-byte C1 CSI), as a terminal would interpret them.
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
 * Text fit for a status: lone surrogates become U+FFFD (what the API server's JSON decoder makes
 * of them), ANSI escape sequences are removed, other control characters and bidirectional
 * overrides are dropped. Tabs and line breaks stay. Idempotent.
 */
export function sanitize(text: string): string {
  if (!SUSPECT.test(text)) return text;
  return text.replace(LONE_SURROGATE, "\ufffd").replace(ANSI_ESCAPE, "").replace(CONTROL, "");
}

let graphemes: Intl.Segmenter | undefined;

/**
 * Cuts `text` to at most `max` code points, ending in `...` when cut. The cut falls on a
 * grapheme boundary, so no emoji, flag, combining accent or surrogate pair is split: cutting
 * again, or storing the result through the API server, changes nothing.
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

/** {@link sanitize}, then {@link truncate} to `max` code points. */
export function statusText(text: string, max: number): string {
  return truncate(sanitize(text), max);
}

/** The largest value of a Kubernetes `int32` field (`restartCount`, `exitCode`). */
const MAX_INT32 = 2147483647;

/** A count for an `int32` status field: a non-negative integer, at most {@link MAX_INT32}. */
export function int32Count(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0
    ? Math.min(Math.floor(value), MAX_INT32)
    : 0;
}
