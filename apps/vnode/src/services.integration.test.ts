/**
 * ClusterIP Services from a Nebula Pod (issue #34), end to end: `provider.serviceProxy` has every
 * host run the real kube-proxy (built with the control plane) in the Pod sandbox's network
 * namespace, reading the cluster with its own token (a `system:node-proxier` ServiceAccount's,
 * bound to the virtual node's Node, delivered in the Pod's token parameter). A Pod resolves a
 * Service's name through CoreDNS and reaches its cluster IP, whose endpoint is an HTTP server of
 * this test, and a Service whose endpoint is another Nebula Pod (Ready at its instance's address,
 * which this machine takes on while the test runs, as the VPC would deliver it); its rules are in
 * the Pod's namespace and not the machine's; the proxy's credential cannot read Secrets; nothing
 * of it outlives the Pods.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import { GetParameterCommand } from "@aws-sdk/client-ssm";
import {
  AuthenticationV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  DiscoveryV1Api,
} from "@kubernetes/client-node";
import {
  type ClusterDns,
  type InstanceHosts,
  kubeProxyPath,
  startClusterDns,
} from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  endpointSliceNames,
  hostAddress,
  kubectlImage,
  motoSsm,
  nodeInstances,
  podEnded,
  podReadyWithIp,
  readPod,
  startVnode,
  startWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
  vnodeConfig,
} from "./testing/e2e.js";

const run = promisify(execFile);
const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
const ssm = motoSsm(moto);
const NODE = "vnode-services";
const NS = "vnode-services";
const PROXY_ACCOUNT = "system:serviceaccount:nebula-system:nebula-service-proxy";

let hosts: InstanceHosts;
let vnode: VnodeProcess;
let dns: ClusterDns;
let echo: Server;
const seen: string[] = [];

beforeAll(async () => {
  // The Service's endpoint: an HTTP server of this test on the machine's address.
  echo = createServer((request, response) => {
    seen.push(request.socket.remoteAddress ?? "");
    response.end(`hello from the test, you are ${request.socket.remoteAddress}\n`);
  });
  await new Promise<void>((resolve) => echo.listen(0, "0.0.0.0", resolve));
  dns = await startClusterDns({ controlPlane, address: hostAddress() });
  const world = await startWorld({
    admin,
    ec2,
    moto,
    cluster: NODE,
    namespace: NS,
    manifests: ["service-proxy.yaml"],
  });
  hosts = world.hosts;
  const config = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: hosts.ec2Endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "20" },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  }) as { provider: Record<string, unknown> };
  config.provider.podDelivery = "parameters";
  config.provider.dns = { clusterDNS: [dns.address], clusterDomain: "cluster.local" };
  // The API server as the hosts (and their kube-proxy) reach it: this machine's address.
  config.provider.kubernetesService = {
    host: hostAddress(),
    port: Number(new URL(admin.getCurrentCluster()?.server ?? "").port),
  };
  config.provider.serviceProxy = { binary: kubeProxyPath() };
  vnode = await startVnode({
    nodeName: NODE,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config,
  });
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  await dns?.stop();
  await new Promise((resolve) => echo?.close(resolve));
  ec2.destroy();
  ssm.destroy();
  expect(code).toBe(0);
});

/** The kube-proxy processes running on this machine (the simulated hosts'), by pid. */
async function proxies(): Promise<string[]> {
  const { stdout } = await run("pgrep", ["-f", `${kubeProxyPath()} --kubeconfig=`]).catch(() => ({
    stdout: "",
  }));
  return stdout.split("\n").filter((line) => line !== "");
}

