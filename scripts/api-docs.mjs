#!/usr/bin/env node
// Generates the Markdown API reference of every published package (packages/* whose package.json
// is not `private`) from the TSDoc of its entries' exports, with TypeDoc and typedoc-plugin-markdown,
// into one page per entry plus docs/api/README.md (the index): the root entry (src/index.ts) into
// docs/api/<package-dir>.md, a subpath entry such as `@nebula/kube/cache` (package.json `exports`
// "./cache" → ./dist/cache/index.js, read from src/cache/index.ts) into docs/api/kube-cache.md.
//
//   node scripts/api-docs.mjs           write docs/api/
//   node scripts/api-docs.mjs --check   regenerate into a temporary folder, compare with docs/api/,
//                                       exit 1 naming the stale files
//   node scripts/api-docs.mjs --out <dir>  write the pages into <dir> instead (to compare by hand)
//
// Workspace imports (@nebula/* and their subpaths) resolve to the packages' sources
// (tsconfig.typedoc.json, plus one path per subpath entry), so no build is needed. Source line numbers are left out ("Defined in" lines would change with every
// edit above an export); the output is formatted with the repository's Biome so that `biome
// check .` accepts it.
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Application, Converter, ReflectionKind } from "typedoc";

const root = fileURLToPath(new URL("..", import.meta.url));
const docsDir = join(root, "docs", "api");
const check = process.argv.includes("--check");
const outIndex = process.argv.indexOf("--out");
const writeDir = outIndex === -1 ? docsDir : resolve(process.argv[outIndex + 1] ?? ".");

/** The target of an `exports` value: a string, or the `import`/`default` of a conditions object. */
function exportTarget(value) {
  if (typeof value === "string") return value;
  if (value && typeof value === "object") {
    return exportTarget(value.import ?? value.default ?? value.node ?? value.require);
  }
  return undefined;
}

/** The text of the `//` comment lines an entry file opens with, without the `<specifier>: ` lead. */
function entryComment(file, specifier) {
  const lines = [];
  for (const line of readFileSync(file, "utf8").split("\n")) {
    const match = /^\/\/ ?(.*)$/.exec(line);
    if (!match) break;
    lines.push(match[1]);
  }
  let text = lines.join(" ").trim();
  if (text.startsWith(`${specifier}:`)) text = text.slice(specifier.length + 1).trim();
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/**
 * The entries of a published package, root first: { subpath, specifier, file (absolute source),
 * page (file name in docs/api), description }. A subpath entry's description is the comment its
 * source file opens with.
 */
function entriesOf(pkgDir, manifest) {
  const dir = join(root, "packages", pkgDir);
  const rootEntry = {
    subpath: ".",
    specifier: manifest.name,
    file: join(dir, "src", "index.ts"),
    page: `${pkgDir}.md`,
    description: manifest.description ?? "",
  };
  const entries = [rootEntry];
  const exportsField =
    manifest.exports && typeof manifest.exports === "object" ? manifest.exports : {};
  for (const [subpath, value] of Object.entries(exportsField)) {
    if (subpath === "." || subpath === "./package.json") continue;
    const match = /^\.\/dist\/(.+)\.[cm]?js$/.exec(exportTarget(value) ?? "");
    if (!match) continue;
    const file = join(dir, "src", `${match[1]}.ts`);
    if (!existsSync(file)) {
      throw new Error(`${manifest.name}: the entry "${subpath}" has no source file ${file}`);
    }
    const name = subpath.replace(/^\.\//, "");
    const specifier = `${manifest.name}/${name}`;
    entries.push({
      subpath,
      specifier,
      file,
      page: `${pkgDir}-${name.replaceAll("/", "-")}.md`,
      description: entryComment(file, specifier),
    });
  }
  return entries;
}

/** The published packages: { dir, name, description, entries }, sorted by folder name. */
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
      entries: entriesOf(dir, manifest),
    }))
    .sort((a, b) => a.dir.localeCompare(b.dir));
}

/** Every entry of every package, root entries and subpath entries alike. */
function allEntries(packages) {
  return packages.flatMap((pkg) => pkg.entries.map((entry) => ({ ...entry, pkg })));
}

/**
 * Runs TypeDoc over the packages' entries, writing one <page> per entry into `outDir` (its
 * tsconfig goes into `workDir`).
 */
