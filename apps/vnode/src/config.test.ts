import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { loadAppConfig } from "./config.js";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Writes `content` as a configuration file and loads it for Node "n1". */
function load(content: unknown) {
  const dir = mkdtempSync(join(tmpdir(), "nebula-vnode-config-"));
  dirs.push(dir);
  const path = join(dir, "config.json");
  writeFileSync(path, JSON.stringify(content));
  return loadAppConfig(path, { nodeName: "n1" });
}

const kubeletApi = {};

describe("loadAppConfig", () => {
  it("gives the Node's name to both, and --cluster overrides the provider's cluster", () => {
    const dir = mkdtempSync(join(tmpdir(), "nebula-vnode-config-"));
    dirs.push(dir);
    const path = join(dir, "config.json");
    writeFileSync(path, JSON.stringify({ provider: { clusterName: "a" }, kubeletApi }));
    const config = loadAppConfig(path, { nodeName: "n1", cluster: "b" });
    expect(config.node.nodeName).toBe("n1");
    expect(config.provider).toMatchObject({ nodeName: "n1", clusterName: "b" });
  });

  it("refuses a catalogue of another architecture than the Node's, saying what to set", () => {
    const catalogue = (architecture?: string) => ({
      instanceTypes: { default: "m7i.large", catalogue: { allowed: ["m7g.*"], architecture } },
    });
    expect(() =>
      load({ node: { architecture: "arm64" }, provider: catalogue(), kubeletApi }),
    ).toThrow(
      'provider.instanceTypes.catalogue.architecture is "x86_64" but node.architecture is "arm64"',
    );
    expect(() => load({ provider: catalogue("arm64"), kubeletApi })).toThrow(
      /node\.architecture is "amd64"; .*set both to the host image's architecture/,
    );
    expect(
      load({ node: { architecture: "arm64" }, provider: catalogue("arm64"), kubeletApi }).node
        .architecture,
    ).toBe("arm64");
    expect(load({ provider: catalogue(), kubeletApi }).node.architecture).toBe("amd64");
    // Without a catalogue the provider does not choose by architecture: nothing to compare.
    expect(
      load({ node: { architecture: "arm64" }, provider: {}, kubeletApi }).node.architecture,
    ).toBe("arm64");
  });
});
