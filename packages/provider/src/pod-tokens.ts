import type { V1Pod } from "@kubernetes/client-node";
import { podTokenParameterName, podTokenParameterValue, podTokenRequests } from "@nebula/userdata";
import { toProviderError } from "./errors.js";
import type { IssuedTokens, PodRecord, ProviderContext } from "./record.js";
import { isTerminalStatus } from "./status.js";

/**
 * Asks the API server for one bound service-account token of a Pod (a `TokenRequest` for the Pod's
 * ServiceAccount, bound to the Pod: `@nebula/virtual-node`'s `podTokenRequester`). Resolves to the
 * token and when it expires (ms since the epoch); rejects with what the API server said.
 */
export type RequestToken = (
  pod: V1Pod,
  request: { readonly audience: string | undefined; readonly expirationSeconds: number },
) => Promise<{ readonly token: string; readonly expiresAt: number }>;

/**
 * Asks the API server for a token of the service proxy's ServiceAccount (`config.serviceProxy`),
 * bound to this virtual node's Node: `@nebula/virtual-node/host`'s `serviceProxyAccess(...).requestToken`.
 */
export type RequestServiceProxyToken = (request: {
  readonly expirationSeconds: number;
}) => Promise<{ readonly token: string; readonly expiresAt: number }>;

/** The longest a token is used before it is renewed, whatever its lifetime (the kubelet's 24 h). */
const MAX_TOKEN_AGE_MS = 24 * 3600 * 1000;
/** Wait after a failed request or write before the next attempt. */
const RETRY_MS = 30_000;
/** Renewals in flight at once (a restarted virtual node renews every running Pod's tokens). */
const CONCURRENT_RENEWALS = 4;

/**
 * When tokens issued at `issuedAt` are renewed, as the kubelet does: at 80 % of the shortest
 * lifetime, and at most 24 h after issue. Pure; a lifetime already over gives `issuedAt`.
 */
export function renewalTime(issuedAt: number, expiries: readonly number[]): number {
  const soonest = Math.min(...expiries);
  if (!Number.isFinite(soonest)) return issuedAt + MAX_TOKEN_AGE_MS;
  const life = Math.max(0, soonest - issuedAt);
  return issuedAt + Math.min(MAX_TOKEN_AGE_MS, Math.floor(life * 0.8));
}

/** What {@link PodTokens.issue} gives: the tokens (none for a Pod that projects none), or why not. */
export type TokensIssued =
  | { readonly ok: true; readonly issued: IssuedTokens | undefined }
  | { readonly ok: false; readonly message: string };

const NONE: TokensIssued = { ok: true, issued: undefined };

/**
 * The Pods' service-account tokens (`podDelivery: "parameters"`): requested for a Pod before it
 * launches (with its sources: a token that cannot be issued holds the Pod, as a missing Secret
 * does), carried in its token parameter with its other parameters, and renewed while the Pod runs
 * (its instance exists, it is not terminal, not deleted): at 80 % of the shortest lifetime, then
 * the parameter is overwritten and the host picks the new tokens up within a tenth of that
 * lifetime. After a restart the process does not know when the running Pods' tokens were issued:
 * it renews them at once, {@link CONCURRENT_RENEWALS} at a time.
 */
export class PodTokens {
  readonly #ctx: ProviderContext;
  readonly #request: RequestToken | undefined;
  readonly #cluster: string;
  readonly #hostPodOf: ((pod: V1Pod) => Promise<V1Pod>) | undefined;
  readonly #requestProxy: RequestServiceProxyToken | undefined;
  readonly #queue: PodRecord[] = [];
  readonly #inFlight = new Set<Promise<void>>();

