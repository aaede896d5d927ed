/**
 * The relay behind the kubelet API's `/exec`, `/attach` and `/portForward` (`kubectl exec`,
 * `kubectl attach`, `kubectl port-forward`): the kubelet's streaming server runs on the Pod's host
 * (its agent serves the kubelet's paths and protocols, SPDY/3.1 and WebSocket upgrades), and the
 * virtual node passes the API server's upgrade request to it, then the bytes both ways, untouched.
 *
 * Trust runs both ways over mutual TLS: the agent's certificate is self-signed and trusted only by
 * its pinned SHA-256 fingerprint (the locator's, compared in constant time before a byte is
 * sent), and the virtual node presents its client certificate, which the agent pins. Each session
 * is bounded (sessions per node and per Pod, an idle timeout) and ends when its Pod does.
 *
 * Authentication and authorization are the kubelet handler's (`kubelet-handler.ts`): this file
 * sees only requests already allowed `nodes/proxy`.
 *
 * @packageDocumentation
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { isIP, type Socket } from "node:net";
import { connect, type TLSSocket } from "node:tls";
import type { V1Pod } from "@kubernetes/client-node";
import { VirtualNodeError } from "./errors.js";
import type { StreamRoute } from "./kubelet-api.js";

/** Where a Pod's host agent listens (implemented by `@nebula/provider`). */
export interface HostAgents {
  /**
   * The address, port and pinned certificate fingerprint of the agent on the Pod's host, or why
   * there is none to reach (its status and words are the answer to the API server).
   */
  locate(pod: {
    readonly namespace: string;
    readonly name: string;
    readonly uid: string;
  }): Promise<HostAgentLocation>;
}

/** The answer of {@link HostAgents.locate}. */
export type HostAgentLocation =
  | {
      readonly kind: "found";
      /** The agent's IP address (or DNS name). */
      readonly address: string;
      /** The agent's TLS port. */
      readonly port: number;
      /** SHA-256 of the agent's certificate (DER), lowercase hex without colons. */
      readonly fingerprint: string;
    }
  | {
      readonly kind: "unavailable";
      /** The status the API server is answered with. */
      readonly status: 404 | 409 | 503;
      /** Why, in words for the person running `kubectl exec`. */
      readonly message: string;
    };

/** Whether `der`'s SHA-256 is `fingerprint` (hex, either case, no colons); constant time. */
export function fingerprintMatches(der: Buffer | undefined, fingerprint: string): boolean {
  if (der === undefined || der.length === 0 || !/^[0-9a-fA-F]{64}$/.test(fingerprint)) {
    return false;
  }
  const actual = createHash("sha256").update(der).digest();
  return timingSafeEqual(actual, Buffer.from(fingerprint, "hex"));
}

/** `address:port` for a `Host` header (an IPv6 address in brackets). */
export function hostHeader(address: string, port: number): string {
  return `${isIP(address) === 6 ? `[${address}]` : address}:${port}`;
}

/**
 * The request head the agent is sent: the request line (the same method, path and query) and
 * the request's headers as they came (`rawHeaders`: names' case and order kept), `Host` replaced
 * by the agent's, `Authorization` left out (a bearer token a caller presented to the kubelet API
 * is not the agent's to see: the agent knows the virtual node by its client certificate).
 */
export function upstreamRequestHead(
  method: string,
  url: string,
  rawHeaders: readonly string[],
  host: string,
): string {
  const lines = [`${method} ${url} HTTP/1.1`];
  let hostDone = false;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    const lower = name.toLowerCase();
    if (lower === "authorization") continue;
    if (lower === "host") {
      if (!hostDone) lines.push(`${name}: ${host}`);
      hostDone = true;
      continue;
    }
    lines.push(`${name}: ${rawHeaders[i + 1]}`);
  }
  if (!hostDone) lines.splice(1, 0, `Host: ${host}`);
  return `${lines.join("\r\n")}\r\n\r\n`;
}

const REASONS: Record<number, string> = {
  400: "Bad Request",
  404: "Not Found",
  409: "Conflict",
  429: "Too Many Requests",
  500: "Internal Server Error",
  502: "Bad Gateway",
  503: "Service Unavailable",
};

/** A whole HTTP/1.1 response, for a socket no `ServerResponse` writes to; `Connection: close`. */
export function rawHttpResponse(
  status: number,
  message: string,
  headers: Readonly<Record<string, string>> = {},
): string {
  const body = message.endsWith("\n") ? message : `${message}\n`;
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  return (
    `HTTP/1.1 ${status} ${REASONS[status] ?? "Error"}\r\n` +
    "Content-Type: text/plain; charset=utf-8\r\n" +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    extra.join("") +
    "Connection: close\r\n\r\n" +
    body
  );
}

