/**
 * The kubelet API's request handling (docs/contracts.md, "The kubelet API"), in virtual-kubelet's `node/api` shape: the
 * library owns the routes and the kubelet's authentication and authorization; the caller owns the
 * listener (an `https.Server` with the serving certificate, on the port the Node advertises in
 * `daemonEndpoints`). Requests are authenticated as the kubelet authenticates them (a client
 * certificate the listener verified against the cluster's client CA, or a bearer token through a
 * `TokenReview`) and authorized as it does (a `SubjectAccessReview` for each
 * `nodes/<subresource>` it tries, in its order), so a request that is not from the API server, or
 * from a client RBAC lets in, is refused. The answers are built by `kubelet-api.ts`'s pure
 * functions; this file is the I/O around them.
 *
 * @packageDocumentation
 */
import { type IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import type {
  AuthenticationV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  V1Pod,
} from "@kubernetes/client-node";
import { ObjectSerializer } from "@kubernetes/client-node/dist/serializer.js";
import { z } from "zod";
import { VirtualNodeError } from "./errors.js";
import {
  type ContainerLogSource,
  type ContainerRunRef,
  forbiddenMessage,
  hasContainer,
  isGetOnlyRoute,
  isStreamRoute,
  type KubeletAuthorization,
  type KubeletLogOptions,
  type KubeletRoute,
  kubeletAuthorizations,
  kubeletRoute,
  LogEncoder,
  type LogLine,
  logRun,
  type PodUsage,
  parseLogQuery,
  podList,
  podUsageQuery,
  resourceMetrics,
  runningPodList,
  type StreamRoute,
  statsSummary,
  type UsageSource,
} from "./kubelet-api.js";
import { NodeCpuCounter } from "./node-cpu.js";
import { createStreamRelay, type HostAgents, type StreamRelay } from "./stream-relay.js";

/** How long `follow` keeps reading after the run is over: Docker's awslogs batch interval. */
const FOLLOW_TAIL_MS = 5_000;

/** What {@link createKubeletHandler} needs. */
export interface KubeletHandlerOptions {
  /** The Node's name (the name in authorization attributes, `/stats/summary`, `/runningpods/`). */
  readonly nodeName: string;
  /** The Pods bound to the Node (the Pod informer's store): `/pods`, logs, stats. */
  readonly pods: { list(): readonly V1Pod[] };
  /**
   * Reads the Pods bound to the Node (`spec.nodeName=<node>`) from the API server at the moment of
   * a `/runningpods/` request (a quorum list, not a cache), so that a Pod gone from the API, or
   * turned terminal, a moment ago is not listed while the informer has yet to hear of it. A failed
   * read is a 500, as the kubelet answers a failed runtime listing. Needs `list` on `pods`.
   */
  readonly core: Pick<CoreV1Api, "listPodForAllNamespaces">;
  /** Authenticates bearer tokens (`TokenReview`s, cached 2 minutes). Needs `create` on `tokenreviews`. */
  readonly authentication: Pick<AuthenticationV1Api, "createTokenReview">;
  /**
   * Authorizes requests (`SubjectAccessReview`s, cached 5 minutes when allowed, 30 seconds when
   * not: the kubelet's defaults). Needs `create` on `subjectaccessreviews` (`system:auth-delegator`).
   */
  readonly authorization: Pick<AuthorizationV1Api, "createSubjectAccessReview">;
  /**
   * The state the provider last listed for a Pod's instance (`running`, `stopping`...), `undefined`
   * when none is listed: `/runningpods/` lists a Pod being deleted only while its instance runs (its
   * teardown stops it). Absent: a deleting Pod is judged by its status alone.
   */
  readonly instanceState?: (podUid: string) => string | undefined;
  /** Where container output is read from; absent: `/containerLogs` explains how to turn it on. */
  readonly logs: ContainerLogSource | undefined;
  /** Where container usage is read from; absent: stats without usage. */
  readonly usage: UsageSource | undefined;
  /** When the virtual node started. */
  readonly startTime: Date;
  /**
   * Where failed requests and reads are reported (a pino logger fits); with `agents`, also where
   * each stream session's audit lines go (`info`, required then).
   */
  readonly logger: {
    warn(fields: Record<string, unknown>, message: string): void;
    info?(fields: Record<string, unknown>, message: string): void;
  };
  /**
   * How long a usage read is reused, in ms (default 60,000). The hosts publish once a minute, so
   * metrics-server's scrape every 15 s would otherwise pay for the same figures four times.
   */
  readonly usageCacheMs?: number;
  /** How often `follow` polls for new lines (ms, default 1000). */
  readonly followPollMs?: number;
  /**
   * The most `/containerLogs` requests (reads and follows) served at once, in total (default 32);
   * one more is answered `429 Too Many Requests` with `Retry-After`. Each holds at most one page of
   * its source (1 MB from CloudWatch) and a follow polls its source every `followPollMs`:
   * CloudWatch's `GetLogEvents` has a quota per AWS account and Region (10 requests per second in
   * the CloudWatch Logs user guide), shared by every virtual node and reader of the account.
   */
  readonly maxLogStreams?: number;
  /** The most `/containerLogs` requests one authenticated user has served at once (default 4). */
  readonly maxLogStreamsPerUser?: number;
  /**
   * `TokenReview`s one client address may cause in a burst (default 10): a bearer token not in
   * the cache costs one from the address's bucket, which refills at `tokenReviewsPerSecond`
   * (default 1). An empty bucket is `429 Too Many Requests` with `Retry-After`, so a flood of
   * made-up tokens does not become a flood of `TokenReview`s on the API server.
   */
  readonly tokenReviewBurst?: number;
  /** How fast a client address's `TokenReview` bucket refills, per second (default 1). */
  readonly tokenReviewsPerSecond?: number;
  /**
   * The Pods' host agents: with them, `/exec`, `/attach` and `/portForward` (`kubectl exec`,
   * `attach`, `port-forward`) are relayed to the agent on the Pod's host over mutual TLS (the
   * agent's certificate pinned by the fingerprint `locate` gives, `clientCert` and `clientKey`, PEM,
   * presented to it); upgrade requests reach the relay through {@link KubeletHandler.upgrade}.
   * Without them those paths are `404 page not found`, as before.
   */
  readonly agents?: {
    readonly locate: HostAgents;
    readonly clientCert: string;
    readonly clientKey: string;
  };
  /** Stream sessions open at once on this node (default 64); one more is `429`. */
  readonly maxStreamSessions?: number;
  /** Stream sessions open at once to one Pod (default 8); one more is `429`. */
  readonly maxStreamSessionsPerPod?: number;
  /**
   * A stream session with no byte either way this long is ended, in ms (default 14,400,000: the
   * kubelet's 4 h `streamingConnectionIdleTimeout`).
   */
  readonly streamIdleTimeoutMs?: number;
  /** Called once per request with its route and HTTP status (metrics). */
  readonly onRequest?: (route: string, status: number) => void;
}

/** The kubelet API's request handling, for the caller's listener. */
export interface KubeletHandler {
  /**
   * Answers one request: give it to an `https.Server` created with the serving certificate and,
   * for client certificates, `ca` (the client CA), `requestCert: true` and
   * `rejectUnauthorized: false` (a client without a certificate may still present a bearer token).
   * It is Node's `http.RequestListener`: it takes an `IncomingMessage` and a `ServerResponse`.
   */
  readonly handle: (req: unknown, res: unknown) => void;
  /**
   * Answers one upgrade request (`kubectl exec`, `attach`, `port-forward` through the API
   * server): give it to the same server's `'upgrade'` event, which Node emits instead of
   * `'request'` for a request with an `Upgrade` header. It is authenticated and authorized as
   * {@link KubeletHandler.handle} does it; a stream route is relayed to the Pod's host agent,
   * any other path answered as by `handle`. It is Node's `(req, socket, head)` listener.
   */
  readonly upgrade: (req: unknown, socket: unknown, head: unknown) => void;
  /** Ends the open `follow` log streams and stream sessions (call it before closing the listener). */
  close(): void;
}

/** Who made a request. */
interface KubeletUser {
  readonly name: string;
  readonly groups: readonly string[];
  readonly extra?: Record<string, string[]>;
  readonly uid?: string;
}

/** Time-limited answers, at most `max` entries (oldest dropped). */
class TtlCache<T> {
  readonly #entries = new Map<string, { value: T; expires: number }>();
  constructor(private readonly max = 1024) {}
  get(key: string, now: number): T | undefined {
    const hit = this.#entries.get(key);
    if (hit === undefined) return undefined;
    if (hit.expires <= now) {
      this.#entries.delete(key);
      return undefined;
    }
    return hit.value;
  }
  set(key: string, value: T, ttlMs: number, now: number): void {
    this.#entries.delete(key);
    this.#entries.set(key, { value, expires: now + ttlMs });
    if (this.#entries.size > this.max) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
  }
}

/**
 * A token bucket per key (a client address): `burst` tokens, refilled at `perSecond`; at most
 * `max` keys are remembered (the least recently used forgotten, which only gives it a full bucket).
 */
class Buckets {
  readonly #buckets = new Map<string, { tokens: number; at: number }>();
  constructor(
    private readonly burst: number,
    private readonly perSecond: number,
    private readonly max = 4096,
  ) {}
  /** Takes a token: 0 when there was one, else the seconds until there is. */
  take(key: string, now: number): number {
    const bucket = this.#buckets.get(key) ?? { tokens: this.burst, at: now };
    this.#buckets.delete(key);
    bucket.tokens = Math.min(
      this.burst,
      bucket.tokens + ((now - bucket.at) / 1000) * this.perSecond,
    );
    bucket.at = now;
    this.#buckets.set(key, bucket);
    if (this.#buckets.size > this.max) {
      const oldest = this.#buckets.keys().next().value;
      if (oldest !== undefined) this.#buckets.delete(oldest);
    }
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.perSecond));
  }
}

