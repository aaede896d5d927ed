import { ApiException } from "@kubernetes/client-node";

/** Machine-readable codes of {@link KubeError}. */
export type KubeErrorCode =
  /** Options failed validation. */
  | "InvalidOptions"
  /** A zod schema has no structural `apiextensions.k8s.io/v1` equivalent (CRD generation). */
  | "UnsupportedSchema"
  /** A `pattern` Go's RE2 cannot compile (look-around, back-reference) (CRD generation). */
  | "UnsupportedPattern"
  /** A store key is not `namespace/name` or `name`. */
  | "InvalidKey"
  /** A request to the API server failed (transport, authorization, unexpected status). */
  | "RequestFailed"
  /** No cluster configuration: not in a cluster, no `--kubeconfig`, no `$KUBECONFIG`, no `~/.kube/config`. */
  | "KubeconfigNotFound"
  /** A kubeconfig file exists but cannot be loaded. */
  | "KubeconfigInvalid"
  /** An HTTP server (metrics, health probes) could not listen on its address. */
  | "ListenFailed"
  /** `run` was called on an informer, controller, elector or manager that is already running. */
  | "AlreadyRunning";

/** An error of `@nebula/kube`, with a machine-readable `code` and the original `cause`. */
export class KubeError extends Error {
  /** Machine-readable code. */
  readonly code: KubeErrorCode;
  override readonly name = "KubeError";
  constructor(code: KubeErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/**
 * The HTTP status of a failed `@kubernetes/client-node` request, or `undefined` when there was no
 * response (transport failure).
 *
 * @example
 * ```ts
 * try { await api.read(spec); } catch (error) { if (statusOf(error) === 404) return undefined; throw error; }
 * ```
 */
export function statusOf(error: unknown): number | undefined {
  if (error instanceof ApiException) return error.code;
  if (typeof error === "object" && error !== null && "code" in error) {
    const code = (error as { code: unknown }).code;
    if (typeof code === "number" && code >= 100 && code < 600) return code;
  }
  return undefined;
}
