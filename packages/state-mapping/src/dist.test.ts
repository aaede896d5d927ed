import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { build } from "tsup";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { libraryConfig } from "../../../tsup.base.ts";

/**
 * The dependency rule: only the Kubernetes plumbing package and the apps import
 * `@kubernetes/client-node` at runtime. This package uses its types only.
 */
describe("the built package", () => {
  let outDir = "";
  let js = "";

  beforeAll(async () => {
    outDir = await mkdtemp(join(tmpdir(), "state-mapping-dist-"));
    await build({
      ...libraryConfig,
      entry: [join(import.meta.dirname, "index.ts")],
      outDir,
      dts: false,
      sourcemap: false,
      silent: true,
    });
    js = await readFile(join(outDir, "index.js"), "utf8");
  }, 60_000);

  afterAll(async () => {
    if (outDir !== "") await rm(outDir, { recursive: true, force: true });
  });

  it("has no runtime import of @kubernetes/client-node", () => {
    expect(js).toContain("toPodStatus");
    expect(js).not.toMatch(/@kubernetes\/client-node/);
  });

  it("imports nothing at runtime but zod and node built-ins", () => {
    const specifiers = [...js.matchAll(/(?:^|\n)\s*import\s[^'"]*?["']([^"']+)["']/g)].map(
      (m) => m[1],
    );
    expect(specifiers.length).toBeGreaterThan(0);
    const allowed = new Set(["zod", ...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
    for (const specifier of specifiers) expect(allowed.has(specifier ?? ""), specifier).toBe(true);
    expect(js).not.toMatch(/\brequire\(/);
  });

  it("needs no @kubernetes/client-node at all: the Kubernetes types it uses ship inside it", async () => {
    const manifest = JSON.parse(
      await readFile(join(import.meta.dirname, "..", "package.json"), "utf8"),
    ) as {
      dependencies?: Record<string, string>;
      peerDependencies?: Record<string, string>;
    };
    expect(manifest.dependencies?.["@kubernetes/client-node"]).toBeUndefined();
    expect(manifest.peerDependencies?.["@kubernetes/client-node"]).toBeUndefined();
  });

  it("imports @kubernetes/client-node in its sources with `import type` only", async () => {
    let seen = 0;
    const files = (await readdir(import.meta.dirname)).filter(
      (f) => f.endsWith(".ts") && !f.endsWith(".test.ts") && !f.endsWith(".bench.ts"),
    );
    for (const file of files) {
      const source = await readFile(join(import.meta.dirname, file), "utf8");
      const statements =
        source.match(/(?:^|\n)(?:import|export)\b[^;]*?["']@kubernetes\/client-node["']/g) ?? [];
      for (const statement of statements) expect(statement.trim(), file).toMatch(/^import type /);
      seen += statements.length;
    }
    expect(seen).toBeGreaterThan(0);
  });
});
