import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { jsonEqual } from "./json-equal.js";

/** JSON.stringify with every object's keys sorted: the text jsonEqual compares in effect. */
function canonical(value: unknown): string | undefined {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(
          Object.keys(v)
            .sort()
            .map((k) => [k, (v as Record<string, unknown>)[k]]),
        )
      : v,
  );
}

/** Values like a Pod status: JSON, plus undefined properties, Dates and non-finite numbers. */
const leaf = fc.oneof(
  fc.constantFrom(null, undefined, true, false, 0, -0, 1, Number.NaN, Number.POSITIVE_INFINITY),
  fc.constantFrom("", "a", "b", "Running", "2026-12-02T12:00:00.000Z"),
  fc.integer({ min: -3, max: 3 }),
  fc.constantFrom(
    new Date("2026-12-02T12:00:00.000Z"),
    new Date("2026-12-02T12:00:01.000Z"),
    new Date(Number.NaN),
  ),
);
const value = fc.letrec<{ v: unknown }>((tie) => ({
  v: fc.oneof(
    { depthSize: "small" },
    leaf,
    fc.array(tie("v"), { maxLength: 3 }),
    fc.dictionary(fc.constantFrom("a", "b", "c", "phase"), tie("v"), { maxKeys: 3 }),
  ),
})).v;

/** The same value rebuilt with every object's keys in reverse order. */
function reordered(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(reordered);
  if (v !== null && typeof v === "object" && !(v instanceof Date)) {
    return Object.fromEntries(
      Object.keys(v)
        .reverse()
        .map((k) => [k, reordered((v as Record<string, unknown>)[k])]),
    );
  }
  return v;
}

describe("jsonEqual", () => {
  it("is true exactly when the canonical JSON texts are equal", () => {
    fc.assert(
      fc.property(value, value, (a, b) => {
        expect(jsonEqual(a, b)).toBe(canonical(a) === canonical(b));
      }),
      { numRuns: 2000 },
    );
  });

  it("holds a value equal to itself, to a deep copy and to its keys in another order", () => {
    fc.assert(
      fc.property(value, (a) => {
        expect(jsonEqual(a, a)).toBe(true);
        expect(jsonEqual(a, reordered(a))).toBe(true);
        expect(jsonEqual(reordered(a), a)).toBe(true);
      }),
    );
  });

  it("reads undefined properties as absent, Dates as their ISO text, non-finite numbers as null", () => {
    expect(jsonEqual({ a: 1, b: undefined }, { a: 1 })).toBe(true);
    expect(jsonEqual({ a: 1 }, { a: 1, b: undefined })).toBe(true);
    expect(
      jsonEqual({ t: new Date("2026-12-02T12:00:00Z") }, { t: "2026-12-02T12:00:00.000Z" }),
    ).toBe(true);
    expect(jsonEqual([undefined], [null])).toBe(true);
    expect(jsonEqual({ n: Number.NaN }, { n: null })).toBe(true);
    expect(jsonEqual({ a: 1 }, { a: 2 })).toBe(false);
    expect(jsonEqual({ a: null }, {})).toBe(false);
    expect(jsonEqual([1, 2], [2, 1])).toBe(false);
    expect(jsonEqual(undefined, null)).toBe(false);
    expect(jsonEqual({ a: [] }, { a: {} })).toBe(false);
  });
});
