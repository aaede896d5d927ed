// Tests scripts/check-public-api.mjs on throwaway fixture trees laid out like the repository:
//   node --test scripts/check-public-api.test.mjs
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";

const script = join(dirname(fileURLToPath(import.meta.url)), "check-public-api.mjs");
const trees = [];
after(() => {
  for (const tree of trees) rmSync(tree, { recursive: true, force: true });
});

/** Writes `files` (path → text; objects become JSON) into a fresh tree; returns its path. */
function tree(files) {
  const root = mkdtempSync(join(tmpdir(), "check-public-api-"));
  trees.push(root);
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(
      join(root, path),
      typeof content === "string" ? content : JSON.stringify(content, null, 2),
    );
  }
  return root;
}

/** Runs the check on `root`: { status, out }. */
function check(root) {
  try {
    const out = execFileSync(process.execPath, [script, "--root", root], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    return { status: 0, out };
  } catch (error) {
    return { status: error.status, out: `${error.stdout}${error.stderr}` };
  }
}

const lib = (name, exportsField) => ({
  name,
  version: "0.1.0",
  exports: exportsField ?? { ".": { types: "./dist/index.d.ts", default: "./dist/index.js" } },
});

/** A published package `@x/lib` with a subpath entry, and an app using some of it. */
function base(extra = {}) {
  return {
    "packages/lib/package.json": lib("@x/lib", {
      ".": { types: "./dist/index.d.ts", default: "./dist/index.js" },
      "./queue": { types: "./dist/queue/index.d.ts", default: "./dist/queue/index.js" },
      "./package.json": "./package.json",
    }),
    "packages/lib/src/index.ts":
      'export * from "./a.js";\nexport { c as renamed } from "./b.js";\n',
    "packages/lib/src/a.ts": "export const used = 1;\nexport type Shape = { n: number };\n",
    "packages/lib/src/b.ts": "export function c() {}\n",
    "packages/lib/src/queue/index.ts": "export class Queue {}\n",
    "apps/app/package.json": { name: "@x/app", private: true },
    "apps/app/src/main.ts":
      'import { used, type Shape, renamed } from "@x/lib";\nimport * as q from "@x/lib/queue";\nexport const s: Shape = { n: used };\nrenamed();\nnew q.Queue();\n',
    ...extra,
  };
}

test("passes when every name of every entry is used in production", () => {
  const { status, out } = check(tree(base()));
  assert.equal(status, 0, out);
  assert.match(out, /2 entries checked/);
});

test("fails naming the package, entry and name nobody uses, and says what to do", () => {
  const root = tree(
    base({
      "packages/lib/src/b.ts": "export function c() {}\nexport const lonely = 2;\n",
      "packages/lib/src/index.ts":
        'export * from "./a.js";\nexport { c as renamed, lonely } from "./b.js";\n',
    }),
  );
  const { status, out } = check(root);
  assert.equal(status, 1);
  assert.match(out, /@x\/lib: @x\/lib exports lonely, which no other package or app imports/);
  assert.match(out, /Public API kept without an in-repo user/);
});

test("tests, testing/ helpers, benches and the package itself do not count as users", () => {
  const root = tree(
    base({
      "packages/lib/src/queue/index.ts": "export class Queue {}\nexport const onlyTests = 1;\n",
      "apps/app/src/main.test.ts": 'import { onlyTests } from "@x/lib/queue";\n',
      "apps/app/src/testing/helper.ts": 'import { onlyTests } from "@x/lib/queue";\n',
      "apps/app/src/load.bench.ts": 'import { onlyTests } from "@x/lib/queue";\n',
      "packages/lib/src/self.ts": 'import { onlyTests } from "@x/lib/queue";\n',
    }),
  );
  const { status, out } = check(root);
  assert.equal(status, 1);
  assert.match(out, /@x\/lib\/queue exports onlyTests/);
});

test("a name listed with a reason in docs/public-api.md passes; a stale row fails", () => {
  const files = base({
    "packages/lib/src/queue/index.ts": "export class Queue {}\nexport const kept = 1;\n",
    "docs/public-api.md":
      "# x\n\n## Public API kept without an in-repo user\n\n### `@x/lib`\n\n| entry | name | why |\n| --- | --- | --- |\n| `@x/lib/queue` | `kept` | in the README example |\n",
  });
  assert.equal(check(tree(files)).status, 0);
  files["docs/public-api.md"] +=
    "| `@x/lib` | `used` | stale: the app uses it |\n| `@x/lib` | `gone` | not exported |\n";
  const { status, out } = check(tree(files));
  assert.equal(status, 1);
  assert.match(
    out,
    /@x\/lib used is listed as kept without a user, but apps\/app\/src\/main.ts imports it/,
  );
  assert.match(out, /@x\/lib does not export gone/);
});

test("a row without a reason does not count", () => {
  const files = base({
    "packages/lib/src/queue/index.ts": "export class Queue {}\nexport const kept = 1;\n",
    "docs/public-api.md":
      "## Public API kept without an in-repo user\n\n| entry | name | why |\n| --- | --- | --- |\n| `@x/lib/queue` | `kept` | |\n",
  });
  const { status, out } = check(tree(files));
  assert.equal(status, 1);
  assert.match(out, /needs three cells/);
});

test("fails an entry with more than 30 names", () => {
  const many = Array.from({ length: 31 }, (_, i) => `export const n${i} = ${i};`).join("\n");
  const uses = `import { ${Array.from({ length: 31 }, (_, i) => `n${i}`).join(", ")} } from "@x/wide";\n`;
  const root = tree(
    base({
      "packages/wide/package.json": lib("@x/wide"),
      "packages/wide/src/index.ts": `${many}\n`,
      "apps/app/src/wide.ts": uses,
    }),
  );
  const { status, out } = check(root);
  assert.equal(status, 1);
  assert.match(
    out,
    /@x\/wide: the entry @x\/wide \(packages\/wide\/src\/index.ts\) exports 31 names, more than 30/,
  );
});

test("a package listed as temporarily exempt is not checked, and the run says so", () => {
  const root = tree(
    base({
      "packages/wip/package.json": lib("@x/wip"),
      "packages/wip/src/index.ts": "export const nobodyUsesMe = 1;\n",
      "docs/public-api.md":
        "## Packages temporarily exempt from this check\n\n| package | why |\n| --- | --- |\n| `@x/wip` | being redesigned |\n",
    }),
  );
  const { status, out } = check(root);
  assert.equal(status, 0, out);
  assert.match(out, /@x\/wip is temporarily exempt/);
});

test("private packages (test infrastructure) are not checked and do not count as users", () => {
  const root = tree(
    base({
      "packages/peers/package.json": { name: "@x/peers", private: true },
      "packages/peers/src/index.ts":
        'import { Queue } from "@x/lib/queue";\nexport const unused = Queue;\n',
      "packages/lib/src/queue/index.ts": "export class Queue {}\nexport const forPeers = 1;\n",
      "packages/peers/src/use.ts": 'import { forPeers } from "@x/lib/queue";\n',
    }),
  );
  const { status, out } = check(root);
  assert.equal(status, 1);
  assert.match(out, /@x\/lib\/queue exports forPeers/);
  assert.doesNotMatch(out, /@x\/peers/);
});
