import type { V1Container, V1Pod } from "@kubernetes/client-node";

/**
 * A Pod's own AWS role, as EKS's IRSA gives it (`amazon-eks-pod-identity-webhook`): where the
 * Pod's ServiceAccount is annotated `eks.amazonaws.com/role-arn`, the Pod gets a projected token
 * for the audience `sts.amazonaws.com` and the environment every AWS SDK reads to assume that role
 * with it (`AWS_ROLE_ARN`, `AWS_WEB_IDENTITY_TOKEN_FILE`). On EKS the webhook has already done it
 * when the Pod was created (its `aws-iam-token` volume is there): nothing is added then. Elsewhere
 * the provider does what the webhook would, on the copy of the Pod it renders for the host (the
 * Pod in the API is not changed). The role's trust policy decides who may assume it: it must
 * trust the cluster's OIDC issuer for `system:serviceaccount:<namespace>:<name>` (docs/security.md).
 */

/** Reads a Pod's ServiceAccount (its annotations); undefined when it does not exist. */
export type ReadServiceAccount = (
  pod: V1Pod,
) => Promise<{ readonly annotations?: Readonly<Record<string, string>> | undefined } | undefined>;

/** The ServiceAccount annotation naming the role. */
export const ROLE_ARN_ANNOTATION = "eks.amazonaws.com/role-arn";
/** The ServiceAccount annotation naming the token's audience (default `sts.amazonaws.com`). */
const AUDIENCE_ANNOTATION = "eks.amazonaws.com/audience";
/** The ServiceAccount annotation naming the token's lifetime in seconds (default 86400). */
const TOKEN_EXPIRATION_ANNOTATION = "eks.amazonaws.com/token-expiration";

/** The volume the webhook adds, and its mount: what the SDKs find in `AWS_WEB_IDENTITY_TOKEN_FILE`. */
const VOLUME = "aws-iam-token";
const MOUNT = "/var/run/secrets/eks.amazonaws.com/serviceaccount";
const DEFAULT_AUDIENCE = "sts.amazonaws.com";
const DEFAULT_EXPIRATION = 86400;
/** The webhook's bounds on `token-expiration`. */
const MIN_EXPIRATION = 3600;
const MAX_EXPIRATION = 86400;
const ROLE_ARN = /^arn:aws[a-z-]*:iam::\d{12}:role\/[\w+=,.@/-]{1,512}$/;

/** The Pod as rendered for its host, and what was done to it. */
export interface WebIdentity {
  /** The Pod with the role's token and environment (or the Pod unchanged). */
  readonly pod: V1Pod;
  /** The role the containers assume; undefined: none added. */
  readonly roleArn: string | undefined;
  /** Why the annotation was not followed (an Event's message), when it was not. */
  readonly warning?: string | undefined;
}

/**
 * The Pod with its ServiceAccount's role, as the webhook would mutate it: the `aws-iam-token`
 * projected volume (audience and lifetime from the annotations), and in every container and init
 * container that does not set `AWS_ROLE_ARN` itself: `AWS_ROLE_ARN`,
 * `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_REGION`, `AWS_DEFAULT_REGION`,
 * `AWS_STS_REGIONAL_ENDPOINTS=regional`, and the volume's read-only mount. Unchanged when the
 * ServiceAccount names no role, the Pod already has the volume (the webhook ran), or the role is
 * not an IAM role ARN (then `warning` says so). Pure and total; never changes `pod`.
 *
 * @param pod - the Pod.
 * @param annotations - its ServiceAccount's annotations (undefined: none, or no ServiceAccount).
 * @param region - the Region the containers' SDKs use.
 */
export function withWebIdentity(
  pod: V1Pod,
  annotations: Readonly<Record<string, string>> | undefined,
  region: string,
): WebIdentity {
  const roleArn = annotations?.[ROLE_ARN_ANNOTATION];
  if (roleArn === undefined || roleArn === "") return { pod, roleArn: undefined };
  if (pod.spec?.volumes?.some((v) => v.name === VOLUME)) return { pod, roleArn: undefined };
  const account = `${pod.metadata?.namespace}/${pod.spec?.serviceAccountName || "default"}`;
  if (!ROLE_ARN.test(roleArn)) {
    return {
      pod,
      roleArn: undefined,
      warning: `serviceaccount ${account} names ${JSON.stringify(roleArn.slice(0, 200))} in ${ROLE_ARN_ANNOTATION}, which is not an IAM role ARN: the Pod gets no role of its own`,
    };
  }
  const audience = annotations?.[AUDIENCE_ANNOTATION] || DEFAULT_AUDIENCE;
  const asked = Number(annotations?.[TOKEN_EXPIRATION_ANNOTATION] ?? DEFAULT_EXPIRATION);
  const expirationSeconds = Number.isInteger(asked)
    ? Math.min(MAX_EXPIRATION, Math.max(MIN_EXPIRATION, asked))
    : DEFAULT_EXPIRATION;
  const env = [
    { name: "AWS_ROLE_ARN", value: roleArn },
    { name: "AWS_WEB_IDENTITY_TOKEN_FILE", value: `${MOUNT}/token` },
    { name: "AWS_STS_REGIONAL_ENDPOINTS", value: "regional" },
    { name: "AWS_DEFAULT_REGION", value: region },
    { name: "AWS_REGION", value: region },
  ];
  const inject = (c: V1Container): V1Container => {
    if (c.env?.some((e) => e.name === "AWS_ROLE_ARN")) return c;
    const own = new Set((c.env ?? []).map((e) => e.name));
    return {
      ...c,
      env: [...(c.env ?? []), ...env.filter((e) => !own.has(e.name))],
      volumeMounts: [...(c.volumeMounts ?? []), { name: VOLUME, mountPath: MOUNT, readOnly: true }],
    };
  };
  const spec = pod.spec;
  if (spec === undefined) return { pod, roleArn: undefined };
  return {
    roleArn,
    pod: {
      ...pod,
      spec: {
        ...spec,
        containers: spec.containers.map(inject),
        ...(spec.initContainers ? { initContainers: spec.initContainers.map(inject) } : {}),
        volumes: [
          ...(spec.volumes ?? []),
          {
            name: VOLUME,
            projected: {
              sources: [{ serviceAccountToken: { audience, expirationSeconds, path: "token" } }],
            },
          },
        ],
      },
    },
  };
}
