/**
 * The Helm chart (helm/nebula) with a real Helm, built from its Go module, against a real
 * kube-apiserver with its controller manager and scheduler:
 *
 * - `helm lint --strict`; the schema and the required provider values refuse bad values with the
 *   path that is wrong;
 * - what `helm template` renders: either app or both, the IRSA annotation, the configuration, and
 *   RBAC rule for rule and the vnode's admission policy the same as the plain manifests
 *   (deploy/vnode, deploy/operator) that `kubectl apply -k deploy/` installs: the kustomization
 *   renders the same objects as the chart;
 * - `helm install` into the control plane: CRDs established, both Deployments' Pods created as the
 *   chart's ServiceAccounts, none on the virtual Node; then each app's bundle runs exactly as the
 *   installed Deployment says (its args, its env, the installed ConfigMap, the chart's
 *   ServiceAccount and RBAC): both report Ready on the probe path the chart names, the vnode's
 *   Node registers, the operator leads, and no request is forbidden;
 * - `helm uninstall` removes what it installed and keeps the CRDs (Helm's rule for crds/).
 *
 * This control plane has no kubelet, so the chart's Pods themselves stay Pending: the apps run as
 * processes with the identity and configuration the chart gives them instead.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateVpcCommand,
  DescribeInstancesCommand,
} from "@aws-sdk/client-ec2";
import {
  AppsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1Deployment,
  type V1PolicyRule,
} from "@kubernetes/client-node";
import {
  type AppImage,
  buildAppImage,
  containerLimits,
  freePort,
  helmPath,
  kubectlPath,
  NEBULA_INSTANCE_PROFILE,
  PODMAN_FLAGS,
} from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";

const run = promisify(execFile);
const DEPLOY = fileURLToPath(new URL("../", import.meta.url));
const CHART = join(DEPLOY, "helm", "nebula");
const TEST_VALUES = join(CHART, "ci", "test-values.yaml");
/** Three virtual nodes: a plain one, a pool with a label and a taint, a draining one. */
const POOL_VALUES = join(CHART, "ci", "pool-values.yaml");
const POOL = ["pool-a", "pool-gpu", "pool-old"];
/** Production settings: PDB, ServiceMonitor, priority class, spread, affinity, extra volumes, labels. */
const PRODUCTION_VALUES = join(CHART, "ci", "production-values.yaml");
/** The apps' folders: each image is built from its Dockerfile and dist/ (buildAppImage). */
const APPS = {
  vnode: fileURLToPath(new URL("../../apps/vnode", import.meta.url)),
  operator: fileURLToPath(new URL("../../apps/operator", import.meta.url)),
};
const HELM = helmPath();
const NAMESPACE = "nebula-system";
const RELEASE = "nebula";
const NODE = "chart-node";

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    annotations?: Record<string, string>;
    labels?: Record<string, string>;
  };
  rules?: V1PolicyRule[];
  data?: Record<string, string>;
  spec?: unknown;
}

const work = mkdtempSync(join(tmpdir(), "nebula-chart-"));
// The apps' containers run as the chart's user (65532) and read what is mounted from here.
chmodSync(work, 0o755);
let admin: KubeConfig;
let adminKubeconfig: string;
const children: ChildProcess[] = [];
/** Each app's image, built once for the file (both describe blocks run them). */
const images: Partial<Record<keyof typeof APPS, AppImage>> = {};
/** The containers this file started (removed in afterAll, whatever happened). */
const containers: string[] = [];

/**
 * `helm uninstall --wait` of `release` (which must succeed), then the names of what is left with
 * its instance label, of every kind the chart creates ("" when nothing is).
 */
async function uninstall(release: string, namespace: string): Promise<string> {
  const out = await helm([
    "uninstall",
    release,
    "--namespace",
    namespace,
    "--kubeconfig",
    adminKubeconfig,
    "--wait",
    "--timeout",
    "120s",
  ]);
  expect(out.code).toBe(0);
  const left = await run(kubectlPath(), [
    "--kubeconfig",
    adminKubeconfig,
    "get",
    "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings,deployments,configmaps,serviceaccounts,roles,rolebindings",
    "-A",
    "-l",
    `app.kubernetes.io/instance=${release}`,
    "-o",
    "name",
  ]);
  return left.stdout.trim();
}

async function helm(
  args: readonly string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(HELM, [...args], {
      env: {
        ...process.env,
        HELM_CACHE_HOME: join(work, "cache"),
        HELM_CONFIG_HOME: join(work, "config"),
        HELM_DATA_HOME: join(work, "data"),
      },
      maxBuffer: 64 * 1024 * 1024,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return {
      code: typeof e.code === "number" ? e.code : -1,
      stdout: e.stdout ?? "",
      stderr: e.stderr ?? "",
    };
  }
}

function parseObjects(yamlText: string): K8sObject[] {
  return parseAllDocuments(yamlText)
    .map((d) => d.toJSON() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null && typeof o === "object" && "kind" in o);
}

async function template(...args: string[]): Promise<K8sObject[]> {
  const out = await helm([
    "template",
    RELEASE,
    CHART,
    "--namespace",
    NAMESPACE,
    "--include-crds",
    ...args,
  ]);
  if (out.code !== 0) throw new Error(`helm template failed: ${out.stderr}`);
  return parseObjects(out.stdout);
}

const idOf = (o: K8sObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;
const find = (objects: K8sObject[], kind: string, name: string, namespace?: string) =>
  objects.find(
    (o) =>
      o.kind === kind &&
      o.metadata.name === name &&
      (namespace === undefined || o.metadata.namespace === namespace),
  );
const deploymentOf = (objects: K8sObject[], name: string) =>
  find(objects, "Deployment", name) as (K8sObject & Pick<V1Deployment, "spec">) | undefined;
const manifest = (file: string) => parseObjects(readFileSync(join(DEPLOY, file), "utf8"));

async function until<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  ms = 120_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${String(last)}` : ""}`);
}

/** A provider configuration for moto: a VPC, a subnet and a security group of their own. */
async function motoProvider(clusterName: string): Promise<Record<string, unknown>> {
  const { moto } = useTestPeers();
  const ec2 = moto.ec2();
  const vpc = await ec2.send(new CreateVpcCommand({ CidrBlock: "10.7.0.0/16" }));
  const subnet = await ec2.send(
    new CreateSubnetCommand({ VpcId: vpc.Vpc?.VpcId ?? "", CidrBlock: "10.7.0.0/16" }),
  );
  const sg = await ec2.send(
    new CreateSecurityGroupCommand({
      VpcId: vpc.Vpc?.VpcId ?? "",
      GroupName: clusterName,
      Description: `${clusterName} test`,
    }),
  );
  ec2.destroy();
  return {
    clusterName,
    region: moto.region,
    subnetIds: [subnet.Subnet?.SubnetId],
    securityGroupIds: [sg.GroupId],
    imageId: "ami-0a1b2c3d",
    instanceProfile: NEBULA_INSTANCE_PROFILE,
    endpoint: moto.endpoint,
  };
}

interface Started {
  readonly app: string;
  readonly lines: string[];
  readonly probe: string;
  readonly child: ChildProcess;
  /** The podman container it runs in. */
  readonly container: string;
}

/**
 * Runs an app's image (built from its Dockerfile, as the release builds it) exactly as an installed
 * Deployment says: its args and env, the ServiceAccount it names (as a kubeconfig), `config` as the
 * mounted ConfigMap's config.json, and its security context (user and group, read-only root
 * filesystem, no capabilities, no privilege escalation), with podman on the host's network: this
 * control plane has no kubelet. AWS credentials for moto stand in for IRSA.
 */
