/**
 * The kubelet API's listener: its settings (zod), the serving certificate (the configured one, or a
 * self-signed one made at start), the client CA, and the HTTPS server around
 * {@link createKubeletHandler}, run until a signal aborts.
 *
 * @packageDocumentation
 */
import { X509Certificate } from "node:crypto";
import { once } from "node:events";
import { readFile } from "node:fs/promises";
import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import {
  AuthenticationV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  type KubeConfig,
} from "@kubernetes/client-node";
import { z } from "zod";
import {
  apiServerClientCa,
  createKubeletHandler,
  type KubeletHandlerOptions,
} from "./kubelet-handler.js";
import { selfSignedServingCert } from "./serving-cert.js";

/**
 * The kubelet API's settings (`kubectl logs`, `/stats/summary`, `/metrics/resource`; `kubectl
 * exec`, `attach`, `port-forward` when the server is given host agents), with defaults.
 */
export const KubeletApiConfigSchema = z
  .strictObject({
    /** Serve it (default `true`). */
    enabled: z.boolean().default(true),
    /** Address to listen on (default every interface). */
    bindAddress: z.string().min(1).default("0.0.0.0"),
    /** Serving certificate (PEM file); with `tlsPrivateKeyFile`. Default: a self-signed one made at start. */
    tlsCertFile: z.string().min(1).optional(),
    /** Its private key (PEM file). */
    tlsPrivateKeyFile: z.string().min(1).optional(),
    /**
     * CA bundle (PEM file) the API server's kubelet client certificate is verified against.
     * Default: `client-ca-file` of the ConfigMap `kube-system/extension-apiserver-authentication`,
     * which kube-apiserver publishes from its `--client-ca-file`.
     */
    clientCaFile: z.string().min(1).optional(),
    /**
     * How often the client CA is read again, in seconds (default 60): a rotated CA (the file
     * rewritten, or the ConfigMap changed) is served from the next read on, without a restart.
     */
    clientCaReloadSeconds: z.number().int().min(1).max(86_400).default(60),
    /**
     * How long one read of container usage from CloudWatch serves `/stats/summary` and
     * `/metrics/resource`, in seconds (default 60: the hosts publish once a minute).
     */
    usageCacheSeconds: z.number().int().min(0).max(3600).default(60),
    /**
     * Log reads and follows served at once by this node (default 32); one more gets 429. Every
     * node of an account shares CloudWatch Logs' `GetLogEvents` quota: lower it where many do.
     */
    maxLogStreams: z.number().int().min(1).max(1024).default(32),
    /** Of those, at once per authenticated user (default 4). */
    maxLogStreamsPerUser: z.number().int().min(1).max(1024).default(4),
    /** TokenReviews one client address may burst to for tokens not yet cached (default 10). */
    tokenReviewBurst: z.number().int().min(1).max(10_000).default(10),
    /** The rate that burst refills at, per second (default 1). */
    tokenReviewsPerSecond: z.number().positive().max(10_000).default(1),
    /**
     * `kubectl exec`, `attach` and `port-forward` sessions relayed at once by this node to the
     * Pods' host agents (default 64); one more gets 429. Each holds two sockets.
     */
    maxStreamSessions: z.number().int().min(1).max(4096).default(64),
    /** Of those, at once to one Pod (default 8). */
    maxStreamSessionsPerPod: z.number().int().min(1).max(1024).default(8),
    /**
     * A session with no byte either way this long is closed, in seconds (default 14400: the
     * kubelet's 4 h `streamingConnectionIdleTimeout`; at most a day).
     */
    streamIdleTimeoutSeconds: z.number().int().min(1).max(86_400).default(14_400),
  })
  .refine((k) => (k.tlsCertFile === undefined) === (k.tlsPrivateKeyFile === undefined), {
    message: "tlsCertFile and tlsPrivateKeyFile go together: give both or neither",
  })
  .default({
    enabled: true,
    bindAddress: "0.0.0.0",
    clientCaReloadSeconds: 60,
    usageCacheSeconds: 60,
    maxLogStreams: 32,
    maxLogStreamsPerUser: 4,
    tokenReviewBurst: 10,
    tokenReviewsPerSecond: 1,
    maxStreamSessions: 64,
    maxStreamSessionsPerPod: 8,
    streamIdleTimeoutSeconds: 14_400,
  });

