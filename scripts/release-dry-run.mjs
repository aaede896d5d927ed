#!/usr/bin/env node
// A dry run of the release, changing nothing: what the next "Version packages" pull request would
// bump (changeset status), each npm package packed as `npm publish` would pack it (npm pack
// --dry-run), the chart packaged at the new version (helm package) with its images pinned by digest
// as the release pins them, and the images it would name.
// Run it after a build (it packs dist/); deploy/release.integration.test.ts runs it in CI.
//
//   node scripts/release-dry-run.mjs [--helm <path>] [--json <file>]
//
// Exits 1, saying why, when the plan cannot be released: the apps and deploy not at one version,
// a package without its dist, README or LICENSE in the tarball, a test or source map of tests
// packed, or the chart not packaging.

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { GROUP } from "./sync-versions.mjs";

const ROOT = fileURLToPath(new URL("../", import.meta.url));
const { values } = parseArgs({
  options: { helm: { type: "string" }, json: { type: "string" } },
});
const helm = values.helm ?? "helm";
const problems = [];
const run = (cmd, args, options = {}) =>
  execFileSync(cmd, args, { cwd: ROOT, encoding: "utf8", maxBuffer: 64 * 1024 * 1024, ...options });

const work = mkdtempSync(join(tmpdir(), "nebula-release-dry-run-"));
try {
  // 1. The plan: what changeset version would bump, from the pending changesets.
  run(
    join(ROOT, "node_modules/.bin/changeset"),
    ["status", "--output", join(work, "status.json")],
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  const { releases } = JSON.parse(readFileSync(join(work, "status.json"), "utf8"));
  const manifests = new Map();
  for (const dir of [
    ...run("git", [
      "ls-files",
      "packages/*/package.json",
      "apps/*/package.json",
      "deploy/package.json",
    ])
      .trim()
      .split("\n"),
  ]) {
    const manifest = JSON.parse(readFileSync(join(ROOT, dir), "utf8"));
    manifests.set(manifest.name, { dir: dir.replace(/\/package\.json$/, ""), manifest });
  }
  const groupNames = GROUP.map(
    (dir) => JSON.parse(readFileSync(join(ROOT, dir, "package.json"), "utf8")).name,
  );
  const groupVersions = new Set(
    groupNames.map(
      (name) =>
        releases.find((r) => r.name === name)?.newVersion ?? manifests.get(name)?.manifest.version,
    ),
  );
  if (groupVersions.size !== 1)
    problems.push(
      `the apps and deploy would not share a version: ${[...groupVersions].join(", ")}`,
    );
  const appVersion = [...groupVersions][0];

  // 2. Each public package as npm would pack it.
  const packages = [];
  for (const release of releases) {
    const entry = manifests.get(release.name);
    if (entry === undefined) {
      problems.push(`${release.name}: in the plan but not in the workspace`);
      continue;
    }
    if (entry.manifest.private === true) continue;
    const [packed] = JSON.parse(
      run("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
        cwd: join(ROOT, entry.dir),
      }),
    );
    const files = packed.files.map((f) => f.path);
    const missing = ["package.json", "README.md", "LICENSE"].filter((f) => !files.includes(f));
    if (missing.length > 0)
      problems.push(`${release.name}: the tarball lacks ${missing.join(", ")}`);
    if (!files.some((f) => f.startsWith("dist/") && f.endsWith(".js")))
      problems.push(`${release.name}: the tarball has no dist/*.js (build first)`);
    const tests = files.filter(
      (f) => /\.(test|integration\.test|bench)\.[cm]?[jt]s$/.test(f) || f.startsWith("src/"),
    );
    if (tests.length > 0)
      problems.push(
        `${release.name}: the tarball carries sources or tests: ${tests.slice(0, 3).join(", ")}`,
      );
    packages.push({
      name: release.name,
      from: release.oldVersion,
      to: release.newVersion,
      type: release.type,
      files: files.length,
      bytes: packed.size,
    });
  }

  // 3. The chart at the release's version, pinned to its images' digests as the release's images
  // job pins it (scripts/pin-chart-images.mjs, on a copy here; the digests stand in for the ones
  // the build would push), and the images it names.
  let chart;
  const digests = {
    vnode: `sha256:${createHash("sha256").update("dry run: nebula-vnode").digest("hex")}`,
    operator: `sha256:${createHash("sha256").update("dry run: nebula-operator").digest("hex")}`,
  };
  try {
    const copy = join(work, "chart");
    cpSync(join(ROOT, "deploy/helm/nebula"), copy, { recursive: true });
    run(process.execPath, [
      join(ROOT, "scripts/pin-chart-images.mjs"),
      "--chart",
      copy,
      "--vnode",
      digests.vnode,
      "--operator",
      digests.operator,
    ]);
    run(
      helm,
      [
        "package",
        copy,
        "--version",
        appVersion,
        "--app-version",
        appVersion,
        "--destination",
        work,
      ],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const tgz = join(work, `nebula-${appVersion}.tgz`);
    const shown = run(helm, ["show", "chart", tgz]);
    const version = /^version: (.*)$/m.exec(shown)?.[1];
    const app = /^appVersion: "?([^"\n]*)"?$/m.exec(shown)?.[1];
    if (version !== appVersion || app !== appVersion)
      problems.push(
        `the packaged chart says version ${version}, appVersion ${app}, not ${appVersion}`,
      );
    const rendered = run(helm, [
      "template",
      "nebula",
      tgz,
      "--set",
      "vnode.config.provider.clusterName=dry-run",
      "--set",
      "vnode.config.provider.region=us-east-1",
      "--set",
      "vnode.config.provider.subnetIds[0]=subnet-0123456789abcdef0",
      "--set",
      "vnode.config.provider.securityGroupIds[0]=sg-0123456789abcdef0",
      "--set",
      "vnode.config.provider.imageId=ami-0123456789abcdef0",
      "--set",
      "vnode.config.provider.instanceProfile=nebula-host",
    ]);
    const images = [
      ...new Set([...rendered.matchAll(/image: "?([^"\s]+)"?/g)].map((m) => m[1])),
    ].sort();
    const expected = Object.values(digests).map((d) => `:${appVersion}@${d}`);
    for (const image of images)
      if (!expected.some((end) => image.endsWith(end)))
        problems.push(`the chart at ${appVersion} names the image ${image}`);
    chart = { file: `nebula-${appVersion}.tgz`, version, appVersion: app, images, digests };
  } catch (error) {
    problems.push(`helm package failed: ${String(error.stderr ?? error.message).trim()}`);
  }

  const plan = { packages, appVersion, chart, problems };
  if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(plan, null, 2)}\n`);
  console.log(
    `release dry run: ${packages.length} npm packages would be published, the chart and the images at ${appVersion}`,
  );
  for (const p of packages)
    console.log(
      `  ${p.name} ${p.from} → ${p.to} (${p.type}): ${p.files} files, ${(p.bytes / 1024).toFixed(0)} KiB packed`,
    );
  if (chart) {
    console.log(`  chart ${chart.file} (version ${chart.version}, appVersion ${chart.appVersion})`);
    for (const image of chart.images)
      console.log(`  image ${image} (the digest stands in for the one the release pushes)`);
  }
  if (problems.length > 0) {
    console.error(`release dry run: ${problems.length} problem(s):`);
    for (const p of problems) console.error(`  ${p}`);
    process.exitCode = 1;
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