/** The `command` query parameters of an `/exec` request, in order (the kubelet's `cmd`). */
export function execCommand(query: URLSearchParams): string[] {
  return query.getAll("command");
}

/** Counts the sessions open, in total and per Pod (by UID), within their caps. */
export class SessionSlots {
  #total = 0;
  readonly #byPod = new Map<string, number>();
  constructor(
    private readonly max: number,
    private readonly maxPerPod: number,
  ) {}
  /** Sessions open now. */
  get open(): number {
    return this.#total;
  }
  /** A slot for a session to the Pod (call the function returned once when done), or why none. */
  acquire(pod: {
    readonly namespace: string;
    readonly name: string;
    readonly uid: string;
  }): (() => void) | { readonly refused: string } {
    const mine = this.#byPod.get(pod.uid) ?? 0;
    if (this.#total >= this.max) {
      return {
        refused: `too many streaming sessions (exec, attach, port-forward) on this virtual node (${this.max} at once); end one or try again later`,
      };
    }
    if (mine >= this.maxPerPod) {
      return {
        refused: `too many streaming sessions (exec, attach, port-forward) to pod "${pod.namespace}/${pod.name}" (${this.maxPerPod} at once); end one or try again later`,
      };
    }
    this.#total += 1;
    this.#byPod.set(pod.uid, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#total -= 1;
      const left = (this.#byPod.get(pod.uid) ?? 1) - 1;
      if (left <= 0) this.#byPod.delete(pod.uid);
      else this.#byPod.set(pod.uid, left);
    };
  }
}

/** What {@link createStreamRelay} needs. */
export interface StreamRelayOptions {
  /** Where each Pod's agent is, and the client certificate and key (PEM) it pins. */
  readonly agents: {
    readonly locate: HostAgents;
    readonly clientCert: string;
    readonly clientKey: string;
  };
  /** The Pods bound to the Node (the informer's store): a session ends when its Pod is gone. */
  readonly pods: { list(): readonly V1Pod[] };
  /** Where the audit lines (info) and failures (warn) go. */
  readonly logger: {
    info(fields: Record<string, unknown>, message: string): void;
    warn(fields: Record<string, unknown>, message: string): void;
  };
  /** Sessions open at once on the node (default 64). */
  readonly maxSessions?: number;
  /** Sessions open at once to one Pod (default 8). */
  readonly maxSessionsPerPod?: number;
  /** A session with no byte either way this long is ended, in ms (default 4 h, the kubelet's). */
  readonly idleTimeoutMs?: number;
  /** How long reaching the agent may take, TCP and TLS, in ms (default 10,000). */
  readonly connectTimeoutMs?: number;
  /** How often the open sessions' Pods are looked for, in ms (default 1,000). */
  readonly podCheckMs?: number;
}

/** What a session is opened for: an authorized request's route, its Pod, and who asked. */
interface StreamTarget {
  /** The route (`exec`, `attach`, `portForward`). */
  readonly route: StreamRoute;
  /** The Pod's UID, as the informer holds it. */
  readonly uid: string;
  /** The authenticated user (the API server's identity, for requests it relays). */
  readonly user: string;
}

/** A reached, verified agent connection, waiting for the request to be piped to it. */
interface OpenedStream {
  readonly ok: true;
  /** Pipes the request to the agent and the bytes both ways; resolves with the agent's status. */
  pipe(req: IncomingMessage, socket: Socket, head: Buffer): Promise<number>;
  /** Closes the agent connection unused (the client went away meanwhile). */
  abandon(): void;
}

/** Why a session was not opened: the status and words to answer with. */
interface StreamRefusal {
  readonly ok: false;
  readonly status: number;
  readonly message: string;
  readonly headers?: Readonly<Record<string, string>>;
}

/** The relay: opens sessions to host agents and ends them (their Pod gone, idle, shut down). */
export interface StreamRelay {
  /**
   * Takes a slot, locates the Pod's agent, connects with the client certificate and checks the
   * agent's certificate against the pinned fingerprint; nothing is sent to the agent yet.
   */
  open(target: StreamTarget, client: string): Promise<OpenedStream | StreamRefusal>;
  /** Sessions open now. */
  readonly sessions: number;
  /** Ends every session (the listener is closing). */
  close(): void;
}

/** Retry-After of a 429 for a full session cap: a session ends at its user's pace. */
const SESSIONS_RETRY_AFTER_SECONDS = 10;

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

/** An open session, as the Pod check and `close()` end it. */
interface Session {
  readonly namespace: string;
  readonly pod: string;
  readonly uid: string;
  end(how: string): void;
}

/**
 * The relay for `/exec`, `/attach` and `/portForward`. Each session logs one `info` line when it
 * starts (`stream session started`: `session`, `kind`, `namespace`, `pod`, `uid`, `container`,
 * `command` for exec, `user`, `client`) and one when it ends (`stream session ended`: `session`,
 * `durationMs`, `bytesToAgent`, `bytesFromAgent`, `agentStatus`, `ended`). The user is who the
 * kubelet API authenticated, for `kubectl` the API server itself: the person (or controller)
 * behind a request is in the API server's audit log, the kubelet API never sees them.
 */
