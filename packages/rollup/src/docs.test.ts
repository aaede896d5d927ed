import { readFileSync } from "node:fs";
import { INSTANCE_REASONS } from "@nebula/state-mapping";
import { describe, expect, it } from "vitest";
import { DEFAULT_REASON_CATALOG } from "./catalog.js";
import { ROLLUP_REASONS } from "./tally.js";

// The troubleshooting page promises every reason a user can read on a WorkloadDeployment or a
// Workload, with what it means and what to do. A reason counts as documented when it heads a row
// of one of the page's tables: `| \`InstanceCrashing\` | ...`.
const PAGE = new URL("../../../docs/troubleshooting.md", import.meta.url);

function documentedReasons(markdown: string): Set<string> {
  const names = new Set<string>();
  for (const line of markdown.split("\n")) {
    const firstCell = /^\|\s*([^|]*)\|/.exec(line)?.[1];
    if (firstCell === undefined) continue;
    for (const match of firstCell.matchAll(/`([A-Za-z][A-Za-z0-9]*)`/g)) {
      if (match[1] !== undefined) names.add(match[1]);
    }
  }
  return names;
}

describe("docs/troubleshooting.md", () => {
  const documented = documentedReasons(readFileSync(PAGE, "utf8"));

  it("documents every reason of the built-in catalog", () => {
    const missing = DEFAULT_REASON_CATALOG.names().filter((name) => !documented.has(name));
    expect(missing).toEqual([]);
  });

  it("documents every instance reason @nebula/state-mapping produces", () => {
    const missing = INSTANCE_REASONS.filter((name) => !documented.has(name));
    expect(missing).toEqual([]);
  });

  it("documents the roll-up's own condition reasons", () => {
    const missing = Object.values(ROLLUP_REASONS).filter((name) => !documented.has(name));
    expect(missing).toEqual([]);
  });

  it("reads a reason only from the first cell of a table row", () => {
    const names = documentedReasons(
      [
        "| `InstanceCrashing` | customer must fix | see `OutOfMemory` |",
        "| `QuotaExceeded`, `InsufficientCapacity` | Warning |",
        "Prose that mentions `Completed`.",
      ].join("\n"),
    );
    expect([...names].sort()).toEqual([
      "InstanceCrashing",
      "InsufficientCapacity",
      "QuotaExceeded",
    ]);
  });
});