async function runTypedoc(packages, workDir, outDir) {
  const entries = allEntries(packages);
  const base = JSON.parse(readFileSync(join(root, "tsconfig.typedoc.json"), "utf8"));
  // A tsconfig for this run: tsconfig.typedoc.json with every entry file in the program, and
  // subpath imports (`@nebula/kube/cache`) resolved to their entry's source next to the `@nebula/*`
  // of the root entries.
  const paths = {
    ...Object.fromEntries(
      entries
        .filter((entry) => entry.subpath !== ".")
        .map((entry) => [entry.specifier, [entry.file]]),
    ),
    ...Object.fromEntries(
      Object.entries(base.compilerOptions?.paths ?? {}).map(([key, targets]) => [
        key,
        targets.map((target) => resolve(root, target)),
      ]),
    ),
  };
  const tsconfig = join(workDir, "tsconfig.json");
  writeFileSync(
    tsconfig,
    JSON.stringify({
      extends: join(root, "tsconfig.typedoc.json"),
      compilerOptions: { paths },
      files: entries.map((entry) => entry.file),
      include: [],
    }),
  );
  const app = await Application.bootstrapWithPlugins({
    entryPoints: entries.map((entry) => entry.file),
    entryPointStrategy: "resolve",
    tsconfig,
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
  // Name each module after its page (kube, kube-cache, ...) so that TypeDoc writes <page>.
  const byEntry = new Map(entries.map((entry) => [entry.file, entry]));
  app.converter.on(Converter.EVENT_CREATE_DECLARATION, (context, reflection) => {
    if (!reflection.kindOf(ReflectionKind.Module)) return;
    const file = context
      .getSymbolFromReflection(reflection)
      ?.declarations?.[0]?.getSourceFile().fileName;
    const entry = file ? byEntry.get(resolve(file)) : undefined;
    if (entry) reflection.name = entry.page.replace(/\.md$/, "");
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
  const rows = allEntries(packages).map(
    (entry) =>
      `| [\`${entry.specifier}\`](${entry.page}) | ${entry.description.replaceAll("|", "\\|")} |`,
  );
  return [
    "# API reference",
    "",
    "Generated from the TSDoc of each published package's entries (`src/index.ts`, and the",
    "source of each subpath entry of its `exports`, such as `src/cache/index.ts` for",
    "`@nebula/kube/cache`) by `npm run docs:api` ([TypeDoc](https://typedoc.org) with",
    "[typedoc-plugin-markdown](https://typedoc-plugin-markdown.org)), one page per entry. Do not",
    "edit these files by hand: change the TSDoc in the package's source and run",
    "`npm run docs:api`; `npm run docs:api:check` fails when they are stale.",
    "",
    "| entry | description |",
    "| --- | --- |",
    ...rows,
    "",
  ].join("\n");
}

/** The line under a page's title linking the index, the README and the package's other entries. */
function navigation(pkg, entry) {
  const links = [
    "[API reference index](README.md)",
    `[package README](../../packages/${pkg.dir}/README.md)`,
  ];
  if (pkg.entries.length > 1) {
    const others = pkg.entries
      .filter((other) => other !== entry)
      .map((other) => `[\`${other.specifier}\`](${other.page})`);
    links.push(
      `${entry.subpath === "." ? "subpath entries" : "other entries"}: ${others.join(", ")}`,
    );
  }
  return links.join(" · ");
}

/** Generates every page; returns a map of file name (in docs/api) → content. */
async function generate(packages) {
  // Under the repository's node_modules, so that the run's tsconfig finds the @types packages.
  const cacheDir = join(root, "node_modules", ".cache");
  mkdirSync(cacheDir, { recursive: true });
  const workDir = mkdtempSync(join(cacheDir, "nebula-api-docs-"));
  const outDir = join(workDir, "out");
  try {
    await runTypedoc(packages, workDir, outDir);
    const pages = new Map();
    for (const { pkg, ...entry } of allEntries(packages)) {
      const file = entry.page;
      let body;
      try {
        body = readFileSync(join(outDir, file), "utf8");
      } catch (error) {
        if (error.code !== "ENOENT") throw error;
        throw new Error(
          `TypeDoc wrote no ${file} (it wrote ${readdirSync(outDir).join(", ")}): the module of ${relative(root, entry.file)} was not renamed`,
        );
      }
      const page = [
        `# ${entry.specifier}`,
        "",
        `${entry.description}`,
        "",
        navigation(
          pkg,
          pkg.entries.find((e) => e.page === entry.page),
        ),
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
    rmSync(workDir, { recursive: true, force: true });
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
  if (writeDir === docsDir) {
    for (const name of current.keys()) {
      if (!pages.has(name)) rmSync(join(docsDir, name));
    }
  }
  mkdirSync(writeDir, { recursive: true });
  for (const [name, text] of pages) writeFileSync(join(writeDir, name), text);
  console.log(`Wrote ${pages.size} files to ${relative(root, writeDir) || "."}/.`);
}
