#!/usr/bin/env node
// Installs the packed tarball of the package in the current directory into a fresh temporary
// project, the way a consumer would, and checks that it works there:
//   - a CommonJS consumer (`require()`, Node >= 22.12 loads the ESM build) and an ESM consumer
//     (`import`) both load it and see the same, non-empty set of exports;
//   - a TypeScript consumer (`module: nodenext`, `strict`) type-checks both a `.cts` and an `.mts`
//     file importing it;
//   - every module the shipped `.d.ts` files import resolves in that consumer, which has no optional
//     peers: an unresolved import would silently turn public types into `any` under `skipLibCheck`;
//   - every relative link of its README points at a file the tarball ships;
//   - the README's runnable example type-checks there and runs as written (scripts/readme-example.mjs;
//     examples that need a cluster or EC2 get a real kube-apiserver or moto from @nebula/test-peers).
// The workspace's other published packages this one depends on are packed too and installed from
// their tarballs, never from the registry; everything else comes from the npm cache when it is
// there (`--prefer-offline`). Optional peers are not installed, as npm does for a consumer.
//
//   cd packages/<name> && node ../../scripts/check-package.mjs [--keep]
//
// --keep leaves the temporary project in place and prints its path. The last line printed is the
// install's footprint (packages and bytes in node_modules), for the lean-install figures.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { brokenReadmeLinks, checkReadmeExample } from "./readme-example.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const keep = process.argv.includes("--keep");
const here = process.cwd();
const manifest = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));
const name = manifest.name;

/** The temporary consumer project, removed on every exit unless --keep. */
let project;

function fail(message) {
  console.error(`check-package ${name}: ${message}`);
  if (project && !keep) rmSync(project, { recursive: true, force: true });
  process.exit(1);
}

/** The workspace's packages by name, with their folders. */
function workspacePackages() {
  const found = new Map();
  for (const group of ["packages", "apps"]) {
    let entries = [];
    try {
      entries = readdirSync(join(root, group));
    } catch {
      continue;
    }
    for (const entry of entries) {
      const dir = join(root, group, entry);
      try {
        const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
        found.set(pkg.name, { dir, pkg });
      } catch {
        // not a package folder
      }
    }
  }
  return found;
}

/** This package and every workspace package it depends on at run time, transitively. */
function closure(workspace) {
  const seen = new Set();
  const visit = (pkgName) => {
    if (seen.has(pkgName)) return;
    const entry = workspace.get(pkgName);
    if (!entry) return;
    if (entry.pkg.private) fail(`depends on the private workspace package ${pkgName}`);
    seen.add(pkgName);
    const deps = { ...entry.pkg.dependencies, ...entry.pkg.peerDependencies };
    for (const dep of Object.keys(deps)) visit(dep);
  };
  visit(name);
  return [...seen];
}

