/**
 * The release, dry (issue #33): what the next "Version packages" pull request would bump, every
 * public package packed as `npm publish` packs it, and the chart packaged at the release's version
 * with the images it names, all from the built workspace and changing nothing
 * (scripts/release-dry-run.mjs). The first real release is then not the first run of its steps.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { helmPath } from "@nebula/test-peers";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../", import.meta.url));
const work = mkdtempSync(join(tmpdir(), "nebula-release-test-"));

afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Plan {
  packages: Array<{ name: string; from: string; to: string; files: number; bytes: number }>;
  appVersion: string;
  chart?: {
    file: string;
    version: string;
    appVersion: string;
    images: string[];
    digests: { vnode: string; operator: string };
  };
  problems: string[];
}

describe("the release, dry", () => {
  it("packs every package the pending changesets bump and the chart at one version, changing nothing", async () => {
    const before = (await run("git", ["status", "--porcelain"], { cwd: ROOT })).stdout;
    const out = join(work, "plan.json");
    const { stdout } = await run(
      process.execPath,
      [join(ROOT, "scripts/release-dry-run.mjs"), "--helm", helmPath(), "--json", out],
      { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 },
    );
    const plan = JSON.parse(readFileSync(out, "utf8")) as Plan;
    expect(plan.problems).toEqual([]);
    expect(stdout).toContain(`the chart and the images at ${plan.appVersion}`);
    // What it would publish: the public packages only, each bumped, each with its files.
    const manifest = (dir: string) =>
      JSON.parse(readFileSync(join(ROOT, dir, "package.json"), "utf8")) as {
        name: string;
        version: string;
        private?: boolean;
      };
    for (const p of plan.packages) {
      expect(p.to, p.name).not.toBe(p.from);
      expect(p.files, p.name).toBeGreaterThan(3);
    }
    const names = plan.packages.map((p) => p.name);
    for (const dir of ["apps/vnode", "apps/operator", "deploy", "packages/test-peers"])
      if (manifest(dir).private) expect(names).not.toContain(manifest(dir).name);
    // The chart and the images carry the apps' (new) version, each image pinned to its digest as
    // the release's images job pins the chart (scripts/pin-chart-images.mjs).
    expect(plan.chart?.version).toBe(plan.appVersion);
    expect(plan.chart?.appVersion).toBe(plan.appVersion);
    expect(plan.chart?.digests.vnode).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(plan.chart?.digests.operator).not.toBe(plan.chart?.digests.vnode);
    expect(plan.chart?.images.sort()).toEqual([
      `ghcr.io/nebula-dev/nebula-operator:${plan.appVersion}@${plan.chart?.digests.operator}`,
      `ghcr.io/nebula-dev/nebula-vnode:${plan.appVersion}@${plan.chart?.digests.vnode}`,
    ]);
    // Nothing in the checkout changed.
    expect((await run("git", ["status", "--porcelain"], { cwd: ROOT })).stdout).toBe(before);
  });
});
