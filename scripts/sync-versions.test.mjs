import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { CARRIERS, GROUP, groupVersion } from "./sync-versions.mjs";

const carrier = (file) => CARRIERS.find((c) => c.file === file);

test("the group shares one version, or the error names each package's", () => {
  assert.deepEqual(groupVersion({ a: "1.2.0", b: "1.2.0" }), { version: "1.2.0" });
  const split = groupVersion({ "apps/vnode": "1.3.0", "apps/operator": "1.2.0" });
  assert.match(split.error, /apps\/vnode 1\.3\.0, apps\/operator 1\.2\.0/);
});

test("the chart's version and appVersion, and each manifest's image tag, are rewritten", () => {
  const chart = carrier("deploy/helm/nebula/Chart.yaml").rewrite(
    'name: nebula\nversion: 0.1.0\nappVersion: "0.1.0"\nkubeVersion: ">=1.30.0-0"\n',
    "0.2.0",
  );
  assert.equal(
    chart,
    'name: nebula\nversion: 0.2.0\nappVersion: "0.2.0"\nkubeVersion: ">=1.30.0-0"\n',
  );
  const vnode = carrier("deploy/vnode/deployment.yaml").rewrite(
    "          image: ghcr.io/nebula-dev/nebula-vnode:0.1.0\n          image: busybox:1.36\n",
    "0.2.0",
  );
  assert.equal(
    vnode,
    "          image: ghcr.io/nebula-dev/nebula-vnode:0.2.0\n          image: busybox:1.36\n",
  );
});

test("the repository is in step: the group's packages share a version the chart and the manifests carry", () => {
  const root = new URL("../", import.meta.url);
  const versions = Object.fromEntries(
    GROUP.map((dir) => [
      dir,
      JSON.parse(readFileSync(new URL(`${dir}/package.json`, root), "utf8")).version,
    ]),
  );
  const { version } = groupVersion(versions);
  assert.ok(version, JSON.stringify(versions));
  for (const { file, rewrite } of CARRIERS) {
    const text = readFileSync(new URL(file, root), "utf8");
    assert.equal(rewrite(text, version), text, `${file} is not at ${version}`);
  }
  const config = JSON.parse(readFileSync(new URL(".changeset/config.json", root), "utf8"));
  const names = GROUP.map(
    (dir) => JSON.parse(readFileSync(new URL(`${dir}/package.json`, root), "utf8")).name,
  );
  assert.ok(
    config.fixed.some((group) => names.every((n) => group.includes(n))),
    `.changeset/config.json fixes ${names.join(", ")} together`,
  );
  // The command agrees.
  const script = new URL("./sync-versions.mjs", import.meta.url).pathname;
  execFileSync("node", [script, "--check"], { stdio: "pipe" });
});
