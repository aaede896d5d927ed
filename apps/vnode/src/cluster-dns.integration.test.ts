/**
 * Cluster DNS for Nebula Pods, end to end (issue #34): a real CoreDNS over the test's
 * kube-apiserver stands where the cluster DNS Service would (there is no service proxy in the
 * local world, so the vnode's `dns.clusterDNS` names CoreDNS's own address, as a VPC-routable
 * cluster DNS does in a real one). A Nebula Pod's containers resolve a Service by its short name
 * through the kubelet's search path, another Nebula Pod by its `hostname.subdomain` record (the
 * EndpointSlice kube-controller-manager fills because that Pod is Ready at its instance's address)
 * and the API server's Service; their host name is the Pod's FQDN with `setHostnameAsFQDN`, mapped
 * to the Pod's IP in their `/etc/hosts`.
 */
import { CoreV1Api } from "@kubernetes/client-node";
import { type ClusterDns, type InstanceHosts, startClusterDns } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  endpointSliceNames,
  hostAddress,
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

const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-dns";
const NS = "vnode-dns";
const DOMAIN = "cluster.local";

let hosts: InstanceHosts;
let vnode: VnodeProcess;
let dns: ClusterDns;

beforeAll(async () => {
  dns = await startClusterDns({ controlPlane, address: hostAddress() });
  const world = await startWorld({ admin, ec2, moto, cluster: NODE, namespace: NS });
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
  config.provider.dns = { clusterDNS: [dns.address], clusterDomain: DOMAIN };
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
  ec2.destroy();
  expect(code).toBe(0);
});

/** What busybox's nslookup answered per name: the `Address:` lines after its `Name:` line. */
function answers(report: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const block of report.split("== ").slice(1)) {
    const [query = "", ...lines] = block.split("\n");
    out.set(
      query.trim(),
      lines.filter((l) => l.startsWith("Address: ")).map((l) => l.slice("Address: ".length).trim()),
    );
  }
  return out;
}

describe("cluster DNS for Nebula Pods (nebula-vnode, kube-apiserver, CoreDNS, moto, the host simulator)", () => {
  it("a Pod resolves a Service by its short name, another Nebula Pod by hostname.subdomain and the API server's Service; its FQDN is its host name and maps to its IP", async () => {
    await core.createNamespacedService({
      namespace: NS,
      body: {
        metadata: { name: "peers" },
        spec: { clusterIP: "None", ports: [{ port: 80 }], selector: { app: "peer" } },
      },
    });
    const web = await core.createNamespacedService({
      namespace: NS,
      body: {
        metadata: { name: "web" },
        spec: { ports: [{ port: 80 }], selector: { app: "web" } },
      },
    });
    const api = await core.readNamespacedService({ name: "kubernetes", namespace: "default" });

    // The peer: a long-running Nebula Pod, Ready at its instance's address, named peer-0.peers.
    const peerSpec = barePod(
      "peer-0",
      NODE,
      { command: ["sleep", "3600"] },
      { hostname: "peer-0", subdomain: "peers", restartPolicy: "Always" },
    );
    peerSpec.metadata = { ...peerSpec.metadata, labels: { app: "peer" } };
    await core.createNamespacedPod({ namespace: NS, body: peerSpec });
    const peer = await podReadyWithIp(core, NS, "peer-0");
    const peerIp = peer.status?.podIP ?? "";
    await endpointSliceNames(admin, NS, "peers", peerIp, "peer-0");

    // The asker: reports what its containers see, in its termination message.
    const peerName = `peer-0.peers.${NS}.svc.${DOMAIN}`;
    const script = [
      'echo "host=$(hostname)"',
      `echo "hosts=$(grep -F 'asker.peers' /etc/hosts | tr -s ' \\t' ' ')"`,
      'echo "resolv=$(grep -v "^#" /etc/resolv.conf | tr "\\n" ";")"',
      `for q in web ${peerName} kubernetes.default.svc.${DOMAIN} absent.${NS}.svc.${DOMAIN}; do`,
      '  echo "== $q"; nslookup "$q" 2>&1 | grep -E "^(Name:|Address: |\\*\\*)"',
      "done",
    ].join("\n");
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod(
        "asker",
        NODE,
        { command: ["sh", "-c", `{\n${script}\n} > /dev/termination-log 2>&1`] },
        { hostname: "asker", subdomain: "peers", setHostnameAsFQDN: true },
      ),
    });
    const ended = await podEnded(core, NS, "asker");
    const terminated = ended.status?.containerStatuses?.[0]?.state?.terminated;
    const report = terminated?.message ?? "";
    expect(terminated?.exitCode, report).toBe(0);
    const askerFqdn = `asker.peers.${NS}.svc.${DOMAIN}`;
    expect(report).toContain(`host=${askerFqdn}\n`);
    expect(report).toContain(`hosts=${ended.status?.podIP} ${askerFqdn}\n`);
    // The kubelet's ClusterFirst resolver (the order of its lines is the runtime's).
    const resolv = /^resolv=(.*)$/m.exec(report)?.[1]?.split(";") ?? [];
    expect(resolv.sort()).toEqual(
      [
        "",
        `nameserver ${dns.address}`,
        "options ndots:5",
        `search ${NS}.svc.${DOMAIN} svc.${DOMAIN} ${DOMAIN}`,
      ].sort(),
    );
    const got = answers(report);
    expect(got.get("web"), report).toEqual([web.spec?.clusterIP]);
    expect(got.get(peerName), report).toEqual([peerIp]);
    expect(got.get(`kubernetes.default.svc.${DOMAIN}`), report).toEqual([api.spec?.clusterIP]);
    expect(got.get(`absent.${NS}.svc.${DOMAIN}`), report).toEqual([]);
    expect(report).toMatch(/can't find absent\./);

    for (const name of ["asker", "peer-0"]) {
      await core.deleteNamespacedPod({ name, namespace: NS });
    }
    await until(
      "both Pods gone",
      async () =>
        (await readPod(core, NS, "asker")) === undefined &&
        (await readPod(core, NS, "peer-0")) === undefined
          ? true
          : undefined,
      180_000,
      1000,
    );
  });
});
