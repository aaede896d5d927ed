import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { z } from "zod";
import { issueCert, issueCertSync, makeCa, makeSigningKey } from "./certs.js";
import {
  controllerList,
  controllerManagerArgs,
  DEFAULT_NODE_MONITOR_GRACE_SECONDS,
  schedulerArgs,
} from "./components.js";
import { TestPeerError } from "./errors.js";
import { cacheDir, DEFAULT_K8S_VERSION } from "./paths.js";
import { freePort, machineAddresses } from "./ports.js";
import { type PeerProcess, spawnPeer, trackPath, waitUntil } from "./process.js";

/** The user the default kubeconfig authenticates as (group `system:masters`). */
export const CONTROL_PLANE_ADMIN = { user: "admin", groups: ["system:masters"] } as const;

/**
 * The identity kube-apiserver presents to kubelets (`--kubelet-client-certificate`), as kubeadm
 * names it: a client certificate from the client CA, bound to the bootstrap ClusterRole
 * `system:kubelet-api-admin` (so a kubelet's `SubjectAccessReview` for `nodes/proxy`,
 * `nodes/log`, `nodes/stats`, `nodes/metrics` allows it). `kubectl logs` goes through it.
 */
export const KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client";

/** The identity kube-apiserver's aggregator presents to aggregated API servers, as kubeadm names it. */
const FRONT_PROXY_CLIENT = "front-proxy-client";

const ControlPlaneOptionsSchema = z.strictObject({
  kubeApiserver: z.string().min(1).optional(),
  etcd: z.string().min(1).optional(),
  startTimeoutMs: z.number().int().positive().optional(),
  apiserverArgs: z.array(z.string().startsWith("--")).optional(),
  controllers: z
    .union([z.boolean(), z.array(z.string().regex(/^(-?[a-z][a-z0-9-]*|\*)$/)).min(1)])
    .optional(),
  scheduler: z.boolean().optional(),
  nodeMonitorGracePeriodSeconds: z.number().int().min(2).max(3_600).optional(),
  kubeControllerManager: z.string().min(1).optional(),
  kubeScheduler: z.string().min(1).optional(),
  controllerManagerArgs: z.array(z.string().startsWith("--")).optional(),
  schedulerArgs: z.array(z.string().startsWith("--")).optional(),
});

/** Options of {@link startControlPlane}. Every field is optional. */
export interface ControlPlaneOptions {
  /**
   * Path of `kube-apiserver`. Default: `TEST_ASSET_KUBE_APISERVER`, else
   * `$KUBEBUILDER_ASSETS/kube-apiserver`, else
   * `$NEBULA_CACHE_DIR/control-plane/<NEBULA_K8S_VERSION or v1.35.4>/kube-apiserver`.
   */
  kubeApiserver?: string;
  /** Path of `etcd`, found like `kubeApiserver` (`TEST_ASSET_ETCD`, `KUBEBUILDER_ASSETS`, cache). */
  etcd?: string;
  /** How long to wait for etcd, `/healthz` and the `default` namespace (default 90 s). */
  startTimeoutMs?: number;
  /**
   * Extra kube-apiserver flags (`--name=value`); each replaces the default flag of the same name,
   * the others are appended. E.g.
   * `["--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"]`.
   */
  apiserverArgs?: string[];
  /**
   * Also run kube-controller-manager: `true` for `DEFAULT_CONTROLLERS` (Deployments → ReplicaSets
   * → Pods, garbage collection, node lifecycle, service accounts, Jobs, StatefulSets, DaemonSets,
   * EndpointSlices...), or the `--controllers` names to run (`"*"` = its own defaults,
   * `"-name"` leaves one out). Default `false`: the apiserver alone starts faster.
   */
  controllers?: boolean | string[];
  /** Also run kube-scheduler (binds Pods to Nodes). Default `false`. */
  scheduler?: boolean;
  /**
   * kube-controller-manager's `--node-monitor-grace-period` in seconds: how long a Node whose
   * Lease and status stop being renewed stays `Ready` before it turns `Unknown`. Default 20 (the
   * binary's own default is 50). Keep it above the Lease renew interval of the nodes under test.
   */
  nodeMonitorGracePeriodSeconds?: number;
  /** Path of `kube-controller-manager`, found like `kubeApiserver` (`TEST_ASSET_KUBE_CONTROLLER_MANAGER`, ...). */
  kubeControllerManager?: string;
  /** Path of `kube-scheduler`, found like `kubeApiserver` (`TEST_ASSET_KUBE_SCHEDULER`, ...). */
  kubeScheduler?: string;
  /** Extra kube-controller-manager flags; each replaces the default flag of the same name. */
  controllerManagerArgs?: string[];
  /** Extra kube-scheduler flags; each replaces the default flag of the same name. */
  schedulerArgs?: string[];
}

