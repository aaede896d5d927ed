import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { microTime } from "./event-recorder.js";

describe("microTime", () => {
  it("writes exactly six fractional digits in UTC", () => {
    expect(microTime(Date.parse("2026-11-30T15:25:52.545Z"))).toBe("2026-11-30T15:25:52.545000Z");
    expect(microTime(Date.parse("2026-11-30T15:25:52Z"))).toBe("2026-11-30T15:25:52.000000Z");
  });

  it("always matches the API server's MicroTime layout and round-trips to the millisecond (property)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 253402300799999 }), (ms) => {
        const text = microTime(ms);
        expect(text).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
        expect(Date.parse(text)).toBe(ms);
      }),
    );
  });
});