/** Counts the log streams served, in total and per user, within their caps. */
class StreamSlots {
  #total = 0;
  readonly #byUser = new Map<string, number>();
  constructor(
    private readonly max: number,
    private readonly maxPerUser: number,
  ) {}
  /** A slot for `user` (call the function returned once when done), or why there is none. */
  acquire(user: string): (() => void) | { readonly refused: string } {
    const mine = this.#byUser.get(user) ?? 0;
    if (this.#total >= this.max) {
      return {
        refused: `too many container log requests on this virtual node (${this.max} at once); try again later`,
      };
    }
    if (mine >= this.maxPerUser) {
      return {
        refused: `too many container log requests of user ${JSON.stringify(user)} on this virtual node (${this.maxPerUser} at once); end one (kubectl logs -f) or try again later`,
      };
    }
    this.#total += 1;
    this.#byUser.set(user, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#total -= 1;
      const left = (this.#byUser.get(user) ?? 1) - 1;
      if (left <= 0) this.#byUser.delete(user);
      else this.#byUser.set(user, left);
    };
  }
}

/** A count option: a whole number of at least 1, or the default. */
function count(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1) {
    throw new VirtualNodeError(
      "InvalidConfiguration",
      `${name} must be a whole number of at least 1, not ${value}`,
    );
  }
  return value;
}

