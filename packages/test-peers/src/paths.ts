import { homedir } from "node:os";
import { join } from "node:path";

/** The Kubernetes version `scripts/bootstrap.sh` builds by default (`NEBULA_K8S_VERSION`). */
export const DEFAULT_K8S_VERSION = "v1.35.4";
/** The etcd version paired with {@link DEFAULT_K8S_VERSION} (`NEBULA_ETCD_VERSION`). */
export const DEFAULT_ETCD_VERSION = "v3.6.13";
/** The moto version `scripts/bootstrap.sh` installs (`NEBULA_MOTO_VERSION`). */
export const DEFAULT_MOTO_VERSION = "5.2.5";
/** The Helm version `scripts/bootstrap.sh` builds (`NEBULA_HELM_VERSION`). */
export const DEFAULT_HELM_VERSION = "v4.3.1";

/** The metrics-server version `scripts/bootstrap.sh` builds (`NEBULA_METRICS_SERVER_VERSION`). */
export const DEFAULT_METRICS_SERVER_VERSION = "v0.8.0";

/** The CoreDNS version `scripts/bootstrap.sh` builds (`NEBULA_COREDNS_VERSION`). */
export const DEFAULT_COREDNS_VERSION = "v1.14.7";

/**
 * The cache folder `scripts/bootstrap.sh` fills: `NEBULA_CACHE_DIR`, else `~/.cache/nebula`.
 *
 * @param env - the environment to read (default `process.env`).
 */
export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env.NEBULA_CACHE_DIR;
  return fromEnv !== undefined && fromEnv !== "" ? fromEnv : join(homedir(), ".cache", "nebula");
}

/**
 * The `helm` binary `scripts/bootstrap.sh helm` builds: `<cacheDir>/helm/<NEBULA_HELM_VERSION>/helm`.
 *
 * @param env - the environment to read (default `process.env`).
 */
export function helmPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(cacheDir(env), "helm", env.NEBULA_HELM_VERSION || DEFAULT_HELM_VERSION, "helm");
}

/**
 * The `metrics-server` binary `scripts/bootstrap.sh metrics-server` builds:
 * `<cacheDir>/metrics-server/<NEBULA_METRICS_SERVER_VERSION>/metrics-server`.
 *
 * @param env - the environment to read (default `process.env`).
 */
export function metricsServerPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(
    cacheDir(env),
    "metrics-server",
    env.NEBULA_METRICS_SERVER_VERSION || DEFAULT_METRICS_SERVER_VERSION,
    "metrics-server",
  );
}

/**
 * The `coredns` binary `scripts/bootstrap.sh coredns` builds:
 * `<cacheDir>/coredns/<NEBULA_COREDNS_VERSION>/coredns`.
 *
 * @param env - the environment to read (default `process.env`).
 */
export function corednsPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(
    cacheDir(env),
    "coredns",
    env.NEBULA_COREDNS_VERSION || DEFAULT_COREDNS_VERSION,
    "coredns",
  );
}
