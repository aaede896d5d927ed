/**
 * Requests a Pod's bound service-account tokens and reads its ServiceAccount, for a provider that
 * serves them on the Pod's machine (`@nebula/provider`'s `requestToken` and `readServiceAccount`). Kubernetes I/O the virtual node owns, next to
 * `podSourceReader`.
 *
 * @packageDocumentation
 */
import { readFileSync } from "node:fs";
import { CoreV1Api, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { z } from "zod";
import { VirtualNodeError } from "./errors.js";

/** What a provider asks: the audience (undefined: the API server's own) and the lifetime. */
interface TokenAsk {
  readonly audience: string | undefined;
  readonly expirationSeconds: number;
}

/** The parts of a `TokenRequest`'s answer the host needs. */
const TokenRequestStatus = z.object({
  status: z.object({
    token: z.string().min(1),
    expirationTimestamp: z.union([z.date(), z.string().min(1)]),
  }),
});

/** The API server's own words in a failed call (its `Status` message), else the error's. */
function statusMessage(error: unknown): string {
  const body = (error as { body?: unknown } | undefined)?.body;
  if (typeof body === "string") {
    try {
      const message = (JSON.parse(body) as { message?: unknown }).message;
      if (typeof message === "string" && message !== "") return message;
    } catch {
      // not JSON: the error's own message below
    }
  }
  return error instanceof Error ? error.message : String(error);
}

/**
 * Requests bound tokens of a Pod's ServiceAccount with `TokenRequest`, as the kubelet does for a
 * projected `serviceAccountToken`: for `spec.serviceAccountName` (`default` when unset), in the
 * Pod's namespace, bound to the Pod (its name and UID: the token stops being valid when the Pod is
 * deleted), with the audience and lifetime asked. The API server may issue a longer lifetime than
 * asked (`--service-account-extend-token-expiration`); the answer's expiry is the one returned.
 * Rejects with what the API server said (the ServiceAccount missing, forbidden, ...), or when the
 * answer has no token. Needs `create` on `serviceaccounts/token`; the shipped admission policy
 * refuses the virtual node a token that is not bound to a Pod.
 *
 * @example
 * ```ts
 * const provider = new Ec2PodProvider({ config, ledger, requestToken: podTokenRequester(kubeConfig) });
 * ```
 */
export function podTokenRequester(
  kubeConfig: KubeConfig,
): (pod: V1Pod, ask: TokenAsk) => Promise<{ token: string; expiresAt: number }> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  return async (pod, ask) => {
    const namespace = pod.metadata?.namespace ?? "default";
    const name = pod.spec?.serviceAccountName || "default";
    const podName = pod.metadata?.name;
    const uid = pod.metadata?.uid;
    if (!podName || !uid) {
      throw new Error(
        `cannot bind a token to pod ${namespace}/${podName ?? "?"}: it has no name or UID`,
      );
    }
    let answer: unknown;
    try {
      answer = await core.createNamespacedServiceAccountToken({
        name,
        namespace,
        body: {
          spec: {
            audiences: ask.audience === undefined ? [] : [ask.audience],
            expirationSeconds: ask.expirationSeconds,
            boundObjectRef: { apiVersion: "v1", kind: "Pod", name: podName, uid },
          },
        },
      });
    } catch (error) {
      throw new Error(
        `TokenRequest for serviceaccount ${namespace}/${name} (pod ${podName}): ${statusMessage(error)}`,
        { cause: error },
      );
    }
    const parsed = TokenRequestStatus.safeParse(answer);
    if (!parsed.success) {
      throw new Error(
        `TokenRequest for serviceaccount ${namespace}/${name} answered without a token: ${z.prettifyError(parsed.error)}`,
      );
    }
    const expiresAt = new Date(parsed.data.status.expirationTimestamp).getTime();
    if (!Number.isFinite(expiresAt)) {
      throw new Error(`TokenRequest for serviceaccount ${namespace}/${name}: unreadable expiry`);
    }
    return { token: parsed.data.status.token, expiresAt };
  };
}

/** The parts of a ServiceAccount a provider reads: its annotations (the AWS role of IRSA). */
const ServiceAccountSchema = z.object({
  metadata: z.object({ annotations: z.record(z.string(), z.string()).nullish() }).nullish(),
});

/**
 * Reads a Pod's ServiceAccount (`spec.serviceAccountName`, `default` when unset, in the Pod's
 * namespace) for its annotations, as `@nebula/provider`'s `readServiceAccount` wants them (the
 * `eks.amazonaws.com/role-arn` of IRSA). Undefined when it does not exist (404); rejects with what
 * the API server said otherwise. Needs `get` on `serviceaccounts`.
 *
 * @example
 * ```ts
 * const provider = new Ec2PodProvider({ config, ledger, readServiceAccount: podServiceAccountReader(kubeConfig) });
 * ```
 */