/** A rate option: a finite number above 0, or the default. */
function rate(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new VirtualNodeError(
      "InvalidConfiguration",
      `${name} must be a number above 0, not ${value}`,
    );
  }
  return value;
}

/** The stream relay when host agents are given (their audit lines need `logger.info`). */
function streamRelay(options: KubeletHandlerOptions): StreamRelay | undefined {
  const { agents, logger } = options;
  if (agents === undefined) return undefined;
  const info = logger.info?.bind(logger);
  if (info === undefined) {
    throw new VirtualNodeError(
      "InvalidConfiguration",
      "agents needs a logger with info(): each stream session is audited with an info line",
    );
  }
  return createStreamRelay({
    agents,
    pods: options.pods,
    logger: { info, warn: logger.warn.bind(logger) },
    ...(options.maxStreamSessions === undefined ? {} : { maxSessions: options.maxStreamSessions }),
    ...(options.maxStreamSessionsPerPod === undefined
      ? {}
      : { maxSessionsPerPod: options.maxStreamSessionsPerPod }),
    ...(options.streamIdleTimeoutMs === undefined
      ? {}
      : { idleTimeoutMs: options.streamIdleTimeoutMs }),
  });
}

/** An upgrade request's connection, handed to the relay once the request is allowed. */
interface Upgrade {
  readonly socket: Socket;
  readonly head: Buffer;
}

/** Retry-After of a 429 for a full log stream cap: a stream ends at its client's pace. */
const LOG_STREAMS_RETRY_AFTER_SECONDS = 5;

const TokenReviewStatus = z.object({
  authenticated: z.boolean().nullish(),
  user: z
    .object({
      username: z.string().nullish(),
      uid: z.string().nullish(),
      groups: z.array(z.string()).nullish(),
      extra: z.record(z.string(), z.array(z.string())).nullish(),
    })
    .nullish(),
});
const SubjectAccessReviewStatus = z.object({
  allowed: z.boolean(),
  denied: z.boolean().nullish(),
  reason: z.string().nullish(),
});

/**
 * Authentication and authorization through the API server, as the kubelet's webhook modes do:
 * a `TokenReview` per new token and a `SubjectAccessReview` per new (user, attributes) pair.
 */
