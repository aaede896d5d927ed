#!/usr/bin/env node
// Checks the public API of every published package (packages/* whose package.json is not
// `private`): each entry of its package.json `exports` (".", "./queue", ...) is read from its
// source (`./dist/<path>.js` → `src/<path>.ts`), with `export *` and re-exports followed, and every
// name it exports must
//   (a) fit: an entry exports at most 30 names (split a wide package into subpath entries), and
//   (b) be used: another package's or app's production code imports it, or it is listed, with a
//       reason, in the "Public API kept without an in-repo user" tables of docs/public-api.md.
// Production code is packages/*/src and apps/*/src without tests (*.test.ts,
// *.integration.test.ts), benchmarks (*.bench.ts, bench/), test fixtures and `testing/` helpers,
// and without private packages under packages/ (test infrastructure such as test-peers). A package's
// own imports do not count. A `./testing` entry exists for tests, so other packages' tests count as
// its users.
//
//   node scripts/check-public-api.mjs [--root <dir>] [--report]
//
// --root checks another tree laid out like this repository (the tests use fixture trees);
// --report prints every entry's names with their users. Exit 1 names the package, the entry, the
// name and what to do.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const ts = createRequire(join(here, "..", "package.json"))("typescript");

/** The most names one entry may export. */
export const MAX_NAMES_PER_ENTRY = 30;

/** The heading of the section of docs/public-api.md that lists the names kept without a user. */
const KEPT_SECTION = "Public API kept without an in-repo user";
/** The heading of the section of docs/public-api.md that lists packages exempt for now. */
const EXEMPT_SECTION = "Packages temporarily exempt from this check";

/** Files that are not production code: tests, benchmarks, fixtures, test helpers. */
const TEST_CODE =
  /(\.(test|integration\.test|bench)\.[cm]?[jt]sx?$)|(\/testing\/)|(\/bench\/)|(\/test-fixtures\.ts$)|(\/testkit\.ts$)|(\/vitest[^/]*\.ts$)/;
const SOURCE_FILE = /\.([cm]?ts|tsx|[cm]?js)$/;

function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

function listDirs(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && existsSync(join(dir, entry.name, "package.json")))
    .map((entry) => join(dir, entry.name))
    .sort();
}

function walk(dir, out = []) {
  if (!existsSync(dir)) return out;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === "node_modules" || entry.name === "dist") continue;
    const full = join(dir, entry.name);
    if (entry.isDirectory()) walk(full, out);
    else if (SOURCE_FILE.test(entry.name) && !entry.name.endsWith(".d.ts")) out.push(full);
  }
  return out;
}

/** The workspace: published packages (with entries), and every package and app. */
function workspace(root) {
  const all = [];
  for (const group of ["packages", "apps"]) {
    for (const dir of listDirs(join(root, group))) {
      const manifest = readJson(join(dir, "package.json"));
      all.push({ dir, group, name: manifest.name, manifest });
    }
  }
  return all;
}

