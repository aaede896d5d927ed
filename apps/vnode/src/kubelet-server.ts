/**
 * The kubelet API of the virtual node (brief C8), over HTTPS on the port the Node advertises in
 * `daemonEndpoints`: `/pods`, `/runningpods/`, `/containerLogs`, `/stats/summary`,
 * `/metrics/resource`, `/healthz`. Requests are authenticated as the kubelet authenticates them
 * (a client certificate from the cluster's client CA, or a bearer token through a `TokenReview`)
 * and authorized as it does (a `SubjectAccessReview` for each `nodes/<subresource>` it tries, in
 * its order), so a request that is not from the API server, or from a client RBAC lets in, is
 * refused. The answers are built
 * by `@nebula/virtual-node`'s pure functions; this file is the I/O around them.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer, type Server } from "node:https";
import type { TLSSocket } from "node:tls";
import {
  AuthenticationV1Api,
  AuthorizationV1Api,
  type KubeConfig,
  type V1Pod,
} from "@kubernetes/client-node";
import { ObjectSerializer } from "@kubernetes/client-node/dist/serializer.js";
import type { Logger } from "@nebula/kube";
import {
  type ContainerLogSource,
  forbiddenMessage,
  hasContainer,
  isGetOnlyRoute,
  type KubeletAuthorization,
  kubeletAuthorizations,
  kubeletRoute,
  LogEncoder,
  logRun,
  NodeCpuCounter,
  type PodUsage,
  parseLogQuery,
  podList,
  podUsageQuery,
  resourceMetrics,
  runningPodList,
  statsSummary,
  type UsageSource,
} from "@nebula/virtual-node";
import { z } from "zod";

/** How long `follow` keeps reading after the run is over: Docker's awslogs batch interval. */
const FOLLOW_TAIL_MS = 5_000;

/** Who made a request. */
export interface KubeletUser {
  /** User name (a certificate's CN, or the token's user). */
  readonly name: string;
  /** Groups (a certificate's O values, or the token's groups). */
  readonly groups: readonly string[];
  /** The token's extra attributes, passed on to the SubjectAccessReview. */
  readonly extra?: Record<string, string[]>;
  /** The token's user UID. */
  readonly uid?: string;
}

/** Answers whether a user may do what a request asks (a SubjectAccessReview, cached). */
export type KubeletAuthorizer = (
  user: KubeletUser,
  attributes: KubeletAuthorization,
) => Promise<{ readonly allowed: boolean; readonly reason?: string }>;

/** Authenticates a bearer token (a TokenReview, cached); `undefined` when it is not valid. */
export type TokenAuthenticator = (token: string) => Promise<KubeletUser | undefined>;

