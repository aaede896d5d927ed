import { readFileSync } from "node:fs";
import { parseVirtualNodeConfig, type VirtualNodeConfig } from "@nebula/virtual-node";
import { type KubeletApiConfig, KubeletApiConfigSchema } from "@nebula/virtual-node/kubelet";
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
  /** The kubelet API (`kubectl logs`, `/stats/summary`, `/metrics/resource`) on `node.kubeletPort`. */
  kubeletApi: KubeletApiConfigSchema,
});

/** The parsed configuration of the app. */
export interface AppConfig {
  /** The virtual node's configuration. */
  readonly node: VirtualNodeConfig;
  /** The provider's configuration (validated by the provider). */
  readonly provider: Record<string, unknown>;
  /** The kubelet API's settings (see the configuration file's `kubeletApi`). */
  readonly kubeletApi: KubeletApiConfig;
}

/**
 * Reads and parses the configuration file, with the flags: the Node's name, `--cluster`, and
 * `POD_IP`. Throws with every problem listed.
 */
export function loadAppConfig(
  path: string,
  flags: {
    readonly nodeName: string;
    readonly cluster?: string | undefined;
    readonly podIP?: string | undefined;
  },
): AppConfig {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    throw new Error(`the configuration is not JSON: ${error.message}`);
  }
  const parsed = AppConfigFile.safeParse(json);
  if (!parsed.success) {
    throw new Error(`invalid configuration: ${z.prettifyError(parsed.error)}`);
  }
  // The Node's InternalIP is where kube-apiserver reaches the kubelet API: this Pod's IP
  // (POD_IP from the downward API) unless the file names one.
  const node = parseVirtualNodeConfig({
    ...(flags.podIP === undefined || flags.podIP === "" ? {} : { internalIP: flags.podIP }),
    ...parsed.data.node,
    nodeName: flags.nodeName,
  });
  checkArchitecture(node.architecture, parsed.data.provider);
  const provider = {
    ...parsed.data.provider,
    nodeName: flags.nodeName,
    ...(flags.cluster === undefined ? {} : { clusterName: flags.cluster }),
  };
  return { node, provider, kubeletApi: parsed.data.kubeletApi };
}

/** EC2's name of each Kubernetes architecture (the `kubernetes.io/arch` label's values). */
const EC2_ARCHITECTURE: Readonly<Record<string, string>> = { amd64: "x86_64", arm64: "arm64" };

/** Where the provider's catalogue architecture is, when one is configured (read loosely). */
const CatalogueArchitecture = z.looseObject({
  instanceTypes: z
    .looseObject({
      catalogue: z.looseObject({ architecture: z.string().optional() }).optional(),
    })
    .optional(),
});

/**
 * The scheduler places a Pod on this Node by its `kubernetes.io/arch` label (`node.architecture`),
 * so the provider's catalogue must choose types of that architecture: throws when
 * `provider.instanceTypes.catalogue.architecture` (default `x86_64`) says otherwise.
 */
function checkArchitecture(nodeArchitecture: string, provider: Record<string, unknown>): void {
  const read = CatalogueArchitecture.safeParse(provider);
  const catalogue = read.success ? read.data.instanceTypes?.catalogue : undefined;
  if (catalogue === undefined) return;
  const chosen = catalogue.architecture ?? "x86_64";
  if (EC2_ARCHITECTURE[nodeArchitecture] === chosen) return;
  throw new Error(
    `invalid configuration: provider.instanceTypes.catalogue.architecture is "${chosen}" but node.architecture is "${nodeArchitecture}"; the scheduler places Pods by the Node's kubernetes.io/arch label, so set both to the host image's architecture (node "amd64" with catalogue "x86_64", or "arm64" with "arm64")`,
  );
}
