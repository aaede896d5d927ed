import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseQuantity } from "./quantity.js";

describe("parseQuantity", () => {
  it.each([
    ["500m", 0.5],
    ["2", 2],
    ["512Mi", 512 * 2 ** 20],
    ["1G", 1e9],
    ["1e3", 1000],
    ["1.5Gi", 1.5 * 2 ** 30],
    [4, 4],
  ] as const)("%s", (input, value) => {
    expect(parseQuantity(input)).toBe(value);
  });

  it("is total", () => {
    expect(parseQuantity("lots")).toBeUndefined();
    expect(parseQuantity(-1)).toBeUndefined();
    fc.assert(fc.property(fc.anything(), (v) => void parseQuantity(v)));
  });
});
