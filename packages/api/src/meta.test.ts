import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { isEmptySelector, LabelSelector, matchesSelector, selectorToString } from "./index.js";
import { isLabelKey, isLabelValue } from "./meta.js";

describe("label keys and values", () => {
  it.each(["app", "nebula.dev/placement", "a_b.c-d", "A1"])("accepts key %s", (k) => {
    expect(isLabelKey(k)).toBe(true);
  });
  it.each(["", "-app", "a b", "Nebula.dev/x", "a/b/c", `${"x".repeat(64)}`])(
    "rejects key %j",
    (k) => {
      expect(isLabelKey(k)).toBe(false);
    },
  );
  it("accepts an empty value and rejects a long one", () => {
    expect(isLabelValue("")).toBe(true);
    expect(isLabelValue("x".repeat(63))).toBe(true);
    expect(isLabelValue("x".repeat(64))).toBe(false);
    expect(isLabelValue("a b")).toBe(false);
  });
});

describe("matchesSelector", () => {
  const labels = { app: "web", tier: "front" };

  it.each([
    [{}, true],
    [{ matchLabels: { app: "web" } }, true],
    [{ matchLabels: { app: "api" } }, false],
    [{ matchExpressions: [{ key: "tier", operator: "In", values: ["front", "back"] }] }, true],
    [{ matchExpressions: [{ key: "tier", operator: "NotIn", values: ["front"] }] }, false],
    [{ matchExpressions: [{ key: "zone", operator: "NotIn", values: ["a"] }] }, true],
    [{ matchExpressions: [{ key: "zone", operator: "Exists" }] }, false],
    [{ matchExpressions: [{ key: "zone", operator: "DoesNotExist" }] }, true],
    [
      { matchLabels: { app: "web" }, matchExpressions: [{ key: "app", operator: "DoesNotExist" }] },
      false,
    ],
  ] as const)("%j → %s", (selector, expected) => {
    expect(matchesSelector(LabelSelector.parse(selector), labels)).toBe(expected);
  });

  it("an object without labels matches only selectors without positive requirements", () => {
    expect(matchesSelector({}, undefined)).toBe(true);
    expect(matchesSelector({ matchLabels: { app: "web" } }, undefined)).toBe(false);
  });

  it("a selector built from an object's own labels always matches it (property)", () => {
    const key = fc.constantFrom("app", "tier", "nebula.dev/placement", "zone");
    const value = fc.constantFrom("web", "api", "eu", "");
    fc.assert(
      fc.property(fc.dictionary(key, value), fc.dictionary(key, value), (own, extra) => {
        const object = { ...extra, ...own };
        expect(matchesSelector({ matchLabels: own }, object)).toBe(true);
      }),
    );
  });
});

describe("selectorToString", () => {
  it("writes the labelSelector query of a list or watch", () => {
    expect(
      selectorToString({
        matchLabels: { app: "web" },
        matchExpressions: [
          { key: "tier", operator: "In", values: ["a", "b"] },
          { key: "zone", operator: "NotIn", values: ["x"] },
          { key: "gpu", operator: "Exists" },
          { key: "legacy", operator: "DoesNotExist" },
        ],
      }),
    ).toBe("app=web,tier in (a,b),zone notin (x),gpu,!legacy");
    expect(selectorToString(undefined)).toBe("");
  });

  it("tells an empty selector", () => {
    expect(isEmptySelector({})).toBe(true);
    expect(isEmptySelector({ matchExpressions: [] })).toBe(true);
    expect(isEmptySelector({ matchLabels: { a: "b" } })).toBe(false);
  });
});
