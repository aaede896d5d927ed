import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type KubernetesObject, KubernetesObjectApi } from "@kubernetes/client-node";
import type { ControlPlaneConnection } from "./control-plane.js";
import { TestPeerError } from "./errors.js";
import { metricsServerPath } from "./paths.js";
import { freePort } from "./ports.js";
import { spawnPeer, trackPath, waitUntil } from "./process.js";

/** Where {@link startMetricsServer} registers metrics-server: the names a real install uses. */
const NAMESPACE = "kube-system";
const NAME = "metrics-server";
const API_SERVICE = "v1beta1.metrics.k8s.io";

/** Options of {@link startMetricsServer}. */
export interface MetricsServerOptions {
  /** The control plane to serve `metrics.k8s.io` in (started with the aggregation layer, as `startControlPlane` does). */
  controlPlane: ControlPlaneConnection;
  /**
   * A non-loopback IPv4 address of this machine: kube-apiserver reaches metrics-server there (an
   * Endpoints address may not be loopback).
   */
  address: string;
  /** How often it scrapes every node's `/metrics/resource` (`--metric-resolution`, at least 10). Default 10. */
  resolutionSeconds?: number;
  /** How long to wait for it to start and for the aggregated API to be available. Default 60 s. */
  timeoutMs?: number;
}

/** A running metrics-server, from {@link startMetricsServer}. */
export interface MetricsServer {
  /** The port it serves on, at the `address` given. */
  readonly port: number;
  /** Its last output (stdout and stderr), for a failing test's message. */
  outputTail(): string;
  /** Unregisters `metrics.k8s.io` (so API discovery stays whole), then stops the process. */
  stop(): Promise<void>;
}

/**
 * Starts the real metrics-server (`scripts/bootstrap.sh metrics-server` builds it) as a process
 * of this machine and registers it with kube-apiserver as a real install does: the
 * `kube-system/metrics-server` Service (its endpoint this process), and the APIService
 * `v1beta1.metrics.k8s.io`. Resolves once the aggregated API is `Available`, so `kubectl top`
 * works. It scrapes each Node's kubelet API at its `InternalIP` and `daemonEndpoints` port,
 * authenticating with the control plane's admin client certificate; the kubelet's serving
 * certificate is not verified (`--kubelet-insecure-tls`, as self-signed ones are common).
 *
 * One per control plane at a time: the APIService name is fixed.
 *
 * @example
 * ```ts
 * const ms = await startMetricsServer({ controlPlane, address: "10.0.0.5" });
 * try {
 *   execFileSync(kubectlPath(), ["--kubeconfig", controlPlane.kubeconfigPath ?? "", "top", "pods", "-A"]);
 * } finally {
 *   await ms.stop();
 * }
 * ```
 */