/**
 * What a test needs to reach a running control plane: plain data, so a vitest global setup can
 * `provide` it to workers. Turn it into clients with {@link connectControlPlane}.
 */
export interface ControlPlaneInfo {
  /** `https://127.0.0.1:<port>`. */
  server: string;
  /** The admin kubeconfig (YAML). */
  kubeconfig: string;
  /** The serving CA certificate, PEM. */
  caCert: string;
  /** Folder with `client-ca.crt`/`client-ca.key`, used to mint client certificates. */
  certDir: string;
  /** `gitVersion` from `/version`, e.g. `v1.35.4`. */
  version: string;
  /** The admin kubeconfig as a file (for `kubectl --kubeconfig`, `KUBECONFIG`), gone after `stop()`. */
  kubeconfigPath?: string;
  /** The controllers kube-controller-manager runs (`[]`: it does not run). */
  controllers?: string[];
  /** Whether kube-scheduler runs. */
  scheduler?: boolean;
}

/** A handle on a running control plane, from {@link startControlPlane} or {@link connectControlPlane}. */
export interface ControlPlaneConnection {
  /** `https://127.0.0.1:<port>`. */
  readonly server: string;
  /** `gitVersion` from `/version`. */
  readonly version: string;
  /** A kubeconfig (YAML) for the admin user (`admin`, group `system:masters`) that client-node loads as is. */
  readonly kubeconfig: string;
  /** The same kubeconfig as a file, e.g. for `kubectl --kubeconfig` (see `kubectlPath()`). */
  readonly kubeconfigPath: string | undefined;
  /** The controllers kube-controller-manager runs (`[]` when it does not run). */
  readonly controllers: readonly string[];
  /** Whether kube-scheduler runs. */
  readonly scheduler: boolean;
  /** A fresh `KubeConfig` loaded from {@link ControlPlaneConnection.kubeconfig}. */
  kubeConfig(): KubeConfig;
  /**
   * A `KubeConfig` for another user: a new client certificate with CN = `user` and O = `groups`,
   * signed by the control plane's client CA. RBAC applies to it (grant with Roles/Bindings).
   */
  clientFor(user: string, groups?: readonly string[]): KubeConfig;
  /** The same, as kubeconfig YAML (for a child process or kubectl). */
  kubeconfigFor(user: string, groups?: readonly string[]): string;
  /** The plain data to hand to another process (see {@link connectControlPlane}). */
  info(): ControlPlaneInfo;
}

