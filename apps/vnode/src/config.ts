import { readFileSync } from "node:fs";
import { parseVirtualNodeConfig, type VirtualNodeConfig } from "@nebula/virtual-node";
import { z } from "zod";

/**
 * The configuration file of `nebula-vnode` (JSON): the virtual node's settings and the provider's.
 * The Node's name comes from `--node-name` and is given to both; `--cluster` overrides
 * `provider.clusterName`.
 */
const AppConfigFile = z.strictObject({
  /** The virtual node (`@nebula/virtual-node`'s configuration, without `nodeName`). */
  node: z.record(z.string(), z.unknown()).default({}),
  /** The provider (`@nebula/provider`'s configuration, without `nodeName`). */
  provider: z.record(z.string(), z.unknown()),
});

/** The parsed configuration of the app. */
export interface AppConfig {
  /** The virtual node's configuration. */
  readonly node: VirtualNodeConfig;
  /** The provider's configuration (validated by the provider). */
  readonly provider: Record<string, unknown>;
}

/** Builds the configuration from the file's JSON text and the flags. Throws with every problem listed. */
function parseAppConfig(
  text: string,
  flags: { readonly nodeName: string; readonly cluster?: string | undefined },
): AppConfig {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Error(`the configuration is not JSON: ${(error as Error).message}`);
  }
  const parsed = AppConfigFile.safeParse(json);
  if (!parsed.success) {
    throw new Error(`invalid configuration: ${z.prettifyError(parsed.error)}`);
  }
  const node = parseVirtualNodeConfig({ ...parsed.data.node, nodeName: flags.nodeName });
  const provider = {
    ...parsed.data.provider,
    nodeName: flags.nodeName,
    ...(flags.cluster === undefined ? {} : { clusterName: flags.cluster }),
  };
  return { node, provider };
}

/** Reads and parses the configuration file. */
export function loadAppConfig(
  path: string,
  flags: { readonly nodeName: string; readonly cluster?: string | undefined },
): AppConfig {
  return parseAppConfig(readFileSync(path, "utf8"), flags);
}
