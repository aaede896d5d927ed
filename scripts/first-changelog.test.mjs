import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { firstChangelog, firstReleases } from "./first-changelog.mjs";

const SCRIPT = fileURLToPath(new URL("./first-changelog.mjs", import.meta.url));

test("the first entry is the version and what the package is, nothing of its history", () => {
  assert.equal(
    firstChangelog({
      name: "@nebula/kube",
      version: "0.2.0",
      description: "Controllers' plumbing.",
    }),
    "# @nebula/kube\n\n## 0.2.0\n\nFirst release: Controllers' plumbing. See the README for what it offers and how to use it.\n",
  );
  assert.match(firstChangelog({ name: "x", version: "1.0.0" }), /^First release\. See/m);
});

test("only a CHANGELOG.md that git does not track yet is a first one, and only it is rewritten", () => {
  const root = mkdtempSync(join(tmpdir(), "nebula-first-changelog-"));
  const git = (...args) => execFileSync("git", args, { cwd: root, encoding: "utf8" });
  try {
    git("init", "-q");
    for (const [dir, name] of [
      ["packages/old", "@nebula/old"],
      ["packages/new", "@nebula/new"],
      ["packages/quiet", "@nebula/quiet"],
    ]) {
      mkdirSync(join(root, dir), { recursive: true });
      writeFileSync(
        join(root, dir, "package.json"),
        JSON.stringify({ name, version: "0.2.0", description: `The ${name} package` }),
      );
    }
    writeFileSync(
      join(root, "packages/old/CHANGELOG.md"),
      "# @nebula/old\n\n## 0.1.0\n\n- released\n",
    );
    git("add", ".");
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first");
    // What `changeset version` leaves: a new entry on top of the released one, a new first file.
    const old =
      "# @nebula/old\n\n## 0.2.0\n\n### Minor Changes\n\n- a feature\n\n## 0.1.0\n\n- released\n";
    writeFileSync(join(root, "packages/old/CHANGELOG.md"), old);
    writeFileSync(
      join(root, "packages/new/CHANGELOG.md"),
      "# @nebula/new\n\n## 0.2.0\n\n### Minor Changes\n\n- Breaking: renamed a thing nobody had\n",
    );
    assert.deepEqual(firstReleases(root), ["packages/new"]);
    // The script works on its own repository; run it on this one through a copy of the script.
    mkdirSync(join(root, "scripts"));
    writeFileSync(join(root, "scripts/first-changelog.mjs"), readFileSync(SCRIPT));
    execFileSync(process.execPath, [join(root, "scripts/first-changelog.mjs")], { cwd: root });
    assert.equal(
      readFileSync(join(root, "packages/new/CHANGELOG.md"), "utf8"),
      firstChangelog({
        name: "@nebula/new",
        version: "0.2.0",
        description: "The @nebula/new package",
      }),
    );
    assert.equal(readFileSync(join(root, "packages/old/CHANGELOG.md"), "utf8"), old);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