/** A control plane this process started, from {@link startControlPlane}. */
export interface ControlPlane extends ControlPlaneConnection {
  /**
   * Stops kube-apiserver alone (SIGTERM, then SIGKILL after 5 s); etcd, its data and the
   * certificates stay, so {@link ControlPlane.startApiServer} brings the same cluster back. Open
   * watches end and new connections are refused until then. Does nothing when already stopped.
   */
  stopApiServer(): Promise<void>;
  /**
   * Starts kube-apiserver again on the same port, etcd and certificates (clients made before
   * keep working) and resolves once `/healthz` is ok. Does nothing when it is running.
   */
  startApiServer(): Promise<void>;
  /**
   * {@link ControlPlane.stopApiServer}, then `downMs` milliseconds (default 0) with nothing
   * listening, then {@link ControlPlane.startApiServer}: what a client sees when the apiserver
   * restarts (a rolling update, a crash).
   */
  restartApiServer(options?: { downMs?: number }): Promise<void>;
  /**
   * Stops kube-scheduler and kube-controller-manager (if running), then kube-apiserver, then
   * etcd, and deletes the temporary folder (certificates, kubeconfigs, etcd data).
   */
  stop(): Promise<void>;
}

/**
 * The `kubectl` built beside kube-apiserver: `TEST_ASSET_KUBECTL`, else `$KUBEBUILDER_ASSETS/kubectl`,
 * else `$NEBULA_CACHE_DIR/control-plane/<version>/kubectl`. Use it with a control plane's
 * `kubeconfigPath`.
 *
 * @example
 * ```ts
 * execFileSync(kubectlPath(), ["--kubeconfig", cp.kubeconfigPath ?? "", "get", "nodes"]);
 * ```
 */
export function kubectlPath(): string {
  return binary(undefined, "TEST_ASSET_KUBECTL", "kubectl");
}

/**
 * The kube-proxy binary built with the control plane (`bash scripts/bootstrap.sh control-plane`),
 * or `TEST_ASSET_KUBE_PROXY` / `KUBEBUILDER_ASSETS`: the service proxy a Nebula host runs.
 */
export function kubeProxyPath(): string {
  return binary(undefined, "TEST_ASSET_KUBE_PROXY", "kube-proxy");
}

function binary(explicit: string | undefined, perBinaryEnv: string, name: string): string {
  if (explicit !== undefined) return explicit;
  const override = process.env[perBinaryEnv];
  if (override !== undefined && override !== "") return override;
  const assets = process.env.KUBEBUILDER_ASSETS;
  if (assets !== undefined && assets !== "") return join(assets, name);
  const version = process.env.NEBULA_K8S_VERSION || DEFAULT_K8S_VERSION;
  return join(cacheDir(), "control-plane", version, name);
}

const flagName = (arg: string): string => arg.split("=", 1)[0] ?? arg;

/** The defaults with every flag named in `extra` replaced by its value(s) there. */
export function withOverrides(defaults: readonly string[], extra: readonly string[]): string[] {
  const replaced = new Set(extra.map(flagName));
  return [...defaults.filter((arg) => !replaced.has(flagName(arg))), ...extra];
}

const b64 = (text: string): string => Buffer.from(text, "utf8").toString("base64");

/** Renders a single-cluster, single-user kubeconfig. */
function renderKubeconfig(
  server: string,
  caCert: string,
  user: string,
  cert: string,
  key: string,
): string {
  return [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "  - name: nebula-test",
    "    cluster:",
    `      server: ${server}`,
    `      certificate-authority-data: ${b64(caCert)}`,
    "users:",
    `  - name: ${JSON.stringify(user)}`,
    "    user:",
    `      client-certificate-data: ${b64(cert)}`,
    `      client-key-data: ${b64(key)}`,
    "contexts:",
    "  - name: nebula-test",
    "    context:",
    "      cluster: nebula-test",
    `      user: ${JSON.stringify(user)}`,
    "current-context: nebula-test",
    "",
  ].join("\n");
}

interface TlsClient {
  ca: string;
  cert: string;
  key: string;
}

/** GET over HTTPS with client-certificate auth; resolves status and body. */
function httpsGet(
  url: string,
  tls: TlsClient,
  post?: unknown,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const method = post === undefined ? "GET" : "POST";
    const headers = post === undefined ? {} : { "content-type": "application/json" };
    const req = request(url, { method, headers, ...tls, timeout: 5_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        body += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end(post === undefined ? undefined : JSON.stringify(post));
  });
}