function webhookAuth(options: KubeletHandlerOptions) {
  const tokens = new TtlCache<KubeletUser | null>();
  const decisions = new TtlCache<{ allowed: boolean; reason?: string }>();
  return {
    /**
     * The token's user (undefined: not authenticated); a cached answer costs nothing, a new
     * review first asks `admit`, whose non-zero answer (seconds to wait) is returned as is.
     */
    async authenticateToken(
      token: string,
      admit: () => number,
    ): Promise<KubeletUser | undefined | { readonly retryAfter: number }> {
      const now = Date.now();
      const cached = tokens.get(token, now);
      if (cached !== undefined) return cached ?? undefined;
      const wait = admit();
      if (wait > 0) return { retryAfter: wait };
      const review = await options.authentication.createTokenReview({
        body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token } },
      });
      const status = TokenReviewStatus.safeParse(review.status ?? {});
      const user =
        status.success && status.data.authenticated === true && status.data.user?.username
          ? {
              name: status.data.user.username,
              groups: status.data.user.groups ?? [],
              ...(status.data.user.extra ? { extra: status.data.user.extra } : {}),
              ...(status.data.user.uid ? { uid: status.data.user.uid } : {}),
            }
          : null;
      tokens.set(token, user, 120_000, now);
      return user ?? undefined;
    },
    async authorize(user: KubeletUser, attributes: KubeletAuthorization) {
      const now = Date.now();
      // Everything the review is asked about is in the key: a user's `extra` (token scopes, an
      // impersonated identity's extras) can change the answer, so two users differing only there
      // never share a decision.
      const extra = Object.entries(user.extra ?? {}).sort(([a], [b]) => (a < b ? -1 : 1));
      const key = JSON.stringify([user.name, [...user.groups].sort(), user.uid, extra, attributes]);
      const cached = decisions.get(key, now);
      if (cached !== undefined) return cached;
      const review = await options.authorization.createSubjectAccessReview({
        body: {
          apiVersion: "authorization.k8s.io/v1",
          kind: "SubjectAccessReview",
          spec: {
            user: user.name,
            groups: [...user.groups],
            ...(user.uid === undefined ? {} : { uid: user.uid }),
            ...(user.extra === undefined ? {} : { extra: user.extra }),
            resourceAttributes: {
              verb: attributes.verb,
              resource: attributes.resource,
              subresource: attributes.subresource,
              name: attributes.name,
              version: "v1",
            },
          },
        },
      });
      const parsed = SubjectAccessReviewStatus.safeParse(review.status ?? {});
      const decision = parsed.success
        ? {
            allowed: parsed.data.allowed && parsed.data.denied !== true,
            ...(parsed.data.reason ? { reason: parsed.data.reason } : {}),
          }
        : { allowed: false, reason: "malformed SubjectAccessReview status" };
      decisions.set(key, decision, decision.allowed ? 300_000 : 30_000, now);
      return decision;
    },
  };
}

/**
 * The client CA bundle kube-apiserver publishes from its `--client-ca-file` in the ConfigMap
 * `kube-system/extension-apiserver-authentication` (readable through the bootstrap Role
 * `extension-apiserver-authentication-reader`): what the listener verifies client certificates
 * (kube-apiserver's kubelet client certificate among them) against.
 *
 * @throws {@link VirtualNodeError} `RequestFailed` when the ConfigMap cannot be read,
 *   `ClientCaMissing` when it names no CA (kube-apiserver runs without `--client-ca-file`).
 *
 * @example
 * ```ts
 * const ca = await apiServerClientCa(kubeConfig.makeApiClient(CoreV1Api));
 * const server = createServer({ cert, key, ca, requestCert: true, rejectUnauthorized: false }, kubelet.handle);
 * ```
 */
export async function apiServerClientCa(
  core: Pick<CoreV1Api, "readNamespacedConfigMap">,
): Promise<string> {
  let map: unknown;
  try {
    map = await core.readNamespacedConfigMap({
      name: "extension-apiserver-authentication",
      namespace: "kube-system",
    });
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    const what =
      "reading ConfigMap kube-system/extension-apiserver-authentication for the client CA";
    const why =
      code === 401 || code === 403
        ? `was refused (${code}): bind the Role kube-system/extension-apiserver-authentication-reader to this identity (deploy/vnode/rbac.yaml does)`
        : code === 404
          ? "found no such ConfigMap: kube-apiserver publishes it once it has started with --client-ca-file"
          : typeof code === "number"
            ? `failed with ${code} (${(error as Error).message})`
            : `got no answer from the API server (${(error as Error).message}): is it reachable from here?`;
    throw new VirtualNodeError("RequestFailed", `${what} ${why}`, { cause: error });
  }
  const ca = z.object({ data: z.object({ "client-ca-file": z.string().min(1) }) }).safeParse(map);
  if (!ca.success) {
    throw new VirtualNodeError(
      "ClientCaMissing",
      "kube-system/extension-apiserver-authentication has no client-ca-file (kube-apiserver runs without --client-ca-file)",
      { cause: ca.error },
    );
  }
  return ca.data.data["client-ca-file"];
}

