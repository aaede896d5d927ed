import { randomUUID } from "node:crypto";
import { Resolver } from "node:dns/promises";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type KubernetesObject, KubernetesObjectApi } from "@kubernetes/client-node";
import type { ControlPlaneConnection } from "./control-plane.js";
import { TestPeerError } from "./errors.js";
import { corednsPath } from "./paths.js";
import { spawnPeer, trackPath, waitUntil } from "./process.js";

/** Options of {@link startClusterDns}. */
export interface ClusterDnsOptions {
  /** The control plane whose Services, EndpointSlices and Pods it serves. */
  controlPlane: ControlPlaneConnection;
  /**
   * A non-loopback IPv4 address of this machine to serve on: the instance-host simulator's
   * containers reach it there (the vnode's `dns.clusterDNS`).
   */
  address: string;
  /** The UDP and TCP port (default 53: a resolver's `nameserver` line has no port). */
  port?: number;
  /** The cluster's DNS domain (default `cluster.local`). */
  clusterDomain?: string;
  /** How long to wait for it to answer for the `kubernetes` Service. Default 60 s. */
  timeoutMs?: number;
}

/** A running CoreDNS, from {@link startClusterDns}. */
export interface ClusterDns {
  /** Where it serves: `address` and `port`, as given. */
  readonly address: string;
  readonly port: number;
  /** Its process id. */
  readonly pid: number;
  /** A resolver that asks only this server, for a test's own lookups. */
  resolver(): Resolver;
  /** The ClusterRole (and ClusterRoleBinding) it reads the API with, removed by `stop`. */
  readonly roleName: string;
  /** Its last output (stdout and stderr), for a failing test's message. */
  outputTail(): string;
  /** Stops the process and removes the RBAC it was given. */
  stop(): Promise<void>;
}

/**
 * Starts the real CoreDNS (`scripts/bootstrap.sh coredns` builds it from its Go module) as a
 * process of this machine, serving the cluster's records as in a real cluster: its `kubernetes`
 * plugin over the control plane's Services, EndpointSlices and Pods (`<svc>.<ns>.svc.<domain>`,
 * a headless Service's endpoints and their host names, `pods verified` records), with the rights
 * of a real install's `system:coredns` ClusterRole and nothing more. Names outside the cluster
 * domain are refused (`NXDOMAIN`): the local world has no upstream to forward to.
 *
 * It stands where a cluster's DNS Service IP would; there is no service proxy in the local world,
 * so a Pod's resolver names this address itself (what a VPC-routable cluster DNS or NodeLocal DNS
 * gives a real cluster). Resolves once it answers for `kubernetes.default.svc.<domain>`.
 *
 * @example
 * ```ts
 * const dns = await startClusterDns({ controlPlane, address: "10.0.0.5" });
 * try {
 *   console.log(await dns.resolver().resolve4("kubernetes.default.svc.cluster.local"));
 * } finally {
 *   await dns.stop();
 * }
 * ```
 */
export async function startClusterDns(options: ClusterDnsOptions): Promise<ClusterDns> {
  const binary = corednsPath();
  if (!existsSync(binary)) {
    throw new TestPeerError(
      "BinaryMissing",
      `CoreDNS is not at ${binary}: run 'bash scripts/bootstrap.sh coredns' (or 'npm run setup')`,
    );
  }
  const port = options.port ?? 53;
  const domain = options.clusterDomain ?? "cluster.local";
  const timeoutMs = options.timeoutMs ?? 60_000;
  const objects = KubernetesObjectApi.makeApiClient(options.controlPlane.kubeConfig());
  // Its own identity and role (a real install's `system:coredns` rights), so two of them never
  // share what one's stop removes.
  const roleName = `nebula-test:coredns-${randomUUID().slice(0, 8)}`;
  const user = `system:serviceaccount:kube-system:${roleName.slice("nebula-test:".length)}`;
  const rbac = corednsRbac(roleName, user);
  for (const object of rbac) {
    await objects.create(object).catch((error: unknown) => {
      if ((error as { code?: number }).code !== 409) throw error;
    });
  }
  const removeRbac = async (): Promise<void> => {
    for (const object of [...rbac].reverse()) {
      await objects.delete(object).catch((error: unknown) => {
        if ((error as { code?: number }).code !== 404) throw error;
      });
    }
  };
  const dir = mkdtempSync(join(tmpdir(), "nebula-coredns-"));
  const untrack = trackPath(dir);
  const kubeconfig = join(dir, "kubeconfig");
  writeFileSync(kubeconfig, options.controlPlane.kubeconfigFor(user), { mode: 0o600 });
  const corefile = join(dir, "Corefile");
  writeFileSync(
    corefile,
    [
      `.:${port} {`,
      `  bind ${options.address}`,
      "  errors",
      `  kubernetes ${domain} in-addr.arpa ip6.arpa {`,
      `    kubeconfig ${kubeconfig}`,
      "    pods verified",
      "    fallthrough in-addr.arpa ip6.arpa",
      "    ttl 1",
      "  }",
      "}",
      "",
    ].join("\n"),
  );
  const peer = spawnPeer({
    name: "coredns",
    command: binary,
    args: ["-conf", corefile],
    cleanupPaths: [dir],
  });
  const stop = async (): Promise<void> => {
    try {
      await peer.stop(3_000);
      untrack();
    } finally {
      await removeRbac();
    }
  };
  const resolver = (): Resolver => {
    const r = new Resolver({ timeout: 1_000, tries: 1 });
    r.setServers([`${options.address}:${port}`]);
    return r;
  };
  try {
    let last = "no answer yet";
    await waitUntil(
      async () => {
        try {
          return (await resolver().resolve4(`kubernetes.default.svc.${domain}`)).length > 0;
        } catch (error) {
          last = String(error);
          return false;
        }
      },
      { what: `CoreDNS answering on ${options.address}:${port}`, timeoutMs, process: peer },
    ).catch((error: unknown) => {
      throw new TestPeerError("NotReady", `${String(error)} (its last answer: ${last})`, {
        cause: error,
      });
    });
  } catch (cause) {
    await stop();
    throw new TestPeerError(
      "StartFailed",
      `CoreDNS did not start on ${options.address}:${port} (is the port taken, or not root?): ${String(cause)}; its output: ${peer.outputTail()}`,
      { cause },
    );
  }
  return {
    address: options.address,
    port,
    pid: peer.pid,
    roleName,
    resolver,
    outputTail: () => peer.outputTail(),
    stop,
  };
}

/** CoreDNS's ClusterRole as its own deployment manifests grant it, and its binding to `user`. */
function corednsRbac(name: string, user: string): KubernetesObject[] {
  return [
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name },
      rules: [
        {
          apiGroups: [""],
          resources: ["endpoints", "services", "pods", "namespaces"],
          verbs: ["list", "watch"],
        },
        {
          apiGroups: ["discovery.k8s.io"],
          resources: ["endpointslices"],
          verbs: ["list", "watch"],
        },
      ],
    } as KubernetesObject,
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: user }],
    } as KubernetesObject,
  ];
}
