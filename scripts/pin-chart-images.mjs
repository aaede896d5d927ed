#!/usr/bin/env node
// Pins the chart's two images to the digests a release pushed: writes `digest: "sha256:..."` under
// vnode.image and operator.image in the chart's values.yaml, so the packaged chart pulls
// repository:tag@digest by default. Without dependencies (the release's images job installs none).
//
//   node scripts/pin-chart-images.mjs --chart deploy/helm/nebula --vnode sha256:... --operator sha256:...
//
// Exits 2 on a bad flag or digest, 1 when values.yaml does not hold each image's `digest: ""` line
// exactly once where it is expected (then nothing is written).

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const IMAGES = {
  vnode: "ghcr.io/nebula-dev/nebula-vnode",
  operator: "ghcr.io/nebula-dev/nebula-operator",
};

/**
 * values.yaml's text with each image's `digest: ""` (the first digest line after its repository
 * line, within that image block) set to the given digest. Throws, naming the image, when the line is
 * not there exactly once.
 */
export function pinDigests(text, digests) {
  const lines = text.split("\n");
  for (const [app, digest] of Object.entries(digests)) {
    const repository = lines.flatMap((line, i) =>
      line.trim() === `repository: ${IMAGES[app]}` ? [i] : [],
    );
    if (repository.length !== 1) {
      throw new Error(`values.yaml names ${IMAGES[app]} ${repository.length} times, not once`);
    }
    const start = repository[0];
    const indent = lines[start].length - lines[start].trimStart().length;
    let at = -1;
    for (let i = start + 1; i < lines.length; i++) {
      const line = lines[i];
      if (line.trim() === "" || line.trimStart().startsWith("#")) continue;
      if (line.length - line.trimStart().length < indent) break;
      if (line.trim() === 'digest: ""') {
        at = i;
        break;
      }
    }
    if (at < 0)
      throw new Error(`values.yaml: no 'digest: ""' in the image block of ${IMAGES[app]}`);
    lines[at] = `${" ".repeat(indent)}digest: "${digest}"`;
  }
  return lines.join("\n");
}

function main() {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        chart: { type: "string" },
        vnode: { type: "string" },
        operator: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (error) {
    console.error(`pin-chart-images: ${error.message}`);
    process.exit(2);
  }
  const usage =
    "usage: node scripts/pin-chart-images.mjs --chart <dir> --vnode sha256:<64 hex> --operator sha256:<64 hex>";
  if (values.help) {
    console.log(usage);
    return;
  }
  if (!values.chart || !DIGEST.test(values.vnode ?? "") || !DIGEST.test(values.operator ?? "")) {
    console.error(`pin-chart-images: --chart and two sha256 digests are required\n${usage}`);
    process.exit(2);
  }
  const file = join(values.chart, "values.yaml");
  let text;
  try {
    text = pinDigests(readFileSync(file, "utf8"), {
      vnode: values.vnode,
      operator: values.operator,
    });
  } catch (error) {
    console.error(`pin-chart-images: ${file}: ${error.message}`);
    process.exit(1);
  }
  writeFileSync(file, text);
  console.log(`pin-chart-images: ${file}: vnode@${values.vnode}, operator@${values.operator}`);
}

if (import.meta.url === `file://${process.argv[1]}`) main();