/** The source file of an `exports` target such as `./dist/queue/index.js`. */
function sourceOfTarget(pkgDir, target) {
  const match = /^\.\/dist\/(.+)\.[cm]?js$/.exec(target);
  if (!match) return undefined;
  for (const ext of [".ts", ".mts", ".tsx"]) {
    const candidate = join(pkgDir, "src", `${match[1]}${ext}`);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

function targetOf(value) {
  if (typeof value === "string") return value;
  if (value && typeof value === "object") {
    return targetOf(value.import ?? value.default ?? value.node ?? value.require);
  }
  return undefined;
}

/** The entries of a published package: [{ subpath, specifier, file }]; problems for the unreadable. */
function entriesOf(pkg, problems) {
  let exportsField = pkg.manifest.exports;
  if (exportsField === undefined) exportsField = { ".": pkg.manifest.main ?? "./dist/index.js" };
  if (typeof exportsField === "string") exportsField = { ".": exportsField };
  const entries = [];
  for (const [subpath, value] of Object.entries(exportsField)) {
    if (subpath === "./package.json") continue;
    const target = targetOf(value);
    if (!target || target.endsWith(".json")) continue;
    const file = sourceOfTarget(pkg.dir, target);
    const specifier = subpath === "." ? pkg.name : `${pkg.name}/${subpath.replace(/^\.\//, "")}`;
    if (!file) {
      problems.push(
        `${pkg.name}: the entry "${subpath}" (${target}) has no source file src/<path>.ts to read; point it at ./dist/<path>.js built from src/<path>.ts`,
      );
      continue;
    }
    entries.push({ subpath, specifier, file });
  }
  return entries;
}

const parsed = new Map();
function parse(file) {
  let source = parsed.get(file);
  if (!source) {
    source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest, true);
    parsed.set(file, source);
  }
  return source;
}

/** Resolves a relative module specifier of `from` to a source file (`./x.js` → `./x.ts`). */
function resolveRelative(from, specifier) {
  const base = resolve(dirname(from), specifier);
  const stem = base.replace(/\.[cm]?js$/, "");
  const candidates = [
    `${stem}.ts`,
    `${stem}.mts`,
    `${stem}.tsx`,
    base,
    join(base, "index.ts"),
    join(stem, "index.ts"),
  ];
  return candidates.find((candidate) => existsSync(candidate) && statSync(candidate).isFile());
}

function hasModifier(node, kind) {
  return (ts.canHaveModifiers(node) ? ts.getModifiers(node) : undefined)?.some(
    (m) => m.kind === kind,
  );
}

/** Names bound by a declaration's binding pattern (`export const { a, b } = ...`). */
function bindingNames(name, out) {
  if (ts.isIdentifier(name)) out.push(name.text);
  else
    for (const element of name.elements)
      if (!ts.isOmittedExpression(element)) bindingNames(element.name, out);
}

/**
 * The names a module exports, following `export *` and `export { } from` through relative
 * imports. Re-exports from packages are listed by name (their own entries are checked on their own).
 */
export function exportedNames(file, seen = new Set()) {
  if (seen.has(file)) return new Set();
  seen.add(file);
  const names = new Set();
  for (const statement of parse(file).statements) {
    if (ts.isExportDeclaration(statement)) {
      const from = statement.moduleSpecifier?.text;
      if (!statement.exportClause) {
        // export * from "./x.js"
        if (from?.startsWith(".")) {
          const target = resolveRelative(file, from);
          if (!target) throw new Error(`${file}: cannot resolve "${from}"`);
          for (const name of exportedNames(target, seen)) if (name !== "default") names.add(name);
        }
        continue;
      }
      if (ts.isNamespaceExport(statement.exportClause)) {
        names.add(statement.exportClause.name.text);
        continue;
      }
      for (const element of statement.exportClause.elements) names.add(element.name.text);
      continue;
    }
    if (ts.isExportAssignment(statement)) {
      names.add(statement.isExportEquals ? "export=" : "default");
      continue;
    }
    if (!hasModifier(statement, ts.SyntaxKind.ExportKeyword)) continue;
    if (hasModifier(statement, ts.SyntaxKind.DefaultKeyword)) {
      names.add("default");
    } else if (ts.isVariableStatement(statement)) {
      const out = [];
      for (const declaration of statement.declarationList.declarations) {
        bindingNames(declaration.name, out);
      }
      for (const name of out) names.add(name);
    } else if (statement.name && ts.isIdentifier(statement.name)) {
      names.add(statement.name.text);
    } else if (ts.isModuleDeclaration(statement) && statement.name) {
      names.add(statement.name.text);
    }
  }
  return names;
}

/**
 * The names each file imports from workspace package specifiers: Map<specifier, Set<name>>, with
 * `*` for a namespace import whose uses could not all be traced, and "default".
 */
export function importedNames(file) {
  const source = parse(file);
  const used = new Map();
  const add = (specifier, name) => {
    if (!used.has(specifier)) used.set(specifier, new Set());
    used.get(specifier).add(name);
  };
  const namespaces = new Map();
  const visit = (node) => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      const specifier = node.moduleSpecifier.text;
      if (ts.isImportDeclaration(node)) {
        const clause = node.importClause;
        if (clause?.name) add(specifier, "default");
        const bindings = clause?.namedBindings;
        if (bindings && ts.isNamespaceImport(bindings)) {
          namespaces.set(bindings.name.text, specifier);
        } else if (bindings) {
          for (const element of bindings.elements) {
            add(specifier, (element.propertyName ?? element.name).text);
          }
        }
        if (!clause) add(specifier, "(side effect)");
      } else if (!node.exportClause || ts.isNamespaceExport(node.exportClause)) {
        add(specifier, "*");
      } else {
        for (const element of node.exportClause.elements) {
          add(specifier, (element.propertyName ?? element.name).text);
        }
      }
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      const specifier = node.argument.literal.text;
      const qualifier = node.qualifier;
      if (!qualifier) add(specifier, "*");
      else {
        let first = qualifier;
        while (ts.isQualifiedName(first)) first = first.left;
        add(specifier, first.text);
      }
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      // A dynamic import(): its names cannot be traced; count them all as used.
      add(node.arguments[0].text, "*");
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  if (namespaces.size > 0) {
    const traced = new Set();
    const visitUses = (node) => {
      if (
        (ts.isPropertyAccessExpression(node) || ts.isQualifiedName(node)) &&
        ts.isIdentifier(ts.isPropertyAccessExpression(node) ? node.expression : node.left) &&
        namespaces.has((ts.isPropertyAccessExpression(node) ? node.expression : node.left).text)
      ) {
        const ns = ts.isPropertyAccessExpression(node) ? node.expression : node.left;
        add(namespaces.get(ns.text), node.name.text);
        traced.add(ns);
        return;
      }
      if (ts.isIdentifier(node) && namespaces.has(node.text) && !traced.has(node)) {
        const parent = node.parent;
        const isDeclaration = parent && ts.isNamespaceImport(parent);
        if (!isDeclaration) add(namespaces.get(node.text), "*");
      }
      ts.forEachChild(node, visitUses);
    };
    visitUses(source);
  }
  return used;
}

/** Splits a Markdown table row into trimmed cells, without the code ticks. */
function cells(line) {
  return line
    .trim()
    .replace(/^\|/, "")
    .replace(/\|$/, "")
    .split(/(?<!\\)\|/)
    .map((cell) => cell.trim().replace(/^`(.*)`$/, "$1"));
}

/**
 * The body rows of the Markdown tables under the `## <title>` section, each with the `### `
 * heading above it and its line number. A table's first row is its header.
 */
function sectionRows(markdown, title) {
  const rows = [];
  let inSection = false;
  let inTable = false;
  let heading = "";
  for (const [index, line] of markdown.split("\n").entries()) {
    if (/^## /.test(line)) {
      inSection = line.slice(3).trim() === title;
      heading = "";
      inTable = false;
      continue;
    }
    if (!inSection) continue;
    if (/^### /.test(line)) {
      heading = line
        .slice(4)
        .trim()
        .replace(/^`(.*)`$/, "$1");
      continue;
    }
    if (!line.trim().startsWith("|")) {
      inTable = false;
      continue;
    }
    const row = cells(line);
    if (!inTable) {
      inTable = true; // the header row
      continue;
    }
    if (row.every((cell) => /^:?-+:?$/.test(cell))) continue;
    rows.push({ heading, row, line: index + 1 });
  }
  return rows;
}

/** Reads docs/public-api.md: the names kept without a user, and the exempt packages. */
function readPolicy(root, problems) {
  const path = join(root, "docs", "public-api.md");
  const markdown = existsSync(path) ? readFileSync(path, "utf8") : "";
  const kept = new Map(); // specifier → Map<name, { reason, line }>
  for (const { heading, row, line } of sectionRows(markdown, KEPT_SECTION)) {
    const [specifier, name, reason] = row;
    if (!specifier || !name || !reason) {
      problems.push(
        `docs/public-api.md:${line}: a "${KEPT_SECTION}" row needs three cells: entry (e.g. \`@nebula/kube/queue\`), name, reason`,
      );
      continue;
    }
    if (heading && specifier !== heading && !specifier.startsWith(`${heading}/`)) {
      problems.push(
        `docs/public-api.md:${line}: the row for ${name} names ${specifier}, which is not an entry of ${heading} (the heading above it)`,
      );
    }
    if (!kept.has(specifier)) kept.set(specifier, new Map());
    kept.get(specifier).set(name, { reason, line });
  }
  const exempt = new Map();
  for (const { row, line } of sectionRows(markdown, EXEMPT_SECTION)) {
    const [name, reason] = row;
    if (!name || !reason) {
      problems.push(
        `docs/public-api.md:${line}: a "${EXEMPT_SECTION}" row needs two cells: package, reason`,
      );
      continue;
    }
    exempt.set(name, { reason, line });
  }
  return { kept, exempt };
}

/** Runs the check over the tree at `root`; returns { problems, notes, report }. */
export function checkPublicApi(root) {
  parsed.clear();
  const problems = [];
  const notes = [];
  const all = workspace(root);
  const published = all.filter((pkg) => pkg.group === "packages" && pkg.manifest.private !== true);
  const { kept, exempt } = readPolicy(root, problems);

  const entries = new Map(); // specifier → { pkg, subpath, file, names }
  for (const pkg of published) {
    for (const entry of entriesOf(pkg, problems)) {
      entries.set(entry.specifier, { ...entry, pkg, names: exportedNames(entry.file) });
    }
  }

  // users: specifier → Map<name, Set<consumer file>>
  const users = new Map();
  const use = (specifier, name, where) => {
    if (!users.has(specifier)) users.set(specifier, new Map());
    const byName = users.get(specifier);
    if (!byName.has(name)) byName.set(name, new Set());
    byName.get(name).add(where);
  };
  for (const consumer of all) {
    const isTestInfrastructure =
      consumer.group === "packages" && consumer.manifest.private === true;
    for (const file of walk(join(consumer.dir, "src"))) {
      const where = relative(root, file);
      const isTest = isTestInfrastructure || TEST_CODE.test(`/${where}`);
      for (const [specifier, names] of importedNames(file)) {
        const entry = entries.get(specifier);
        if (!entry || entry.pkg.name === consumer.name) continue;
        // A ./testing entry is for tests: tests are its users. Elsewhere only production counts.
        if (isTest && entry.subpath !== "./testing") continue;
        for (const name of names) use(specifier, name, where);
      }
    }
  }

  for (const [name, { line }] of exempt) {
    if (!published.some((pkg) => pkg.name === name)) {
      problems.push(
        `docs/public-api.md:${line}: ${name} is listed as temporarily exempt but is not a published package; remove the row`,
      );
    }
  }

  const report = [];
  for (const [specifier, entry] of entries) {
    const isExempt = exempt.has(entry.pkg.name);
    const byName = users.get(specifier) ?? new Map();
    const everything = byName.has("*");
    const keptHere = kept.get(specifier) ?? new Map();
    const sorted = [...entry.names].sort();
    report.push({ specifier, names: sorted, users: byName, exempt: isExempt });
    if (isExempt) continue;
    if (entry.names.size > MAX_NAMES_PER_ENTRY) {
      problems.push(
        `${entry.pkg.name}: the entry ${specifier} (${relative(root, entry.file)}) exports ${entry.names.size} names, more than ${MAX_NAMES_PER_ENTRY}: export only what a consumer constructs, calls or catches, and split the rest into subpath entries`,
      );
    }
    for (const name of sorted) {
      const used = everything || byName.has(name);
      const keptRow = keptHere.get(name);
      if (!used && !keptRow) {
        problems.push(
          `${entry.pkg.name}: ${specifier} exports ${name}, which no other package or app imports in production code: stop exporting it from the entry (tests import it from its module), or list it with a reason under "${KEPT_SECTION}" → ${entry.pkg.name} in docs/public-api.md`,
        );
      } else if (used && keptRow && !everything) {
        const who = [...byName.get(name)].sort()[0];
        problems.push(
          `docs/public-api.md:${keptRow.line}: ${specifier} ${name} is listed as kept without a user, but ${who} imports it: remove the row`,
        );
      }
    }
    for (const [name, { line }] of keptHere) {
      if (!entry.names.has(name)) {
        problems.push(
          `docs/public-api.md:${line}: ${specifier} does not export ${name}: remove the row (or fix the entry named)`,
        );
      }
    }
  }
  for (const [specifier, names] of kept) {
    if (entries.has(specifier)) continue;
    const { line } = [...names.values()][0];
    problems.push(
      `docs/public-api.md:${line}: ${specifier} is not an entry of a published package (see its package.json "exports"): fix or remove its rows`,
    );
  }
  for (const [name, { reason }] of exempt) {
    notes.push(`${name} is temporarily exempt (docs/public-api.md): ${reason}`);
  }
  return { problems, notes, report };
}

function main() {
  const args = process.argv.slice(2);
  const rootIndex = args.indexOf("--root");
  const root = rootIndex >= 0 ? resolve(args[rootIndex + 1]) : resolve(here, "..");
  let result;
  try {
    result = checkPublicApi(root);
  } catch (error) {
    console.error(`check-public-api: ${error.message}`);
    process.exit(1);
  }
  const { problems, notes, report } = result;
  if (args.includes("--report")) {
    for (const { specifier, names, users, exempt } of report) {
      console.log(`${specifier}: ${names.length} names${exempt ? " (exempt)" : ""}`);
      for (const name of names) {
        const who = [...(users.get(name) ?? [])].sort();
        console.log(`  ${name}: ${who.length === 0 ? "-" : who.join(", ")}`);
      }
    }
  }
  for (const note of notes) console.log(`check-public-api: note: ${note}`);
  if (problems.length > 0) {
    console.error(
      `check-public-api: ${problems.length} problem(s) with the published packages' public API (docs/public-api.md explains the rules):\n  ${problems.join("\n  ")}`,
    );
    process.exit(1);
  }
  const count = report.filter((entry) => !entry.exempt).length;
  console.log(
    `check-public-api: ${count} entries checked: each exports at most ${MAX_NAMES_PER_ENTRY} names, each used by another package or app, or listed with a reason in docs/public-api.md`,
  );
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