  /**
   * @param ctx - the provider's context.
   * @param request - how tokens are requested; undefined: a Pod that projects one is held.
   * @param cluster - the cluster segment the renderer names parameters with.
   * @param hostPodOf - the Pod as rendered for its host (its ServiceAccount's role added: see
   *   `withWebIdentity`), for a Pod this process did not render (after a restart); undefined:
   *   the Pod itself.
   * @param requestProxy - how the service proxy's token is requested (`config.serviceProxy`);
   *   undefined: a Pod whose host runs the proxy is held.
   */
  constructor(
    ctx: ProviderContext,
    request: RequestToken | undefined,
    cluster: string,
    hostPodOf?: (pod: V1Pod) => Promise<V1Pod>,
    requestProxy?: RequestServiceProxyToken,
  ) {
    this.#ctx = ctx;
    this.#request = request;
    this.#cluster = cluster;
    this.#hostPodOf = hostPodOf;
    this.#requestProxy = requestProxy;
  }

  /**
   * The tokens the Pod projects, and its service proxy's with `config.serviceProxy` (none with
   * `podDelivery: "user-data"`, which serves none).
   */
  requestsOf(pod: V1Pod): ReturnType<typeof podTokenRequests> {
    const { podDelivery, serviceProxy } = this.#ctx.config;
    return podDelivery === "parameters"
      ? podTokenRequests(pod, { serviceProxy: serviceProxy !== undefined })
      : [];
  }

  /**
   * The Pod's tokens for a launch (`hostPod`: the Pod as rendered for its host): those already
   * issued while they are not due, else new ones. Never throws.
   */
  async forLaunch(record: PodRecord, hostPod: V1Pod): Promise<TokensIssued> {
    const current = record.tokens;
    if (current !== undefined && this.#ctx.now() < current.renewAt) {
      return { ok: true, issued: current };
    }
    return this.issue(hostPod);
  }