/** Binds {@link KUBELET_CLIENT_USER} to `system:kubelet-api-admin`, as kubeadm does at init. */
async function bindKubeletClient(server: string, tls: TlsClient): Promise<void> {
  const binding = {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: `${KUBELET_CLIENT_USER}:kubelet-api-admin` },
    roleRef: {
      apiGroup: "rbac.authorization.k8s.io",
      kind: "ClusterRole",
      name: "system:kubelet-api-admin",
    },
    subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: KUBELET_CLIENT_USER }],
  };
  const created = await httpsGet(
    `${server}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings`,
    tls,
    binding,
  );
  if (created.status !== 201 && created.status !== 409) {
    throw new TestPeerError(
      "StartFailed",
      `binding ${KUBELET_CLIENT_USER} to system:kubelet-api-admin: HTTP ${created.status} ${created.body.slice(0, 300)}`,
    );
  }
}

/** A Kubernetes user or group name as a client certificate carries it: printable ASCII. */
const UserName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/);
const Groups = z.array(UserName);

const VersionSchema = z.object({ gitVersion: z.string() });

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * Starts a real etcd and kube-apiserver on free loopback ports, envtest-style: throwaway CAs
 * (serving, client, service-account signing), a client-certificate admin in `system:masters`,
 * `--authorization-mode=RBAC`, the `ServiceAccount` admission plugin disabled. Resolves once
 * `/healthz` is ok and the `default` namespace exists.
 *
 * Use it through the vitest global setup (one per test run) or, for a test that needs its own,
 * directly. By default no controller-manager and no scheduler run: bind Pods yourself
 * (`spec.nodeName`) and finish graceful deletions yourself, as a kubelet would. With
 * `controllers` and `scheduler` it also starts kube-controller-manager and kube-scheduler
 * (each healthy on `/healthz` before it resolves): Deployments make Pods, Pods get scheduled,
 * owners' deletions cascade, silent Nodes turn `Unknown`.
 *
 * @example
 * ```ts
 * const cp = await startControlPlane();
 * const core = cp.kubeConfig().makeApiClient(CoreV1Api);
 * await core.listNamespace();
 * await cp.stop();
 *
 * const whole = await startControlPlane({ controllers: true, scheduler: true, nodeMonitorGracePeriodSeconds: 5 });
 * await whole.stop();
 * ```
 */
export async function startControlPlane(options: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const parsed = ControlPlaneOptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new TestPeerError(
      "InvalidOptions",
      `startControlPlane: ${z.prettifyError(parsed.error)}`,
      {
        cause: parsed.error,
      },
    );
  }
  const apiserverBin = binary(
    parsed.data.kubeApiserver,
    "TEST_ASSET_KUBE_APISERVER",
    "kube-apiserver",
  );
  const etcdBin = binary(parsed.data.etcd, "TEST_ASSET_ETCD", "etcd");
  const bins: Binaries = { apiserver: apiserverBin, etcd: etcdBin };
  const controllers = parsed.data.controllers ?? false;
  if (controllers !== false) {
    bins.controllerManager = binary(
      parsed.data.kubeControllerManager,
      "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
      "kube-controller-manager",
    );
  }
  if (parsed.data.scheduler === true) {
    bins.scheduler = binary(
      parsed.data.kubeScheduler,
      "TEST_ASSET_KUBE_SCHEDULER",
      "kube-scheduler",
    );
  }
  for (const path of Object.values(bins)) {
    if (!existsSync(path)) {
      throw new TestPeerError(
        "BinaryMissing",
        `${path} not found: run \`bash scripts/bootstrap.sh control-plane\` (or set KUBEBUILDER_ASSETS)`,
      );
    }
  }
  // Another process may take a port between freePort() and the bind: start again, as envtest does.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(parsed.data, bins);
    } catch (error) {
      const portTaken =
        error instanceof TestPeerError &&
        error.code === "StartFailed" &&
        /address already in use/i.test(error.message);
      if (!portTaken || attempt >= 3) throw error;
    }
  }
}