function run(command, args, cwd) {
  const started = Date.now();
  try {
    const out = execFileSync(command, args, {
      cwd,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    if (process.env.CHECK_PACKAGE_TRACE) {
      console.error(`${command} ${args.join(" ")}: ${Date.now() - started} ms`);
    }
    return out;
  } catch (error) {
    fail(`${command} ${args.join(" ")} failed:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
  }
}

function footprint(dir) {
  let packages = 0;
  let bytes = 0;
  const walk = (path) => {
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const full = join(path, entry.name);
      if (entry.isDirectory()) {
        if (entry.name === "node_modules") countPackages(full);
        walk(full);
      } else if (entry.isFile()) {
        bytes += statSync(full).size;
      }
    }
  };
  const countPackages = (nodeModules) => {
    for (const entry of readdirSync(nodeModules, { withFileTypes: true })) {
      if (!entry.isDirectory() || entry.name.startsWith(".")) continue;
      if (entry.name.startsWith("@")) {
        packages += readdirSync(join(nodeModules, entry.name)).length;
      } else {
        packages += 1;
      }
    }
  };
  countPackages(join(dir, "node_modules"));
  walk(join(dir, "node_modules"));
  return { packages, bytes };
}

/**
 * The module specifiers imported by the installed package's `.d.ts` files that TypeScript
 * (`nodenext`) cannot resolve from where they sit, as `file: specifier`. Checked directly rather than
 * with `skipLibCheck: false`, which would type-check all of `@types/node` and take most of a minute.
 */
function unresolvedDeclarationImports(installed) {
  const ts = createRequire(join(root, "package.json"))("typescript");
  const options = {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
  };
  const found = [];
  const visit = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== "node_modules") visit(full);
        continue;
      }
      if (!/\.d\.[cm]?ts$/.test(entry.name)) continue;
      const text = readFileSync(full, "utf8");
      const info = ts.preProcessFile(text, true, true);
      const mode = ts.getImpliedNodeFormatForFile(full, undefined, ts.sys, options);
      for (const ref of info.importedFiles) {
        const { resolvedModule } = ts.resolveModuleName(
          ref.fileName,
          full,
          options,
          ts.sys,
          undefined,
          undefined,
          mode,
        );
        if (!resolvedModule) found.push(`${full.slice(installed.length + 1)}: ${ref.fileName}`);
      }
    }
  };
  visit(installed);
  return found;
}

project = mkdtempSync(join(tmpdir(), "nebula-check-package-"));
try {
  const workspace = workspacePackages();
  const tarballs = {};
  for (const pkgName of closure(workspace)) {
    const out = run(
      "npm",
      ["pack", "--silent", "--ignore-scripts", "--pack-destination", project],
      workspace.get(pkgName).dir,
    );
    tarballs[pkgName] = `file:${join(project, out.trim().split("\n").pop())}`;
  }
  const typesNode = JSON.parse(
    readFileSync(join(root, "node_modules/@types/node/package.json"), "utf8"),
  ).version;
  writeFileSync(
    join(project, "package.json"),
    `${JSON.stringify(
      {
        name: "nebula-consumer",
        private: true,
        dependencies: { [name]: tarballs[name], "@types/node": typesNode },
        overrides: tarballs,
      },
      null,
      2,
    )}\n`,
  );
  run(
    "npm",
    [
      "install",
      "--prefer-offline",
      "--no-audit",
      "--no-fund",
      "--ignore-scripts",
      "--loglevel=error",
    ],
    project,
  );

  writeFileSync(
    join(project, "consumer.cjs"),
    `const m = require(${JSON.stringify(name)});\nconsole.log(JSON.stringify(Object.keys(m).sort()));\n`,
  );
  writeFileSync(
    join(project, "consumer.mjs"),
    `import * as m from ${JSON.stringify(name)};\nconsole.log(JSON.stringify(Object.keys(m).sort()));\n`,
  );
  const fromRequire = run(process.execPath, ["consumer.cjs"], project).trim();
  const fromImport = run(process.execPath, ["consumer.mjs"], project).trim();
  const names = JSON.parse(fromImport);
  if (names.length === 0) fail("the ESM consumer sees no exports");
  if (fromRequire !== fromImport) {
    fail(
      `require() and import see different exports:\n  require: ${fromRequire}\n  import:  ${fromImport}`,
    );
  }

  const tsConsumer = `import * as m from ${JSON.stringify(name)};\nexport const names: readonly string[] = Object.keys(m);\n`;
  writeFileSync(join(project, "consumer-cjs.cts"), tsConsumer);
  writeFileSync(join(project, "consumer-esm.mts"), tsConsumer);
  writeFileSync(
    join(project, "tsconfig.json"),
    `${JSON.stringify(
      {
        compilerOptions: {
          module: "nodenext",
          moduleResolution: "nodenext",
          target: "es2023",
          strict: true,
          skipLibCheck: true,
          noEmit: true,
          types: ["node"],
        },
        files: ["consumer-cjs.cts", "consumer-esm.mts"],
      },
      null,
      2,
    )}\n`,
  );
  run(
    process.execPath,
    [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"],
    project,
  );

  // This package's declarations and those of the workspace packages it brings along.
  const unresolved = Object.keys(tarballs).flatMap((pkgName) =>
    unresolvedDeclarationImports(join(project, "node_modules", pkgName)).map(
      (where) => `${pkgName}/${where}`,
    ),
  );
  if (unresolved.length > 0) {
    fail(
      `its type declarations import modules a consumer without optional peers does not have, so their types would silently become \`any\`:\n  ${unresolved.join("\n  ")}`,
    );
  }

  // Every relative link of the README points at a file the tarball ships.
  const ownTarball = tarballs[name].slice("file:".length);
  const shipped = run("tar", ["-tzf", ownTarball], project)
    .split("\n")
    .filter(Boolean)
    .map((entry) => entry.replace(/^package\//, ""));
  const broken = brokenReadmeLinks(readFileSync(join(here, "README.md"), "utf8"), shipped);
  if (broken.length > 0) {
    fail(
      `README.md links to files the package does not ship (use a URL, or add them to "files"):\n  ${broken.join("\n  ")}`,
    );
  }

  // The README's runnable example, as written, against the installed tarball.
  let example;
  try {
    example = await checkReadmeExample({
      name,
      readme: readFileSync(join(here, "README.md"), "utf8"),
      project,
      tsc: async (args) =>
        run(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), ...args], project),
    });
  } catch (error) {
    fail(error.message);
  }

  const { packages, bytes } = footprint(project);
  console.log(
    `check-package ${name}: require() and import both load ${names.length} exports; TypeScript nodenext (cts+mts, strict) type-checks; every import of its declarations resolves`,
  );
  console.log(
    `check-package ${name}: install footprint ${packages} packages, ${(bytes / 1e6).toFixed(1)} MB in node_modules (with @types/node)`,
  );
  console.log(`check-package ${name}: every relative link of its README ships; ${example}`);
  if (keep) console.log(`check-package ${name}: kept ${project}`);
} finally {
  if (!keep) rmSync(project, { recursive: true, force: true });
}
