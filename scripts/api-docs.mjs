#!/usr/bin/env node
// Generates the Markdown API reference of every published package (packages/* whose package.json
// is not `private`) from the TSDoc of its src/index.ts exports, with TypeDoc and
// typedoc-plugin-markdown, into docs/api/<package-dir>.md plus docs/api/README.md (the index).
//
//   node scripts/api-docs.mjs           write docs/api/
//   node scripts/api-docs.mjs --check   regenerate into a temporary folder, compare with docs/api/,
//                                       exit 1 naming the stale files
//
// Workspace imports (@nebula/*) resolve to the packages' sources (tsconfig.typedoc.json), so no
// build is needed. Source line numbers are left out ("Defined in" lines would change with every
// edit above an export); the output is formatted with the repository's Biome so that `biome
// check .` accepts it.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Application, Converter, ReflectionKind } from "typedoc";

const root = fileURLToPath(new URL("..", import.meta.url));
const docsDir = join(root, "docs", "api");
const check = process.argv.includes("--check");

/** The published packages: { dir, name, description }, sorted by folder name. */
function publishedPackages() {
  const packagesDir = join(root, "packages");
  return readdirSync(packagesDir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => ({
      dir: entry.name,
      manifest: JSON.parse(readFileSync(join(packagesDir, entry.name, "package.json"), "utf8")),
    }))
    .filter(({ manifest }) => manifest.private !== true)
    .map(({ dir, manifest }) => ({
      dir,
      name: manifest.name,
      description: manifest.description ?? "",
    }))
    .sort((a, b) => a.dir.localeCompare(b.dir));
}

/** Runs TypeDoc over the packages, writing <package-dir>.md files into `outDir`. */
async function runTypedoc(packages, outDir) {
  const app = await Application.bootstrapWithPlugins({
    entryPoints: packages.map((pkg) => join(root, "packages", pkg.dir, "src", "index.ts")),
    entryPointStrategy: "resolve",
    tsconfig: join(root, "tsconfig.typedoc.json"),
    plugin: ["typedoc-plugin-markdown"],
    out: outDir,
    router: "module",
    flattenOutputFiles: true,
    readme: "none",
    disableSources: true,
    excludeExternals: true,
    excludePrivate: true,
    excludeProtected: true,
    hidePageHeader: true,
    hideBreadcrumbs: true,
    hideGroupHeadings: false,
    useCodeBlocks: true,
    sort: ["kind", "alphabetical"],
    validation: { notExported: false, invalidLink: true, notDocumented: true },
    logLevel: "Warn",
  });
  // Name each module after its package directory so that the pages are <package-dir>.md.
  const byEntry = new Map(
    packages.map((pkg) => [join(root, "packages", pkg.dir, "src", "index.ts"), pkg]),
  );
  app.converter.on(Converter.EVENT_CREATE_DECLARATION, (context, reflection) => {
    if (!reflection.kindOf(ReflectionKind.Module)) return;
    const file = context
      .getSymbolFromReflection(reflection)
      ?.declarations?.[0]?.getSourceFile().fileName;
    const pkg = file ? byEntry.get(resolve(file)) : undefined;
    if (pkg) reflection.name = pkg.dir;
  });
  const project = await app.convert();
  if (!project) throw new Error("TypeDoc could not convert the packages (see the errors above)");
  await app.generateOutputs(project);
  if (app.logger.hasErrors()) throw new Error("TypeDoc reported errors (see above)");
}

/** Formats Markdown text with the repository's Biome, as if it were the file at `path`. */
function biomeFormat(text, path) {
  return execFileSync(
    join(root, "node_modules", ".bin", "biome"),
    ["format", `--stdin-file-path=${path}`],
    { cwd: root, input: text, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 },
  );
}

function indexPage(packages) {
  const rows = packages.map(
    (pkg) => `| [\`${pkg.name}\`](${pkg.dir}.md) | ${pkg.description.replaceAll("|", "\\|")} |`,
  );
  return [
    "# API reference",
    "",
    "Generated from the TSDoc of each published package's `src/index.ts` exports by",
    "`npm run docs:api` ([TypeDoc](https://typedoc.org) with",
    "[typedoc-plugin-markdown](https://typedoc-plugin-markdown.org)). Do not edit these files by",
    "hand: change the TSDoc in the package's source and run `npm run docs:api`;",
    "`npm run docs:api:check` fails when they are stale.",
    "",
    "| package | description |",
    "| --- | --- |",
    ...rows,
    "",
  ].join("\n");
}

/** Generates every page; returns a map of file name (in docs/api) → content. */
async function generate(packages) {
  const outDir = mkdtempSync(join(tmpdir(), "nebula-api-docs-"));
  try {
    await runTypedoc(packages, outDir);
    const pages = new Map();
    for (const pkg of packages) {
      const file = `${pkg.dir}.md`;
      let body;
      try {
        body = readFileSync(join(outDir, file), "utf8");
      } catch (error) {
        if (error.code !== "ENOENT") throw error;
        throw new Error(
          `TypeDoc wrote no ${file} (it wrote ${readdirSync(outDir).join(", ")}): the module of packages/${pkg.dir}/src/index.ts was not renamed`,
        );
      }
      const page = [
        `# ${pkg.name}`,
        "",
        `${pkg.description}`,
        "",
        `[API reference index](README.md) · [package README](../../packages/${pkg.dir}/README.md)`,
        "",
        // TypeDoc titles the page with the module name; the title above replaces it.
        body.replace(/^# .*\n+/, ""),
      ].join("\n");
      pages.set(file, biomeFormat(page, relative(root, join(docsDir, file))));
    }
    pages.set(
      "README.md",
      biomeFormat(indexPage(packages), relative(root, join(docsDir, "README.md"))),
    );
    return pages;
  } finally {
    rmSync(outDir, { recursive: true, force: true });
  }
}

function committedPages() {
  let names = [];
  try {
    names = readdirSync(docsDir).filter((name) => name.endsWith(".md"));
  } catch (error) {
    if (error.code !== "ENOENT") throw error;
  }
  return new Map(names.map((name) => [name, readFileSync(join(docsDir, name), "utf8")]));
}

const packages = publishedPackages();
let pages;
try {
  pages = await generate(packages);
} catch (error) {
  console.error(`api-docs: ${error.message}`);
  process.exit(1);
}
const current = committedPages();

if (check) {
  const stale = [];
  for (const [name, text] of pages) {
    if (!current.has(name)) stale.push(`missing: docs/api/${name}`);
    else if (current.get(name) !== text) stale.push(`out of date: docs/api/${name}`);
  }
  for (const name of current.keys()) {
    if (!pages.has(name)) stale.push(`not generated (remove it): docs/api/${name}`);
  }
  if (stale.length > 0) {
    console.error(
      `The API reference in docs/api/ is stale; run npm run docs:api and commit the result.\n  ${stale.join("\n  ")}`,
    );
    process.exit(1);
  }
  console.log(`docs/api/ is current (${pages.size} files).`);
} else {
  for (const name of current.keys()) {
    if (!pages.has(name)) rmSync(join(docsDir, name));
  }
  for (const [name, text] of pages) writeFileSync(join(docsDir, name), text);
  console.log(`Wrote ${pages.size} files to docs/api/.`);
}
