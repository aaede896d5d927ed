/**
 * Finds the cluster to talk to, in one place for both apps.
 *
 * Order: an explicit kubeconfig path (the `--kubeconfig` flag) always wins. Without one: the
 * in-cluster service account (when `KUBERNETES_SERVICE_HOST`/`_PORT` are set and the token file
 * exists), then `$KUBECONFIG` (a list of paths joined by `:`; the files found are merged, the first
 * one's current context wins), then `~/.kube/config`.
 *
 * @packageDocumentation
 */
import { existsSync, readFileSync } from "node:fs";
import { isIPv6 } from "node:net";
import { homedir } from "node:os";
import { delimiter, join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { z } from "zod";
import { KubeError } from "./errors.js";

/** Where the in-cluster service-account files live. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** Options of {@link connect}; every field is optional. */
const ConnectOptions = z.object({
  /** An explicit kubeconfig path (the `--kubeconfig` flag): used as is, never falls through. */
  kubeconfig: z.string().min(1).optional(),
  /** Environment to read (default `process.env`). */
  env: z.record(z.string(), z.string().optional()).optional(),
  /** Home directory for `~/.kube/config` (default `os.homedir()`). */
  homeDir: z.string().optional(),
  /** Prefix of the service-account directory (tests; default empty). */
  inClusterPathPrefix: z.string().optional(),
});

/** Input of {@link connect}. */
export type ConnectOptionsInput = z.input<typeof ConnectOptions>;

/** Where {@link connect} found its configuration. */
type ConnectSource = "flag" | "in-cluster" | "env" | "home";

/** A loaded configuration and where it came from. */
export interface Connection {
  /** The loaded configuration, ready for `makeApiClient`. */
  readonly kubeConfig: KubeConfig;
  /** Which source was used. */
  readonly source: ConnectSource;
  /** The file read (absent for in-cluster). */
  readonly path?: string;
  /** The namespace this process runs in when in a cluster, else the current context's namespace. */
  readonly namespace: string | undefined;
}

function loadFiles(paths: readonly string[]): KubeConfig {
  const [first, ...rest] = paths;
  const kc = new KubeConfig();
  try {
    if (first !== undefined) kc.loadFromFile(first);
    for (const path of rest) {
      const more = new KubeConfig();
      more.loadFromFile(path);
      kc.mergeConfig(more, true);
    }
  } catch (error) {
    throw new KubeError(
      "KubeconfigInvalid",
      `cannot load kubeconfig ${paths.join(delimiter)}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  return kc;
}

function contextNamespace(kc: KubeConfig): string | undefined {
  return kc.getContextObject(kc.getCurrentContext())?.namespace;
}

/**
 * Loads the cluster configuration (see the module doc for the order). Throws {@link KubeError}:
 * `KubeconfigNotFound` when no source exists, `KubeconfigInvalid` when a file cannot be loaded,
 * `InvalidOptions` for bad options.
 *
 * @example
 * ```ts
 * const { kubeConfig, source } = connect({ kubeconfig: flags.kubeconfig });
 * const core = kubeConfig.makeApiClient(CoreV1Api);
 * ```
 */
export function connect(options: ConnectOptionsInput = {}): Connection {
  const parsed = ConnectOptions.safeParse(options);
  if (!parsed.success) {
    throw new KubeError("InvalidOptions", `connect: ${parsed.error.message}`, {
      cause: parsed.error,
    });
  }
  const env = parsed.data.env ?? process.env;
  if (parsed.data.kubeconfig !== undefined) {
    const path = parsed.data.kubeconfig;
    if (!existsSync(path)) {
      throw new KubeError("KubeconfigNotFound", `--kubeconfig ${path}: no such file`);
    }
    const kubeConfig = loadFiles([path]);
    return { kubeConfig, source: "flag", path, namespace: contextNamespace(kubeConfig) };
  }
  const prefix = parsed.data.inClusterPathPrefix ?? "";
  const saDir = `${prefix}${SERVICE_ACCOUNT_DIR}`;
  if (
    env.KUBERNETES_SERVICE_HOST &&
    env.KUBERNETES_SERVICE_PORT &&
    existsSync(join(saDir, "token"))
  ) {
    // client-node's loadFromCluster reads process.env; rebuild its result from `env`.
    const template = new KubeConfig();
    template.loadFromCluster(prefix);
    const host = env.KUBERNETES_SERVICE_HOST;
    const port = env.KUBERNETES_SERVICE_PORT;
    const scheme = port === "80" || port === "8080" || port === "8001" ? "http" : "https";
    const server = `${scheme}://${isIPv6(host) ? `[${host}]` : host}:${port}`;
    const cluster = { ...template.clusters[0], name: "inCluster", server, skipTLSVerify: false };
    const user = { ...template.users[0], name: "inClusterUser" };
    const nsFile = join(saDir, "namespace");
    const namespace = existsSync(nsFile) ? readFileSync(nsFile, "utf8").trim() : undefined;
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [cluster],
      users: [user],
      contexts: [
        {
          name: "inClusterContext",
          cluster: "inCluster",
          user: "inClusterUser",
          ...(namespace === undefined ? {} : { namespace }),
        },
      ],
      currentContext: "inClusterContext",
    });
    return { kubeConfig, source: "in-cluster", namespace };
  }
  const fromEnv = (env.KUBECONFIG ?? "")
    .split(delimiter)
    .filter((path) => path !== "" && existsSync(path));
  if (fromEnv.length > 0) {
    const kubeConfig = loadFiles(fromEnv);
    return {
      kubeConfig,
      source: "env",
      path: fromEnv.join(delimiter),
      namespace: contextNamespace(kubeConfig),
    };
  }
  const home = join(parsed.data.homeDir ?? homedir(), ".kube", "config");
  if (existsSync(home)) {
    const kubeConfig = loadFiles([home]);
    return { kubeConfig, source: "home", path: home, namespace: contextNamespace(kubeConfig) };
  }
  throw new KubeError(
    "KubeconfigNotFound",
    "no cluster configuration: not running in a cluster, no --kubeconfig, no $KUBECONFIG file and no ~/.kube/config",
  );
}
