import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * What the proxy does to a request instead of (or after) forwarding it:
 * - `throttle`: answers HTTP 503 with EC2's `RequestLimitExceeded` error document;
 * - `server-error`: answers HTTP 500 with `InternalError`;
 * - `drop`: closes the connection without forwarding (the request never reaches EC2);
 * - `drop-after-forward`: forwards the request (EC2 acts on it), then closes the connection
 *   without answering (the caller cannot know it happened: the case `ClientToken` exists for);
 * - `error`: answers with the rule's EC2 error `code` and HTTP `status` (capacity, quota).
 */
type FaultKind = "throttle" | "server-error" | "drop" | "drop-after-forward" | "error";

/** Applies `kind` to the next `times` requests of `action` (any action when omitted). */
interface FaultRule {
  readonly action?: string;
  readonly kind: FaultKind;
  times: number;
  /** Only requests whose form parameters match (e.g. one subnet's launches). */
  readonly match?: (params: URLSearchParams) => boolean;
  /** For `error`: the EC2 error code and HTTP status to answer with (e.g. `InsufficientInstanceCapacity`, 500). */
  readonly code?: string;
  readonly status?: number;
}

/** A loopback HTTP proxy between the SDK and the EC2 endpoint that injects faults. Test-only. */
export interface FaultProxy {
  /** The proxy's URL: give it to the EC2 client as `endpoint`. */
  readonly endpoint: string;
  /** Requests received, by EC2 action (faulted ones included). */
  readonly received: Map<string, number>;
  /** Requests that reached the real endpoint, by action. */
  readonly forwarded: Map<string, number>;
  /** Faults injected, by kind. */
  readonly injected: Map<FaultKind, number>;
  /** Every request received: its action and form parameters. */
  readonly log: Array<{ action: string; params: URLSearchParams }>;
  /** Adds rules (consumed in order). */
  inject(...rules: FaultRule[]): void;
  /** Removes all remaining rules. */
  clear(): void;
  close(): Promise<void>;
}

const errorXml = (code: string, message: string) =>
  `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${code}</Code><Message>${message}</Message></Error></Errors><RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>`;

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

function bump<K>(map: Map<K, number>, key: K): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

/** Starts a {@link FaultProxy} in front of `target` (e.g. moto's endpoint). */
export async function startFaultProxy(target: string): Promise<FaultProxy> {
  const rules: FaultRule[] = [];
  const received = new Map<string, number>();
  const forwarded = new Map<string, number>();
  const injected = new Map<FaultKind, number>();
  const log: Array<{ action: string; params: URLSearchParams }> = [];

  const forward = async (req: IncomingMessage, body: Buffer) => {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (typeof v === "string" && k !== "host" && k !== "connection") headers[k] = v;
    }
    return fetch(new URL(req.url ?? "/", target), {
      method: req.method ?? "POST",
      headers,
      ...(body.length > 0 ? { body: new Uint8Array(body) } : {}),
    });
  };

  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    try {
      const body = await readBody(req);
      const params = new URLSearchParams(body.toString("utf8"));
      const action = params.get("Action") ?? "?";
      bump(received, action);
      log.push({ action, params });
      const index = rules.findIndex(
        (r) =>
          r.times > 0 &&
          (r.action === undefined || r.action === action) &&
          (r.match === undefined || r.match(params)),
      );
      const rule = index >= 0 ? rules[index] : undefined;
      if (rule) {
        rule.times--;
        if (rule.times === 0) rules.splice(index, 1);
        bump(injected, rule.kind);
      }
      if (rule?.kind === "throttle") {
        res.writeHead(503, { "content-type": "text/xml" });
        res.end(errorXml("RequestLimitExceeded", "Request limit exceeded."));
        return;
      }
      if (rule?.kind === "server-error") {
        res.writeHead(500, { "content-type": "text/xml" });
        res.end(errorXml("InternalError", "An internal error has occurred."));
        return;
      }
      if (rule?.kind === "error") {
        res.writeHead(rule.status ?? 400, { "content-type": "text/xml" });
        res.end(errorXml(rule.code ?? "InvalidRequest", `${rule.code ?? "error"} injected`));
        return;
      }
      if (rule?.kind === "drop") {
        req.socket.destroy();
        return;
      }
      const upstream = await forward(req, body);
      bump(forwarded, action);
      const payload = Buffer.from(await upstream.arrayBuffer());
      if (rule?.kind === "drop-after-forward") {
        req.socket.destroy();
        return;
      }
      const headers: Record<string, string> = {};
      upstream.headers.forEach((value, key) => {
        if (key !== "content-encoding" && key !== "transfer-encoding" && key !== "connection") {
          headers[key] = value;
        }
      });
      headers["content-length"] = String(payload.length);
      res.writeHead(upstream.status, headers);
      res.end(payload);
    } catch {
      req.socket.destroy();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    received,
    forwarded,
    injected,
    log,
    inject: (...more) => void rules.push(...more),
    clear: () => void rules.splice(0, rules.length),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