interface Binaries {
  apiserver: string;
  etcd: string;
  controllerManager?: string;
  scheduler?: string;
}

async function startOnce(
  options: z.infer<typeof ControlPlaneOptionsSchema>,
  bins: Binaries,
): Promise<ControlPlane> {
  const timeoutMs = options.startTimeoutMs ?? 90_000;

  const dir = mkdtempSync(join(tmpdir(), "nebula-control-plane-"));
  const release = trackPath(dir);
  const certDir = join(dir, "pki");
  let etcd: PeerProcess | undefined;
  let apiserver: PeerProcess | undefined;
  let controllerManager: PeerProcess | undefined;
  let scheduler: PeerProcess | undefined;
  const stopAll = async (): Promise<void> => {
    // Throwaway state: a short grace keeps teardown inside vitest's teardownTimeout (10 s).
    await Promise.all([scheduler?.stop(3_000), controllerManager?.stop(3_000)]);
    await apiserver?.stop(5_000);
    await etcd?.stop(3_000);
    release();
  };

  try {
    mkdirSync(certDir, { mode: 0o700 });
    const [servingCa] = await Promise.all([
      makeCa(certDir, "serving-ca", "nebula-test-peers serving CA"),
      makeCa(certDir, "client-ca", "nebula-test-peers client CA"),
      makeCa(certDir, "front-proxy-ca", "nebula-test-peers front-proxy CA"),
      makeSigningKey(certDir, "sa-signer"),
    ]);
    const [serving, admin, kubeletClient, frontProxy] = await Promise.all([
      issueCert({
        caDir: certDir,
        ca: "serving-ca",
        commonName: "localhost",
        organizations: ["nebula-test-peers"],
        usage: "server",
        // Containers of the instance-host simulator reach it at this machine's own addresses.
        ips: machineAddresses(),
      }),
      issueCert({
        caDir: certDir,
        ca: "client-ca",
        commonName: CONTROL_PLANE_ADMIN.user,
        organizations: CONTROL_PLANE_ADMIN.groups,
        usage: "client",
      }),
      issueCert({
        caDir: certDir,
        ca: "client-ca",
        commonName: KUBELET_CLIENT_USER,
        organizations: [],
        usage: "client",
      }),
      issueCert({
        caDir: certDir,
        ca: "front-proxy-ca",
        commonName: FRONT_PROXY_CLIENT,
        organizations: [],
        usage: "client",
      }),
    ]);
    writeFileSync(join(certDir, "apiserver.crt"), serving.cert);
    writeFileSync(join(certDir, "front-proxy-client.crt"), frontProxy.cert);
    writeFileSync(join(certDir, "front-proxy-client.key"), frontProxy.key, { mode: 0o600 });
    writeFileSync(join(certDir, "kubelet-client.crt"), kubeletClient.cert);
    writeFileSync(join(certDir, "kubelet-client.key"), kubeletClient.key, { mode: 0o600 });
    writeFileSync(join(certDir, "apiserver.key"), serving.key, { mode: 0o600 });

    // etcd, plain HTTP on loopback (as envtest runs it).
    const clientPort = await freePort();
    const peerPort = await freePort();
    const etcdUrl = `http://127.0.0.1:${clientPort}`;
    const peerUrl = `http://127.0.0.1:${peerPort}`;
    etcd = spawnPeer({
      name: "etcd",
      command: bins.etcd,
      args: [
        `--data-dir=${join(dir, "etcd")}`,
        `--listen-client-urls=${etcdUrl}`,
        `--advertise-client-urls=${etcdUrl}`,
        `--listen-peer-urls=${peerUrl}`,
        `--initial-advertise-peer-urls=${peerUrl}`,
        `--initial-cluster=default=${peerUrl}`,
        "--unsafe-no-fsync=true",
        "--log-level=warn",
      ],
      cleanupPaths: [dir],
    });
    const etcdProcess = etcd;
    await waitUntil(
      async () => {
        const response = await fetch(`${etcdUrl}/health`);
        return response.ok && (await response.text()).includes('"health":"true"');
      },
      { what: `etcd on ${etcdUrl}`, timeoutMs, process: etcdProcess },
    );

    const port = await freePort("0.0.0.0");
    const server = `https://127.0.0.1:${port}`;
    const tls = { ca: servingCa.cert, cert: admin.cert, key: admin.key };
    const launchApiserver = async (): Promise<void> => {
      const launched = spawnPeer({
        name: "kube-apiserver",
        command: bins.apiserver,
        args: withOverrides(
          [
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            `--cert-dir=${certDir}`,
            `--tls-cert-file=${join(certDir, "apiserver.crt")}`,
            `--tls-private-key-file=${join(certDir, "apiserver.key")}`,
            "--authorization-mode=RBAC",
            `--secure-port=${port}`,
            // Every address of this machine: a Nebula Pod's containers (in the instance-host
            // simulator) reach it at the machine's address, as a Pod reaches an EKS endpoint.
            "--bind-address=0.0.0.0",
            "--advertise-address=127.0.0.1",
            `--service-account-issuer=${server}/`,
            `--service-account-key-file=${join(certDir, "sa-signer.pub")}`,
            `--service-account-signing-key-file=${join(certDir, "sa-signer.key")}`,
            `--etcd-servers=${etcdUrl}`,
            `--client-ca-file=${join(certDir, "client-ca.crt")}`,
            // kubectl logs/top reach kubelets (the virtual node) as this identity; no
            // --kubelet-certificate-authority, as in most clusters: kubelet serving certificates
            // are often self-signed.
            `--kubelet-client-certificate=${join(certDir, "kubelet-client.crt")}`,
            `--kubelet-client-key=${join(certDir, "kubelet-client.key")}`,
            // The aggregation layer, as kubeadm configures it, so an aggregated API such as
            // metrics-server's metrics.k8s.io (kubectl top) is served; routing to the endpoint
            // addresses, as there is no kube-proxy here to route a Service's cluster IP.
            `--requestheader-client-ca-file=${join(certDir, "front-proxy-ca.crt")}`,
            `--requestheader-allowed-names=${FRONT_PROXY_CLIENT}`,
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            `--proxy-client-cert-file=${join(certDir, "front-proxy-client.crt")}`,
            `--proxy-client-key-file=${join(certDir, "front-proxy-client.key")}`,
            "--enable-aggregator-routing=true",
          ],
          options.apiserverArgs ?? [],
        ),
        cleanupPaths: [dir],
      });
      apiserver = launched;
      await waitUntil(
        async () => {
          const health = await httpsGet(`${server}/healthz`, tls);
          return health.status === 200 && health.body === "ok";
        },
        {
          what: `kube-apiserver /healthz on ${server}`,
          timeoutMs,
          intervalMs: 250,
          process: launched,
        },
      );
      await waitUntil(
        async () => (await httpsGet(`${server}/api/v1/namespaces/default`, tls)).status === 200,
        { what: "the default namespace", timeoutMs, intervalMs: 250, process: launched },
      );
    };
    await launchApiserver();
    await bindKubeletClient(server, tls);

    const adminKubeconfig = renderKubeconfig(
      server,
      servingCa.cert,
      CONTROL_PLANE_ADMIN.user,
      admin.cert,
      admin.key,
    );
    const kubeconfigPath = join(dir, "admin.kubeconfig");
    writeFileSync(kubeconfigPath, adminKubeconfig, { mode: 0o600 });

    // kube-controller-manager and kube-scheduler, each with its own identity (the bootstrap RBAC
    // roles bind these user names) and the apiserver's serving certificate on their /healthz.
    const controllerNames =
      options.controllers === undefined || options.controllers === false
        ? []
        : controllerList(options.controllers);
    const componentKubeconfig = async (user: string, file: string): Promise<string> => {
      const pair = await issueCert({
        caDir: certDir,
        ca: "client-ca",
        commonName: user,
        organizations: [],
        usage: "client",
      });
      const path = join(certDir, file);
      writeFileSync(path, renderKubeconfig(server, servingCa.cert, user, pair.cert, pair.key), {
        mode: 0o600,
      });
      return path;
    };
    const waitHealthy = (peer: PeerProcess, port: number): Promise<void> =>
      waitUntil(
        async () => {
          const health = await httpsGet(`https://127.0.0.1:${port}/healthz`, tls);
          return health.status === 200 && health.body === "ok";
        },
        {
          what: `${peer.name} /healthz on port ${port}`,
          timeoutMs,
          intervalMs: 250,
          process: peer,
        },
      );
    const tlsFiles = {
      tlsCert: join(certDir, "apiserver.crt"),
      tlsKey: join(certDir, "apiserver.key"),
    };
    const starting: Promise<void>[] = [];
    if (bins.controllerManager !== undefined && controllerNames.length > 0) {
      const command = bins.controllerManager;
      starting.push(
        (async () => {
          const paths = {
            kubeconfig: await componentKubeconfig(
              "system:kube-controller-manager",
              "controller-manager.kubeconfig",
            ),
            port: await freePort(),
            ...tlsFiles,
            serviceAccountKey: join(certDir, "sa-signer.key"),
            rootCa: join(certDir, "serving-ca.crt"),
            signingCert: join(certDir, "client-ca.crt"),
            signingKey: join(certDir, "client-ca.key"),
          };
          controllerManager = spawnPeer({
            name: "kube-controller-manager",
            command,
            args: withOverrides(
              controllerManagerArgs(
                paths,
                controllerNames,
                options.nodeMonitorGracePeriodSeconds ?? DEFAULT_NODE_MONITOR_GRACE_SECONDS,
              ),
              options.controllerManagerArgs ?? [],
            ),
            cleanupPaths: [dir],
          });
          await waitHealthy(controllerManager, paths.port);
        })(),
      );
    }
    if (bins.scheduler !== undefined) {
      const command = bins.scheduler;
      starting.push(
        (async () => {
          const paths = {
            kubeconfig: await componentKubeconfig("system:kube-scheduler", "scheduler.kubeconfig"),
            port: await freePort(),
            ...tlsFiles,
          };
          scheduler = spawnPeer({
            name: "kube-scheduler",
            command,
            args: withOverrides(schedulerArgs(paths), options.schedulerArgs ?? []),
            cleanupPaths: [dir],
          });
          await waitHealthy(scheduler, paths.port);
        })(),
      );
    }
    const started = await Promise.allSettled(starting);
    const failed = started.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    const versionResponse = await httpsGet(`${server}/version`, tls);
    const version = VersionSchema.safeParse(parseJson(versionResponse.body));
    const connection = connectControlPlane({
      server,
      kubeconfig: adminKubeconfig,
      caCert: servingCa.cert,
      certDir,
      version: version.success ? version.data.gitVersion : "unknown",
      kubeconfigPath,
      controllers: controllerNames,
      scheduler: scheduler !== undefined,
    });
    // One start or stop of the apiserver at a time, in call order.
    let lifecycle: Promise<unknown> = Promise.resolve();
    const serialized = (step: () => Promise<void>): Promise<void> => {
      const next = lifecycle.then(step, step);
      lifecycle = next.catch(() => undefined);
      return next;
    };
    const stopApiServer = (): Promise<void> =>
      serialized(async () => {
        await apiserver?.stop(5_000);
      });
    let stopped = false;
    const startApiServer = (): Promise<void> =>
      serialized(async () => {
        if (stopped) {
          throw new TestPeerError("Closed", "startApiServer: the control plane was stopped");
        }
        if (apiserver !== undefined && !apiserver.hasExited()) return;
        await launchApiserver();
      });
    return Object.assign(connection, {
      stopApiServer,
      startApiServer,
      async restartApiServer(restart: { downMs?: number } = {}) {
        await stopApiServer();
        const downMs = restart.downMs ?? 0;
        if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
        await startApiServer();
      },
      stop: () =>
        serialized(async () => {
          stopped = true;
          await stopAll();
        }),
    });
  } catch (error) {
    await stopAll();
    throw error;
  }
}

