/**
 * The Helm chart's schema for `vnode.config` (and each `vnode.nodes[].config`), made from the zod
 * schemas the app parses its configuration file with, so a typo fails at `helm install`, not in
 * a crash loop. `chart-schema.test.ts` keeps deploy/helm/nebula/values.schema.json equal to it.
 */
import { ProviderConfigSchema } from "@nebula/provider";
import { VirtualNodeConfigSchema } from "@nebula/virtual-node/config";
import { KubeletApiConfigSchema } from "@nebula/virtual-node/kubelet";
import { z } from "zod";

type Json = { [key: string]: unknown };

/**
 * The six provider values the chart checks itself (`required`, with a message that says what each
 * is for), so their empty placeholders in values.yaml stay valid: the chart renders without them
 * when the vnode is off.
 */
const CHART_REQUIRED = [
  "clusterName",
  "region",
  "subnetIds",
  "securityGroupIds",
  "imageId",
  "instanceProfile",
] as const;

/** A zod schema as draft-07 JSON Schema (what Helm validates values with), as the file accepts it. */
function jsonSchema(schema: z.ZodType): Json {
  const { $schema: _draft, ...rest } = z.toJSONSchema(schema, {
    target: "draft-7",
    io: "input",
    unrepresentable: "any",
  }) as Json;
  return rest;
}

/** The schema without `name` among its properties and required keys. */
function without(schema: Json, name: string): Json {
  const { [name]: _dropped, ...properties } = (schema.properties ?? {}) as Json;
  const required = ((schema.required ?? []) as string[]).filter((r) => r !== name);
  const { required: _all, ...rest } = schema;
  return { ...rest, properties, ...(required.length > 0 ? { required } : {}) };
}

/** Every `required` list dropped, at every depth: an entry's config is merged over the base one. */
function partial(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(partial);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value as Json)
      .filter(([key]) => key !== "required")
      .map(([key, v]) => [key, partial(v)]),
  );
}

/** The provider section: `nodeName` comes from `--node-name`; the chart's six may stay empty. */
function providerSchema(): Json {
  const schema = without(jsonSchema(ProviderConfigSchema), "nodeName");
  const properties = { ...(schema.properties as Json) };
  for (const key of CHART_REQUIRED) {
    const own = properties[key] as Json | undefined;
    if (own === undefined) continue;
    const empty = own.type === "array" ? { type: "array", maxItems: 0 } : { const: "" };
    properties[key] = { anyOf: [own, empty] };
  }
  const required = ((schema.required ?? []) as string[]).filter(
    (r) => !(CHART_REQUIRED as readonly string[]).includes(r),
  );
  const { required: _all, ...rest } = schema;
  return { ...rest, properties, ...(required.length > 0 ? { required } : {}) };
}

/**
 * `vnode.config`'s schema (`config`) and an entry's (`entryConfig`, the same without required
 * keys): the configuration file's `node` (without `nodeName`, from `--node-name`), `provider`
 * and `kubeletApi`, nothing else.
 */
export function chartConfigSchemas(): { config: Json; entryConfig: Json } {
  const config: Json = {
    type: "object",
    additionalProperties: false,
    description:
      "config.json of nebula-vnode (deploy/vnode/README.md): node, provider and kubeletApi, checked here as the app checks them (generated from its configuration schema: npm run chart-schema -w apps/vnode).",
    properties: {
      node: without(jsonSchema(VirtualNodeConfigSchema), "nodeName"),
      provider: providerSchema(),
      kubeletApi: jsonSchema(KubeletApiConfigSchema),
    },
  };
  const entryConfig = {
    ...(partial(config) as Json),
    description: "Merged over vnode.config for this node only (the same keys, none required).",
  };
  return { config, entryConfig };
}
