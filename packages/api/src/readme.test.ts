import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { matchesSelector, parseWorkloadDeployment } from "./index.js";

const readme = readFileSync(fileURLToPath(new URL("../README.md", import.meta.url)), "utf8");

describe("the README's example", () => {
  it("prints what the README says", () => {
    const lines: string[] = [];
    // The statements of the README's example, printing into `lines`.
    const parsed = parseWorkloadDeployment({
      apiVersion: "compute.nebula.dev/v1alpha1",
      kind: "WorkloadDeployment",
      metadata: { name: "web-eu", namespace: "team-a" },
      spec: {
        workloadRef: { name: "web" },
        placement: "eu",
        replicas: -1,
        selector: { matchLabels: { app: "web" } },
      },
    });
    if (!parsed.ok) lines.push(`${parsed.error.code} | ${parsed.error.message}`);
    lines.push(
      String(matchesSelector({ matchLabels: { app: "web" } }, { app: "web", tier: "front" })),
    );

    const printed = /prints\n\n```text\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(printed).toBe(`${lines.join("\n")}\n`);
    expect(readme).toContain("replicas: -1,");
  });
});