function subjectValues(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}

function text(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8" });
  res.end(body);
}

function json(res: ServerResponse, body: object): void {
  res.writeHead(200, { "content-type": "application/json" });
  // Go's json.Encoder ends what it writes with a newline.
  res.end(`${JSON.stringify(body)}\n`);
}

/**
 * The kubelet API a virtual node serves, with the kubelet's paths and semantics: `/pods`,
 * `/runningpods/`, `/containerLogs/{namespace}/{pod}/{container}`, `/stats/summary`,
 * `/metrics/resource`, `/healthz`; the kubelet's 401, 403 (in its words), 405 (GET-only routes,
 * with `Allow: GET`), 404 and 301 (`/runningpods` to the slash, before authentication) answers.
 *
 * @example
 * ```ts
 * const kubelet = createKubeletHandler({
 *   nodeName, pods: informer, startTime: new Date(), logger, logs: undefined, usage: undefined,
 *   core: kubeConfig.makeApiClient(CoreV1Api),
 *   authentication: kubeConfig.makeApiClient(AuthenticationV1Api),
 *   authorization: kubeConfig.makeApiClient(AuthorizationV1Api),
 * });
 * const server = createServer({ cert, key, ca, requestCert: true, rejectUnauthorized: false }, kubelet.handle);
 * server.listen(10250);
 * ```
 */