const ControlPlaneInfoSchema = z.object({
  server: z.url(),
  kubeconfig: z.string().min(1),
  caCert: z.string().includes("BEGIN CERTIFICATE"),
  certDir: z.string().min(1),
  version: z.string(),
  kubeconfigPath: z.string().min(1).optional(),
  controllers: z.array(z.string()).optional(),
  scheduler: z.boolean().optional(),
});

/**
 * Connects to a control plane started elsewhere (typically by the vitest global setup, which
 * `provide`s its {@link ControlPlaneInfo}). The connection mints clients but cannot stop it.
 *
 * @example
 * ```ts
 * import { inject } from "vitest";
 * const cp = connectControlPlane(inject("nebulaTestPeers").controlPlane);
 * const viewer = cp.clientFor("alice", ["viewers"]);
 * ```
 */
export function connectControlPlane(info: ControlPlaneInfo): ControlPlaneConnection {
  const parsed = ControlPlaneInfoSchema.safeParse(info);
  if (!parsed.success) {
    throw new TestPeerError(
      "InvalidOptions",
      `connectControlPlane: ${z.prettifyError(parsed.error)}`,
      {
        cause: parsed.error,
      },
    );
  }
  const data = parsed.data;
  const load = (yaml: string): KubeConfig => {
    const kc = new KubeConfig();
    kc.loadFromString(yaml);
    return kc;
  };
  const kubeconfigFor = (user: string, groups: readonly string[] = []): string => {
    const parsedUser = UserName.safeParse(user);
    const parsedGroups = Groups.safeParse(groups);
    if (!parsedUser.success || !parsedGroups.success) {
      throw new TestPeerError(
        "InvalidOptions",
        "clientFor: user and group names must be 1-64 printable ASCII characters, no leading or trailing space",
        { cause: parsedUser.error ?? parsedGroups.error },
      );
    }
    if (!existsSync(join(data.certDir, "client-ca.key"))) {
      throw new TestPeerError(
        "NotProvided",
        `clientFor: ${data.certDir} is gone (control plane stopped?)`,
      );
    }
    const pair = issueCertSync({
      caDir: data.certDir,
      ca: "client-ca",
      commonName: parsedUser.data,
      organizations: parsedGroups.data,
      usage: "client",
    });
    return renderKubeconfig(data.server, data.caCert, parsedUser.data, pair.cert, pair.key);
  };
  return {
    server: data.server,
    version: data.version,
    kubeconfig: data.kubeconfig,
    kubeconfigPath: data.kubeconfigPath,
    controllers: data.controllers ?? [],
    scheduler: data.scheduler ?? false,
    kubeConfig: () => load(data.kubeconfig),
    kubeconfigFor,
    clientFor: (user, groups) => load(kubeconfigFor(user, groups)),
    info: () => ({
      server: data.server,
      kubeconfig: data.kubeconfig,
      caCert: data.caCert,
      certDir: data.certDir,
      version: data.version,
      ...(data.kubeconfigPath === undefined ? {} : { kubeconfigPath: data.kubeconfigPath }),
      controllers: [...(data.controllers ?? [])],
      scheduler: data.scheduler ?? false,
    }),
  };
}
