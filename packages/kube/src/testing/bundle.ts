/**
 * Bundles a test helper in `src/testing/` into a runnable ESM file (dependencies left to
 * node_modules) so a test can run it as a child process and kill it.
 */
import { mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

/** Bundles `src/testing/<name>.ts`; returns the path of the runnable `.mjs`. */
export async function bundleTestChild(name: string): Promise<string> {
  const outdir = fileURLToPath(
    new URL("../../node_modules/.cache/nebula-test-children/", import.meta.url),
  );
  mkdirSync(outdir, { recursive: true });
  const outfile = `${outdir}${name}.mjs`;
  await build({
    entryPoints: [fileURLToPath(new URL(`./${name}.ts`, import.meta.url))],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node22",
    packages: "external",
    logLevel: "silent",
  });
  return outfile;
}
