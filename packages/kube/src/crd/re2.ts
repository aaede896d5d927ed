/**
 * A check that a JavaScript regular expression source is one Go's RE2 (`regexp`) also compiles:
 * the API server compiles every `pattern` of a CRD schema with it.
 *
 * @packageDocumentation
 */

/** Why a pattern is not RE2-compatible. */
export type Re2Problem =
  | "look-ahead"
  | "look-behind"
  | "back-reference"
  | "atomic group"
  | "possessive quantifier";

/**
 * The first construct in `pattern` that Go's RE2 cannot compile (look-around, back-reference,
 * atomic group, possessive quantifier), or `undefined` when there is none. Character classes and
 * escapes are skipped correctly (`[(?=]` and `\(?=` are literal). Total: never throws.
 *
 * @example
 * ```ts
 * re2Problem("^[a-z]+$");     // undefined
 * re2Problem("^(?=.{1,253})"); // "look-ahead"
 * re2Problem("(a)\\1");        // "back-reference"
 * ```
 */
export function re2Problem(pattern: string): Re2Problem | undefined {
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\") {
      const next = pattern[i + 1] ?? "";
      if (!inClass && /[1-9]/.test(next)) return "back-reference";
      if (!inClass && next === "k" && pattern[i + 2] === "<") return "back-reference";
      i += 1;
      continue;
    }
    if (inClass) {
      if (c === "]") inClass = false;
      continue;
    }
    if (c === "[") {
      inClass = true;
      // A `]` right after `[` or `[^` is a literal member.
      if (pattern[i + 1] === "^") i += 1;
      if (pattern[i + 1] === "]") i += 1;
      continue;
    }
    if (c === "(" && pattern[i + 1] === "?") {
      const rest = pattern.slice(i + 2, i + 4);
      if (rest.startsWith("=") || rest.startsWith("!")) return "look-ahead";
      if (rest === "<=" || rest === "<!") return "look-behind";
      if (rest.startsWith(">")) return "atomic group";
      continue;
    }
    if ((c === "*" || c === "+" || c === "?" || c === "}") && pattern[i + 1] === "+") {
      // `a*+` is possessive in PCRE (and a syntax error in JS); RE2 rejects it.
      return "possessive quantifier";
    }
  }
  return undefined;
}
