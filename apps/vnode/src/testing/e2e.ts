/**
 * End-to-end harness for the app: the real bundle (`dist/main.js`) as a child process, run as the
 * app's ServiceAccount (the deploy RBAC applied to a real kube-apiserver), against moto with the
 * instance-host simulator in front of it.
 *
 * @packageDocumentation
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import {
  appendFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { CloudWatchLogsClient, CreateLogGroupCommand } from "@aws-sdk/client-cloudwatch-logs";
import {
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateVpcCommand,
  DescribeInstancesCommand,
  type EC2Client,
  type Instance,
} from "@aws-sdk/client-ec2";
import { SSMClient } from "@aws-sdk/client-ssm";
import {
  CoreV1Api,
  DiscoveryV1Api,
  type KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  loadAllYaml,
  type V1Pod,
} from "@kubernetes/client-node";
import {
  buildTestImage,
  freePort,
  type InstanceHosts,
  kubectlPath,
  MOTO_CREDENTIALS,
  type MotoConnection,
  machineAddresses,
  NEBULA_INSTANCE_PROFILE,
  startInstanceHosts,
} from "@nebula/test-peers";

/** The bundled app. */
const BUNDLE = fileURLToPath(new URL("../../dist/main.js", import.meta.url));
/** The deploy folder. */
const DEPLOY_DIR = fileURLToPath(new URL("../../../../deploy/vnode/", import.meta.url));
/** The app's ServiceAccount as an API-server user. */
export const VNODE_USER = "system:serviceaccount:nebula-system:nebula-vnode";
/** The groups of a ServiceAccount token. */
export const VNODE_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:nebula-system"];

/** Creates every object of a deploy manifest (existing ones are left alone). */
async function applyManifest(admin: KubeConfig, file: string): Promise<void> {
  const objects = loadAllYaml(readFileSync(join(DEPLOY_DIR, file), "utf8")) as KubernetesObject[];
  const api = KubernetesObjectApi.makeApiClient(admin);
  const core = admin.makeApiClient(CoreV1Api);
  for (const object of objects) {
    const ns = object.metadata?.namespace;
    if (ns !== undefined) {
      await core.createNamespace({ body: { metadata: { name: ns } } }).catch(() => undefined);
    }
    await api.create(object).catch((error: { code?: number }) => {
      if (error.code !== 409) throw error;
    });
  }
}

/** A VPC, a subnet and a security group in moto. */
async function prepareNetwork(
  ec2: EC2Client,
): Promise<{ subnetId: string; securityGroupId: string }> {
  const vpc = await ec2.send(new CreateVpcCommand({ CidrBlock: "10.1.0.0/16" }));
  const vpcId = vpc.Vpc?.VpcId ?? "";
  const subnet = await ec2.send(
    // A fixed zone: moto picks one at random otherwise, and some (us-east-1e) offer few types.
    new CreateSubnetCommand({
      VpcId: vpcId,
      CidrBlock: "10.1.0.0/16",
      AvailabilityZone: `${await ec2.config.region()}a`,
    }),
  );
  const sg = await ec2.send(
    new CreateSecurityGroupCommand({
      VpcId: vpcId,
      GroupName: `vnode-${vpcId}`,
      Description: "e2e",
    }),
  );
  return { subnetId: subnet.Subnet?.SubnetId ?? "", securityGroupId: sg.GroupId ?? "" };
}

/** An SSM client of moto (Parameter Store, where the Pods' values go); destroy it when done. */
export function motoSsm(moto: MotoConnection): SSMClient {
  return new SSMClient({
    endpoint: moto.endpoint,
    region: moto.region,
    credentials: MOTO_CREDENTIALS,
  });
}

/** Every instance tagged for a node, whatever its state. */
export async function nodeInstances(ec2: EC2Client, nodeName: string): Promise<Instance[]> {
  const out: Instance[] = [];
  let token: string | undefined;
  do {
    const page = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: "tag:nebula:node", Values: [nodeName] }],
        MaxResults: 1000,
        ...(token ? { NextToken: token } : {}),
      }),
    );
    for (const r of page.Reservations ?? []) out.push(...(r.Instances ?? []));
    token = page.NextToken || undefined;
  } while (token);
  return out;
}