describe("ClusterIP Services for Nebula Pods (nebula-vnode, kube-apiserver, CoreDNS, kube-proxy, moto, the host simulator)", () => {
  it("a Pod reaches a Service's cluster IP by its name and by its environment; the rules are in its own namespace; the proxy's token is bound to the Node and reads no Secret", async () => {
    const port = (echo.address() as AddressInfo).port;
    // A Service without a selector and its EndpointSlice, as for any endpoint outside the Pods.
    const service = await core.createNamespacedService({
      namespace: NS,
      body: { metadata: { name: "echo" }, spec: { ports: [{ port: 80, targetPort: port }] } },
    });
    const clusterIp = service.spec?.clusterIP ?? "";
    expect(clusterIp).toMatch(/^10\.0\.0\.\d+$/);
    await admin.makeApiClient(DiscoveryV1Api).createNamespacedEndpointSlice({
      namespace: NS,
      body: {
        metadata: { name: "echo-1", labels: { "kubernetes.io/service-name": "echo" } },
        addressType: "IPv4",
        endpoints: [{ addresses: [hostAddress()], conditions: { ready: true } }],
        ports: [{ port, protocol: "TCP" }],
      },
    });
    // The real kubectl as a plain HTTP client (busybox-static's wget crashes in its resolver).
    const image = await kubectlImage();
    const script = [
      'get() { kubectl get --raw /hello --server "$1" --request-timeout=10s 2>&1; }',
      "byname=$(get http://echo); a=$?",
      'byenv=$(get "http://$ECHO_SERVICE_HOST:$ECHO_SERVICE_PORT"); b=$?',
      'printf "name=%s %s\\nenv=%s %s\\n" "$a" "$byname" "$b" "$byenv" >/dev/termination-log',
    ].join("\n");
    const created = await core.createNamespacedPod({
      namespace: NS,
      body: barePod(
        "client",
        NODE,
        {
          image,
          imagePullPolicy: "IfNotPresent",
          command: ["sh", "-c", script],
          env: [{ name: "HOME", value: "/tmp" }],
        },
        { automountServiceAccountToken: false },
      ),
    });
    const uid = created.metadata?.uid ?? "";

    // While it runs: its host's token parameter carries the proxy's token, bound to the Node.
    const parameter = await until(
      "the Pod's token parameter",
      async () => {
        try {
          const got = await ssm.send(
            new GetParameterCommand({
              Name: `/nebula/${NODE}/pods/${uid}/t`,
              WithDecryption: true,
            }),
          );
          return got.Parameter?.Value;
        } catch {
          return undefined;
        }
      },
      120_000,
      500,
    );
    // A Pod that projects no token gets none of its own: the proxy's alone.
    expect(parameter).toMatch(/^p:[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    const review = await admin.makeApiClient(AuthenticationV1Api).createTokenReview({
      body: { spec: { token: parameter.slice(2) } },
    });
    expect(review.status?.user?.username).toBe(PROXY_ACCOUNT);
    expect(review.status?.user?.extra?.["authentication.kubernetes.io/node-name"]).toEqual([NODE]);

    const ended = await podEnded(core, NS, "client");
    // The supervisor waited for the proxy's first sync before the container started.
    const [instance] = (await nodeInstances(ec2, NODE)).filter((i) =>
      i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid),
    );
    const guest = hosts.guest(instance?.InstanceId ?? "");
    const journal = guest
      ? readFileSync(guest.unitLogPath("nebula-supervisor.service"), "utf8")
      : "";
    expect(journal, journal).toMatch(
      /nebula-supervisor: service proxy \(kube-proxy, pid \d+\) synced: cluster IPs route from the Pod's network\n/,
    );
    const started = journal.indexOf("nebula-supervisor: container app: started");
    expect(started).toBeGreaterThan(journal.indexOf("synced: cluster IPs route"));
    const terminated = ended.status?.containerStatuses?.[0]?.state?.terminated;
    const report = terminated?.message ?? "";
    // Both reached the test's server through the cluster IP (its answer names the Pod's address).
    expect(report, report).toMatch(/^name=0 hello from the test, you are \S+\n/);
    expect(report, report).toMatch(/\nenv=0 hello from the test, you are \S+\n$/);
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expect(terminated?.exitCode).toBe(0);

    // kube-proxy's chains are in the Pod's namespace only: this machine's nat table has none.
    const host = await run("iptables", ["-w", "5", "-t", "nat", "-S", "KUBE-SERVICES"]).then(
      () => "present",
      () => "absent",
    );
    expect(host).toBe("absent");

    // The proxy's credential: Services and EndpointSlices, never a Secret.
    const authz = admin.makeApiClient(AuthorizationV1Api);
    const can = async (verb: string, resource: string, group = "") =>
      (
        await authz.createSubjectAccessReview({
          body: {
            spec: {
              user: PROXY_ACCOUNT,
              groups: ["system:serviceaccounts", "system:serviceaccounts:nebula-system"],
              resourceAttributes: { verb, resource, group, namespace: NS },
            },
          },
        })
      ).status?.allowed === true;
    expect(await can("list", "endpointslices", "discovery.k8s.io")).toBe(true);
    expect(await can("watch", "services")).toBe(true);
    expect(await can("get", "secrets")).toBe(false);
    expect(await can("list", "secrets")).toBe(false);
    expect(await can("list", "pods")).toBe(false);

    // Nothing of the proxy outlives the Pod's instance.
    await core.deleteNamespacedPod({ name: "client", namespace: NS });
    await until(
      "the Pod gone",
      async () => ((await readPod(core, NS, "client")) === undefined ? true : undefined),
      180_000,
      1000,
    );
    await until(
      "no kube-proxy left",
      async () => ((await proxies()).length === 0 ? true : undefined),
      60_000,
      500,
    );
  }, 420_000);

  it("a Pod reaches a Service whose endpoint is another Nebula Pod, at that Pod's address", async () => {
    // The server: a Nebula Pod serving HTTP on a port of its own, Ready at its instance's address.
    const port = 18473;
    const server = barePod(
      "server-0",
      NODE,
      {
        command: [
          "sh",
          "-c",
          `mkdir -p /www && echo "hello from server-0" >/www/index.html && exec httpd -f -p ${port} -h /www`,
        ],
        ports: [{ containerPort: port }],
      },
      { restartPolicy: "Always", automountServiceAccountToken: false },
    );
    server.metadata = { ...server.metadata, labels: { app: "server" } };
    await core.createNamespacedPod({ namespace: NS, body: server });
    await core.createNamespacedService({
      namespace: NS,
      body: {
        metadata: { name: "server" },
        spec: { selector: { app: "server" }, ports: [{ port: 80, targetPort: port }] },
      },
    });
    const ready = await podReadyWithIp(core, NS, "server-0");
    const podIp = ready.status?.podIP ?? "";
    await endpointSliceNames(admin, NS, "server", podIp);
    // On EC2 the VPC delivers the instance's private address to its instance. Here every instance
    // is this machine: the address is this machine's own while the test runs (on its loopback
    // link), so a packet for it is delivered here and podman's published port takes it to server-0.
    await run("ip", ["address", "add", `${podIp}/32`, "dev", "lo"]);
    try {
      const image = await kubectlImage();
      await core.createNamespacedPod({
        namespace: NS,
        body: barePod(
          "peer-client",
          NODE,
          {
            image,
            imagePullPolicy: "IfNotPresent",
            command: [
              "sh",
              "-c",
              'out=$(kubectl get --raw /index.html --server http://server --request-timeout=10s 2>&1); printf "rc=%s %s\\n" "$?" "$out" >/dev/termination-log',
            ],
            env: [{ name: "HOME", value: "/tmp" }],
          },
          { automountServiceAccountToken: false },
        ),
      });
      const ended = await podEnded(core, NS, "peer-client");
      const report = ended.status?.containerStatuses?.[0]?.state?.terminated?.message ?? "";
      expect(report, report).toBe("rc=0 hello from server-0\n");
    } finally {
      await run("ip", ["address", "delete", `${podIp}/32`, "dev", "lo"]);
    }
    for (const name of ["peer-client", "server-0"]) {
      await core.deleteNamespacedPod({ name, namespace: NS });
    }
    await until(
      "both Pods gone, no kube-proxy left",
      async () =>
        (await readPod(core, NS, "server-0")) === undefined &&
        (await readPod(core, NS, "peer-client")) === undefined &&
        (await proxies()).length === 0
          ? true
          : undefined,
      180_000,
      1000,
    );
  }, 600_000);
});