/** The kubelet API's parsed settings. */
export type KubeletApiConfig = z.output<typeof KubeletApiConfigSchema>;

/** What {@link kubeletApiServer} needs besides the handler's own options. */
export interface KubeletApiServerOptions
  extends Omit<
    KubeletHandlerOptions,
    | "core"
    | "authentication"
    | "authorization"
    | "usageCacheMs"
    | "logger"
    | "maxStreamSessions"
    | "maxStreamSessionsPerPod"
    | "streamIdleTimeoutMs"
  > {
  /** Where and as whom to reach the API server (reviews, the client CA, `/runningpods/`). */
  readonly kubeConfig: KubeConfig;
  /** The settings (the configuration file's `kubeletApi`). */
  readonly settings: KubeletApiConfig;
  /** The port (the Node's `daemonEndpoints.kubeletEndpoint.Port`). */
  readonly port: number;
  /** Names and addresses a self-signed serving certificate is made for (the Node's name and InternalIP). */
  readonly hosts: readonly string[];
  /** Where the listener and failed requests are reported (a pino logger fits). */
  readonly logger: KubeletHandlerOptions["logger"] & {
    info(fields: Record<string, unknown>, message: string): void;
  };
  /**
   * The waits between attempts to read the API server's client CA at start, in milliseconds
   * (default 1 s doubling to 30 s; the last repeats until the read succeeds or the signal aborts).
   */
  readonly clientCaRetryDelaysMs?: readonly number[];
}

/** Start-up read attempts of the client CA: 1 s doubling to 30 s, the last repeated. */
const CLIENT_CA_RETRY_DELAYS_MS = [1_000, 2_000, 4_000, 8_000, 16_000, 30_000];

