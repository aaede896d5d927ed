/**
 * The probe and metrics HTTP server (node:http): `/metrics` (Prometheus text), `/healthz`
 * (liveness) and `/readyz` (readiness), each answering 200 `ok` or 503 with the reason.
 *
 * @packageDocumentation
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeError } from "../errors.js";
import type { Registry } from "./metrics.js";

/** A parsed `host:port` bind address. */
export interface BindAddress {
  /** Host to listen on (`0.0.0.0` for `:port`). */
  readonly host: string;
  /** Port (0 = any free port). */
  readonly port: number;
}

/**
 * Parses a bind address as the apps' flags take it: `:8080` (all interfaces), `127.0.0.1:8080`,
 * `[::1]:8080`, or `0` (disabled → `undefined`). Returns `null` when the text is not an address.
 */
export function parseBindAddress(text: string): BindAddress | undefined | null {
  if (text === "0") return undefined;
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]\s]*)):(\d{1,5})$/.exec(text);
  if (match === null) return null;
  const port = Number(match[3]);
  if (port > 65535) return null;
  const host = match[1] ?? (match[2] === "" || match[2] === undefined ? "0.0.0.0" : match[2]);
  return { host, port };
}

/** The result of a probe: `true`, or the reason it fails. */
export type ProbeResult = true | string;

/** Options of {@link startProbeServer}. */
export interface ProbeServerOptions {
  /** Where to listen. */
  readonly address: BindAddress;
  /** Serve `/metrics` from this registry (omit: no `/metrics`). */
  readonly registry?: Registry;
  /** `/healthz`: alive (omit: no `/healthz`). */
  readonly healthy?: () => ProbeResult;
  /** `/readyz`: ready to serve, e.g. caches synced (omit: no `/readyz`). */
  readonly ready?: () => ProbeResult;
}

/** A listening probe server. */
export interface ProbeServer {
  /** `host:port` actually bound (the port filled in when 0 was asked). */
  readonly address: string;
  /** `http://host:port`. */
  readonly url: string;
  /** Stops listening and closes idle and open connections. */
  close(): Promise<void>;
}

/**
 * Starts the probe/metrics server. Rejects with {@link KubeError} `ListenFailed` when the address
 * cannot be bound.
 *
 * @example
 * ```ts
 * const server = await startProbeServer({
 *   address: { host: "127.0.0.1", port: 8081 },
 *   registry: createRegistry(),
 *   healthy: () => true,
 *   ready: () => (informer.hasSynced() ? true : "pods informer not synced"),
 * });
 * // GET http://127.0.0.1:8081/readyz → 503 "pods informer not synced", later 200 "ok"
 * await server.close();
 * ```
 */
export async function startProbeServer(options: ProbeServerOptions): Promise<ProbeServer> {
  const server: Server = createServer((request, response) => {
    const path = (request.url ?? "/").split("?")[0];
    const probe =
      path === "/healthz" ? options.healthy : path === "/readyz" ? options.ready : undefined;
    if (request.method !== "GET" && request.method !== "HEAD") {
      response.writeHead(405, { "content-type": "text/plain; charset=utf-8", allow: "GET, HEAD" });
      response.end("method not allowed\n");
      return;
    }
    if (probe !== undefined) {
      let result: ProbeResult;
      try {
        result = probe();
      } catch (error) {
        result = error instanceof Error ? error.message : String(error);
      }
      response.writeHead(result === true ? 200 : 503, {
        "content-type": "text/plain; charset=utf-8",
      });
      response.end(result === true ? "ok\n" : `${result}\n`);
      return;
    }
    if (path === "/metrics" && options.registry !== undefined) {
      const registry = options.registry;
      registry.metrics().then(
        (text) => {
          response.writeHead(200, { "content-type": registry.contentType });
          response.end(text);
        },
        (error: unknown) => {
          response.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
          response.end(`${error instanceof Error ? error.message : String(error)}\n`);
        },
      );
      return;
    }
    response.writeHead(404, { "content-type": "text/plain; charset=utf-8" });
    response.end("not found\n");
  });
  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error): void => {
      reject(
        new KubeError(
          "ListenFailed",
          `cannot listen on ${options.address.host}:${options.address.port}: ${error.message}`,
          { cause: error },
        ),
      );
    };
    server.once("error", onError);
    server.listen(options.address.port, options.address.host, () => {
      server.off("error", onError);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  const host = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
  const address = `${host}:${bound.port}`;
  let closing: Promise<void> | undefined;
  return {
    address,
    url: `http://${address}`,
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