async function runAsDeployment(
  app: keyof typeof APPS,
  deployment: V1Deployment,
  config: string,
): Promise<Started> {
  const { moto, controlPlane } = useTestPeers();
  const pod = deployment.spec?.template.spec;
  const container = pod?.containers[0];
  const label = deployment.metadata?.name ?? app;
  if (!pod || !container) throw new Error(`${label}: no container in the installed Deployment`);
  const namespace = deployment.metadata?.namespace ?? "";
  const sa = `system:serviceaccount:${namespace}:${pod.serviceAccountName}`;
  const kubeconfig = join(work, `${label}.kubeconfig`);
  writeFileSync(
    kubeconfig,
    controlPlane.kubeconfigFor(sa, [
      "system:serviceaccounts",
      `system:serviceaccounts:${namespace}`,
      "system:authenticated",
    ]),
  );
  // What the kubelet would mount: the ConfigMap volume, at the path the args name.
  const mount = container.volumeMounts?.find((m) => m.name === "config");
  const args = (container.args ?? []).map((a) => {
    if (mount && a.startsWith(`--config=${mount.mountPath}/`)) {
      writeFileSync(join(work, `${label}-config.json`), config);
      return `--config=${join(work, `${label}-config.json`)}`;
    }
    return a;
  });
  const probePort = await freePort();
  const metricsPort = await freePort();
  const chartProbe = container.readinessProbe?.httpGet?.path ?? "";
  expect(chartProbe).toBe("/readyz");
  expect(container.livenessProbe?.httpGet?.path).toBe("/healthz");
  const finalArgs = [
    ...args.filter(
      (a) =>
        !a.startsWith("--health-probe-bind-address") && !a.startsWith("--metrics-bind-address"),
    ),
    `--health-probe-bind-address=127.0.0.1:${probePort}`,
    `--metrics-bind-address=127.0.0.1:${metricsPort}`,
    "--kubeconfig",
    kubeconfig,
  ];
  // The container's env: fieldRefs resolved as the kubelet would.
  const env: Record<string, string> = { ...moto.env };
  for (const e of container.env ?? []) {
    if (e.valueFrom?.fieldRef?.fieldPath === "metadata.name") env[e.name] = `${label}-chart-0`;
    else if (e.value !== undefined) env[e.name] = e.value;
  }
  // Each vnode serves the kubelet API: on one machine each needs a port of its own.
  if (app === "vnode" && config !== "") {
    const parsed = JSON.parse(config) as { node?: Record<string, unknown> };
    parsed.node = { ...parsed.node, kubeletPort: await freePort() };
    writeFileSync(join(work, `${label}-config.json`), JSON.stringify(parsed));
  }
  images[app] ??= await buildAppImage(APPS[app], `nebula-chart-${app}`);
  const security = container.securityContext ?? {};
  const podSecurity = pod.securityContext ?? {};
  const user = security.runAsUser ?? podSecurity.runAsUser;
  const group = security.runAsGroup ?? podSecurity.runAsGroup;
  expect(user, `${label}: the chart runs it as a numeric user`).toBe(65532);
  for (const file of [kubeconfig, join(work, `${label}-config.json`)])
    if (existsSync(file)) chmodSync(file, 0o644);
  const name = `nebula-chart-${label}-${containers.length}-${process.pid}`;
  containers.push(name);
  const child = spawn(
    "podman",
    [
      ...PODMAN_FLAGS,
      "run",
      "--rm",
      "--name",
      name,
      "--network=host",
      `--user=${user}:${group ?? user}`,
      // Read-only as in a Pod: no tmpfs on /tmp or /run unless the Deployment mounts one.
      ...(security.readOnlyRootFilesystem ? ["--read-only", "--read-only-tmpfs=false"] : []),
      ...(security.capabilities?.drop?.includes("ALL") ? ["--cap-drop=ALL"] : []),
      ...(security.allowPrivilegeEscalation === false ? ["--security-opt=no-new-privileges"] : []),
      ...(await containerLimits()),
      // The same paths inside: the kubeconfig and config.json the args name.
      "--volume",
      `${work}:${work}:ro`,
      ...Object.entries(env).flatMap(([k, v]) => ["--env", `${k}=${v}`]),
      images[app].image,
      ...finalArgs,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  children.push(child);
  const lines: string[] = [];
  if (child.stdout) createInterface({ input: child.stdout }).on("line", (l) => lines.push(l));
  if (child.stderr) createInterface({ input: child.stderr }).on("line", (l) => lines.push(l));
  return {
    app: label,
    lines,
    probe: `http://127.0.0.1:${probePort}${chartProbe}`,
    child,
    container: name,
  };
}

/** Waits until a started app answers its readiness probe. */
async function ready(s: Started): Promise<void> {
  await until(`${s.app} Ready on ${s.probe}`, async () =>
    (await fetch(s.probe)).status === 200 ? true : undefined,
  ).catch((error) => {
    throw new Error(`${(error as Error).message}\n${s.lines.slice(-20).join("\n")}`);
  });
}

beforeAll(async () => {
  if (!existsSync(HELM))
    throw new Error(
      `no helm at ${HELM}: run 'bash scripts/bootstrap.sh helm' (or 'npm test', which prepares it)`,
    );
  const { controlPlane } = useTestPeers();
  admin = controlPlane.kubeConfig();
  adminKubeconfig = join(work, "admin.kubeconfig");
  writeFileSync(adminKubeconfig, controlPlane.kubeconfig);
});

afterAll(async () => {
  for (const child of children) child.kill("SIGTERM");
  await new Promise((r) => setTimeout(r, 1_000));
  for (const child of children) child.kill("SIGKILL");
  if (containers.length > 0)
    await run("podman", [...PODMAN_FLAGS, "rm", "-f", "-i", "-t", "0", ...containers]);
  for (const built of Object.values(images)) await built?.remove();
  rmSync(work, { recursive: true, force: true });
}, 120_000);

describe("helm lint and the values schema", () => {
  it("lints clean with complete values, with one virtual node and with three", async () => {
    const out = await helm(["lint", "--strict", CHART, "--values", TEST_VALUES]);
    expect(out.stderr + out.stdout).toContain("1 chart(s) linted, 0 chart(s) failed");
    expect(out.code).toBe(0);
    const pool = await helm(["lint", "--strict", CHART, "-f", TEST_VALUES, "-f", POOL_VALUES]);
    expect(pool.stderr + pool.stdout).toContain("1 chart(s) linted, 0 chart(s) failed");
    expect(pool.code).toBe(0);
    const production = await helm([
      "lint",
      "--strict",
      CHART,
      "-f",
      TEST_VALUES,
      "-f",
      PRODUCTION_VALUES,
    ]);
    expect(production.stderr + production.stdout).toContain("1 chart(s) linted, 0 chart(s) failed");
    expect(production.code).toBe(0);
  });

  it("refuses to render without the provider's required values, naming the one missing", async () => {
    const out = await helm(["template", RELEASE, CHART]);
    expect(out.code).not.toBe(0);
    expect(out.stderr).toContain("vnode.config.provider.clusterName is required");
    // With the vnode off, nothing about EC2 is needed.
    const operatorOnly = await helm(["template", RELEASE, CHART, "--set", "vnode.enabled=false"]);
    expect(operatorOnly.code).toBe(0);
  });

  it.each([
    ["a wrong type", "vnode.replicas=two", /at '\/vnode\/replicas': got string, want integer/],
    ["an unknown key", "vnode.replica=2", /additional properties 'replica' not allowed/],
    ["a value not in the list", "operator.logLevel=verbose", /at '\/operator\/logLevel'/],
    [
      "a virtual node's name that is not a Node name",
      "vnode.nodes[0].name=Pool_A",
      /at '\/vnode\/nodes\/0\/name'/,
    ],
    [
      "a virtual node without a name",
      "vnode.nodes[0].labels.team=a",
      /at '\/vnode\/nodes\/0': missing property 'name'/,
    ],
    [
      "an unknown key of a virtual node",
      "vnode.nodes[0].name=a,vnode.nodes[0].replica=1",
      /additional properties 'replica' not allowed/,
    ],
    [
      "a virtual node's taint effect not in the list",
      "vnode.nodes[0].name=a,vnode.nodes[0].taints[0].key=k,vnode.nodes[0].taints[0].effect=Sometimes",
      /at '\/vnode\/nodes\/0\/taints\/0\/effect'/,
    ],
    [
      "a virtual node listed twice",
      "vnode.nodes[0].name=a,vnode.nodes[1].name=a",
      /vnode.nodes\[1\]: the name "a" is listed twice/,
    ],
    [
      "two virtual nodes on one event queue",
      "vnode.config.provider.events.queueUrl=https://sqs.eu-west-1.amazonaws.com/1/q,vnode.nodes[0].name=a,vnode.nodes[1].name=b",
      /vnode.nodes\[1\] \(b\): provider.events.queueUrl https:\/\/sqs.eu-west-1.amazonaws.com\/1\/q is also a's/,
    ],
    [
      "a typo in the provider's configuration (the app's own schema)",
      "vnode.config.provider.regoin=eu-west-1",
      /at '\/vnode\/config\/provider': additional properties 'regoin' not allowed/,
    ],
    [
      "a wrong type in a virtual node's own configuration",
      "vnode.nodes[0].name=a,vnode.nodes[0].config.provider.pollIntervalSeconds=fast",
      /at '\/vnode\/nodes\/0\/config\/provider\/pollIntervalSeconds': got string, want number/,
    ],
    [
      "a warm-pool entry whose name is no DNS label",
      "vnode.config.provider.warmPool[0].name=Small_1,vnode.config.provider.warmPool[0].instanceType=m7i.large",
      /at '\/vnode\/config\/provider\/warmPool\/0\/name'/,
    ],
    [
      "a warm-pool entry without its instance type",
      "vnode.config.provider.warmPool[0].name=small,vnode.config.provider.warmPool[0].size=3",
      /at '\/vnode\/config\/provider\/warmPool\/0': missing property 'instanceType'/,
    ],
    [
      "an unknown key of a warm-pool entry",
      "vnode.config.provider.warmPool[0].name=small,vnode.config.provider.warmPool[0].instanceType=m7i.large,vnode.config.provider.warmPool[0].sizes=3",
      /additional properties 'sizes' not allowed/,
    ],
    [
      "an unknown kubelet API setting",
      "vnode.config.kubeletApi.clientCAFile=/etc/ca.crt",
      /at '\/vnode\/config\/kubeletApi': additional properties 'clientCAFile' not allowed/,
    ],
    [
      "a ServiceMonitor without its Service",
      "metrics.service.enabled=false,metrics.serviceMonitor.enabled=true",
      /metrics.serviceMonitor.enabled needs metrics.service.enabled/,
    ],
    [
      "a disruption budget that is no count or percent",
      "vnode.podDisruptionBudget.maxUnavailable=lots",
      /at '\/vnode\/podDisruptionBudget\/maxUnavailable'/,
    ],
    [
      "a topology spread constraint without its topologyKey",
      "operator.topologySpreadConstraints[0].maxSkew=1,operator.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
      /missing property 'topologyKey'/,
    ],
  ])("refuses %s, naming its path (--set %s)", async (_what, set, message) => {
    const out = await helm(["template", RELEASE, CHART, "-f", TEST_VALUES, "--set", set]);
    expect(out.code).not.toBe(0);
    expect(out.stderr).toMatch(message);
  });
});

describe("helm template", () => {
  it("renders both apps, the CRDs, the IRSA annotation and the configuration", async () => {
    const objects = await template("-f", TEST_VALUES);
    expect(
      objects
        .filter((o) => o.kind === "CustomResourceDefinition")
        .map((o) => o.metadata.name)
        .sort(),
    ).toEqual([
      "instances.compute.nebula.dev",
      "workloaddeployments.compute.nebula.dev",
      "workloads.compute.nebula.dev",
    ]);
    expect(find(objects, "Deployment", "nebula-vnode", NAMESPACE)).toBeDefined();
    expect(find(objects, "Deployment", "nebula-operator", NAMESPACE)).toBeDefined();
    expect(find(objects, "ServiceAccount", "nebula-vnode")?.metadata.annotations).toEqual({
      "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/nebula-vnode-controller",
    });
    const config = JSON.parse(
      find(objects, "ConfigMap", "nebula-vnode")?.data?.["config.json"] ?? "",
    );
    expect(config.provider).toMatchObject({
      clusterName: "prod",
      subnetIds: ["subnet-0123456789abcdef0"],
    });
    // Neither app may run on a virtual Node (its own or another's).
    for (const name of ["nebula-vnode", "nebula-operator"]) {
      const deployment = deploymentOf(objects, name);
      expect(
        deployment?.spec?.template.spec?.affinity?.nodeAffinity
          ?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms,
      ).toEqual([
        { matchExpressions: [{ key: "type", operator: "NotIn", values: ["virtual-kubelet"] }] },
      ]);
    }
    for (const o of objects.filter((x) => x.kind !== "CustomResourceDefinition"))
      expect(o.metadata.labels?.["app.kubernetes.io/instance"], idOf(o)).toBe(RELEASE);
  });

  it("names each image by tag, and by tag@digest when a digest is set (as a released chart is); the schema refuses a digest that is not sha256", async () => {
    const image = (objects: K8sObject[], name: string) =>
      deploymentOf(objects, name)?.spec?.template.spec?.containers[0]?.image;
    const plain = await template("-f", TEST_VALUES);
    const version = (await helm(["show", "chart", CHART])).stdout.match(
      /^appVersion: "?([^"\n]*)/m,
    )?.[1];
    expect(image(plain, "nebula-vnode")).toBe(`ghcr.io/nebula-dev/nebula-vnode:${version}`);
    const digest = `sha256:${"0123456789abcdef".repeat(4)}`;
    const pinned = await template(
      "-f",
      TEST_VALUES,
      "--set",
      `vnode.image.digest=${digest}`,
      "--set",
      `operator.image.digest=${digest}`,
    );
    expect(image(pinned, "nebula-vnode")).toBe(
      `ghcr.io/nebula-dev/nebula-vnode:${version}@${digest}`,
    );
    expect(image(pinned, "nebula-operator")).toBe(
      `ghcr.io/nebula-dev/nebula-operator:${version}@${digest}`,
    );
    const bad = await helm([
      "template",
      RELEASE,
      CHART,
      "-f",
      TEST_VALUES,
      "--set",
      "vnode.image.digest=latest",
    ]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("/vnode/image/digest");
  });

  it("renders each Deployment's disruption budget and metrics Service selecting its Pods; with production values the ServiceMonitors, priority class, spread, affinity, extra volumes and Pod labels", async () => {
    const selects = (selector: Record<string, string> | undefined, deployment: V1Deployment) =>
      selector !== undefined &&
      Object.keys(selector).length > 0 &&
      Object.entries(selector).every(
        ([k, v]) => deployment.spec?.template.metadata?.labels?.[k] === v,
      );
    const spec = (o: K8sObject | undefined) =>
      o?.spec as
        | {
            maxUnavailable?: number | string;
            selector?: Record<string, string> & { matchLabels?: Record<string, string> };
            ports?: Array<{ name: string; port: number; targetPort: string }>;
            endpoints?: Array<{ port: string; path: string; interval: string }>;
          }
        | undefined;
    for (const values of [[], ["-f", POOL_VALUES]]) {
      const objects = await template("-f", TEST_VALUES, ...values);
      const deployments = objects.filter((o) => o.kind === "Deployment");
      expect(deployments.length).toBeGreaterThanOrEqual(2);
      for (const d of deployments) {
        const deployment = d as unknown as V1Deployment;
        const name = d.metadata.name;
        const pdb = find(objects, "PodDisruptionBudget", name, NAMESPACE);
        expect(spec(pdb)?.maxUnavailable, name).toBe(1);
        expect(selects(spec(pdb)?.selector?.matchLabels, deployment), name).toBe(true);
        const service = find(objects, "Service", `${name}-metrics`, NAMESPACE);
        expect(spec(service)?.ports, name).toEqual([
          { name: "metrics", port: 8080, targetPort: "metrics" },
        ]);
        const { matchLabels: _none, ...serviceSelector } = spec(service)?.selector ?? {};
        expect(selects(serviceSelector as Record<string, string>, deployment), name).toBe(true);
        // Each budget and Service selects its own Deployment's Pods and no other's.
        for (const other of deployments.filter((o) => o !== d))
          expect(selects(spec(pdb)?.selector?.matchLabels, other as unknown as V1Deployment)).toBe(
            false,
          );
      }
      expect(objects.filter((o) => o.kind === "ServiceMonitor")).toEqual([]);
    }
    const objects = await template("-f", TEST_VALUES, "-f", PRODUCTION_VALUES);
    const vnode = deploymentOf(objects, "nebula-vnode")?.spec?.template;
    const operator = deploymentOf(objects, "nebula-operator")?.spec?.template;
    expect(vnode?.metadata?.labels?.team).toBe("platform");
    expect(vnode?.spec?.priorityClassName).toBe("system-cluster-critical");
    // The constraint given without a labelSelector gets the Deployment's.
    expect(vnode?.spec?.topologySpreadConstraints).toEqual([
      {
        maxSkew: 1,
        topologyKey: "topology.kubernetes.io/zone",
        whenUnsatisfiable: "ScheduleAnyway",
        labelSelector: {
          matchLabels: {
            "app.kubernetes.io/name": "nebula-vnode",
            "app.kubernetes.io/instance": RELEASE,
          },
        },
      },
    ]);
    // The vnode keeps the chart's affinity; the operator's is replaced by its own.
    expect(vnode?.spec?.affinity?.podAntiAffinity).toBeDefined();
    expect(operator?.spec?.affinity?.podAntiAffinity).toBeUndefined();
    expect(operator?.spec?.affinity?.nodeAffinity).toBeDefined();
    // Extra volumes beside the chart's, mounted where asked.
    expect(vnode?.spec?.volumes?.map((v) => v.name)).toEqual(["config", "kubelet-tls"]);
    expect(vnode?.spec?.containers[0]?.volumeMounts?.map((m) => [m.name, m.mountPath])).toEqual([
      ["config", "/etc/nebula"],
      ["kubelet-tls", "/etc/nebula/tls"],
    ]);
    expect(operator?.spec?.volumes).toEqual([{ name: "scratch", emptyDir: {} }]);
    expect(operator?.spec?.containers[0]?.volumeMounts).toEqual([
      { name: "scratch", mountPath: "/scratch" },
    ]);
    expect(
      spec(find(objects, "PodDisruptionBudget", "nebula-operator", NAMESPACE))?.maxUnavailable,
    ).toBe("50%");
    // The warm pool reaches the vnode's configuration file as written in the values.
    const config = JSON.parse(
      find(objects, "ConfigMap", "nebula-vnode")?.data?.["config.json"] ?? "",
    ) as { provider: { warmPool?: unknown; clusterName?: string } };
    expect(config.provider.clusterName).toBe("prod");
    expect(config.provider.warmPool).toEqual([
      {
        name: "general",
        instanceType: "m7i.large",
        size: 3,
        images: ["public.ecr.aws/docker/library/nginx:1.27"],
        maxHourlyCostUsd: 0.01,
      },
    ]);
    for (const name of ["nebula-vnode", "nebula-operator"]) {
      const monitor = find(objects, "ServiceMonitor", name, NAMESPACE);
      expect(monitor?.apiVersion).toBe("monitoring.coreos.com/v1");
      expect(monitor?.metadata.labels?.release).toBe("prom");
      expect(spec(monitor)?.endpoints).toEqual([
        { port: "metrics", path: "/metrics", interval: "30s" },
      ]);
      // It selects its metrics Service by the Service's labels.
      const service = find(objects, "Service", `${name}-metrics`, NAMESPACE);
      for (const [k, v] of Object.entries(spec(monitor)?.selector?.matchLabels ?? {}))
        expect(service?.metadata.labels?.[k], `${name} ${k}`).toBe(v);
    }
  });

  it("installs either app alone", async () => {
    const operatorOnly = await template("--set", "vnode.enabled=false");
    expect(operatorOnly.some((o) => o.metadata.name.startsWith("nebula-vnode"))).toBe(false);
    expect(find(operatorOnly, "Deployment", "nebula-operator")).toBeDefined();
    const vnodeOnly = await template("-f", TEST_VALUES, "--set", "operator.enabled=false");
    expect(vnodeOnly.some((o) => o.metadata.name.startsWith("nebula-operator"))).toBe(false);
    expect(find(vnodeOnly, "Deployment", "nebula-vnode")).toBeDefined();
  });

  it("grants no ConfigMap or Secret read outside its namespace with podDelivery user-data (the vnode reads none)", async () => {
    const readsOf = (objects: K8sObject[]) =>
      (find(objects, "ClusterRole", "nebula-vnode")?.rules ?? []).filter((r) =>
        r.resources?.some((x) => x === "secrets" || x === "configmaps"),
      );
    expect(readsOf(await template("-f", TEST_VALUES))).toEqual([
      { apiGroups: [""], resources: ["configmaps", "secrets"], verbs: ["get"] },
    ]);
    expect(
      readsOf(
        await template("-f", TEST_VALUES, "--set", "vnode.config.provider.podDelivery=user-data"),
      ),
    ).toEqual([]);
  });

  it("grants pods/eviction only with capacity.onRebalance evict, the rule of deploy/vnode/rbac-rebalance-eviction.yaml", async () => {
    const evictions = (objects: K8sObject[]) =>
      (find(objects, "ClusterRole", "nebula-vnode")?.rules ?? []).filter((r) =>
        r.resources?.includes("pods/eviction"),
      );
    expect(evictions(await template("-f", TEST_VALUES))).toEqual([]);
    const optional = find(
      manifest("vnode/rbac-rebalance-eviction.yaml"),
      "ClusterRole",
      "nebula-vnode-rebalance-eviction",
    );
    expect(optional?.rules).toHaveLength(1);
    expect(
      evictions(
        await template(
          "-f",
          TEST_VALUES,
          "--set",
          "vnode.config.provider.capacity.onRebalance=evict",
        ),
      ),
    ).toEqual(optional?.rules);
  });

  it("follows the release's name and namespace everywhere (another release in another namespace)", async () => {
    const out = await helm([
      "template",
      "acme",
      CHART,
      "--namespace",
      "platform",
      "-f",
      TEST_VALUES,
    ]);
    expect(out.code).toBe(0);
    const objects = parseObjects(out.stdout);
    const clusterScoped = new Set([
      "ClusterRole",
      "ClusterRoleBinding",
      "ValidatingAdmissionPolicy",
      "ValidatingAdmissionPolicyBinding",
    ]);
    for (const o of objects) {
      expect(o.metadata.name, idOf(o)).toMatch(/^acme-nebula-(vnode|operator)/);
      // Only the Node Lease's Role and RoleBinding live elsewhere, where Node Leases are, and
      // the binding that reads the client CA, where kube-apiserver publishes it.
      const expected = clusterScoped.has(o.kind)
        ? undefined
        : o.metadata.name.endsWith("-node-lease")
          ? "kube-node-lease"
          : o.metadata.name.endsWith("-authentication-reader")
            ? "kube-system"
            : "platform";
      expect(o.metadata.namespace, idOf(o)).toBe(expected);
      const subjects = (o as { subjects?: Array<{ name: string; namespace: string }> }).subjects;
      for (const subject of subjects ?? []) {
        expect(subject.namespace, idOf(o)).toBe("platform");
        expect(subject.name, idOf(o)).toMatch(/^acme-nebula-(vnode|operator)$/);
      }
    }
    for (const app of ["vnode", "operator"]) {
      const pod = deploymentOf(objects, `acme-nebula-${app}`)?.spec?.template.spec;
      expect(pod?.serviceAccountName).toBe(`acme-nebula-${app}`);
      expect(pod?.containers[0]?.args).toContain("--leader-election-namespace=platform");
    }
    const vnode = deploymentOf(objects, "acme-nebula-vnode");
    expect(vnode?.spec?.template.spec?.containers[0]?.args).toContain("--namespace=platform");
    // The admission policies fence the release's ServiceAccount; its leader-election Lease is in
    // the release's namespace.
    for (const suffix of ["pods", "node", "tokens"]) {
      const policy = find(objects, "ValidatingAdmissionPolicy", `acme-nebula-vnode-${suffix}`)
        ?.spec as { matchConditions: Array<{ expression: string }> } | undefined;
      expect(policy?.matchConditions[0]?.expression).toBe(
        "request.userInfo.username == 'system:serviceaccount:platform:acme-nebula-vnode'",
      );
      const binding = find(
        objects,
        "ValidatingAdmissionPolicyBinding",
        `acme-nebula-vnode-${suffix}`,
      );
      expect((binding?.spec as { policyName?: string } | undefined)?.policyName).toBe(
        `acme-nebula-vnode-${suffix}`,
      );
    }
    const nodePolicy = find(objects, "ValidatingAdmissionPolicy", "acme-nebula-vnode-node")?.spec as
      | { variables: Array<{ name: string; expression: string }> }
      | undefined;
    expect(nodePolicy?.variables.find((v) => v.name === "leaderNamespace")?.expression).toBe(
      "'platform'",
    );
    expect(vnode?.spec?.template.spec?.volumes?.[0]?.configMap?.name).toBe("acme-nebula-vnode");
  });

  it("renders one virtual node per entry of vnode.nodes: the objects, RBAC and admission policies of a single vnode of that name, pinned to its own names", async () => {
    const objects = await template("-f", TEST_VALUES, "-f", POOL_VALUES);
    expect(
      objects
        .filter((o) => o.kind === "Deployment")
        .map((o) => o.metadata.name)
        .sort(),
    ).toEqual(["nebula-operator", ...POOL.map((n) => `nebula-vnode-${n}`)]);
    const rbacKinds = new Set(["ClusterRole", "Role"]);
    const admissionKinds = new Set([
      "ValidatingAdmissionPolicy",
      "ValidatingAdmissionPolicyBinding",
    ]);
    const configs: Record<string, { node: Record<string, unknown>; provider: object }> = {};
    for (const node of POOL) {
      const name = `nebula-vnode-${node}`;
      const own = objects.filter(
        (o) => o.metadata.name === name || o.metadata.name.startsWith(`${name}-`),
      );
      // A single vnode of that name, the chart's other form.
      const single = (await template("-f", TEST_VALUES, "--set", `vnode.nodeName=${node}`)).filter(
        (o) => o.metadata.name.startsWith("nebula-vnode"),
      );
      const asSingle = (o: K8sObject) => idOf(o).replace(name, "nebula-vnode");
      expect(own.map(asSingle).sort(), node).toEqual(single.map(idOf).sort());
      for (const o of own) {
        expect(o.metadata.labels?.["nebula.dev/node"], idOf(o)).toBe(node);
        const twin = single.find((x) => idOf(x) === asSingle(o));
        // RBAC rule for rule, names included: its Node, its Node's Lease, its leader Lease.
        if (rbacKinds.has(o.kind)) expect(o.rules, idOf(o)).toEqual(twin?.rules);
        // The admission policies: the same, for its own ServiceAccount and Node.
        if (admissionKinds.has(o.kind))
          expect(
            JSON.parse(JSON.stringify(o.spec).replaceAll(name, "nebula-vnode")),
            idOf(o),
          ).toEqual(twin?.spec);
      }
      const policy = find(objects, "ValidatingAdmissionPolicy", `${name}-node`)?.spec as
        | {
            matchConditions: Array<{ expression: string }>;
            variables: Array<{ name: string; expression: string }>;
          }
        | undefined;
      expect(policy?.matchConditions[0]?.expression).toBe(
        `request.userInfo.username == 'system:serviceaccount:${NAMESPACE}:${name}'`,
      );
      expect(policy?.variables.find((v) => v.name === "node")?.expression).toBe(`'${node}'`);
      const pod = deploymentOf(objects, name)?.spec?.template.spec;
      expect(pod?.serviceAccountName).toBe(name);
      expect(pod?.containers[0]?.args).toContain(`--node-name=${node}`);
      expect(pod?.volumes?.[0]?.configMap?.name).toBe(name);
      // Its own Pods only: the selector and the anti-affinity name the Node.
      expect(deploymentOf(objects, name)?.spec?.selector.matchLabels).toEqual({
        "app.kubernetes.io/name": "nebula-vnode",
        "app.kubernetes.io/instance": RELEASE,
        "nebula.dev/node": node,
      });
      configs[node] = JSON.parse(find(objects, "ConfigMap", name)?.data?.["config.json"] ?? "");
    }
    expect(deploymentOf(objects, "nebula-vnode-pool-gpu")?.spec?.replicas).toBe(1);
    expect(deploymentOf(objects, "nebula-vnode-pool-a")?.spec?.replicas).toBe(2);
    // vnode.config, then the entry's: labels, taints, drain and the provider override.
    expect(configs["pool-a"]).toMatchObject({
      node: { capacity: { cpu: "1000", memory: "4Ti", pods: "1000" } },
      provider: {
        clusterName: "prod",
        instanceTypes: { default: "m7i.large" },
        warmPool: [{ name: "small", instanceType: "m7i.large", size: 0, images: ["busybox"] }],
      },
    });
    expect(configs["pool-a"]?.node).not.toHaveProperty("drain");
    expect(configs["pool-gpu"]?.provider).not.toHaveProperty("warmPool");
    expect(configs["pool-gpu"]).toMatchObject({
      node: {
        capacity: { cpu: "1000" },
        labels: { "nebula.dev/pool": "gpu" },
        taints: [{ key: "nebula.dev/pool", value: "gpu", effect: "NoSchedule" }],
      },
      provider: { clusterName: "prod", instanceTypes: { default: "g5.xlarge" } },
    });
    expect(configs["pool-old"]?.node).toMatchObject({ drain: true });
    // The single vnode is not rendered beside the list.
    expect(find(objects, "Deployment", "nebula-vnode")).toBeUndefined();
  });

  it("deploy/vnodes/nebula-b, a second virtual node in plain manifests, is what the chart renders for vnode.nodes [nebula-b]: the same objects, RBAC rule for rule, admission policies, pinned to its names", async () => {
    const chart = (
      await template("-f", TEST_VALUES, "--set", "vnode.nodes[0].name=nebula-b")
    ).filter((o) => o.metadata.name.startsWith("nebula-vnode"));
    const { stdout } = await run(kubectlPath(), ["kustomize", join(DEPLOY, "vnodes", "nebula-b")], {
      maxBuffer: 64 * 1024 * 1024,
    });
    const plain = parseObjects(stdout);
    // The chart names them nebula-vnode-nebula-b[-<part>], kustomize's suffix nebula-vnode[-<part>]-nebula-b.
    const part = (o: K8sObject) =>
      `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name.replace("nebula-vnode-nebula-b", "nebula-vnode").replace(/-nebula-b$/, "")}`;
    const normalized = (value: unknown) =>
      JSON.parse(
        JSON.stringify(value ?? null)
          .replaceAll("nebula-vnode-nebula-b", "nebula-vnode")
          .replace(/(nebula-vnode-[a-z-]+?)-nebula-b\b/g, "$1")
          // The policies' messages name the ServiceAccount (the chart's) or not (the base's).
          .replace(/"message":"[^"]*"/g, '"message":""'),
      );
    expect(plain.map(part).sort()).toEqual(chart.map(part).sort());
    for (const o of plain) {
      const twin = chart.find((x) => part(x) === part(o));
      expect(o.metadata.labels?.["nebula.dev/node"], idOf(o)).toBe("nebula-b");
      if (o.rules) expect(o.rules, idOf(o)).toEqual(twin?.rules);
      if (o.kind.startsWith("ValidatingAdmissionPolicy") || o.kind.endsWith("Binding"))
        expect(normalized({ ...o, metadata: {} }), idOf(o)).toEqual(
          normalized({ ...twin, metadata: {} }),
        );
    }
    // Pinned to its own names: the ServiceAccount the policies match, the Node, the leader Lease.
    const policy = (list: K8sObject[]) =>
      list.find((o) => o.kind === "ValidatingAdmissionPolicy")?.spec as
        | {
            matchConditions: Array<{ expression: string }>;
            variables: Array<{ expression: string }>;
          }
        | undefined;
    expect(policy(plain)?.matchConditions[0]?.expression).toBe(
      "request.userInfo.username == 'system:serviceaccount:nebula-system:nebula-vnode-nebula-b'",
    );
    expect(policy(plain)?.variables[0]?.expression).toBe("'nebula-b'");
    const named = plain.flatMap((o) => o.rules ?? []).flatMap((r) => r.resourceNames ?? []);
    expect(named.sort()).toEqual(["nebula-b", "nebula-b", "nebula-b", "nebula-vnode-nebula-b"]);
    const pod = deploymentOf(plain, "nebula-vnode-nebula-b")?.spec?.template.spec;
    expect(pod?.containers[0]?.args).toContain("--node-name=nebula-b");
    expect(pod?.serviceAccountName).toBe("nebula-vnode-nebula-b");
    expect(pod?.volumes?.[0]?.configMap?.name).toBe("nebula-vnode-nebula-b");
    expect(deploymentOf(plain, "nebula-vnode-nebula-b")?.spec?.selector.matchLabels).toEqual({
      "app.kubernetes.io/name": "nebula-vnode",
      "nebula.dev/node": "nebula-b",
    });
  });

  it("grants exactly the RBAC and the admission policy of the plain manifests, and renders the objects `kubectl apply -k deploy/` does", async () => {
    const objects = await template("-f", TEST_VALUES);
    // The kustomization (kubectl's built-in kustomize): the plain manifests with the vnode's RBAC
    // pinned to its Node's and Leases' names.
    const { stdout } = await run(kubectlPath(), ["kustomize", DEPLOY], {
      maxBuffer: 64 * 1024 * 1024,
    });
    const kustomized = parseObjects(stdout);
    const rbacKinds = new Set(["ClusterRole", "Role"]);
    const rules = (list: K8sObject[]) =>
      Object.fromEntries(list.filter((o) => rbacKinds.has(o.kind)).map((o) => [idOf(o), o.rules]));
    expect(rules(objects)).toEqual(rules(kustomized));
    const admissionKinds = new Set([
      "ValidatingAdmissionPolicy",
      "ValidatingAdmissionPolicyBinding",
    ]);
    const admission = (list: K8sObject[]) =>
      Object.fromEntries(
        list.filter((o) => admissionKinds.has(o.kind)).map((o) => [idOf(o), o.spec]),
      );
    expect(Object.keys(admission(objects)).sort()).toEqual([
      "ValidatingAdmissionPolicy//nebula-vnode-node",
      "ValidatingAdmissionPolicy//nebula-vnode-pods",
      "ValidatingAdmissionPolicy//nebula-vnode-tokens",
      "ValidatingAdmissionPolicyBinding//nebula-vnode-node",
      "ValidatingAdmissionPolicyBinding//nebula-vnode-pods",
      "ValidatingAdmissionPolicyBinding//nebula-vnode-tokens",
    ]);
    expect(admission(objects)).toEqual(admission(kustomized));
    // The names RBAC and the policy pin are the Node the Deployment runs (--node-name) and its
    // leader-election Lease, in the chart and in the plain manifests alike.
    for (const list of [objects, kustomized]) {
      const args = deploymentOf(list, "nebula-vnode")?.spec?.template.spec?.containers[0]?.args;
      const node = args?.find((a) => a.startsWith("--node-name="))?.slice("--node-name=".length);
      expect(node).toBe("nebula");
      const named = list
        .filter((o) => rbacKinds.has(o.kind) && o.metadata.name.startsWith("nebula-vnode"))
        .flatMap((o) => o.rules ?? [])
        .flatMap((r) => r.resourceNames ?? [])
        .sort();
      expect(named).toEqual([node, node, node, `nebula-vnode-${node}`].sort());
      for (const policyName of ["nebula-vnode-pods", "nebula-vnode-node"]) {
        const policy = find(list, "ValidatingAdmissionPolicy", policyName)?.spec as
          | { variables: Array<{ name: string; expression: string }> }
          | undefined;
        expect(policy?.variables.find((v) => v.name === "node")?.expression).toBe(`'${node}'`);
      }
    }
    // vnode/rbac.yaml alone (what the apps' end-to-end suites apply, several Nodes under one
    // ServiceAccount) is the same RBAC without the names: the kustomization only adds them.
    const unpinned = (list: K8sObject[]) =>
      list.map((o) =>
        o.rules ? { ...o, rules: o.rules.map(({ resourceNames: _names, ...rule }) => rule) } : o,
      );
    const vnodeRbac = (list: K8sObject[]) =>
      rules(list.filter((o) => o.metadata.name.startsWith("nebula-vnode")));
    expect(vnodeRbac(unpinned(kustomized))).toEqual(vnodeRbac(manifest("vnode/rbac.yaml")));
    // The kustomization names the same objects, plus the Namespace that
    // `helm install --create-namespace` makes.
    expect(kustomized.map(idOf).sort()).toEqual(
      [...objects.map(idOf), `Namespace//${NAMESPACE}`].sort(),
    );
  });
});

describe("helm install into the control plane", () => {
  let installed: { vnode: V1Deployment; operator: V1Deployment };

  it("installs: CRDs established, both Deployments' Pods created as the chart's ServiceAccounts", async () => {
    const values = { vnode: { nodeName: NODE, config: { provider: await motoProvider("chart") } } };
    writeFileSync(join(work, "values.json"), JSON.stringify(values));
    const out = await helm([
      "install",
      RELEASE,
      CHART,
      "--namespace",
      NAMESPACE,
      "--create-namespace",
      "--kubeconfig",
      adminKubeconfig,
      "-f",
      TEST_VALUES,
      "-f",
      join(work, "values.json"),
    ]);
    expect(out.stderr).toBe("");
    expect(out.code).toBe(0);
    expect(out.stdout).toContain(`kubectl get node ${NODE}`);

    const crds = await run(kubectlPath(), [
      "--kubeconfig",
      adminKubeconfig,
      "wait",
      "--for=condition=Established",
      "--timeout=60s",
      "crd/workloads.compute.nebula.dev",
      "crd/workloaddeployments.compute.nebula.dev",
      "crd/instances.compute.nebula.dev",
    ]);
    expect(crds.stdout.split("\n").filter((l) => l.includes("condition met"))).toHaveLength(3);

    const apps = admin.makeApiClient(AppsV1Api);
    installed = {
      vnode: await apps.readNamespacedDeployment({ name: "nebula-vnode", namespace: NAMESPACE }),
      operator: await apps.readNamespacedDeployment({
        name: "nebula-operator",
        namespace: NAMESPACE,
      }),
    };
    // The controller manager makes each Deployment's two Pods.
    const core = admin.makeApiClient(CoreV1Api);
    const pods = await until("the chart's four Pods", async () => {
      const list = (await core.listNamespacedPod({ namespace: NAMESPACE })).items;
      return list.length === 4 ? list : undefined;
    });
    expect(pods.map((p) => p.metadata?.labels?.["app.kubernetes.io/name"]).sort()).toEqual([
      "nebula-operator",
      "nebula-operator",
      "nebula-vnode",
      "nebula-vnode",
    ]);
    expect(pods.every((p) => p.spec?.serviceAccountName?.startsWith("nebula-"))).toBe(true);
  });

  it("runs each app exactly as its Deployment says: both Ready, the vnode's Node registers, the operator leads, nothing forbidden", async () => {
    const core = admin.makeApiClient(CoreV1Api);
    const configMap = await core.readNamespacedConfigMap({
      name: "nebula-vnode",
      namespace: NAMESPACE,
    });
    const started = [
      await runAsDeployment("vnode", installed.vnode, configMap.data?.["config.json"] ?? ""),
      await runAsDeployment("operator", installed.operator, ""),
    ];
    for (const s of started) await ready(s);
    // They are the images, run as the Deployments say: user, read-only root, no capabilities.
    for (const s of started) {
      const { stdout } = await run("podman", [
        ...PODMAN_FLAGS,
        "inspect",
        "--format",
        "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{len .EffectiveCaps}} {{.ImageName}}",
        s.container,
      ]);
      expect(stdout.trim(), s.app).toMatch(
        /^65532:65532 true 0 localhost\/nebula-test\/nebula-chart-(vnode|operator):test$/,
      );
    }
    const node = await until(`Node ${NODE} Ready`, async () => {
      const n = await core.readNode({ name: NODE });
      return n.status?.conditions?.find((c) => c.type === "Ready")?.status === "True"
        ? n
        : undefined;
    });
    expect(node.spec?.taints?.map((t) => t.key)).toContain("virtual-kubelet.io/provider");
    const lease = await until("the operator's leader Lease", async () => {
      const l = await admin
        .makeApiClient(CoordinationV1Api)
        .readNamespacedLease({ name: "nebula-operator", namespace: NAMESPACE });
      return l.spec?.holderIdentity ? l : undefined;
    });
    expect(lease.spec?.holderIdentity).toBe("nebula-operator-chart-0");
    // None of the chart's Pods lands on the virtual Node the vnode registered (its taint, and the
    // chart's node affinity checked in the template test above).
    const pods = (await core.listNamespacedPod({ namespace: NAMESPACE })).items;
    expect(pods.filter((p) => p.spec?.nodeName === NODE)).toEqual([]);
    // Let both run a few seconds more, then read every log line for a refused request.
    await new Promise((r) => setTimeout(r, 5_000));
    for (const s of started)
      expect(
        s.lines.filter((l) => /forbidden/i.test(l)),
        s.app,
      ).toEqual([]);
  });

  it("uninstalls what it installed and keeps the CRDs", async () => {
    for (const child of children) child.kill("SIGTERM");
    expect(await uninstall(RELEASE, NAMESPACE)).toBe("");
    const crds = await run(kubectlPath(), [
      "--kubeconfig",
      adminKubeconfig,
      "get",
      "crd",
      "-o",
      "name",
    ]);
    expect(crds.stdout).toContain("workloads.compute.nebula.dev");
  });
});

describe("helm install of three virtual nodes (vnode.nodes)", () => {
  const release = "pool";
  const namespace = "pool-system";
  const started: Started[] = [];

  it("installs one Deployment per virtual node; each runs as its Deployment says, registers its own Node with its labels and taints, the draining one cordoned and Drained, nothing forbidden", async () => {
    const provider = { ...(await motoProvider("pool")), pollIntervalSeconds: 2 };
    writeFileSync(join(work, "pool.json"), JSON.stringify({ vnode: { config: { provider } } }));
    const out = await helm([
      "install",
      release,
      CHART,
      "--namespace",
      namespace,
      "--create-namespace",
      "--kubeconfig",
      adminKubeconfig,
      "-f",
      TEST_VALUES,
      "-f",
      POOL_VALUES,
      "-f",
      join(work, "pool.json"),
      "--set",
      "operator.enabled=false",
      // The first release installed them; a second one in the same cluster uses them.
      "--skip-crds",
    ]);
    // Nothing but client-go's note that a watch it no longer needed ended.
    expect(out.stderr.split("\n").filter((l) => l !== "" && !l.includes("watch ended"))).toEqual(
      [],
    );
    expect(out.code).toBe(0);
    for (const node of POOL) expect(out.stdout).toContain(`kubectl get node ${node}`);
    const apps = admin.makeApiClient(AppsV1Api);
    const core = admin.makeApiClient(CoreV1Api);
    // 2 + 1 + 2 replicas, each Pod as its own node's ServiceAccount.
    const pods = await until("the five vnode Pods", async () => {
      const list = (await core.listNamespacedPod({ namespace })).items;
      return list.length === 5 ? list : undefined;
    });
    expect(
      pods
        .map((p) => `${p.metadata?.labels?.["nebula.dev/node"]}:${p.spec?.serviceAccountName}`)
        .sort(),
    ).toEqual(
      ["pool-a", "pool-a", "pool-gpu", "pool-old", "pool-old"].map(
        (n) => `${n}:pool-nebula-vnode-${n}`,
      ),
    );
    for (const node of POOL) {
      const name = `pool-nebula-vnode-${node}`;
      const deployment = await apps.readNamespacedDeployment({ name, namespace });
      const configMap = await core.readNamespacedConfigMap({ name, namespace });
      started.push(
        await runAsDeployment("vnode", deployment, configMap.data?.["config.json"] ?? ""),
      );
    }
    for (const s of started) await ready(s);
    const nodes = await until("three Nodes Ready", async () => {
      const list = await Promise.all(POOL.map((name) => core.readNode({ name })));
      return list.every(
        (n) => n.status?.conditions?.find((c) => c.type === "Ready")?.status === "True",
      )
        ? list
        : undefined;
    });
    const [a, gpu] = nodes;
    expect(a?.spec?.unschedulable).toBeUndefined();
    expect(a?.status?.conditions?.map((c) => c.type)).not.toContain("Drained");
    expect(gpu?.metadata?.labels?.["nebula.dev/pool"]).toBe("gpu");
    expect(gpu?.spec?.taints).toContainEqual({
      key: "nebula.dev/pool",
      value: "gpu",
      effect: "NoSchedule",
    });
    // The draining one: cordoned, and Drained once its first poll shows no instance left.
    const old = await until("pool-old Drained", async () => {
      const n = await core.readNode({ name: "pool-old" });
      return n.status?.conditions?.find((c) => c.type === "Drained")?.status === "True"
        ? n
        : undefined;
    });
    expect(old.spec?.unschedulable).toBe(true);
    expect(old.metadata?.annotations?.["nebula.dev/drain-cordoned"]).toBe("true");
    await until("pool-old's vnode saying it is drained", async () =>
      started[2]?.lines.some((l) => l.includes("node pool-old drained")) ? true : undefined,
    );
    // A Pod that asks for the draining Node is not scheduled there; one that asks for the gpu pool
    // (its label and toleration) is bound to the pool's Node.
    const tolerations = [
      { key: "virtual-kubelet.io/provider", operator: "Exists", effect: "NoSchedule" },
      { key: "nebula.dev/pool", operator: "Exists", effect: "NoSchedule" },
    ];
    const ask = (name: string, nodeSelector: Record<string, string>) =>
      core.createNamespacedPod({
        namespace: "default",
        body: {
          metadata: { name },
          spec: {
            nodeSelector,
            tolerations,
            terminationGracePeriodSeconds: 0,
            containers: [{ name: "app", image: "busybox" }],
          },
        },
      });
    await ask("pool-to-old", { "kubernetes.io/hostname": "pool-old" });
    await ask("pool-to-gpu", { "nebula.dev/pool": "gpu" });
    const refused = await until("pool-to-old unschedulable", async () => {
      const p = await core.readNamespacedPod({ name: "pool-to-old", namespace: "default" });
      const scheduled = p.status?.conditions?.find((c) => c.type === "PodScheduled");
      return scheduled?.status === "False" ? scheduled : undefined;
    });
    expect(refused.message).toMatch(/unschedulable/);
    const bound = await until("pool-to-gpu bound", async () => {
      const p = await core.readNamespacedPod({ name: "pool-to-gpu", namespace: "default" });
      return p.spec?.nodeName ? p : undefined;
    });
    expect(bound.spec?.nodeName).toBe("pool-gpu");
    // The pool's vnode launches it: its instance, tagged with the pool's Node, of the pool's type.
    const instanceId = await until("pool-to-gpu launched", async () => {
      const p = await core.readNamespacedPod({ name: "pool-to-gpu", namespace: "default" });
      return p.metadata?.annotations?.["nebula.dev/instance-id"];
    });
    const ec2 = useTestPeers().moto.ec2();
    const described = async () =>
      (await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] })))
        .Reservations?.[0]?.Instances?.[0];
    const launched = await described();
    expect(launched?.InstanceType).toBe("g5.xlarge");
    expect(launched?.Tags).toContainEqual({ Key: "nebula:node", Value: "pool-gpu" });
    for (const name of ["pool-to-old", "pool-to-gpu"])
      await core.deleteNamespacedPod({ name, namespace: "default" });
    // The gpu node's vnode tears its Pod down (its instance terminated) and lets it go.
    await until(
      "both Pods gone",
      async () => {
        const left = (await core.listNamespacedPod({ namespace: "default" })).items.filter((p) =>
          p.metadata?.name?.startsWith("pool-to-"),
        );
        return left.length === 0 ? true : undefined;
      },
      150_000,
    );
    expect((await described())?.State?.Name).toBe("terminated");
    ec2.destroy();
    for (const s of started)
      expect(
        s.lines.filter((l) => /forbidden/i.test(l)),
        s.app,
      ).toEqual([]);
  });

  it("scales down after the drain and up: the removed node's objects go, the others' Deployments are not touched (no vnode restarts, no Pod moves)", async () => {
    const apps = admin.makeApiClient(AppsV1Api);
    const core = admin.makeApiClient(CoreV1Api);
    const kept = ["pool-a", "pool-gpu"].map((n) => `pool-nebula-vnode-${n}`);
    const before = await Promise.all(
      kept.map((name) => apps.readNamespacedDeployment({ name, namespace })),
    );
    // pool-old is drained (the test above): its Deployment goes, and its vnode with it.
    started[2]?.child.kill("SIGTERM");
    const values = parse(readFileSync(POOL_VALUES, "utf8")) as {
      vnode: { nodes: Array<{ name: string }> };
    };
    values.vnode.nodes = [
      ...values.vnode.nodes.filter((n) => n.name !== "pool-old"),
      { name: "pool-new" },
    ];
    writeFileSync(join(work, "pool-scaled.json"), JSON.stringify(values));
    const out = await helm([
      "upgrade",
      release,
      CHART,
      "--namespace",
      namespace,
      "--kubeconfig",
      adminKubeconfig,
      "-f",
      TEST_VALUES,
      "-f",
      join(work, "pool-scaled.json"),
      "-f",
      join(work, "pool.json"),
      "--set",
      "operator.enabled=false",
    ]);
    expect(out.code, out.stderr).toBe(0);
    const left = await run(kubectlPath(), [
      "--kubeconfig",
      adminKubeconfig,
      "get",
      "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings,deployments,configmaps,serviceaccounts,roles,rolebindings",
      "-A",
      "-l",
      "nebula.dev/node=pool-old",
      "-o",
      "name",
    ]);
    expect(left.stdout.trim()).toBe("");
    await apps.readNamespacedDeployment({ name: "pool-nebula-vnode-pool-new", namespace });
    const after = await Promise.all(
      kept.map((name) => apps.readNamespacedDeployment({ name, namespace })),
    );
    for (const [i, deployment] of after.entries()) {
      expect(deployment.metadata?.generation, kept[i]).toBe(before[i]?.metadata?.generation);
      expect(deployment.spec?.template, kept[i]).toEqual(before[i]?.spec?.template);
    }
    // What the vnode made itself stays until removed by hand (docs/operating.md).
    await core.readNode({ name: "pool-old" });
    await core.deleteNode({ name: "pool-old" });
    await admin
      .makeApiClient(CoordinationV1Api)
      .deleteNamespacedLease({ name: "nebula-vnode-pool-old", namespace });
  });

  it("uninstalls what it installed", async () => {
    for (const child of children) child.kill("SIGTERM");
    expect(await uninstall(release, namespace)).toBe("");
    // The Nodes are the vnodes' own, not the chart's: removed by hand, as docs/operating.md says.
    const core = admin.makeApiClient(CoreV1Api);
    for (const name of POOL)
      await core.deleteNode({ name }).catch((error) => {
        if ((error as { code?: number }).code !== 404) throw error;
      });
  });
});