/** What {@link KubeletServer} needs. */
export interface KubeletServerOptions {
  /** The Node's name (the name in authorization attributes, `/stats/summary`). */
  readonly nodeName: string;
  /** Port to listen on (the Node's `daemonEndpoints.kubeletEndpoint.Port`). */
  readonly port: number;
  /** Address to listen on. */
  readonly bindAddress: string;
  /** Serving certificate and key, PEM. */
  readonly cert: string;
  /** Serving key, PEM. */
  readonly key: string;
  /** CA bundle (PEM) client certificates are verified against; absent: certificates are not accepted. */
  readonly clientCa: string | undefined;
  /** The Pods bound to the Node (the app's informer): `/pods`, logs, stats. */
  readonly pods: () => readonly V1Pod[];
  /**
   * The Pods bound to the Node, read from the API server at the moment of the request (a quorum
   * list, not a cache): what `/runningpods/` judges, so that a Pod gone from the API, or turned
   * terminal, a moment ago is not listed while the informer has yet to hear of it. Absent:
   * {@link KubeletServerOptions.pods}. A failed read is a 500, as the kubelet answers a failed
   * runtime listing.
   */
  readonly readPods?: () => Promise<readonly V1Pod[]>;
  /**
   * The state EC2 last listed for a Pod's instance (`running`, `stopping`...), `undefined` when
   * none is listed: `/runningpods/` lists a Pod being deleted only while its instance runs (its
   * teardown stops it). Absent: a deleting Pod is judged by its status alone.
   */
  readonly instanceState?: (podUid: string) => string | undefined;
  /** Where container output is read from; absent: `/containerLogs` explains how to turn it on. */
  readonly logs: ContainerLogSource | undefined;
  /** Where container usage is read from; absent: stats without usage. */
  readonly usage: UsageSource | undefined;
  /** Token authentication. */
  readonly authenticateToken: TokenAuthenticator;
  /** Authorization. */
  readonly authorize: KubeletAuthorizer;
  /** When the virtual node started. */
  readonly startTime: Date;
  /** Logger. */
  readonly logger: Logger;
  /**
   * How long a usage read is reused, in ms (default 60,000). The hosts publish once a minute, so
   * metrics-server's scrape every 15 s would otherwise pay `GetMetricData` four times for the
   * same figures.
   */
  readonly usageCacheMs?: number;
  /** How often `follow` polls for new lines (ms, default 1000). */
  readonly followPollMs?: number;
  /** Called once per request with its route and status (metrics). */
  readonly onRequest?: (route: string, status: number) => void;
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
 * a `TokenReview` per new token (cached 2 minutes) and a `SubjectAccessReview` per new
 * (user, attributes) pair (cached 5 minutes when allowed, 30 seconds when not: the kubelet's
 * defaults). Needs `create` on `tokenreviews` and `subjectaccessreviews`
 * (`system:auth-delegator`).
 */
export function apiServerAuth(kubeConfig: KubeConfig): {
  authenticateToken: TokenAuthenticator;
  authorize: KubeletAuthorizer;
} {
  const authn = kubeConfig.makeApiClient(AuthenticationV1Api);
  const authz = kubeConfig.makeApiClient(AuthorizationV1Api);
  const tokens = new TtlCache<KubeletUser | null>();
  const decisions = new TtlCache<{ allowed: boolean; reason?: string }>();
  return {
    async authenticateToken(token) {
      const now = Date.now();
      const cached = tokens.get(token, now);
      if (cached !== undefined) return cached ?? undefined;
      const review = await authn.createTokenReview({
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
    async authorize(user, attributes) {
      const now = Date.now();
      const key = JSON.stringify([user.name, [...user.groups].sort(), user.uid, attributes]);
      const cached = decisions.get(key, now);
      if (cached !== undefined) return cached;
      const review = await authz.createSubjectAccessReview({
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

function subjectValues(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}

/** The kubelet API server. Start it with {@link KubeletServer.run}. */
export class KubeletServer {
  readonly #options: KubeletServerOptions;
  readonly #server: Server;
  readonly #streams = new Set<AbortController>();
  #usageCache: { key: string; at: number; usage: Promise<PodUsage> } | undefined;
  /** The Node's CPU counter: keeps ended runs, so metrics-server never sees it drop. */
  readonly #nodeCpu = new NodeCpuCounter();

  constructor(options: KubeletServerOptions) {
    this.#options = options;
    this.#server = createServer(
      {
        cert: options.cert,
        key: options.key,
        ...(options.clientCa === undefined ? {} : { ca: options.clientCa }),
        // Ask for a certificate, verify it against the client CA, and decide per request: a
        // client without one may still present a bearer token.
        requestCert: options.clientCa !== undefined,
        rejectUnauthorized: false,
      },
      (req, res) => {
        void this.#handle(req, res).catch((error: unknown) => {
          options.logger.warn({ err: error, path: req.url }, "kubelet API request failed");
          if (!res.headersSent) this.#text(res, 500, "Internal Server Error");
          else res.destroy();
        });
      },
    );
  }

  /** The port the server listens on (after {@link KubeletServer.listen}). */
  get port(): number {
    const address = this.#server.address();
    return typeof address === "object" && address !== null ? address.port : 0;
  }

  /** Starts listening; rejects when the port cannot be bound. */
  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(this.#options.port, this.#options.bindAddress, () => {
        this.#server.off("error", reject);
        resolve();
      });
    });
  }

  /** Listens until `signal` aborts, then ends open log streams and closes. */
  async run(signal: AbortSignal): Promise<void> {
    await this.listen();
    this.#options.logger.info(
      { port: this.port, address: this.#options.bindAddress },
      "kubelet API listening",
    );
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    await this.close();
  }

  /** Ends open log streams and closes the server. */
  async close(): Promise<void> {
    for (const stream of this.#streams) stream.abort();
    await new Promise<void>((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
  }

  #text(res: ServerResponse, status: number, body: string): void {
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8" });
    res.end(body);
  }

  async #user(req: IncomingMessage): Promise<KubeletUser | undefined> {
    const socket = req.socket as TLSSocket;
    if (this.#options.clientCa !== undefined && socket.authorized) {
      const cert = socket.getPeerCertificate();
      const name = subjectValues(cert.subject?.CN)[0];
      if (name !== undefined && name !== "") {
        return { name, groups: subjectValues(cert.subject?.O) };
      }
    }
    const header = req.headers.authorization;
    const match = header === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (match?.[1] !== undefined) return this.#options.authenticateToken(match[1]);
    return undefined;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "https://kubelet");
    const route = kubeletRoute(url.pathname);
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
      const user = await this.#user(req);
      if (user === undefined) {
        done(401);
        return this.#text(res, 401, "Unauthorized");
      }
      // The kubelet tries each attribute in turn (nodes/pods, then nodes/proxy...): any allows.
      const attempts = kubeletAuthorizations(
        req.method ?? "GET",
        url.pathname,
        this.#options.nodeName,
      );
      let allowed = false;
      for (const attributes of attempts) {
        if ((await this.#options.authorize(user, attributes)).allowed) {
          allowed = true;
          break;
        }
      }
      if (!allowed) {
        done(403);
        return this.#text(res, 403, forbiddenMessage(user.name, attempts));
      }
      if (isGetOnlyRoute(route) && req.method !== "GET") {
        done(405);
        res.writeHead(405, { "content-type": "text/plain; charset=utf-8", allow: "GET" });
        return void res.end("Method Not Allowed");
      }
      switch (route.kind) {
        case "healthz":
          done(200);
          return this.#text(res, 200, "ok");
        case "pods":
          done(200);
          return this.#json(
            res,
            podList(
              this.#options
                .pods()
                .map((p) => ObjectSerializer.serialize(p, "V1Pod") as Record<string, unknown>),
            ),
          );
        case "runningPods": {
          let pods: readonly V1Pod[];
          try {
            pods = await (this.#options.readPods?.() ?? this.#options.pods());
          } catch (error) {
            this.#options.logger.warn({ err: error }, "reading the Pods for /runningpods/ failed");
            done(500);
            return this.#text(res, 500, `listing the Pods failed: ${(error as Error).message}`);
          }
          done(200);
          return this.#json(res, runningPodList(pods, this.#options.instanceState));
        }
        case "statsSummary": {
          const { view } = await this.#usage();
          done(200);
          return this.#json(res, statsSummary(view));
        }
        case "metricsResource": {
          const { view, failed } = await this.#usage();
          done(200);
          res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
          return void res.end(resourceMetrics(view, failed));
        }
        case "containerLogs":
          return done(await this.#logs(route, url, req, res));
        case "notFound":
          done(404);
          return this.#text(res, 404, "404 page not found");
      }
    } finally {
      this.#options.onRequest?.(route.kind, status);
    }
  }

  #json(res: ServerResponse, body: object): void {
    res.writeHead(200, { "content-type": "application/json" });
    // Go's json.Encoder ends what it writes with a newline.
    res.end(`${JSON.stringify(body)}\n`);
  }

  async #usage() {
    const pods = this.#options.pods();
    let usage: PodUsage = new Map();
    let failed = false;
    if (this.#options.usage !== undefined) {
      const query = podUsageQuery(pods);
      if (query.length > 0) {
        const key = JSON.stringify(query);
        const now = Date.now();
        const cached = this.#usageCache;
        const fresh =
          cached !== undefined &&
          cached.key === key &&
          now - cached.at < (this.#options.usageCacheMs ?? 60_000);
        if (!fresh) this.#usageCache = { key, at: now, usage: this.#options.usage.podUsage(query) };
        const entry = this.#usageCache as { usage: Promise<PodUsage> };
        try {
          usage = await entry.usage;
        } catch (error) {
          failed = true;
          // A failed read is not reused: the next scrape asks again.
          if (this.#usageCache === entry) this.#usageCache = undefined;
          this.#options.logger.warn({ err: error }, "reading container usage failed");
        }
      }
    }
    // A failed read says nothing about which runs ended: the counter skips it.
    const nodeCpuCoreSeconds = failed ? undefined : this.#nodeCpu.observe(usage);
    return {
      view: {
        nodeName: this.#options.nodeName,
        startTime: this.#options.startTime,
        pods,
        usage,
        ...(nodeCpuCoreSeconds === undefined ? {} : { nodeCpuCoreSeconds }),
      },
      failed,
    };
  }

  #findPod(namespace: string, name: string): V1Pod | undefined {
    return this.#options
      .pods()
      .find((p) => p.metadata?.namespace === namespace && p.metadata?.name === name);
  }

  async #logs(
    route: { namespace: string; pod: string; container: string },
    url: URL,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<number> {
    // The kubelet's checks, in its order and words.
    if (route.pod === "") return this.#refuse(res, 400, '{"message": "Missing podID."}');
    if (route.container === "") {
      return this.#refuse(res, 400, '{"message": "Missing container name."}');
    }
    if (route.namespace === "") {
      return this.#refuse(res, 400, '{"message": "Missing podNamespace."}');
    }
    const query = parseLogQuery(url.searchParams, new Date());
    if (!query.ok) return this.#refuse(res, query.status, query.message);
    const pod = this.#findPod(route.namespace, route.pod);
    if (pod === undefined) return this.#refuse(res, 404, `pod "${route.pod}" does not exist`);
    if (!hasContainer(pod, route.container)) {
      return this.#refuse(
        res,
        404,
        `container "${route.container}" not found in pod "${route.pod}"`,
      );
    }
    const run = logRun(pod, route.container, query.options.previous);
    if (!run.ok) return this.#refuse(res, run.status, run.message);
    const logs = this.#options.logs;
    if (logs === undefined) {
      return this.#refuse(
        res,
        400,
        "container logs are not kept on this virtual node: set provider.logs.group in its configuration (docs/operating.md, Logs and metrics)",
      );
    }
    const options = query.options;
    const encoder = new LogEncoder(options);
    const read = {
      ...(options.tailLines === undefined ? {} : { tailLines: options.tailLines }),
      ...(options.since === undefined ? {} : { since: options.since }),
    };
    if (!options.follow || !run.running) {
      const lines = await logs.read(run.ref, read);
      res.writeHead(200, { "content-type": "text/plain" });
      const chunks: Buffer[] = [];
      for (const line of lines ?? []) {
        chunks.push(encoder.encode(line));
        if (encoder.done) break;
      }
      res.end(Buffer.concat(chunks));
      return 200;
    }
    const stream = new AbortController();
    this.#streams.add(stream);
    const abort = () => stream.abort();
    req.on("close", abort);
    res.on("close", abort);
    res.writeHead(200, { "content-type": "text/plain", "transfer-encoding": "chunked" });
    res.flushHeaders();
    const ref = run.ref;
    // The run is over once the Pod no longer shows it running (its container exited, the Pod
    // went away). Its last lines may still be in Docker's batch (flushed at most every 5 s), so
    // follow ends only after FOLLOW_TAIL_MS more of finding nothing new.
    const runOver = () => {
      const now = this.#findPod(route.namespace, route.pod);
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
    try {
      for await (const line of logs.follow(ref, {
        ...read,
        signal: stream.signal,
        pollMs: this.#options.followPollMs ?? 1000,
        done: over,
      })) {
        const bytes = encoder.encode(line);
        if (bytes.length > 0 && !res.write(bytes)) {
          await new Promise<void>((resolve) => {
            res.once("drain", resolve);
            res.once("close", resolve);
          });
        }
        if (encoder.done || stream.signal.aborted) break;
      }
    } catch (error) {
      if (!stream.signal.aborted) throw error;
    } finally {
      this.#streams.delete(stream);
      req.off("close", abort);
    }
    res.end();
    return 200;
  }

  #refuse(res: ServerResponse, status: number, message: string): number {
    this.#text(res, status, message);
    return status;
  }
}
