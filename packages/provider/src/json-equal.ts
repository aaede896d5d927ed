/**
 * Equality of two values as JSON would write them, without writing them: `jsonEqual(a, b)` is
 * true exactly when `JSON.stringify` of both, with every object's keys in one order, is the same
 * text. Object keys in another order are equal; a property whose value is `undefined` (or a
 * function or symbol) counts as absent, as JSON leaves it out; a `Date` compares as the text its
 * `toJSON` writes (two Dates by their time, without writing either); anything else with `toJSON`
 * as what that returns; `NaN` and the infinities as `null`.
 *
 * The poll compares every Pod's status with the one last delivered; this walks both once and stops
 * at the first difference, where serializing both cost more per Pod than everything else the
 * provider does with it (measured in the poll-cycle bench's CPU profile).
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  return same(toJson(a, ""), toJson(b, ""));
}

/**
 * A value as `JSON.stringify` sees it before writing it: `toJSON` applied once (except on a Date,
 * which {@link same} compares by its time), boxed primitives unboxed, non-finite numbers null.
 */
function toJson(value: unknown, key: string): unknown {
  if (typeof value === "number") return Number.isFinite(value) ? value : null;
  if (typeof value !== "object" || value === null || value instanceof Date) return value;
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") return toJson(toJSON.call(value, key), key);
  if (value instanceof Number || value instanceof String || value instanceof Boolean) {
    return toJson(value.valueOf(), key);
  }
  return value;
}

/** True for what JSON leaves out of an object (and writes as `null` in an array). */
function omitted(value: unknown): boolean {
  return value === undefined || typeof value === "function" || typeof value === "symbol";
}

/** What JSON writes for a Date: its ISO text, or null for an invalid one. */
function dateText(date: Date): string | null {
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

function same(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a instanceof Date || b instanceof Date) {
    if (a instanceof Date && b instanceof Date) {
      const x = a.getTime();
      const y = b.getTime();
      return x === y || (Number.isNaN(x) && Number.isNaN(y));
    }
    return same(a instanceof Date ? dateText(a) : a, b instanceof Date ? dateText(b) : b);
  }
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) {
      const x = toJson(a[i], String(i));
      const y = toJson(b[i], String(i));
      if (!same(omitted(x) ? null : x, omitted(y) ? null : y)) return false;
    }
    return true;
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  let count = 0;
  for (const key in left) {
    if (!Object.hasOwn(left, key)) continue;
    const x = toJson(left[key], key);
    if (omitted(x)) continue;
    count++;
    if (!Object.hasOwn(right, key)) return false;
    const y = toJson(right[key], key);
    if (omitted(y) || !same(x, y)) return false;
  }
  // Every key written on the left is on the right, written and equal; equal when the right
  // writes no more keys than that.
  for (const key in right) {
    if (!Object.hasOwn(right, key)) continue;
    const y = right[key];
    if (y instanceof Date || !omitted(toJson(y, key))) count--;
  }
  return count === 0;
}
