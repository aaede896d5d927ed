/**
 * Quotes `text` as a bash ANSI-C string (`$'...'`), the form the generated `pod.sh` uses.
 * Every byte outside printable ASCII, plus `\` and `'`, is written as an escape, so the result is
 * one line of plain ASCII that bash turns back into exactly the UTF-8 bytes of `text`.
 * `text` must not contain NUL (no argv or environment string can); callers check that first.
 *
 * @example
 * ```ts
 * bashQuote("it's $(rm -rf /)\n"); // => "$'it\\'s $(rm -rf /)\\x0a'"
 * ```
 */
export function bashQuote(text: string): string {
  let out = "$'";
  for (const byte of Buffer.from(text, "utf8")) {
    if (byte === 0x5c) out += "\\\\";
    else if (byte === 0x27) out += "\\'";
    else if (byte >= 0x20 && byte < 0x7f) out += String.fromCharCode(byte);
    else out += `\\x${byte.toString(16).padStart(2, "0")}`;
  }
  return `${out}'`;
}

/**
 * Quotes `text` for a POSIX shell (`'...'`, with `'` written as `'\''`), for scripts that run
 * inside a container whose `/bin/sh` may be dash or busybox (no `$'...'` there).
 */
export function shQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}
