import { UserDataError } from "./errors.js";
import { POD_PARAMETER_VALUE_CHARS, podParameterPrefix } from "./parameters.js";

/**
 * Service-account tokens of a Pod, as the kubelet serves them: every `serviceAccountToken` source
 * of the Pod's `projected` volumes (the API server's `kube-api-access-*` volume among them, and the
 * `sts.amazonaws.com` token of EKS's IRSA webhook) becomes a bound token the controller requests
 * with `TokenRequest` and delivers through one SSM parameter of the Pod, `<prefix>t`, which it
 * renews before the token expires. The host supervisor reads that parameter at boot and again
 * every {@link tokenPollSeconds}, and writes each token into its volume's file atomically, so the
 * containers see the new token without a restart.
 */

/** `expirationSeconds` of a projection that names none (the API's default). */
export const DEFAULT_TOKEN_EXPIRATION_SECONDS = 3600;
/** The shortest `expirationSeconds` the API server accepts (and so the shortest token). */
const MIN_TOKEN_EXPIRATION_SECONDS = 600;

/** The token parameter's key of the service proxy's token. */
const SERVICE_PROXY_TOKEN_KEY = "p";
/** The lifetime the service proxy's token is requested with (renewed at 80 %, as the Pod's). */
const SERVICE_PROXY_TOKEN_SECONDS = 3600;

/**
 * One token the controller must request for a Pod: one per distinct audience and lifetime of its
 * projections, and the service proxy's.
 */
export interface PodTokenRequest {
  /**
   * Its key in the token parameter and in the host's `TOKEN_KEY` (`"0"`, `"1"`, … for the Pod's
   * ServiceAccount; `"p"` for the service proxy's).
   */
  readonly key: string;
  /**
   * Whose token: `pod`, the Pod's ServiceAccount's (bound to the Pod); `serviceProxy`, the host's
   * service proxy's (its own ServiceAccount, bound to the virtual node's Node: see
   * `RenderOptions.serviceProxy`).
   */
  readonly subject: "pod" | "serviceProxy";
  /** The audience to request; undefined: the API server's own (what `kube-api-access-*` asks). */
  readonly audience: string | undefined;
  /** The lifetime to request, at least 600 s (the kube-apiserver's minimum). */
  readonly expirationSeconds: number;
}

type Loose = Record<string, unknown>;
const obj = (v: unknown): Loose | undefined =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Loose) : undefined;
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/**
 * The tokens a Pod's projected volumes ask for, one per distinct (audience, lifetime), in the
 * order they first appear (volumes in order, sources in order). A lifetime below the API's minimum
 * or not a whole number is taken as the default, as the API server would refuse the Pod before.
 * With `serviceProxy`, the service proxy's token comes last (key `p`, the API server's audience,
 * one hour), unless the Pod uses the host's network (no proxy runs for it). Total: a malformed Pod
 * gives the requests it has.
 *
 * @param pod - the Pod (any value).
 * @param options - `serviceProxy`: its host runs the service proxy (`RenderOptions.serviceProxy`).
 * @returns the requests; empty when the Pod projects no token and runs no proxy.
 */
export function podTokenRequests(
  pod: unknown,
  options?: { readonly serviceProxy?: boolean },
): readonly PodTokenRequest[] {
  const found: PodTokenRequest[] = [];
  for (const v of arr(obj(obj(pod)?.spec)?.volumes)) {
    for (const s of arr(obj(obj(v)?.projected)?.sources)) {
      const projection = obj(obj(s)?.serviceAccountToken);
      if (projection === undefined) continue;
      const { audience, expirationSeconds } = projectionRequest(projection);
      if (found.some((r) => r.audience === audience && r.expirationSeconds === expirationSeconds)) {
        continue;
      }
      found.push({ key: String(found.length), subject: "pod", audience, expirationSeconds });
    }
  }
  if (options?.serviceProxy === true && obj(obj(pod)?.spec)?.hostNetwork !== true) {
    found.push({
      key: SERVICE_PROXY_TOKEN_KEY,
      subject: "serviceProxy",
      audience: undefined,
      expirationSeconds: SERVICE_PROXY_TOKEN_SECONDS,
    });
  }
  return found;
}

/**
 * The audience and lifetime one `serviceAccountToken` projection asks for, as
 * {@link podTokenRequests} reads them (an empty audience is the API server's own; a lifetime below
 * the minimum or not a whole number is the default): what finds its request's key. Total.
 *
 * @param projection - the projection (any value).
 */
export function projectionRequest(
  projection: unknown,
): Pick<PodTokenRequest, "audience" | "expirationSeconds"> {
  const p = obj(projection) ?? {};
  const audience = typeof p.audience === "string" && p.audience !== "" ? p.audience : undefined;
  const asked = p.expirationSeconds;
  const expirationSeconds =
    typeof asked === "number" && Number.isInteger(asked) && asked >= MIN_TOKEN_EXPIRATION_SECONDS
      ? asked
      : DEFAULT_TOKEN_EXPIRATION_SECONDS;
  return { audience, expirationSeconds };
}

/**
 * How often the host reads the token parameter: a tenth of the shortest lifetime requested (at
 * least 60 s). The controller renews a token at 80 % of its life, so the host has the new one by
 * 90 % at the latest, before the old one expires.
 */
export function tokenPollSeconds(requests: readonly PodTokenRequest[]): number {
  const shortest = Math.min(...requests.map((r) => r.expirationSeconds));
  return Number.isFinite(shortest) ? Math.max(60, Math.floor(shortest / 10)) : 60;
}

/** The Pod's token parameter: `/nebula/<cluster>/pods/<pod-uid>/t` (one of its parameter names). */
export function podTokenParameterName(cluster: string, podUid: string): string {
  return `${podParameterPrefix(cluster, podUid)}t`;
}

/** What a bound token looks like: a compact JWS (base64url segments joined by dots). */
const JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$/;

/**
 * The token parameter's value: `<key>:<token>` per token, separated by single spaces (no JSON
 * escape can occur, so the host's bash reads it with one pattern). Returns an error, never throws:
 * `InvalidPod` for a key that is not a {@link PodTokenRequest} key's shape or a token that is not
 * a compact JWS, `SourceTooLarge` when the tokens exceed one parameter's
 * {@link POD_PARAMETER_VALUE_CHARS} characters.
 *
 * @param tokens - each request's key and the token the API server issued for it.
 */
export function podTokenParameterValue(
  tokens: ReadonlyArray<{ readonly key: string; readonly token: string }>,
):
  | { readonly ok: true; readonly value: string }
  | { readonly ok: false; readonly error: UserDataError } {
  for (const { key, token } of tokens) {
    if (!/^([0-9]{1,3}|p)$/.test(key) || !JWT.test(token)) {
      return {
        ok: false,
        error: new UserDataError(
          "InvalidPod",
          `tokens[${key}]`,
          `token ${JSON.stringify(key)} is not a bound service-account token (a compact JWS)`,
        ),
      };
    }
  }
  const value = tokens.map(({ key, token }) => `${key}:${token}`).join(" ");
  if (value.length > POD_PARAMETER_VALUE_CHARS) {
    return {
      ok: false,
      error: new UserDataError(
        "SourceTooLarge",
        "spec.volumes",
        `the Pod's ${tokens.length} service-account token(s) take ${value.length} characters; one parameter holds ${POD_PARAMETER_VALUE_CHARS}: project fewer distinct audiences or lifetimes`,
      ),
    };
  }
  return { ok: true, value };
}