/** A running `nebula-vnode` child process. */
export interface VnodeProcess {
  readonly child: ChildProcess;
  /** Its JSON log lines so far. */
  readonly lines: Array<Record<string, unknown>>;
  /** `http://host:port` of `/metrics` (and the probes, on the same server). */
  readonly url: string;
  /** The kubelet API's port on 127.0.0.1 (HTTPS). */
  readonly kubeletPort: number;
  /** Resolves with the exit code. */
  readonly exited: Promise<number | null>;
  /**
   * SIGTERM and wait; SIGKILL after 30 s (the Deployment's grace), which resolves `null`. See
   * {@link stopCleanly} for a stop that must end in exit code 0.
   */
  stop(): Promise<number | null>;
  /** SIGKILL and wait. */
  kill(): Promise<void>;
  /** How it ended (`exit code 0`, `signal SIGKILL sent 30 s after SIGTERM`, ...), once it has. */
  howExited(): string | undefined;
}

/** What {@link startVnode} runs. */
export interface VnodeRun {
  readonly nodeName: string;
  readonly kubeconfig: string;
  readonly config: object;
  readonly moto: MotoConnection;
  readonly extraArgs?: readonly string[];
  /** Extra environment (e.g. `POD_NAME`, the leader-election identity). */
  readonly env?: Readonly<Record<string, string>>;
}

