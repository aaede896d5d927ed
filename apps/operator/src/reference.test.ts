import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { apiReference } from "./reference.js";

const file = fileURLToPath(new URL("../docs/api-reference.md", import.meta.url));

/** The page with table cells trimmed and rules shortened: the formatter pads tables. */
function normalized(page: string): string {
  return page
    .split("\n")
    .map((line) =>
      line.startsWith("|")
        ? line
            .split(/(?<!\\)\|/)
            .map((cell) => cell.trim().replace(/^-{3,}$/, "---"))
            .join("|")
        : line,
    )
    .join("\n");
}

describe("docs/api-reference.md", () => {
  it("is what the schemas generate", () => {
    if (process.env.UPDATE_CRDS === "1") writeFileSync(file, apiReference());
    expect(normalized(readFileSync(file, "utf8"))).toBe(normalized(apiReference()));
  });

  it("documents every kind's spec fields and columns", () => {
    const page = apiReference();
    for (const field of [
      "`spec.placements[].replicas`",
      "`spec.selector.matchLabels`",
      "`spec.workloadRef.name`",
      "`status.conditions[].reason`",
      "`spec.providerID`",
    ]) {
      expect(page).toContain(field);
    }
    expect(page).toContain(
      '| Reason | `.status.conditions[?(@.type=="Available")].reason` | always |',
    );
  });
});
