import { describe, expect, it } from "vitest";
import { asSentence, listNames, toCount, toText, truncate } from "./text.js";

describe("listNames", () => {
  it("lists up to three names", () => {
    expect(listNames(["a"], 1)).toBe("a");
    expect(listNames(["a", "b", "c"], 3)).toBe("a, b, c");
  });

  it('summarises the rest as "... (N more)"', () => {
    expect(listNames(["a", "b", "c", "d", "e"], 5)).toBe("a, b, c, ... (2 more)");
    expect(listNames(["a"], 3)).toBe("a, ... (2 more)");
  });
});

describe("asSentence", () => {
  it("ends a message with a period unless it already ends a sentence", () => {
    expect(asSentence("it broke")).toBe("it broke.");
    expect(asSentence(" it broke. ")).toBe("it broke.");
    expect(asSentence("really?")).toBe("really?");
    expect(asSentence("   ")).toBe("");
  });
});

describe("truncate", () => {
  it("keeps short text and cuts long text with an ellipsis", () => {
    expect(truncate("abc", 5)).toBe("abc");
    expect(truncate("abcdefgh", 5)).toBe("ab...");
  });

  it("never splits a surrogate pair", () => {
    const text = "😀".repeat(10);
    const cut = truncate(text, 5);
    expect(cut).toBe(`${"😀".repeat(2)}...`);
  });
});

describe("toCount / toText", () => {
  it("turns anything that is not a finite non-negative number into 0", () => {
    expect([3, 2.7, -1, Number.NaN, Number.POSITIVE_INFINITY, "4", undefined].map(toCount)).toEqual(
      [3, 2, 0, 0, 0, 0, 0],
    );
  });

  it("turns anything that is not a string into empty text", () => {
    expect([" a ", 1, null].map(toText)).toEqual(["a", "", ""]);
  });
});
