#!/usr/bin/env node
// A package's first CHANGELOG says "first release", not the history of its development.
//
// Until a package is released, its pending changesets describe changes to code no user has had:
// "Breaking: ...", fixes to bugs nobody met. `changeset version` would copy all of them into the
// first CHANGELOG.md. `npm run version-packages` runs this right after it: every CHANGELOG.md that
// git does not track yet (a package's first) is replaced by one entry for the version it releases,
// saying what the package is (its package.json description). A CHANGELOG.md already in git is left
// as changesets wrote it.
//
//   node scripts/first-changelog.mjs            # rewrite the new CHANGELOG.md files
//   node scripts/first-changelog.mjs --dry-run  # name them, change nothing

import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../", import.meta.url));

/**
 * The first CHANGELOG.md of a package.
 *
 * @param {{ name: string, version: string, description?: string }} manifest
 * @returns {string}
 */
export function firstChangelog(manifest) {
  const what = (manifest.description ?? "").trim();
  return [
    `# ${manifest.name}`,
    "",
    `## ${manifest.version}`,
    "",
    `First release${what ? `: ${what.replace(/\.$/, "")}.` : "."} See the README for what it offers and how to use it.`,
    "",
  ].join("\n");
}

/**
 * The package folders (relative to `root`) whose CHANGELOG.md exists but is not tracked by git.
 *
 * @param {string} root
 * @returns {string[]}
 */
export function firstReleases(root) {
  const git = (...args) => execFileSync("git", args, { cwd: root, encoding: "utf8" });
  const manifests = git(
    "ls-files",
    "packages/*/package.json",
    "apps/*/package.json",
    "deploy/package.json",
  )
    .split("\n")
    .filter(Boolean);
  const tracked = new Set(git("ls-files", "*CHANGELOG.md").split("\n").filter(Boolean));
  return manifests
    .map((file) => file.replace(/\/?package\.json$/, "") || ".")
    .filter((dir) => existsSync(join(root, dir, "CHANGELOG.md")))
    .filter((dir) => !tracked.has(join(dir, "CHANGELOG.md")));
}

function main() {
  const dry = process.argv.includes("--dry-run");
  const dirs = firstReleases(ROOT);
  for (const dir of dirs) {
    const manifest = JSON.parse(readFileSync(join(ROOT, dir, "package.json"), "utf8"));
    if (!dry) writeFileSync(join(ROOT, dir, "CHANGELOG.md"), firstChangelog(manifest));
    console.log(
      `first-changelog: ${dir}/CHANGELOG.md: ${manifest.name} ${manifest.version}, first release`,
    );
  }
  if (dirs.length === 0) console.log("first-changelog: no package has its first CHANGELOG.md");
}

if (import.meta.url === `file://${process.argv[1]}`) main();