  /** Requests every token the Pod projects. Never throws: a failure says which token and why. */
  async issue(pod: V1Pod): Promise<TokensIssued> {
    const requests = this.requestsOf(pod);
    if (requests.length === 0) return NONE;
    const uid = pod.metadata?.uid ?? "";
    const key = `${pod.metadata?.namespace}/${pod.metadata?.name}`;
    const account = pod.spec?.serviceAccountName || "default";
    const request = this.#request;
    const requestProxy = this.#requestProxy;
    if (request === undefined && requests.some((r) => r.subject === "pod")) {
      return {
        ok: false,
        message: `pod ${key} projects a service-account token, and this provider was built without requestToken (pass @nebula/virtual-node's podTokenRequester)`,
      };
    }
    if (requestProxy === undefined && requests.some((r) => r.subject === "serviceProxy")) {
      return {
        ok: false,
        message: `pod ${key}: its host runs the service proxy (config.serviceProxy), and this provider was built without serviceProxy (pass @nebula/virtual-node/host's serviceProxyAccess)`,
      };
    }
    const issuedAt = this.#ctx.now();
    const tokens: { key: string; token: string }[] = [];
    const expiries: number[] = [];
    for (const r of requests) {
      const asked = { audience: r.audience, expirationSeconds: r.expirationSeconds };
      try {
        const answer =
          r.subject === "serviceProxy"
            ? await requestProxy?.({ expirationSeconds: r.expirationSeconds })
            : await request?.(pod, asked);
        if (answer === undefined) throw new Error("no token requester");
        tokens.push({ key: r.key, token: answer.token });
        expiries.push(answer.expiresAt);
      } catch (error) {
        const why = error instanceof Error ? error.message : String(error);
        const whose =
          r.subject === "serviceProxy"
            ? `the service proxy's token (service account ${this.#ctx.config.serviceProxy?.serviceAccount})`
            : `token for pod ${key}: service account ${account}, audience ${r.audience ?? "the API server"}`;
        return { ok: false, message: `failed to fetch ${whose}: ${why}` };
      }
    }
    const value = podTokenParameterValue(tokens);
    if (!value.ok) return { ok: false, message: `pod ${key}: ${value.error.message}` };
    return {
      ok: true,
      issued: {
        parameter: { name: podTokenParameterName(this.#cluster, uid), value: value.value },
        issuedAt,
        renewAt: renewalTime(issuedAt, expiries),
        expiresAt: Math.min(...expiries),
      },
    };
  }

  /**
   * Queues the Pod's renewal when it is due: it runs (its instance exists; it is not deleted, not
   * terminal), projects a token, and its tokens are unknown (a restart) or at their renewal time.
   * Returns at once; the renewal runs in the background ({@link idle} waits for it).
   */
  renewIfDue(record: PodRecord): void {
    if (record.mode !== "launch" || record.instanceId === undefined || record.deleted) return;
    if (record.renewingTokens || isTerminalStatus(record.status)) return;
    const now = this.#ctx.now();
    if ((record.tokensRetryAt ?? 0) > now) return;
    if (record.tokens !== undefined && now < record.tokens.renewAt) return;
    // A Pod this process did not render (a restart) may get a token from its ServiceAccount's
    // role: its host's Pod is found out once, in the renewal.
    const pod = record.hostPod ?? (this.#hostPodOf === undefined ? record.pod : undefined);
    if (pod !== undefined && this.requestsOf(pod).length === 0) return;
    record.renewingTokens = true;
    this.#queue.push(record);
    this.#drain();
  }

  /** Resolves once no renewal is queued or in flight. */
  async idle(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all(this.#inFlight);
  }

  #drain(): void {
    while (this.#inFlight.size < CONCURRENT_RENEWALS) {
      const record = this.#queue.shift();
      if (record === undefined) return;
      const run = this.#renew(record).finally(() => {
        record.renewingTokens = false;
        this.#inFlight.delete(run);
        this.#drain();
      });
      this.#inFlight.add(run);
    }
  }

  async #renew(record: PodRecord): Promise<void> {
    const { facts } = record;
    // Deleted or ended while it waited in the queue: no token for a Pod that is going.
    if (record.deleted || isTerminalStatus(record.status)) return;
    let pod = record.hostPod;
    if (pod === undefined) {
      try {
        pod = this.#hostPodOf === undefined ? record.pod : await this.#hostPodOf(record.pod);
      } catch (error) {
        this.#failed(
          record,
          `pod ${facts.key}: ${error instanceof Error ? error.message : String(error)}`,
        );
        return;
      }
      record.hostPod = pod;
    }
    if (this.requestsOf(pod).length === 0) return;
    const issued = await this.issue(pod);
    if (!issued.ok || issued.issued === undefined) {
      this.#failed(record, issued.ok ? "no token is projected" : issued.message);
      return;
    }
    const { parameter } = issued.issued;
    try {
      // Overwritten in place: the parameter keeps its tags, the instance's ARN among them.
      await this.#ctx.gateway.writePodParameters(facts.uid, [parameter]);
    } catch (error) {
      this.#failed(record, toProviderError(error, `PutParameter ${parameter.name}`).message);
      return;
    }
    record.tokens = issued.issued;
    record.tokensRetryAt = undefined;
    if (record.parameters !== undefined) {
      // A later rewrite of the Pod's parameters (their refresh) carries the new tokens.
      record.parameters = record.parameters.map((p) => (p.name === parameter.name ? parameter : p));
    }
    if (record.tokensFailing) {
      record.tokensFailing = false;
      this.#ctx.log("info", `pod ${facts.key}: its service-account token is renewed again`);
    }
  }

  #failed(record: PodRecord, message: string): void {
    record.tokensRetryAt = this.#ctx.now() + RETRY_MS;
    this.#ctx.log("warn", `pod ${record.facts.key}: ${message} (retried in ${RETRY_MS / 1000}s)`);
    if (record.tokensFailing) return;
    record.tokensFailing = true;
    const expires = record.tokens?.expiresAt;
    record.events.push({
      type: "Warning",
      reason: "FailedToRenewToken",
      message: `${message}; the host keeps the current token${expires === undefined ? "" : ` (it expires at ${new Date(expires).toISOString()})`} and the renewal is retried`,
    });
  }
}
