import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { re2Problem } from "./re2.js";

describe("re2Problem", () => {
  it("accepts what RE2 compiles", () => {
    for (const pattern of [
      "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
      "^(?:a|b)+$",
      "^(?i)abc$",
      "^(?P<name>x)$",
      "^(?<name>x)$",
      "[(?=]",
      "\\(?=x\\)",
      "[]a]",
      "[^]a]",
      "\\d{1,3}\\.\\d+",
      "\\\\1",
    ]) {
      expect(re2Problem(pattern), pattern).toBeUndefined();
    }
  });

  it("names the construct RE2 rejects", () => {
    expect(re2Problem("^(?=.{1,253}$)[a-z.]+$")).toBe("look-ahead");
    expect(re2Problem("^(?!-)")).toBe("look-ahead");
    expect(re2Problem("(?<=a)b")).toBe("look-behind");
    expect(re2Problem("(?<!a)b")).toBe("look-behind");
    expect(re2Problem("(a)\\1")).toBe("back-reference");
    expect(re2Problem("(?<q>a)\\k<q>")).toBe("back-reference");
    expect(re2Problem("(?>a)")).toBe("atomic group");
    expect(re2Problem("a*+")).toBe("possessive quantifier");
  });

  it("treats escapes and character classes as literal (property)", () => {
    const safeAtom = fc.constantFrom(
      "a",
      "[a-z]",
      "\\d",
      "(?:ab)",
      "[(?=]",
      "\\(",
      "\\)",
      ".",
      "[]x]",
      "\\\\",
    );
    const quantifier = fc.constantFrom("", "*", "+", "?", "{1,3}");
    fc.assert(
      fc.property(fc.array(fc.tuple(safeAtom, quantifier)), (parts) => {
        const pattern = parts.map(([atom, q]) => atom + q).join("");
        expect(() => new RegExp(pattern)).not.toThrow();
        expect(re2Problem(pattern)).toBeUndefined();
        expect(re2Problem(`${pattern}(?=x)`)).toBe("look-ahead");
      }),
    );
  });

  it("never throws (property)", () => {
    fc.assert(
      fc.property(fc.string(), (pattern) => {
        re2Problem(pattern);
      }),
    );
  });
});
