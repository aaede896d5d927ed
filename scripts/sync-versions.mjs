#!/usr/bin/env node
// One version for what a cluster installs: the apps (@nebula/vnode-app, @nebula/operator-app) and
// the install artefacts (@nebula/deploy) move together (a `fixed` group in .changeset/config.json),
// and the Helm chart's `version` and `appVersion` and the plain manifests' image tags follow them.
// `npm run version-packages` runs this after `changeset version`; `--check` (part of
// `npm run lint`) fails when anything drifted.
//
//   node scripts/sync-versions.mjs           # write the version into Chart.yaml and the manifests
//   node scripts/sync-versions.mjs --check   # exit 1, naming each file, if one is behind

import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../", import.meta.url));

/** The packages that share the version, by folder. */
export const GROUP = ["apps/vnode", "apps/operator", "deploy"];

/** Files that carry the version, and how each is rewritten to `version`. */
export const CARRIERS = [
  {
    file: "deploy/helm/nebula/Chart.yaml",
    rewrite: (text, version) =>
      text
        .replace(/^version: .*$/m, `version: ${version}`)
        .replace(/^appVersion: .*$/m, `appVersion: "${version}"`),
  },
  {
    file: "deploy/vnode/deployment.yaml",
    rewrite: (text, version) =>
      text.replace(
        /(image: ghcr\.io\/nebula-dev\/nebula-vnode:)[^\s@]+/g,
        (_m, image) => `${image}${version}`,
      ),
  },
  {
    file: "deploy/operator/deployment.yaml",
    rewrite: (text, version) =>
      text.replace(
        /(image: ghcr\.io\/nebula-dev\/nebula-operator:)[^\s@]+/g,
        (_m, image) => `${image}${version}`,
      ),
  },
];

/**
 * The group's one version, or an error naming the packages that disagree.
 *
 * @param {Record<string, string>} versions version by package folder
 * @returns {{ version: string } | { error: string }}
 */
export function groupVersion(versions) {
  const distinct = [...new Set(Object.values(versions))];
  if (distinct.length === 1 && distinct[0] !== undefined) return { version: distinct[0] };
  return {
    error: `the packages that a cluster installs together have different versions (${Object.entries(
      versions,
    )
      .map(([dir, v]) => `${dir} ${v}`)
      .join(", ")}): .changeset/config.json's "fixed" group keeps them equal`,
  };
}

function main() {
  const check = process.argv.includes("--check");
  const versions = Object.fromEntries(
    GROUP.map((dir) => [
      dir,
      JSON.parse(readFileSync(`${ROOT}${dir}/package.json`, "utf8")).version,
    ]),
  );
  const group = groupVersion(versions);
  if ("error" in group) {
    console.error(`sync-versions: ${group.error}`);
    process.exit(1);
  }
  const behind = [];
  for (const { file, rewrite } of CARRIERS) {
    const text = readFileSync(`${ROOT}${file}`, "utf8");
    const next = rewrite(text, group.version);
    if (next === text) continue;
    if (check) behind.push(file);
    else writeFileSync(`${ROOT}${file}`, next);
  }
  if (behind.length > 0) {
    console.error(
      `sync-versions: not at ${group.version} (the apps' version): ${behind.join(", ")}; run node scripts/sync-versions.mjs`,
    );
    process.exit(1);
  }
  console.error(
    `sync-versions: the chart, its appVersion and the manifests' images are at ${group.version}${check ? "" : " (written)"}`,
  );
}

if (import.meta.url === `file://${process.argv[1]}`) main();
