import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { chartConfigSchemas } from "./chart-schema.js";

const FILE = fileURLToPath(
  new URL("../../../deploy/helm/nebula/values.schema.json", import.meta.url),
);

type Schema = {
  properties: {
    vnode: {
      properties: {
        config: unknown;
        nodes: { items: { properties: { config: unknown } } };
      };
    };
  };
};

describe("the chart's schema for the vnode's configuration", () => {
  it("is the app's own (deploy/helm/nebula/values.schema.json; npm run chart-schema -w apps/vnode writes it)", () => {
    const file = JSON.parse(readFileSync(FILE, "utf8")) as Schema;
    const { config, entryConfig } = chartConfigSchemas();
    if (process.env.NEBULA_WRITE_CHART_SCHEMA === "1") {
      file.properties.vnode.properties.config = config;
      file.properties.vnode.properties.nodes.items.properties.config = entryConfig;
      writeFileSync(FILE, `${JSON.stringify(file, null, 2)}\n`);
    }
    const vnode = file.properties.vnode.properties;
    const hint = "values.schema.json is out of date: run npm run chart-schema -w apps/vnode";
    expect(vnode.config, hint).toEqual(config);
    expect(vnode.nodes.items.properties.config, hint).toEqual(entryConfig);
  });

  it("knows every key of the configuration file and refuses others", () => {
    const { config, entryConfig } = chartConfigSchemas();
    const keys = (s: unknown) => Object.keys((s as { properties: object }).properties);
    expect(keys(config)).toEqual(["node", "provider", "kubeletApi"]);
    const provider = (
      config.properties as Record<string, { properties: object; additionalProperties: unknown }>
    ).provider;
    expect(Object.keys(provider?.properties ?? {})).toContain("ec2Budget");
    expect(Object.keys(provider?.properties ?? {})).not.toContain("nodeName");
    expect(provider?.additionalProperties).toBe(false);
    // An entry's config is merged over the base: nothing in it is required.
    expect(JSON.stringify(entryConfig)).not.toContain('"required"');
  });
});
