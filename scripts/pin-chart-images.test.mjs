import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { pinDigests } from "./pin-chart-images.mjs";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const SCRIPT = join(ROOT, "scripts/pin-chart-images.mjs");
const A = `sha256:${"a".repeat(64)}`;
const B = `sha256:${"b".repeat(64)}`;

test("pins both images of the chart's own values.yaml and changes no other line", () => {
  const before = readFileSync(join(ROOT, "deploy/helm/nebula/values.yaml"), "utf8");
  const after = pinDigests(before, { vnode: A, operator: B });
  const changed = after
    .split("\n")
    .map((line, i) => [before.split("\n")[i], line])
    .filter(([was, is]) => was !== is);
  assert.deepEqual(changed, [
    ['    digest: ""', `    digest: "${A}"`],
    ['    digest: ""', `    digest: "${B}"`],
  ]);
  assert.ok(
    after.indexOf(A) < after.indexOf("nebula-operator"),
    "the vnode's digest is the vnode's",
  );
});

test("refuses values whose image block has no empty digest line, or names an image twice", () => {
  const one = 'vnode:\n  image:\n    repository: ghcr.io/nebula-dev/nebula-vnode\n    tag: ""\n';
  const op =
    'operator:\n  image:\n    repository: ghcr.io/nebula-dev/nebula-operator\n    digest: ""\n';
  assert.throws(() => pinDigests(one + op, { vnode: A, operator: B }), /no 'digest: ""'/);
  assert.throws(
    () => pinDigests(op + op, { operator: B }),
    /names ghcr.io\/nebula-dev\/nebula-operator 2 times/,
  );
});

test("the CLI writes the chart's values, and exits 2 on a digest that is not one", () => {
  const dir = mkdtempSync(join(tmpdir(), "nebula-pin-"));
  try {
    cpSync(join(ROOT, "deploy/helm/nebula/values.yaml"), join(dir, "values.yaml"));
    execFileSync(process.execPath, [SCRIPT, "--chart", dir, "--vnode", A, "--operator", B]);
    assert.match(readFileSync(join(dir, "values.yaml"), "utf8"), new RegExp(`digest: "${B}"`));
    const bad = spawnSync(
      process.execPath,
      [SCRIPT, "--chart", dir, "--vnode", "sha256:1", "--operator", B],
      {
        encoding: "utf8",
      },
    );
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /two sha256 digests are required/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
