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
  /** The kubelet API (`kubectl logs`, `/stats/summary`, `/metrics/resource`) on `node.kubeletPort`. */
  kubeletApi: z
    .strictObject({
      /** Serve it (default `true`). */
      enabled: z.boolean().default(true),
      /** Address to listen on (default every interface). */
      bindAddress: z.string().min(1).default("0.0.0.0"),
      /** Serving certificate (PEM file); with `tlsPrivateKeyFile`. Default: a self-signed one made at start. */
      tlsCertFile: z.string().min(1).optional(),
      /** Its private key (PEM file). */
      tlsPrivateKeyFile: z.string().min(1).optional(),
      /**
       * CA bundle (PEM file) the API server's kubelet client certificate is verified against.
       * Default: `client-ca-file` of the ConfigMap `kube-system/extension-apiserver-authentication`,
       * which kube-apiserver publishes from its `--client-ca-file`.
       */
      clientCaFile: z.string().min(1).optional(),
      /**
       * How long one read of container usage from CloudWatch serves `/stats/summary` and
       * `/metrics/resource`, in seconds (default 60: the hosts publish once a minute).
       */
      usageCacheSeconds: z.number().int().min(0).max(3600).default(60),
    })
    .refine((k) => (k.tlsCertFile === undefined) === (k.tlsPrivateKeyFile === undefined), {
      message: "tlsCertFile and tlsPrivateKeyFile go together: give both or neither",
    })
    .default({ enabled: true, bindAddress: "0.0.0.0", usageCacheSeconds: 60 }),
});

/** The parsed configuration of the app. */
export interface AppConfig {
  /** The virtual node's configuration. */
  readonly node: VirtualNodeConfig;
  /** The provider's configuration (validated by the provider). */
  readonly provider: Record<string, unknown>;
  /** The kubelet API's settings (see the configuration file's `kubeletApi`). */
  readonly kubeletApi: z.infer<typeof AppConfigFile>["kubeletApi"];
}

/** Builds the configuration from the file's JSON text and the flags. Throws with every problem listed. */
function parseAppConfig(
  text: string,
  flags: {
    readonly nodeName: string;
    readonly cluster?: string | undefined;
    readonly podIP?: string | undefined;
  },
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
  // The Node's InternalIP is where kube-apiserver reaches the kubelet API: this Pod's IP
  // (POD_IP from the downward API) unless the file names one.
  const node = parseVirtualNodeConfig({
    ...(flags.podIP === undefined || flags.podIP === "" ? {} : { internalIP: flags.podIP }),
    ...parsed.data.node,
    nodeName: flags.nodeName,
  });
  const provider = {
    ...parsed.data.provider,
    nodeName: flags.nodeName,
    ...(flags.cluster === undefined ? {} : { clusterName: flags.cluster }),
  };
  return { node, provider, kubeletApi: parsed.data.kubeletApi };
}

/** Reads and parses the configuration file. */
export function loadAppConfig(
  path: string,
  flags: {
    readonly nodeName: string;
    readonly cluster?: string | undefined;
    readonly podIP?: string | undefined;
  },
): AppConfig {
  return parseAppConfig(readFileSync(path, "utf8"), flags);
}