export function createKubeletHandler(options: KubeletHandlerOptions): KubeletHandler {
  const auth = webhookAuth(options);
  const relay = streamRelay(options);
  const streams = new Set<AbortController>();
  const slots = new StreamSlots(
    count(options.maxLogStreams, 32, "maxLogStreams"),
    count(options.maxLogStreamsPerUser, 4, "maxLogStreamsPerUser"),
  );
  const reviews = new Buckets(
    count(options.tokenReviewBurst, 10, "tokenReviewBurst"),
    rate(options.tokenReviewsPerSecond, 1, "tokenReviewsPerSecond"),
  );
  let usageCache: { key: string; at: number; usage: Promise<PodUsage> } | undefined;
  /** The Node's CPU counter: keeps ended runs, so metrics-server never sees it drop. */
  const nodeCpu = new NodeCpuCounter();

  const user = async (
    req: IncomingMessage,
  ): Promise<KubeletUser | undefined | { readonly retryAfter: number }> => {
    // Verified by the listener against its client CA (`authorized` is false without one).
    const socket = req.socket as Partial<TLSSocket>;
    if (socket.authorized === true && socket.getPeerCertificate !== undefined) {
      const cert = socket.getPeerCertificate();
      const name = subjectValues(cert.subject?.CN)[0];
      if (name !== undefined && name !== "") {
        return { name, groups: subjectValues(cert.subject?.O) };
      }
    }
    const header = req.headers.authorization;
    const match = header === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (match?.[1] !== undefined) {
      // A review the cache cannot answer costs the client's address a token.
      const client = req.socket.remoteAddress ?? "";
      return auth.authenticateToken(match[1], () => reviews.take(client, Date.now()));
    }
    return undefined;
  };

  const usage = async () => {
    const pods = options.pods.list();
    let read: PodUsage = new Map();
    let failed = false;
    if (options.usage !== undefined) {
      const query = podUsageQuery(pods);
      if (query.length > 0) {
        const key = JSON.stringify(query);
        const now = Date.now();
        const cached = usageCache;
        const fresh =
          cached !== undefined &&
          cached.key === key &&
          now - cached.at < (options.usageCacheMs ?? 60_000);
        if (!fresh) usageCache = { key, at: now, usage: options.usage.podUsage(query) };
        const entry = usageCache as { usage: Promise<PodUsage> };
        try {
          read = await entry.usage;
        } catch (error) {
          failed = true;
          // A failed read is not reused: the next scrape asks again.
          if (usageCache === entry) usageCache = undefined;
          options.logger.warn({ err: error }, "reading container usage failed");
        }
      }
    }
    // A failed read says nothing about which runs ended: the counter skips it.
    const nodeCpuCoreSeconds = failed ? undefined : nodeCpu.observe(read);
    return {
      view: {
        nodeName: options.nodeName,
        startTime: options.startTime,
        pods,
        usage: read,
        ...(nodeCpuCoreSeconds === undefined ? {} : { nodeCpuCoreSeconds }),
      },
      failed,
    };
  };

  const findPod = (namespace: string, name: string): V1Pod | undefined =>
    options.pods
      .list()
      .find((p) => p.metadata?.namespace === namespace && p.metadata?.name === name);

  const refuse = (res: ServerResponse, status: number, message: string): number => {
    text(res, status, message);
    return status;
  };

  /**
   * Writes one chunk, waiting for the client when the response's buffer is full (back-pressure);
   * false once the response is closed or `signal` aborted (the client went away).
   */
  const send = async (
    res: ServerResponse,
    bytes: Buffer,
    signal: AbortSignal,
  ): Promise<boolean> => {
    if (signal.aborted || res.destroyed) return false;
    if (bytes.length > 0 && !res.write(bytes)) {
      await new Promise<void>((resolve) => {
        const resume = () => {
          res.off("drain", resume);
          res.off("close", resume);
          signal.removeEventListener("abort", resume);
          resolve();
        };
        res.on("drain", resume);
        res.on("close", resume);
        signal.addEventListener("abort", resume);
      });
    }
    return !signal.aborted && !res.destroyed;
  };

  const logs = async (
    route: { namespace: string; pod: string; container: string },
    url: URL,
    who: KubeletUser,
    res: ServerResponse,
  ): Promise<number> => {
    // The kubelet's checks, in its order and words.
    if (route.pod === "") return refuse(res, 400, '{"message": "Missing podID."}');
    if (route.container === "") {
      return refuse(res, 400, '{"message": "Missing container name."}');
    }
    if (route.namespace === "") {
      return refuse(res, 400, '{"message": "Missing podNamespace."}');
    }
    const query = parseLogQuery(url.searchParams, new Date());
    if (!query.ok) return refuse(res, query.status, query.message);
    const pod = findPod(route.namespace, route.pod);
    if (pod === undefined) return refuse(res, 404, `pod "${route.pod}" does not exist`);
    if (!hasContainer(pod, route.container)) {
      return refuse(res, 404, `container "${route.container}" not found in pod "${route.pod}"`);
    }
    const run = logRun(pod, route.container, query.options.previous);
    if (!run.ok) return refuse(res, run.status, run.message);
    const source = options.logs;
    if (source === undefined) {
      return refuse(
        res,
        400,
        "container logs are not kept on this virtual node: set provider.logs.group in its configuration (docs/operating.md, Logs and metrics)",
      );
    }
    const release = slots.acquire(who.name);
    if (typeof release !== "function") {
      res.writeHead(429, {
        "content-type": "text/plain; charset=utf-8",
        "retry-after": String(LOG_STREAMS_RETRY_AFTER_SECONDS),
      });
      res.end(`${release.refused}\n`);
      return 429;
    }
    // Ended by the client going away (the response closes before it is finished) or by close().
    const stream = new AbortController();
    streams.add(stream);
    const abort = () => stream.abort();
    res.on("close", abort);
    try {
      return await streamLogs(
        source,
        run.ref,
        route,
        query.options,
        run.running,
        res,
        stream.signal,
      );
    } finally {
      res.off("close", abort);
      streams.delete(stream);
      release();
    }
  };

  /**
   * Writes a run's lines as they come, as the kubelet does: each line once read, `limitBytes`
   * counted across them and the last one cut at the limit (its `LimitWriter`), the source left
   * as soon as the limit is reached or the client is gone, and no more read than the client takes.
   */
  const streamLogs = async (
    source: ContainerLogSource,
    ref: ContainerRunRef,
    route: { namespace: string; pod: string; container: string },
    logOptions: KubeletLogOptions,
    running: boolean,
    res: ServerResponse,
    signal: AbortSignal,
  ): Promise<number> => {
    const encoder = new LogEncoder(logOptions);
    const read = {
      ...(logOptions.tailLines === undefined ? {} : { tailLines: logOptions.tailLines }),
      ...(logOptions.since === undefined ? {} : { since: logOptions.since }),
    };
    let lines: AsyncIterable<LogLine>;
    if (!logOptions.follow || !running) {
      lines = source.lines(ref, { ...read, signal });
    } else {
      // Headers now: the client waits for lines that may be long to come.
      res.writeHead(200, { "content-type": "text/plain", "transfer-encoding": "chunked" });
      res.flushHeaders();
      // The run is over once the Pod no longer shows it running (its container exited, the Pod
      // went away). Its last lines may still be in Docker's batch (flushed at most every 5 s), so
      // follow ends only after FOLLOW_TAIL_MS more of finding nothing new.
      const runOver = () => {
        const now = findPod(route.namespace, route.pod);
        if (now === undefined || now.metadata?.uid !== ref.podUid) return true;
        const current = logRun(now, route.container, false);
        return !current.ok || !current.running || current.ref.restart !== ref.restart;
      };
      let overSince: number | undefined;
      const over = () => {
        if (!runOver()) {
          overSince = undefined;
          return false;
        }
        overSince ??= Date.now();
        return Date.now() - overSince >= FOLLOW_TAIL_MS;
      };
      lines = source.follow(ref, {
        ...read,
        signal,
        pollMs: options.followPollMs ?? 1000,
        done: over,
      });
    }
    try {
      for await (const line of lines) {
        if (signal.aborted) break;
        if (!res.headersSent) res.writeHead(200, { "content-type": "text/plain" });
        // Leaving the loop returns the source's iterator: it asks for no further page.
        if (!(await send(res, encoder.encode(line), signal)) || encoder.done) break;
      }
    } catch (error) {
      if (!signal.aborted) throw error;
    }
    if (!res.headersSent) res.writeHead(200, { "content-type": "text/plain" });
    res.end();
    return 200;
  };

  /**
   * Authenticates and authorizes a request as the kubelet does (its client certificate or a
   * bearer token; a `SubjectAccessReview` per attribute, in order): who made it, or the refusal
   * written (401, 403, or 429 for too many new tokens) and its status. Every path goes through it,
   * upgrades included.
   */
  const admit = async (
    req: IncomingMessage,
    url: URL,
    res: ServerResponse,
  ): Promise<{ readonly who: KubeletUser } | { readonly refused: number }> => {
    const who = await user(req);
    if (who === undefined) {
      text(res, 401, "Unauthorized");
      return { refused: 401 };
    }
    if ("retryAfter" in who) {
      res.writeHead(429, {
        "content-type": "text/plain; charset=utf-8",
        "retry-after": String(who.retryAfter),
      });
      res.end(
        "Too many new bearer tokens from this address: each costs a TokenReview; try again later\n",
      );
      return { refused: 429 };
    }
    // The kubelet tries each attribute in turn (nodes/pods, then nodes/proxy...): any allows.
    const attempts = kubeletAuthorizations(req.method ?? "GET", url.pathname, options.nodeName);
    for (const attributes of attempts) {
      if ((await auth.authorize(who, attributes)).allowed) return { who };
    }
    text(res, 403, forbiddenMessage(who.name, attempts));
    return { refused: 403 };
  };

  /**
   * `/exec`, `/attach`, `/portForward`: the kubelet's checks (the Pod, by UID too when the path
   * has one; the container), then, for an upgrade, the session relayed to the Pod's host agent
   * (its status the agent's answer); a request without `Upgrade` is refused.
   */
  const stream = async (
    route: StreamRoute,
    who: KubeletUser,
    req: IncomingMessage,
    res: ServerResponse,
    upgrade: Upgrade | undefined,
    streams: StreamRelay,
  ): Promise<number> => {
    const pod = findPod(route.namespace, route.pod);
    const uid = pod?.metadata?.uid;
    if (pod === undefined || uid === undefined) {
      return refuse(res, 404, "pod does not exist");
    }
    if (route.uid !== undefined && route.uid !== uid) {
      // The kubelet's words: its getPortForward checks the UID itself ("pod not found"); for exec
      // and attach its runtime finds no such Pod.
      return refuse(
        res,
        404,
        route.kind === "portForward" ? "pod not found" : "pod does not exist",
      );
    }
    if (route.kind !== "portForward" && !hasContainer(pod, route.container)) {
      return refuse(res, 404, `container not found (${JSON.stringify(route.container)})`);
    }
    if (upgrade === undefined) return refuse(res, 400, "Upgrade request required");
    const opened = await streams.open(
      { route, uid, user: who.name },
      req.socket.remoteAddress ?? "",
    );
    if (!opened.ok) {
      res.writeHead(opened.status, {
        "content-type": "text/plain; charset=utf-8",
        ...opened.headers,
      });
      res.end(opened.message.endsWith("\n") ? opened.message : `${opened.message}\n`);
      return opened.status;
    }
    if (upgrade.socket.destroyed) {
      opened.abandon();
      return 499;
    }
    // From here the connection is the relay's: the agent answers (101, or its error).
    res.detachSocket(upgrade.socket);
    return opened.pipe(req, upgrade.socket, upgrade.head);
  };

  const handle = async (
    req: IncomingMessage,
    res: ServerResponse,
    upgrade?: Upgrade,
  ): Promise<void> => {
    const url = new URL(req.url ?? "/", "https://kubelet");
    const routed = kubeletRoute(url.pathname);
    // Without host agents the streams are not served, as before.
    const route: KubeletRoute =
      isStreamRoute(routed) && relay === undefined ? { kind: "notFound" } : routed;
    let status = 0;
    const done = (s: number) => {
      status = s;
    };
    try {
      if (route.kind === "redirect") {
        // Go's ServeMux answers a subtree root asked for without its slash before any handler
        // (and so before the kubelet's authentication filter) runs.
        done(301);
        res.writeHead(301, {
          location: `${route.location}${url.search}`,
          "content-type": "text/html; charset=utf-8",
        });
        return void res.end(
          req.method === "GET" ? `<a href="${route.location}">Moved Permanently</a>.\n\n` : "",
        );
      }
      const admitted = await admit(req, url, res);
      if ("refused" in admitted) return done(admitted.refused);
      const { who } = admitted;
      if (isGetOnlyRoute(route) && req.method !== "GET") {
        done(405);
        res.writeHead(405, { "content-type": "text/plain; charset=utf-8", allow: "GET" });
        return void res.end("Method Not Allowed");
      }
      if (isStreamRoute(route) && req.method !== "GET" && req.method !== "POST") {
        done(405);
        res.writeHead(405, { "content-type": "text/plain; charset=utf-8", allow: "GET, POST" });
        return void res.end("Method Not Allowed");
      }
      switch (route.kind) {
        case "healthz":
          done(200);
          return text(res, 200, "ok");
        case "pods":
          done(200);
          return json(
            res,
            podList(
              options.pods
                .list()
                .map((p) => ObjectSerializer.serialize(p, "V1Pod") as Record<string, unknown>),
            ),
          );
        case "runningPods": {
          let pods: readonly V1Pod[];
          try {
            pods = (
              await options.core.listPodForAllNamespaces({
                fieldSelector: `spec.nodeName=${options.nodeName}`,
              })
            ).items;
          } catch (error) {
            options.logger.warn({ err: error }, "reading the Pods for /runningpods/ failed");
            done(500);
            return text(res, 500, `listing the Pods failed: ${(error as Error).message}`);
          }
          done(200);
          return json(res, runningPodList(pods, options.instanceState));
        }
        case "statsSummary": {
          const { view } = await usage();
          done(200);
          return json(res, statsSummary(view));
        }
        case "metricsResource": {
          const { view, failed } = await usage();
          done(200);
          res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
          return void res.end(resourceMetrics(view, failed));
        }
        case "containerLogs":
          return done(await logs(route, url, who, res));
        case "exec":
        case "attach":
        case "portForward":
          // Only routed so when the relay exists (above).
          if (relay === undefined) throw new Error("stream route without host agents");
          return done(await stream(route, who, req, res, upgrade, relay));
        case "notFound":
          done(404);
          return text(res, 404, "404 page not found");
      }
    } finally {
      options.onRequest?.(route.kind, status);
    }
  };

  const serve = (req: IncomingMessage, res: ServerResponse, upgrade?: Upgrade) =>
    void handle(req, res, upgrade).catch((error: unknown) => {
      options.logger.warn({ err: error, path: req.url }, "kubelet API request failed");
      if (!res.headersSent) text(res, 500, "Internal Server Error");
      else res.destroy();
    });

  return {
    // Typed `unknown` in the declarations (a `RequestListener` still), so that they import no
    // `node:http`: Node's `IncomingMessage` and `ServerResponse` are what it is given.
    handle: (request, response) => serve(request as IncomingMessage, response as ServerResponse),
    upgrade: (request, connection, head) => {
      const req = request as IncomingMessage;
      const socket = connection as Socket;
      socket.on("error", () => socket.destroy());
      // Answers other than the relay's (a refusal, a path that is no stream) are written as to
      // any request, on this connection, which then closes.
      const res = new ServerResponse(req);
      res.shouldKeepAlive = false;
      res.assignSocket(socket);
      res.on("finish", () => {
        socket.end();
      });
      serve(req, res, { socket, head: Buffer.isBuffer(head) ? head : Buffer.alloc(0) });
    },
    close() {
      for (const stream of streams) stream.abort();
      relay?.close();
    },
  };
}