export function podServiceAccountReader(
  kubeConfig: KubeConfig,
): (pod: V1Pod) => Promise<{ annotations: Record<string, string> } | undefined> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  return async (pod) => {
    const namespace = pod.metadata?.namespace ?? "default";
    const name = pod.spec?.serviceAccountName || "default";
    let answer: unknown;
    try {
      answer = await core.readNamespacedServiceAccount({ name, namespace });
    } catch (error) {
      if ((error as { code?: number }).code === 404) return undefined;
      throw new Error(`reading serviceaccount ${namespace}/${name}: ${statusMessage(error)}`, {
        cause: error,
      });
    }
    const parsed = ServiceAccountSchema.safeParse(answer);
    if (!parsed.success) {
      throw new Error(
        `serviceaccount ${namespace}/${name} is malformed: ${z.prettifyError(parsed.error)}`,
      );
    }
    return { annotations: parsed.data.metadata?.annotations ?? {} };
  };
}

/** What {@link serviceProxyAccess} gives a provider (`@nebula/provider`'s `serviceProxy` option). */
export interface ServiceProxyAccess {
  /** The PEM CA bundle the API server's certificate is verified with (the virtual node's own). */
  readonly caCert: string;
  /** Requests a token of the service proxy's ServiceAccount, bound to the virtual node's Node. */
  readonly requestToken: (ask: {
    readonly expirationSeconds: number;
  }) => Promise<{ token: string; expiresAt: number }>;
}

/**
 * What the hosts' service proxy (kube-proxy in each Pod's network namespace) needs from the API
 * server: the CA the virtual node itself trusts it with (its kubeconfig's, the in-cluster
 * `ca.crt` in a Pod), and tokens of `serviceAccount` (`<namespace>/<name>`, bound to
 * `system:node-proxier`: Services, EndpointSlices, Nodes, never Secrets) bound to the Node
 * `nodeName` (its name and UID: the token dies with the Node), requested with the API server's
 * audience. Needs `create` on that ServiceAccount's `serviceaccounts/token` and `get` on the Node;
 * the shipped admission policy lets the virtual node bind a token to its Node only for that
 * ServiceAccount.
 *
 * @throws VirtualNodeError `InvalidConfiguration` when the kubeconfig names no CA (an insecure
 *   cluster entry: nothing would verify the API server) or `serviceAccount` is not
 *   `<namespace>/<name>`.
 *
 * @example
 * ```ts
 * const provider = new Ec2PodProvider({
 *   config, ledger,
 *   serviceProxy: serviceProxyAccess(kubeConfig, {
 *     serviceAccount: "nebula-system/nebula-service-proxy",
 *     nodeName: "nebula",
 *   }),
 * });
 * ```
 */
export function serviceProxyAccess(
  kubeConfig: KubeConfig,
  options: { readonly serviceAccount: string; readonly nodeName: string },
): ServiceProxyAccess {
  const [namespace, name, ...rest] = options.serviceAccount.split("/");
  if (!namespace || !name || rest.length > 0) {
    throw new VirtualNodeError(
      "InvalidConfiguration",
      `the service proxy's ServiceAccount ${JSON.stringify(options.serviceAccount)} is not <namespace>/<name>`,
    );
  }
  const cluster = kubeConfig.getCurrentCluster();
  let caCert = "";
  try {
    caCert = cluster?.caData
      ? Buffer.from(cluster.caData, "base64").toString("utf8")
      : cluster?.caFile
        ? readFileSync(cluster.caFile, "utf8")
        : "";
  } catch (error) {
    throw new VirtualNodeError(
      "InvalidConfiguration",
      `cannot read the API server's CA ${cluster?.caFile} for the service proxy: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  if (!caCert.includes("-----BEGIN CERTIFICATE-----")) {
    throw new VirtualNodeError(
      "InvalidConfiguration",
      `the kubeconfig's cluster ${cluster?.name ?? "(none)"} names no CA certificate: the hosts' service proxy would not verify the API server (set certificate-authority-data, or turn serviceProxy off)`,
    );
  }
  const core = kubeConfig.makeApiClient(CoreV1Api);
  // The Node's UID, read once and again after a failed request (a Node registered anew).
  let nodeUid: string | undefined;
  const requestToken = async (ask: { readonly expirationSeconds: number }) => {
    const what = `TokenRequest for serviceaccount ${namespace}/${name} (node ${options.nodeName})`;
    let answer: unknown;
    try {
      const uid = nodeUid ?? (await core.readNode({ name: options.nodeName })).metadata?.uid;
      if (!uid) throw new Error(`node ${options.nodeName} has no UID`);
      nodeUid = uid;
      answer = await core.createNamespacedServiceAccountToken({
        name,
        namespace,
        body: {
          spec: {
            audiences: [],
            expirationSeconds: ask.expirationSeconds,
            boundObjectRef: { apiVersion: "v1", kind: "Node", name: options.nodeName, uid },
          },
        },
      });
    } catch (error) {
      nodeUid = undefined;
      throw new Error(`${what}: ${statusMessage(error)}`, { cause: error });
    }
    const parsed = TokenRequestStatus.safeParse(answer);
    if (!parsed.success) {
      throw new Error(`${what} answered without a token: ${z.prettifyError(parsed.error)}`);
    }
    const expiresAt = new Date(parsed.data.status.expirationTimestamp).getTime();
    if (!Number.isFinite(expiresAt)) throw new Error(`${what}: unreadable expiry`);
    return { token: parsed.data.status.token, expiresAt };
  };
  return { caCert, requestToken };
}