export function createStreamRelay(options: StreamRelayOptions): StreamRelay {
  const slots = new SessionSlots(
    count(options.maxSessions, 64, "maxStreamSessions"),
    count(options.maxSessionsPerPod, 8, "maxStreamSessionsPerPod"),
  );
  const idleMs = count(options.idleTimeoutMs, 4 * 3600 * 1000, "streamIdleTimeoutSeconds");
  const connectMs = count(options.connectTimeoutMs, 10_000, "connectTimeoutMs");
  const sessions = new Set<Session>();
  let podCheck: NodeJS.Timeout | undefined;

  /** Ends the sessions whose Pod (namespace, name and UID) the informer no longer holds. */
  const checkPods = () => {
    const live = new Set(
      options.pods
        .list()
        .map((p) => `${p.metadata?.namespace}/${p.metadata?.name}/${p.metadata?.uid}`),
    );
    for (const s of sessions) {
      if (!live.has(`${s.namespace}/${s.pod}/${s.uid}`)) s.end("pod deleted");
    }
  };
  const track = (session: Session) => {
    sessions.add(session);
    podCheck ??= setInterval(checkPods, options.podCheckMs ?? 1000);
    podCheck.unref();
  };
  const untrack = (session: Session) => {
    sessions.delete(session);
    if (sessions.size === 0 && podCheck !== undefined) {
      clearInterval(podCheck);
      podCheck = undefined;
    }
  };

  /** Connects to the agent and verifies its certificate: the socket, or what went wrong. */
  const reach = (
    address: string,
    port: number,
    fingerprint: string,
  ): Promise<TLSSocket | { readonly error: string }> =>
    new Promise((resolve) => {
      const where = `${hostHeader(address, port)}`;
      const upstream = connect({
        host: address,
        port,
        cert: options.agents.clientCert,
        key: options.agents.clientKey,
        // The agent's certificate is self-signed: it is trusted by its fingerprint alone, below.
        rejectUnauthorized: false,
        ...(isIP(address) === 0 ? { servername: address } : {}),
      });
      let settled = false;
      const settle = (value: TLSSocket | { readonly error: string }) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        upstream.off("error", failed);
        // Until the session's own listeners: an error then ends the socket, never the process.
        upstream.on("error", () => undefined);
        if ("error" in value) upstream.destroy();
        resolve(value);
      };
      const failed = (error: Error) =>
        settle({
          error: `cannot reach the pod's host agent at ${where}: ${error.message}; check that the host is running its agent and that its security group lets the virtual node reach port ${port}`,
        });
      const deadline = setTimeout(
        () =>
          settle({
            error: `the pod's host agent at ${where} did not answer within ${connectMs / 1000} s; check that its security group lets the virtual node reach port ${port} and that the host is running its agent`,
          }),
        connectMs,
      );
      upstream.on("error", failed);
      upstream.once("secureConnect", () => {
        if (!fingerprintMatches(upstream.getPeerCertificate().raw, fingerprint)) {
          settle({
            error: `the pod's host agent at ${where} presented a certificate whose SHA-256 fingerprint is not the one pinned for it; nothing was sent to it. Check that the address belongs to the pod's host (not reused by another instance) and that the pinned fingerprint is the agent's current one`,
          });
          return;
        }
        settle(upstream);
      });
    });

  const open = async (
    target: StreamTarget,
    client: string,
  ): Promise<OpenedStream | StreamRefusal> => {
    const { route } = target;
    const pod = { namespace: route.namespace, name: route.pod, uid: target.uid };
    const release = slots.acquire(pod);
    if (typeof release !== "function") {
      return {
        ok: false,
        status: 429,
        message: `${release.refused}\n`,
        headers: { "retry-after": String(SESSIONS_RETRY_AFTER_SECONDS) },
      };
    }
    let handedOver = false;
    try {
      let location: HostAgentLocation;
      try {
        location = await options.agents.locate.locate(pod);
      } catch (error) {
        options.logger.warn({ err: error, ...pod }, "locating a pod's host agent failed");
        return {
          ok: false,
          status: 502,
          message: `cannot locate the host agent of pod "${pod.namespace}/${pod.name}": ${(error as Error).message}`,
        };
      }
      if (location.kind === "unavailable") {
        return { ok: false, status: location.status, message: location.message };
      }
      const upstream = await reach(location.address, location.port, location.fingerprint);
      if ("error" in upstream) {
        options.logger.warn({ ...pod, reason: upstream.error }, "reaching a host agent failed");
        return { ok: false, status: 502, message: upstream.error };
      }
      handedOver = true;
      const opened: OpenedStream = {
        ok: true,
        abandon: () => {
          upstream.destroy();
          release();
        },
        pipe: (req, socket, head) =>
          pipeSession({
            req,
            socket,
            head,
            upstream,
            host: hostHeader(location.address, location.port),
            target,
            client,
            release,
          }),
      };
      return opened;
    } finally {
      if (!handedOver) release();
    }
  };

  const pipeSession = (s: {
    req: IncomingMessage;
    socket: Socket;
    head: Buffer;
    upstream: TLSSocket;
    host: string;
    target: StreamTarget;
    client: string;
    release: () => void;
  }): Promise<number> => {
    const { req, socket, upstream, target } = s;
    const { route } = target;
    const hungUp = () =>
      rawHttpResponse(
        502,
        `the pod's host agent at ${s.host} closed the connection before answering; check that it pins this virtual node's client certificate`,
      );
    if (upstream.destroyed) {
      // It hung up while the request was being checked (it refused the client certificate, say).
      s.release();
      socket.end(hungUp());
      return Promise.resolve(502);
    }
    const id = randomBytes(8).toString("hex");
    const started = Date.now();
    const url = new URL(req.url ?? "/", "https://kubelet");
    options.logger.info(
      {
        session: id,
        kind: route.kind,
        namespace: route.namespace,
        pod: route.pod,
        uid: target.uid,
        ...(route.kind === "portForward" ? {} : { container: route.container }),
        ...(route.kind === "exec" ? { command: execCommand(url.searchParams) } : {}),
        user: target.user,
        client: s.client,
      },
      "stream session started",
    );
    let toAgent = s.head.length;
    let fromAgent = 0;
    let agentStatus = 0;
    let ended: string | undefined;
    let resolveStatus: (status: number) => void = () => undefined;
    const status = new Promise<number>((resolve) => {
      resolveStatus = resolve;
    });
    const session: Session = {
      namespace: route.namespace,
      pod: route.pod,
      uid: target.uid,
      end: (how) => {
        ended ??= how;
        socket.destroy();
        upstream.destroy();
      },
    };
    track(session);
    let closed = 0;
    const onClose = () => {
      closed += 1;
      if (closed < 2) return;
      untrack(session);
      s.release();
      resolveStatus(agentStatus);
      options.logger.info(
        {
          session: id,
          durationMs: Date.now() - started,
          bytesToAgent: toAgent,
          bytesFromAgent: fromAgent,
          agentStatus,
          ended: ended ?? "closed",
        },
        "stream session ended",
      );
    };
    // Either side closing (or failing) ends the other once what it was sent is written.
    socket.once("close", () => {
      ended ??= "client closed";
      if (fromAgent === 0) upstream.destroy();
      else upstream.destroySoon();
      onClose();
    });
    // The agent's side ending ends the client's once what it was sent is written.
    let agentDone = false;
    const agentEnded = () => {
      if (agentDone) return;
      agentDone = true;
      ended ??= "agent closed";
      if (fromAgent === 0 && !socket.destroyed) {
        // The agent hung up before answering (it refused the virtual node's certificate, say):
        // the API server is told so rather than left with a closed connection.
        agentStatus = 502;
        socket.write(hungUp());
      }
      socket.destroySoon();
    };
    upstream.once("end", agentEnded);
    upstream.once("close", () => {
      agentEnded();
      onClose();
    });
    socket.on("error", (error: Error) => {
      ended ??= `client error: ${error.message}`;
      socket.destroy();
    });
    upstream.on("error", (error: Error) => {
      ended ??= `agent error: ${error.message}`;
      upstream.destroy();
    });
    const idle = () => session.end(`idle for ${idleMs / 1000} s`);
    socket.setTimeout(idleMs, idle);
    upstream.setTimeout(idleMs, idle);
    socket.on("data", (chunk: Buffer) => {
      toAgent += chunk.length;
    });
    upstream.on("data", (chunk: Buffer) => {
      if (fromAgent === 0) {
        const line = /^HTTP\/1\.[01] (\d{3})/.exec(chunk.subarray(0, 16).toString("latin1"));
        agentStatus = line === null ? 0 : Number(line[1]);
        resolveStatus(agentStatus);
      }
      fromAgent += chunk.length;
    });
    upstream.write(
      upstreamRequestHead(req.method ?? "GET", req.url ?? "/", req.rawHeaders, s.host),
    );
    if (s.head.length > 0) upstream.write(s.head);
    // pipe(): each side reads only as fast as the other takes (back-pressure); nothing is kept whole.
    socket.pipe(upstream);
    upstream.pipe(socket, { end: false });
    return status;
  };

  return {
    open,
    get sessions() {
      return sessions.size;
    },
    close() {
      for (const s of sessions) s.end("virtual node shutting down");
    },
  };
}
