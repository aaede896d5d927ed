import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { statusChanged } from "./condition.js";
import { rollupWorkloadDeployment } from "./deployment.js";
import { asSentence, listNames, sanitize, toCount, toText, truncate } from "./text.js";

/** Lone surrogates (what the API server turns into U+FFFD). */
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * What storing a value through the API server does to it: JSON, with every string made
 * well-formed (Go's encoding/json decodes a lone surrogate escape as U+FFFD).
 */
function throughApiServer<T>(value: T): T {
  return JSON.parse(
    JSON.stringify(value, (_key, v) => (typeof v === "string" ? v.replace(LONE, "\ufffd") : v)),
  ) as T;
}

/** Text with everything that breaks naive cutting: emoji, ZWJ sequences, accents, escapes. */
const nastyText = fc
  .array(
    fc.oneof(
      fc.constantFrom(
        "😀",
        "👩‍👩‍👧",
        "e\u0301",
        "🇫🇷",
        "\ud83d",
        "\ude00",
        "\u001b[31m",
        "\u0000",
        "\u202e",
        "\n",
      ),
      fc.string({ maxLength: 5 }),
    ),
    { maxLength: 400 },
  )
  .map((parts) => parts.join(""));

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

  it("cuts on grapheme boundaries: no emoji, flag or accent is split", () => {
    expect(truncate("👩‍👩‍👧".repeat(3), 12)).toBe("👩‍👩‍👧...");
    expect(truncate("e\u0301".repeat(5), 6)).toBe("e\u0301...");
    expect(truncate("🇫🇷🇫🇷🇫🇷", 5)).toBe("🇫🇷...");
  });

  it("is a fixed point through the API server: cutting again or storing changes nothing", () => {
    fc.assert(
      fc.property(nastyText, fc.integer({ min: 3, max: 300 }), (text, max) => {
        const once = truncate(sanitize(text), max);
        expect([...once].length).toBeLessThanOrEqual(Math.max(max, 3));
        expect(truncate(once, max)).toBe(once);
        expect(throughApiServer(once)).toBe(once);
      }),
    );
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

describe("sanitize", () => {
  it("removes ANSI escapes, control characters and bidi overrides, and mends lone surrogates", () => {
    expect(sanitize("\u001b[1;31mred\u001b[0m \u001b]0;title\u0007ok")).toBe("red ok");
    expect(sanitize("a\u0000b\u0007c\u007fd\u0085e")).toBe("abcde");
    expect(sanitize("evil\u202ecode")).toBe("evilcode");
    expect(sanitize("tab\tline\nend")).toBe("tab\tline\nend");
    expect(sanitize("x\ud83dy")).toBe("x\ufffdy");
    expect(sanitize("plain 😀 text")).toBe("plain 😀 text");
  });

  it("is idempotent", () => {
    fc.assert(
      fc.property(nastyText, (text) => {
        expect(sanitize(sanitize(text))).toBe(sanitize(text));
      }),
    );
  });
});

describe("a roll-up is a fixed point through the API server", () => {
  it("storing the status and rolling up again writes nothing, whatever the messages hold", () => {
    fc.assert(
      fc.property(nastyText, nastyText, fc.nat(3), (message, name, desired) => {
        const input = {
          desiredReplicas: desired,
          generation: 1,
          instances: [
            { name, ready: false, reason: "InstanceCrashing", message },
            {
              name: `${name}x`,
              ready: false,
              reason: "OutOfMemory",
              message: `${message}${message}`,
            },
          ],
        };
        const now = new Date("2026-11-30T05:00:00Z");
        const status = rollupWorkloadDeployment(input, { now });
        const stored = throughApiServer(status);
        expect(stored).toEqual(status);
        const again = rollupWorkloadDeployment(input, { now, previous: stored.conditions });
        expect(statusChanged(stored, again)).toBe(false);
      }),
    );
  });
});