/** Writes the files and starts the bundle; resolves once it listens. */
export async function startVnode(run: VnodeRun): Promise<VnodeProcess> {
  const dir = mkdtempSync(join(tmpdir(), "nebula-vnode-e2e-"));
  writeFileSync(join(dir, "kubeconfig"), run.kubeconfig);
  // Every vnode serves the kubelet API; on one machine each needs a port of its own (a test that
  // gives `node.kubeletPort` keeps it).
  const config = run.config as { node?: Record<string, unknown> };
  const kubeletPort =
    typeof config.node?.kubeletPort === "number" ? config.node.kubeletPort : await freePort();
  writeFileSync(
    join(dir, "config.json"),
    JSON.stringify({ ...config, node: { ...config.node, kubeletPort } }),
  );
  // One server for /metrics, /healthz and /readyz.
  const address = `127.0.0.1:${await freePort()}`;
  const child = spawn(
    process.execPath,
    [
      BUNDLE,
      "--node-name",
      run.nodeName,
      "--config",
      join(dir, "config.json"),
      "--kubeconfig",
      join(dir, "kubeconfig"),
      "--namespace",
      "nebula-system",
      "--metrics-bind-address",
      address,
      "--health-probe-bind-address",
      address,
      "--log-level",
      process.env.NEBULA_E2E_LOG_LEVEL ?? "info",
      ...(run.extraArgs ?? []),
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        ...run.moto.env,
        AWS_ACCESS_KEY_ID: MOTO_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: MOTO_CREDENTIALS.secretAccessKey,
        ...run.env,
      },
    },
  );
  const lines: Array<Record<string, unknown>> = [];
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  // NEBULA_E2E_LOG_DIR keeps every vnode's log, one file per process, for a failure's post-mortem.
  const logDir = process.env.NEBULA_E2E_LOG_DIR;
  if (logDir) mkdirSync(logDir, { recursive: true });
  const logFile = logDir ? join(logDir, `${run.nodeName}-${child.pid ?? "x"}.log`) : undefined;
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
    if (logFile !== undefined) appendFileSync(logFile, `${line}\n`);
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      lines.push({ msg: line });
    }
  });
  /** What the test did that ended it by a signal, if it did. */
  let sent: string | undefined;
  let howExited: string | undefined;
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code, signal) => {
      rmSync(dir, { recursive: true, force: true });
      howExited =
        code !== null
          ? `exit code ${code}`
          : `signal ${signal}${sent === undefined ? " (not sent by the test)" : ` ${sent}`}`;
      resolve(code);
    });
  });
  const deadline = Date.now() + 30_000;
  let url: string | undefined;
  while (url === undefined) {
    url = lines.find((l) => l.msg === "listening")?.url as string | undefined;
    if (url !== undefined) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`nebula-vnode did not start: ${stderr}\n${JSON.stringify(lines.slice(-5))}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const listening = url;
  return {
    child,
    lines,
    url: listening,
    kubeletPort,
    exited,
    async stop() {
      child.kill("SIGTERM");
      // The grace the Deployment gives (terminationGracePeriodSeconds: 30); the vnode drains its
      // reconciles for at most 20 s of it, so exit code 0 within it is what the test asks.
      const timer = setTimeout(() => {
        sent = "sent by the test 30 s after its SIGTERM";
        child.kill("SIGKILL");
      }, 30_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
    async kill() {
      sent = "sent by the test (kill)";
      child.kill("SIGKILL");
      await exited;
    },
    howExited: () => howExited,
  };
}

/**
 * What the vnode logged from its last stop request on (its shutdown's steps, what it was still
 * doing), one entry per line, for an assertion's message: a vnode that did not exit within the
 * grace then says where it was.
 */
export function shutdownLog(vnode: VnodeProcess): string {
  const from = vnode.lines.findLastIndex((l) => l.msg === "stop requested");
  const lines = (from === -1 ? vnode.lines.slice(-15) : vnode.lines.slice(from)).map((l) => {
    const { level, time, name, msg, ...rest } = l;
    const fields = Object.keys(rest).length === 0 ? "" : ` ${JSON.stringify(rest).slice(0, 300)}`;
    return `${String(time ?? "").slice(11, 23)} ${String(level ?? "")} ${String(msg)}${fields}`;
  });
  const kept = lines.length > 40 ? ["...", ...lines.slice(-40)] : lines;
  const how = vnode.howExited() ?? "still running";
  return `nebula-vnode (${how}); its log from its stop on:\n${kept.join("\n")}`;
}

/** Stops `vnode` and fails unless it exits with code 0 within the grace (saying where it was). */
export async function stopCleanly(vnode: VnodeProcess | undefined): Promise<void> {
  if (vnode === undefined) throw new Error("no nebula-vnode to stop (it never started)");
  const code = await vnode.stop();
  if (code !== 0) {
    throw new Error(`nebula-vnode did not stop cleanly: ${shutdownLog(vnode)}`);
  }
}

/** Reads the Prometheus text of `/metrics`: a sum per metric name and label set. */
export async function scrape(url: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const space = line.lastIndexOf(" ");
    out.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return out;
}

/** Polls until `probe` returns a value, or fails after `ms`. */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  ms = 120_000,
  every = 250,
): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    }
    await new Promise((r) => setTimeout(r, every));
  }
}

/** A bare Pod bound to the node, tolerating its taint. */
export function barePod(
  name: string,
  nodeName: string,
  container: Record<string, unknown>,
  spec: Partial<V1Pod["spec"]> = {},
): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name },
    spec: {
      nodeName,
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 10,
      tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
      containers: [{ name: "app", image: "busybox", ...container }],
      ...spec,
    },
  };
}

/**
 * Deletes a test's Node once its vnode has stopped. The end-to-end files share one control plane,
 * and a Node left behind still looks schedulable for a while: a later file's Deployment would get
 * Pods onto a Node that nobody serves, stuck `Terminating` for good.
 */
export async function deleteNode(kubeConfig: KubeConfig, name: string): Promise<void> {
  try {
    await kubeConfig.makeApiClient(CoreV1Api).deleteNode({ name });
  } catch (error) {
    if ((error as { code?: number }).code !== 404) throw error;
  }
}

/** What {@link startWorld} prepared for one end-to-end file. */
export interface E2eWorld {
  readonly hosts: InstanceHosts;
  readonly network: { readonly subnetId: string; readonly securityGroupId: string };
}

/**
 * One file's world: a subnet and security group in moto, the instance-host simulator for
 * `cluster`, the vnode's Namespace, ServiceAccount and RBAC, and the file's own namespace.
 */
export async function startWorld(options: {
  readonly admin: KubeConfig;
  readonly ec2: EC2Client;
  readonly moto: MotoConnection;
  readonly cluster: string;
  readonly namespace: string;
  /** Deploy manifests (deploy/vnode/) applied beside rbac.yaml, e.g. an optional RBAC rule. */
  readonly manifests?: readonly string[];
  /** Called before each simulated host boots (the simulator's `beforeBoot`). */
  readonly beforeBoot?: (instanceId: string) => Promise<void> | void;
}): Promise<E2eWorld> {
  const network = await prepareNetwork(options.ec2);
  const hosts = await startInstanceHosts({
    ec2Endpoint: options.moto.endpoint,
    region: options.moto.region,
    cluster: options.cluster,
    bootDelayMs: 500,
    ...(options.beforeBoot === undefined ? {} : { beforeBoot: options.beforeBoot }),
  });
  for (const file of [
    "namespace.yaml",
    "serviceaccount.yaml",
    "rbac.yaml",
    ...(options.manifests ?? []),
  ]) {
    await applyManifest(options.admin, file);
  }
  await options.admin
    .makeApiClient(CoreV1Api)
    .createNamespace({ body: { metadata: { name: options.namespace } } });
  return { hosts, network };
}

/** The vnode configuration the end-to-end files share; what differs is passed in. */
export function vnodeConfig(options: {
  readonly cluster: string;
  readonly region: string;
  readonly world: E2eWorld;
  /** The EC2 endpoint: the simulator's, or a proxy in front of it. */
  readonly endpoint: string;
  readonly capacity: { readonly cpu: string; readonly memory: string; readonly pods: string };
  readonly pollIntervalSeconds: number;
  readonly batchWindowMs: number;
}): object {
  return {
    node: { capacity: options.capacity },
    provider: {
      clusterName: options.cluster,
      region: options.region,
      subnetIds: [options.world.network.subnetId],
      securityGroupIds: [options.world.network.securityGroupId],
      imageId: "ami-0a1b2c3d",
      instanceProfile: NEBULA_INSTANCE_PROFILE,
      instanceTypes: { default: "t3.micro" },
      endpoint: options.endpoint,
      pollIntervalSeconds: options.pollIntervalSeconds,
      apiHeadroomSeconds: 5,
      batchWindowMs: options.batchWindowMs,
    },
  };
}

/** A Pod, or `undefined` once it is gone. */
export async function readPod(
  core: CoreV1Api,
  namespace: string,
  name: string,
): Promise<V1Pod | undefined> {
  try {
    return await core.readNamespacedPod({ name, namespace });
  } catch (error) {
    if ((error as { code?: number }).code === 404) return undefined;
    throw error;
  }
}

/** The Pod once it exists and `test` holds for it; fails after `ms`. */
export function podWhen(
  core: CoreV1Api,
  namespace: string,
  name: string,
  test: (pod: V1Pod) => boolean,
  ms = 180_000,
): Promise<V1Pod> {
  return until(
    `pod ${name}`,
    async () => {
      const pod = await readPod(core, namespace, name);
      return pod !== undefined && test(pod) ? pod : undefined;
    },
    ms,
  );
}

/** The Pod once it has ended (`Succeeded` or `Failed`), within `ms`. */
export function podEnded(
  core: CoreV1Api,
  namespace: string,
  name: string,
  ms = 240_000,
): Promise<V1Pod> {
  return podWhen(
    core,
    namespace,
    name,
    (pod) => pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed",
    ms,
  );
}

/**
 * A test image with the real kubectl at `/bin/kubectl` (busybox beside it): an in-cluster client
 * (InClusterConfig, as any client-go program) and a plain HTTP client (`get --raw --server`:
 * busybox-static's wget crashes in its resolver). Its name, for a Pod's `image`.
 */
export function kubectlImage(): Promise<string> {
  return buildTestImage({
    name: "nebula-test/kubectl",
    files: { "/bin/kubectl": { content: readFileSync(kubectlPath()), mode: 0o755 } },
  });
}

/** The Pod once it is Ready with an IP (a Service's EndpointSlices take it then), within `ms`. */
export function podReadyWithIp(
  core: CoreV1Api,
  namespace: string,
  name: string,
  ms = 240_000,
): Promise<V1Pod> {
  return podWhen(
    core,
    namespace,
    name,
    (pod) =>
      pod.status?.conditions?.find((c) => c.type === "Ready")?.status === "True" &&
      Boolean(pod.status?.podIP),
    ms,
  );
}

/**
 * Resolves once an EndpointSlice of the Service `service` names an endpoint at `address` (with
 * the host name `hostname`, when given), as the endpointslice controller writes it; fails after
 * `ms`.
 */
export async function endpointSliceNames(
  admin: KubeConfig,
  namespace: string,
  service: string,
  address: string,
  hostname?: string,
  ms = 60_000,
): Promise<void> {
  const discovery = admin.makeApiClient(DiscoveryV1Api);
  await until(
    `the EndpointSlice of ${namespace}/${service} naming ${hostname ?? "an endpoint"} at ${address}`,
    async () => {
      const slices = await discovery.listNamespacedEndpointSlice({
        namespace,
        labelSelector: `kubernetes.io/service-name=${service}`,
      });
      return slices.items
        .flatMap((x) => x.endpoints ?? [])
        .some(
          (e) =>
            e.addresses.includes(address) && (hostname === undefined || e.hostname === hostname),
        )
        ? true
        : undefined;
    },
    ms,
    500,
  );
}

/** This machine's first non-loopback IPv4 address (`@nebula/test-peers`' `machineAddresses`). */
export function hostAddress(): string {
  const [address] = machineAddresses();
  if (address === undefined) throw new Error("no non-loopback IPv4 address on this machine");
  return address;
}

/**
 * One file's world for the kubelet API through kube-apiserver: the log group (the operator
 * creates it; the hosts may not), the world of {@link startWorld}, and the vnode as its
 * ServiceAccount (TokenReview, SubjectAccessReview and the client CA are what
 * deploy/vnode/rbac.yaml grants) with logs, metrics and a 5 s usage cache, advertising this
 * machine's own address: kube-apiserver refuses to proxy to loopback (nodes/proxy: "address not
 * allowed"), as it should. Resolves once the kubelet API listens.
 */
export async function startKubeletApiWorld(options: {
  readonly admin: KubeConfig;
  readonly ec2: EC2Client;
  readonly moto: MotoConnection;
  /** The vnode's ServiceAccount kubeconfig (`controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS)`). */
  readonly kubeconfig: string;
  /** The Node, the cluster and the file's namespace. */
  readonly node: string;
  readonly namespace: string;
  /** The CloudWatch Logs group the hosts write. */
  readonly group: string;
  /** Provider settings over the shared ones (e.g. `maxGracePeriodSeconds`). */
  readonly provider?: Readonly<Record<string, unknown>>;
}): Promise<{ readonly hosts: InstanceHosts; readonly vnode: VnodeProcess }> {
  const logs = new CloudWatchLogsClient({
    endpoint: options.moto.endpoint,
    region: options.moto.region,
    credentials: MOTO_CREDENTIALS,
  });
  await logs.send(new CreateLogGroupCommand({ logGroupName: options.group }));
  logs.destroy();
  const world = await startWorld({
    admin: options.admin,
    ec2: options.ec2,
    moto: options.moto,
    cluster: options.node,
    namespace: options.namespace,
  });
  const config = vnodeConfig({
    cluster: options.node,
    region: options.moto.region,
    world,
    endpoint: world.hosts.ec2Endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "20" },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  }) as { node: Record<string, unknown>; provider: Record<string, unknown> };
  config.node.internalIP = hostAddress();
  config.provider.logs = { group: options.group };
  config.provider.metrics = { sampleSeconds: 5, publishSeconds: 10 };
  Object.assign(config.provider, options.provider);
  (config as Record<string, unknown>).kubeletApi = { usageCacheSeconds: 5 };
  const vnode = await startVnode({
    nodeName: options.node,
    kubeconfig: options.kubeconfig,
    moto: options.moto,
    config,
  });
  await until("the kubelet API", () =>
    vnode.lines.some((l) => l.msg === "kubelet API listening") ? true : undefined,
  );
  return { hosts: world.hosts, vnode };
}

/**
 * The real kubectl with the kubeconfig at `kubeconfigPath` (the cluster admin's:
 * `controlPlane.kubeconfigPath`): resolves with stdout, rejects with stderr.
 */
export function kubectlWith(kubeconfigPath: string): (...args: string[]) => Promise<string> {
  const run = promisify(execFile);
  return async (...args) => {
    const { stdout } = await run(kubectlPath(), ["--kubeconfig", kubeconfigPath, ...args], {
      maxBuffer: 64 * 1024 * 1024,
    });
    return stdout;
  };
}