export async function startMetricsServer(options: MetricsServerOptions): Promise<MetricsServer> {
  const binary = metricsServerPath();
  if (!existsSync(binary)) {
    throw new TestPeerError(
      "BinaryMissing",
      `metrics-server is not at ${binary}: run 'bash scripts/bootstrap.sh metrics-server' (or 'npm run setup')`,
    );
  }
  const timeoutMs = options.timeoutMs ?? 60_000;
  const dir = mkdtempSync(join(tmpdir(), "nebula-metrics-server-"));
  const untrack = trackPath(dir);
  const kubeconfig = join(dir, "kubeconfig");
  writeFileSync(kubeconfig, options.controlPlane.kubeconfig, { mode: 0o600 });
  const port = await freePort();
  const resolution = options.resolutionSeconds ?? 10;
  const peer = spawnPeer({
    name: "metrics-server",
    command: binary,
    args: [
      `--kubeconfig=${kubeconfig}`,
      `--authentication-kubeconfig=${kubeconfig}`,
      `--authorization-kubeconfig=${kubeconfig}`,
      `--bind-address=${options.address}`,
      `--secure-port=${port}`,
      `--cert-dir=${join(dir, "certs")}`,
      "--kubelet-insecure-tls",
      "--kubelet-preferred-address-types=InternalIP",
      "--kubelet-use-node-status-port",
      `--metric-resolution=${resolution}s`,
      // It must be shorter than the resolution.
      `--kubelet-request-timeout=${Math.max(1, Math.floor(resolution / 2))}s`,
    ],
    cleanupPaths: [dir],
  });
  const objects = KubernetesObjectApi.makeApiClient(options.controlPlane.kubeConfig());
  const registered: KubernetesObject[] = [];
  const unregister = async (): Promise<void> => {
    const failures: string[] = [];
    for (const object of registered.reverse()) {
      try {
        await objects.delete(object);
      } catch (error) {
        if ((error as { code?: number }).code !== 404) {
          failures.push(`${object.kind} ${object.metadata?.name}: ${String(error)}`);
        }
      }
    }
    registered.length = 0;
    if (failures.length > 0) {
      throw new TestPeerError(
        "RequestFailed",
        `could not unregister metrics-server (delete these by hand, or API discovery stays partial): ${failures.join("; ")}`,
      );
    }
  };
  const stop = async (): Promise<void> => {
    try {
      await unregister();
    } finally {
      await peer.stop(3_000);
      untrack();
    }
  };
  try {
    await waitUntil(() => listening(options.address, port), {
      what: `metrics-server listening on ${options.address}:${port}`,
      timeoutMs,
      process: peer,
      intervalMs: 250,
    });
    const labels = { "app.kubernetes.io/name": NAME };
    const manifests: KubernetesObject[] = [
      {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: NAME, namespace: NAMESPACE, labels },
        spec: { ports: [{ name: "https", port: 443, protocol: "TCP", targetPort: port }] },
      } as KubernetesObject,
      {
        apiVersion: "discovery.k8s.io/v1",
        kind: "EndpointSlice",
        metadata: {
          name: NAME,
          namespace: NAMESPACE,
          labels: { ...labels, "kubernetes.io/service-name": NAME },
        },
        addressType: "IPv4",
        endpoints: [{ addresses: [options.address], conditions: { ready: true } }],
        ports: [{ name: "https", port, protocol: "TCP" }],
      } as KubernetesObject,
      {
        apiVersion: "v1",
        kind: "Endpoints",
        metadata: { name: NAME, namespace: NAMESPACE, labels },
        subsets: [
          {
            addresses: [{ ip: options.address }],
            ports: [{ name: "https", port, protocol: "TCP" }],
          },
        ],
      } as KubernetesObject,
      {
        apiVersion: "apiregistration.k8s.io/v1",
        kind: "APIService",
        metadata: { name: API_SERVICE, labels },
        spec: {
          service: { name: NAME, namespace: NAMESPACE, port: 443 },
          group: "metrics.k8s.io",
          version: "v1beta1",
          insecureSkipTLSVerify: true,
          groupPriorityMinimum: 100,
          versionPriority: 100,
        },
      } as KubernetesObject,
    ];
    for (const manifest of manifests) {
      await objects.create(manifest);
      registered.push(manifest);
    }
    let last = "no condition yet";
    await waitUntil(
      async () => {
        const service = (await objects.read({
          apiVersion: "apiregistration.k8s.io/v1",
          kind: "APIService",
          metadata: { name: API_SERVICE },
        })) as KubernetesObject & {
          status?: { conditions?: Array<{ type: string; status: string; message?: string }> };
        };
        const available = service.status?.conditions?.find((c) => c.type === "Available");
        last = available?.message ?? last;
        return available?.status === "True";
      },
      { what: `APIService ${API_SERVICE} Available`, timeoutMs, process: peer },
    ).catch((error: unknown) => {
      throw new TestPeerError("NotReady", `${String(error)} (its last condition: ${last})`, {
        cause: error,
      });
    });
  } catch (cause) {
    await stop();
    throw new TestPeerError(
      "StartFailed",
      `metrics-server did not become available: ${String(cause)}`,
      {
        cause,
      },
    );
  }
  return { port, outputTail: () => peer.outputTail(), stop };
}

/** Whether something accepts TCP connections on `host:port`. */
function listening(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
