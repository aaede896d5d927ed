/**
 * The local world the demo runs in, started and stopped in order: kube-apiserver + etcd +
 * kube-controller-manager + kube-scheduler, moto, the instance-host simulator, the EC2 proxy in
 * front of it, the event channel (an SQS queue, the EventBridge rule, EC2's state events played
 * as EC2 sends them), then two nebula-vnodes (one with the channel, one polling) and
 * nebula-operator as real processes from their bundles.
 */
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { CloudWatchLogsClient, CreateLogGroupCommand } from "@aws-sdk/client-cloudwatch-logs";
import {
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateVpcCommand,
  EC2Client,
} from "@aws-sdk/client-ec2";
import { CreateQueueCommand, SQSClient } from "@aws-sdk/client-sqs";
import { CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import {
  type ControlPlane,
  cacheDir,
  createEc2EventRule,
  type Ec2ProxyHandle,
  freePort,
  type InstanceHosts,
  kubectlPath,
  MOTO_CREDENTIALS,
  type Moto,
  machineAddresses,
  NEBULA_INSTANCE_PROFILE,
  startControlPlane,
  startEc2Events,
  startEc2Proxy,
  startInstanceHosts,
  startMoto,
} from "@nebula/test-peers";
import { DEFAULT_HOST_TIMES, type HostTimes } from "./cli.js";
import { type AppProcess, run, startApp } from "./proc.js";
import {
  COLD_INSTANCE_TYPE,
  WARM_INSTANCE_TYPE,
  WARM_POOL_ENTRY,
  WARM_POOL_IMAGES,
} from "./warm.js";

/** The repository's root (this file is in apps/demo/src or bundled into apps/demo/dist). */
export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
/** The virtual Node's name (the event channel on), also its instances' `nebula:node` tag. */
export const NODE_NAME = "nebula-demo";
/**
 * The second virtual Node (the event channel off, polling only): it runs the channel's
 * comparison Pods and nothing else (its `type` label is not the samples' `virtual-kubelet`).
 */
export const POLLED_NODE_NAME = "nebula-demo-polled";
/** Every instance's `nebula:cluster` tag. */
export const CLUSTER = "nebula-demo";
/** The namespace of the samples. */
export const DEMO_NAMESPACE = "nebula-demo";
/** The apps' namespace (the vnode's Pod ledger lives there). */
const SYSTEM_NAMESPACE = "nebula-system";
/** The CloudWatch Logs group (in moto) the demo's containers log to. */
const LOG_GROUP = "/nebula/nebula-demo/containers";
/**
 * The vnodes' EC2 poll interval in the demo: the polled node's `provider.pollIntervalSeconds` (the
 * product's default), and the channel's node's safety net (`provider.events.pollIntervalSeconds`,
 * shorter than the product's 60 s so the watch's allowances, which add it, stay short).
 */
export const VNODE_POLL_INTERVAL_SECONDS = 10;
/** The event channel's queue in moto (the hosts of {@link NODE_NAME} ring it, EventBridge fills it). */
const EVENT_QUEUE = "nebula-demo-events";
/** The vnode's API headroom on a stop's wait in the demo (`provider.apiHeadroomSeconds`). */
export const VNODE_API_HEADROOM_SECONDS = 5;

/** This machine's first non-loopback IPv4 address: the demo Node's InternalIP. */
function hostAddress(): string {
  const [address] = machineAddresses();
  if (address === undefined) {
    throw new Error(
      "the demo needs a non-loopback IPv4 address on this machine (kube-apiserver refuses to reach a kubelet on 127.0.0.1)",
    );
  }
  return address;
}

/** The apps: the two vnodes (the channel on, polling only) and the operator. */
type AppName = "nebula-vnode" | "nebula-vnode-polled" | "nebula-operator";

/** A running world. */
export interface World {
  readonly controlPlane: ControlPlane;
  readonly moto: Moto;
  readonly hosts: InstanceHosts;
  readonly proxy: Ec2ProxyHandle;
  /** The apps that started, by name. */
  readonly apps: ReadonlyMap<AppName, AppProcess>;
  /** Why an app could not be used, by name. */
  readonly unusable: ReadonlyMap<AppName, string>;
  /** An EC2 client on the simulator's endpoint (what the demo observes with). */
  readonly ec2: EC2Client;
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  /** Where the apps' logs are written. */
  readonly logDir: string;
  /** The warm pool's size nebula-vnode was started with (0: no pool). */
  readonly warmPoolSize: number;
  /**
   * Empties the warm pool as an operator would: nebula-vnode's configuration gets the entry with
   * `size: 0` and nebula-vnode is restarted with it (it collects the entry's hosts on its next
   * passes). Resolves once it is ready again.
   */
  drainWarmPool(): Promise<void>;
  /** Runs the real kubectl against the world as its admin. */
  kubectl(args: readonly string[], input?: string): Promise<string>;
  /** The lines that point kubectl and the AWS CLI at this world. */
  connectionHelp(): string[];
  /** Stops everything (apps, simulator, proxy, moto, control plane), in that order. */
  stop(): Promise<void>;
  /** Kills the apps at once (a second Ctrl-C); the peers' own handlers end the rest. */
  kill(): void;
}

/** Progress of the start-up. */
export type StepReporter = (
  step: string,
  state: "start" | "done" | "failed",
  detail?: string,
) => void;

interface Cleanup {
  readonly name: string;
  readonly run: () => Promise<void>;
}

/** The bundle of an app. */
function bundleOf(app: "vnode" | "operator"): string {
  return join(REPO_ROOT, "apps", app, "dist", "main.js");
}

async function step<T>(report: StepReporter, name: string, body: () => Promise<T>): Promise<T> {
  const started = Date.now();
  report(name, "start");
  try {
    const value = await body();
    report(name, "done", `${((Date.now() - started) / 1000).toFixed(1)} s`);
    return value;
  } catch (error) {
    report(name, "failed", (error as Error).message);
    throw error;
  }
}

async function runCleanups(cleanups: Cleanup[]): Promise<void> {
  for (const cleanup of cleanups.splice(0).reverse()) {
    try {
      await cleanup.run();
    } catch (error) {
      process.stderr.write(`demo: stopping ${cleanup.name}: ${(error as Error).message}\n`);
    }
  }
}

/** Starts the world; on failure stops whatever it had started and rethrows. */
export async function startWorld(options: {
  readonly report: StepReporter;
  readonly signal: AbortSignal;
  /** Prepared, stopped hosts nebula-vnode keeps in its warm pool (0 or absent: no pool). */
  readonly warmPoolSize?: number;
  /** How long the simulated hosts boot and pull (default: the simulator's own speed). */
  readonly hostTimes?: HostTimes;
}): Promise<World> {
  const { report, signal } = options;
  const warmPoolSize = options.warmPoolSize ?? 0;
  const cleanups: Cleanup[] = [];
  const logDir = join(cacheDir(), "demo", "logs");
  rmSync(logDir, { recursive: true, force: true });
  mkdirSync(logDir, { recursive: true });
  const checkAbort = () => {
    if (signal.aborted) throw new Error("interrupted");
  };
  try {
    const [controlPlane, moto] = await Promise.all([
      step(
        report,
        "control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler",
        async () => {
          const cp = await startControlPlane({ controllers: true, scheduler: true });
          cleanups.push({ name: "the control plane", run: () => cp.stop() });
          return cp;
        },
      ),
      step(report, "moto (EC2)", async () => {
        const m = await startMoto();
        cleanups.push({ name: "moto", run: () => m.stop() });
        return m;
      }),
    ]);
    checkAbort();
    const hosts = await step(report, "instance-host simulator (podman)", async () => {
      const h = await startInstanceHosts({
        ec2Endpoint: moto.endpoint,
        region: moto.region,
        cluster: CLUSTER,
        bootDelayMs: 500,
        firstBootDelayMs: (options.hostTimes ?? DEFAULT_HOST_TIMES).firstBootMs,
        restartBootDelayMs: (options.hostTimes ?? DEFAULT_HOST_TIMES).restartBootMs,
        pullDelayMs: (options.hostTimes ?? DEFAULT_HOST_TIMES).pullMs,
      });
      cleanups.push({ name: "the instance-host simulator", run: () => h.close() });
      return h;
    });
    // EC2's idempotent launches and refused stops, in front of the simulator.
    const proxy = await startEc2Proxy({
      upstream: hosts.ec2Endpoint,
      region: moto.region,
      clientToken: true,
      refuseStops: true,
    });
    cleanups.push({ name: "the EC2 proxy", run: () => proxy.close() });
    const ec2 = new EC2Client({
      endpoint: hosts.ec2Endpoint,
      region: moto.region,
      credentials: { ...MOTO_CREDENTIALS },
    });
    cleanups.push({ name: "the EC2 client", run: async () => ec2.destroy() });
    checkAbort();

    const queueUrl = await step(
      report,
      "event channel: SQS queue, EventBridge rule, EC2's state events (moto)",
      async () => {
        const sqs = new SQSClient({
          endpoint: moto.endpoint,
          region: moto.region,
          credentials: { ...MOTO_CREDENTIALS },
        });
        let url: string;
        try {
          const queue = await sqs.send(new CreateQueueCommand({ QueueName: EVENT_QUEUE }));
          url = queue.QueueUrl ?? "";
        } finally {
          sqs.destroy();
        }
        if (url === "") throw new Error(`moto created queue ${EVENT_QUEUE} without a URL`);
        const rule = await createEc2EventRule(moto, url);
        cleanups.push({ name: "the EventBridge rule", run: () => rule.remove() });
        // Read through the simulator: it shows pending, stopping and shutting-down as its guests
        // really boot and shut down (moto alone jumps); every instance's, as in an account.
        const events = await startEc2Events({ moto, ec2Endpoint: hosts.ec2Endpoint });
        cleanups.push({ name: "EC2's state events", run: () => events.stop() });
        return url;
      },
    );
    checkAbort();

    const kubectl = (args: readonly string[], input?: string) =>
      run(kubectlPath(), ["--kubeconfig", controlPlane.kubeconfigPath ?? "", ...args], {
        ...(input === undefined ? {} : { input }),
        timeoutMs: 90_000,
      });

    const network = await step(
      report,
      "network in moto (VPC, subnet, security group)",
      async () => {
        const setup = moto.ec2();
        try {
          const vpc = await setup.send(new CreateVpcCommand({ CidrBlock: "10.42.0.0/16" }));
          const vpcId = vpc.Vpc?.VpcId ?? "";
          const subnet = await setup.send(
            new CreateSubnetCommand({ VpcId: vpcId, CidrBlock: "10.42.0.0/16" }),
          );
          const group = await setup.send(
            new CreateSecurityGroupCommand({
              VpcId: vpcId,
              GroupName: "nebula-demo",
              Description: "nebula demo instances",
            }),
          );
          return { subnetId: subnet.Subnet?.SubnetId ?? "", securityGroupId: group.GroupId ?? "" };
        } finally {
          setup.destroy();
        }
      },
    );

    await step(
      report,
      "kubectl apply: CRDs, the apps' namespace, ServiceAccounts and RBAC",
      async () => {
        await kubectl(["apply", "-f", join(REPO_ROOT, "deploy", "crds")]);
        for (const app of ["vnode", "operator"]) {
          for (const file of ["namespace.yaml", "serviceaccount.yaml", "rbac.yaml"]) {
            const path = join(REPO_ROOT, "deploy", app, file);
            if (existsSync(path)) await kubectl(["apply", "-f", path]);
          }
        }
        await kubectl(["wait", "--for", "condition=Established", "crd", "--all", "--timeout=60s"]);
      },
    );
    checkAbort();

    const apps = new Map<AppName, AppProcess>();
    const unusable = new Map<AppName, string>();
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      ...moto.env,
      AWS_ACCESS_KEY_ID: MOTO_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: MOTO_CREDENTIALS.secretAccessKey,
    };
    const saKubeconfig = (name: string) => {
      const path = join(logDir, `${name}.kubeconfig`);
      writeFileSync(
        path,
        controlPlane.kubeconfigFor(`system:serviceaccount:${SYSTEM_NAMESPACE}:${name}`, [
          "system:serviceaccounts",
          `system:serviceaccounts:${SYSTEM_NAMESPACE}`,
        ]),
        { mode: 0o600 },
      );
      return path;
    };

    // Container logs and usage go to CloudWatch in moto (the group is the operator's to create),
    // so `kubectl logs` works through kube-apiserver → the vnode's kubelet API.
    await step(report, `log group ${LOG_GROUP} in moto`, async () => {
      const logs = new CloudWatchLogsClient({
        endpoint: moto.endpoint,
        region: moto.region,
        credentials: { ...MOTO_CREDENTIALS },
      });
      try {
        await logs.send(new CreateLogGroupCommand({ logGroupName: LOG_GROUP }));
      } catch (error) {
        if ((error as { name?: string }).name !== "ResourceAlreadyExistsException") throw error;
      } finally {
        logs.destroy();
      }
    });
    const vnodeConfig = async (
      file: string,
      node: Record<string, unknown>,
      provider: Record<string, unknown>,
    ): Promise<string> => {
      const path = join(logDir, file);
      const config = {
        node: {
          capacity: { cpu: "100", memory: "400Gi", pods: "60" },
          // kube-apiserver reaches the kubelet API here; it refuses loopback addresses, and
          // 10250 may belong to a real kubelet on this machine.
          internalIP: hostAddress(),
          kubeletPort: await freePort(),
          ...node,
        },
        provider: {
          clusterName: CLUSTER,
          region: moto.region,
          subnetIds: [network.subnetId],
          securityGroupIds: [network.securityGroupId],
          imageId: "ami-0a1b2c3d",
          instanceProfile: NEBULA_INSTANCE_PROFILE,
          instanceTypes: { default: "t3.micro" },
          endpoint: proxy.endpoint,
          pollIntervalSeconds: VNODE_POLL_INTERVAL_SECONDS,
          apiHeadroomSeconds: VNODE_API_HEADROOM_SECONDS,
          batchWindowMs: 50,
          logs: { group: LOG_GROUP },
          metrics: { sampleSeconds: 5, publishSeconds: 15 },
          ...provider,
        },
      };
      writeFileSync(path, JSON.stringify(config, null, 2));
      return path;
    };
    // The channel's node: its hosts ring the queue after every report, and it reads the
    // instances a message names at once (its SQS calls go through the same endpoint). With the
    // warm pool: its entry's instance type is one only the comparison's warm Pods ask for.
    const channelNode = { kubeletPort: await freePort() };
    const channelProvider = (size: number) => ({
      events: { queueUrl, pollIntervalSeconds: VNODE_POLL_INTERVAL_SECONDS },
      ...(warmPoolSize === 0
        ? {}
        : {
            instanceTypes: {
              default: COLD_INSTANCE_TYPE,
              allowed: [COLD_INSTANCE_TYPE, WARM_INSTANCE_TYPE],
            },
            warmPool: [
              {
                name: WARM_POOL_ENTRY,
                instanceType: WARM_INSTANCE_TYPE,
                size,
                images: [...WARM_POOL_IMAGES],
              },
            ],
          }),
    });
    const channelConfig = await vnodeConfig(
      "vnode-config.json",
      channelNode,
      channelProvider(warmPoolSize),
    );
    // The polled node: no channel; a label that keeps the samples off it.
    const polledConfig = await vnodeConfig(
      "vnode-polled-config.json",
      { labels: { type: "nebula-demo-polled" } },
      {},
    );
    const starts: [AppName, "vnode" | "operator", string[]][] = [
      [
        "nebula-vnode",
        "vnode",
        [
          "--node-name",
          NODE_NAME,
          "--config",
          channelConfig,
          "--kubeconfig",
          saKubeconfig("nebula-vnode"),
          "--namespace",
          SYSTEM_NAMESPACE,
        ],
      ],
      [
        "nebula-vnode-polled",
        "vnode",
        [
          "--node-name",
          POLLED_NODE_NAME,
          "--config",
          polledConfig,
          "--kubeconfig",
          saKubeconfig("nebula-vnode"),
          "--namespace",
          SYSTEM_NAMESPACE,
        ],
      ],
      [
        "nebula-operator",
        "operator",
        ["--kubeconfig", saKubeconfig("nebula-operator"), "--namespace", DEMO_NAMESPACE],
      ],
    ];
    const appAddresses = new Map<AppName, string>();
    const launch = async (name: AppName, dir: "vnode" | "operator", args: string[]) => {
      const bundle = bundleOf(dir);
      const address = appAddresses.get(name) ?? `127.0.0.1:${await freePort()}`;
      appAddresses.set(name, address);
      return step(report, `${name} (${bundle.slice(REPO_ROOT.length)})`, async () =>
        startApp({
          name,
          bundle,
          args: [...args, "--log-level", "info"],
          env,
          address,
          logFile: join(logDir, `${name}.log`),
          readyTimeoutMs: 60_000,
          signal,
        }),
      );
    };
    for (const [name, dir, args] of starts) {
      const bundle = bundleOf(dir);
      if (!existsSync(bundle)) {
        unusable.set(name, `its bundle ${bundle} is missing (npx nx run @nebula/${dir}-app:build)`);
        report(name, "failed", unusable.get(name));
        continue;
      }
      try {
        apps.set(name, await launch(name, dir, args));
        // The app running now (a restarted one replaces the first in `apps`).
        cleanups.push({ name, run: async () => apps.get(name)?.stop() });
      } catch (error) {
        unusable.set(name, (error as Error).message.split("\n")[0] ?? "did not start");
      }
      checkAbort();
    }
    for (const [app, node] of [
      ["nebula-vnode", NODE_NAME],
      ["nebula-vnode-polled", POLLED_NODE_NAME],
    ] as const) {
      if (!apps.has(app)) continue;
      await step(report, `virtual Node ${node} Ready`, () =>
        kubectl(["wait", "--for", "condition=Ready", `node/${node}`, "--timeout=60s"]).catch(
          async () => {
            // `kubectl wait` fails at once while the Node does not exist yet.
            const deadline = Date.now() + 60_000;
            for (;;) {
              const out = await kubectl([
                "get",
                "node",
                node,
                "-o",
                'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
              ]).catch(() => "");
              if (out.trim() === "True") return "";
              if (Date.now() > deadline) throw new Error(`Node ${node} not Ready in 60 s`);
              checkAbort();
              await new Promise((r) => setTimeout(r, 500));
            }
          },
        ),
      );
    }

    const admin = controlPlane.kubeConfig();
    const world: World = {
      controlPlane,
      moto,
      hosts,
      proxy,
      apps,
      unusable,
      ec2,
      core: admin.makeApiClient(CoreV1Api),
      custom: admin.makeApiClient(CustomObjectsApi),
      logDir,
      kubectl,
      warmPoolSize,
      drainWarmPool: async () => {
        const vnode = apps.get("nebula-vnode");
        const start = starts.find(([name]) => name === "nebula-vnode");
        if (vnode === undefined || start === undefined || warmPoolSize === 0) return;
        await vnodeConfig("vnode-config.json", channelNode, channelProvider(0));
        await vnode.stop();
        apps.set("nebula-vnode", await launch("nebula-vnode", "vnode", start[2]));
      },
      connectionHelp: () => [
        `export KUBECONFIG=${controlPlane.kubeconfigPath}`,
        `alias kubectl=${kubectlPath()}`,
        `export AWS_REGION=${moto.region} AWS_DEFAULT_REGION=${moto.region} AWS_ACCESS_KEY_ID=${MOTO_CREDENTIALS.accessKeyId} AWS_SECRET_ACCESS_KEY=${MOTO_CREDENTIALS.secretAccessKey}`,
        `export AWS_ENDPOINT_URL_EC2=${hosts.ec2Endpoint}`,
        "# Debian's aws CLI 2.9 ignores AWS_ENDPOINT_URL_EC2; pass the endpoint explicitly:",
        `aws --endpoint-url ${hosts.ec2Endpoint} ec2 describe-instances --filters Name=tag:nebula:cluster,Values=${CLUSTER} --query 'Reservations[].Instances[].[InstanceId,State.Name]' --output text`,
        `kubectl get pods,workloads,workloaddeployments -n ${DEMO_NAMESPACE}`,
        `# logs of nebula-vnode and nebula-operator: ${logDir}`,
      ],
      stop: () => runCleanups(cleanups),
      kill: () => {
        for (const app of apps.values()) app.kill();
      },
    };
    return world;
  } catch (error) {
    await runCleanups(cleanups);
    throw error;
  }
}