/** Reads a file the settings name, saying which setting named it when it cannot. */
async function readConfigured(setting: string, path: string): Promise<string> {
  try {
    return await readFile(path, "utf8");
  } catch (error) {
    throw new Error(`kubeletApi.${setting}: cannot read ${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/**
 * The kubelet API served over HTTPS: returns the loop that listens on `port` until `signal`
 * aborts, then ends the `follow` log streams and the stream sessions and closes the server. With
 * `agents`, upgrade requests (`kubectl exec`, `attach`, `port-forward`) are relayed to the Pods'
 * host agents (the handler's `upgrade`). The serving certificate is the
 * configured one or a self-signed one; client certificates are verified against `clientCaFile` or
 * the API server's client CA ({@link apiServerClientCa}), per request, so a client without one
 * may still present a bearer token.
 *
 * @example
 * ```ts
 * const serve = kubeletApiServer({ kubeConfig, settings, port: 10250, hosts: [nodeName, ip],
 *   nodeName, pods: informer, logs: undefined, usage: undefined, startTime: new Date(), logger });
 * await serve(signal);
 * ```
 */
export function kubeletApiServer(
  options: KubeletApiServerOptions,
): (signal: AbortSignal) => Promise<void> {
  const { kubeConfig, settings, port, hosts, logger } = options;
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const kubelet = createKubeletHandler({
    ...options,
    core,
    authentication: kubeConfig.makeApiClient(AuthenticationV1Api),
    authorization: kubeConfig.makeApiClient(AuthorizationV1Api),
    usageCacheMs: settings.usageCacheSeconds * 1000,
    maxLogStreams: settings.maxLogStreams,
    maxLogStreamsPerUser: settings.maxLogStreamsPerUser,
    tokenReviewBurst: settings.tokenReviewBurst,
    tokenReviewsPerSecond: settings.tokenReviewsPerSecond,
    maxStreamSessions: settings.maxStreamSessions,
    maxStreamSessionsPerPod: settings.maxStreamSessionsPerPod,
    streamIdleTimeoutMs: settings.streamIdleTimeoutSeconds * 1000,
    logger,
  });
  const { tlsCertFile, tlsPrivateKeyFile, clientCaFile, bindAddress } = settings;
  const readCa = async (): Promise<string> =>
    clientCaFile !== undefined
      ? certificates(
          `kubeletApi.clientCaFile: ${clientCaFile}`,
          await readConfigured("clientCaFile", clientCaFile),
        )
      : certificates(
          "kube-system/extension-apiserver-authentication client-ca-file",
          await apiServerClientCa(core).catch((error: Error) => {
            throw new Error(`kubelet API: ${error.message}; or set kubeletApi.clientCaFile`, {
              cause: error,
            });
          }),
        );
  return async (signal) => {
    const serving =
      tlsCertFile !== undefined && tlsPrivateKeyFile !== undefined
        ? {
            cert: await readConfigured("tlsCertFile", tlsCertFile),
            key: await readConfigured("tlsPrivateKeyFile", tlsPrivateKeyFile),
          }
        : await selfSignedServingCert(hosts);
    // A configured file that cannot be read is a mistake to fix; the API server may only be
    // briefly away (or its Role not yet bound): that read is retried until it answers.
    const first =
      clientCaFile !== undefined
        ? await readCa()
        : await untilRead(readCa, options.clientCaRetryDelaysMs ?? CLIENT_CA_RETRY_DELAYS_MS, {
            signal,
            logger,
          });
    if (first === undefined) return;
    // Client certificates are verified against the CA per request: a client without one may
    // still present a bearer token.
    let ca = first;
    const tls = (caPem: string) => ({ ...serving, ca: caPem, requestCert: true });
    const server = createServer({ ...tls(ca), rejectUnauthorized: false }, kubelet.handle);
    // Node gives a request with an `Upgrade` header to 'upgrade' listeners, not to the handler:
    // `kubectl exec`, `attach` and `port-forward` come that way (without agents, as any request).
    if (options.agents !== undefined) server.on("upgrade", kubelet.upgrade);
    server.listen(port, bindAddress);
    try {
      await once(server, "listening");
    } catch (error) {
      throw new Error(
        `kubelet API: cannot listen on ${bindAddress}:${port} (${(error as Error).message}); set node.kubeletPort, or kubeletApi.enabled: false`,
        { cause: error },
      );
    }
    const bound = (server.address() as AddressInfo).port;
    logger.info({ port: bound, address: bindAddress }, "kubelet API listening");
    // A rotated CA is served from the next read on; a read that fails keeps the CA in use.
    const reload = setInterval(() => {
      readCa()
        .then((next) => {
          if (next === ca || signal.aborted) return;
          server.setSecureContext(tls(next));
          ca = next;
          logger.info({ certificates: pemCount(next) }, "kubelet API: client CA reloaded");
        })
        .catch((error: unknown) =>
          logger.warn(
            { err: error },
            "kubelet API: the client CA read again is not usable; keeping the one in use",
          ),
        );
    }, settings.clientCaReloadSeconds * 1000);
    reload.unref();
    try {
      if (!signal.aborted) await once(signal, "abort");
    } finally {
      clearInterval(reload);
    }
    kubelet.close();
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  };
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** How many certificates a PEM bundle holds. */
function pemCount(pem: string): number {
  return pem.match(PEM_CERTIFICATE)?.length ?? 0;
}

/**
 * `pem` when it is a bundle of one or more certificates that parse; else an error naming `source`
 * (TLS itself takes any text as a CA and then trusts nobody).
 */
function certificates(source: string, pem: string): string {
  const blocks = pem.match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) throw new Error(`${source}: holds no PEM certificate`);
  for (const block of blocks) {
    try {
      new X509Certificate(block);
    } catch (error) {
      throw new Error(
        `${source}: a certificate in it cannot be read (${(error as Error).message})`,
        {
          cause: error,
        },
      );
    }
  }
  return pem;
}

/**
 * `read()` until it resolves, waiting `delays[i]` after the i-th failure (the last repeating) and
 * warning each time with the failure's own message; `undefined` once `signal` aborts.
 */
async function untilRead(
  read: () => Promise<string>,
  delays: readonly number[],
  context: { signal: AbortSignal; logger: KubeletApiServerOptions["logger"] },
): Promise<string | undefined> {
  for (let attempt = 1; !context.signal.aborted; attempt++) {
    try {
      return await read();
    } catch (error) {
      const wait = delays[Math.min(attempt - 1, delays.length - 1)] ?? 30_000;
      context.logger.warn(
        { err: error, attempt, retryInSeconds: wait / 1000 },
        "kubelet API: the client CA could not be read yet; not serving until it is, retrying",
      );
      await sleep(wait, context.signal);
    }
  }
  return undefined;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
