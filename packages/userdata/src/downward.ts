/**
 * The kubelet's text formats for downward-API files: `metadata.labels` and `metadata.annotations`
 * as one `key="value"` line per entry (keys sorted, values quoted as Go's `%q`), as its
 * `fieldpath.FormatMap` writes them.
 */

const NAMED: Readonly<Record<string, string>> = {
  "\x07": "\\a",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
  "\v": "\\v",
  '"': '\\"',
  "\\": "\\\\",
};

/** What Go's `strconv.IsPrint` takes as printable: letters, marks, numbers, punctuation, symbols, ' '. */
const PRINTABLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;

/**
 * A string as Go's `%q` (`strconv.Quote`) prints it: in double quotes, printable characters as
 * they are, `\a` `\b` `\f` `\n` `\r` `\t` `\v` `\\` `\"`, other characters below U+0080 (and
 * U+007F) as `\xHH`, other non-printable ones as `\uHHHH` or `\UHHHHHHHH`. A lone surrogate (no
 * character in UTF-8) is U+FFFD, as Go reads the API server's JSON. Total.
 *
 * @param text - any string.
 */
export function goQuote(text: string): string {
  let out = '"';
  for (const ch of text) {
    let cp = ch.codePointAt(0) ?? 0;
    if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;
    const c = String.fromCodePoint(cp);
    const named = NAMED[c];
    if (named !== undefined) out += named;
    else if (PRINTABLE.test(c)) out += c;
    else if (cp < 0x20 || cp === 0x7f) out += `\\x${cp.toString(16).padStart(2, "0")}`;
    else if (cp < 0x10000) out += `\\u${cp.toString(16).padStart(4, "0")}`;
    else out += `\\U${cp.toString(16).padStart(8, "0")}`;
  }
  return `${out}"`;
}

/**
 * A map as the kubelet writes `metadata.labels` or `metadata.annotations` into a downward-API
 * file: `key="value"` lines (value as {@link goQuote}), keys in byte order (Go's sort of UTF-8
 * strings), joined by newlines, no newline at the end; empty for an empty map. Total.
 *
 * @param map - the labels or annotations.
 */
export function formatDownwardMap(map: Readonly<Record<string, string>>): string {
  return Object.keys(map)
    .sort((a, b) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8")))
    .map((key) => `${key}=${goQuote(String(map[key]))}`)
    .join("\n");
}
