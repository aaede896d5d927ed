import { CoreV1Api, DiscoveryV1Api, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ControlPlane, startControlPlane } from "./control-plane.js";
import { type ClusterDns, startClusterDns } from "./coredns.js";
import { processes } from "./host/index.js";
import { freePort, machineAddresses } from "./ports.js";
import { waitUntil } from "./process.js";

const NS = "dns-peer";
let cp: ControlPlane;
let dns: ClusterDns;

const address = (): string => {
  const [found] = machineAddresses();
  if (found === undefined) throw new Error("no non-loopback IPv4 address on this machine");
  return found;
};

beforeAll(async () => {
  cp = await startControlPlane({});
  const core = cp.kubeConfig().makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: NS } } });
  // A port of its own: the vnode's end-to-end tests hold port 53 for the containers' resolver.
  dns = await startClusterDns({ controlPlane: cp, address: address(), port: await freePort() });
}, 120_000);

afterAll(async () => {
  await dns?.stop();
  await cp?.stop();
});

describe("startClusterDns (real CoreDNS over a real kube-apiserver)", () => {
  it("answers for a ClusterIP Service, a headless Service's named endpoint and the API server's Service; nothing outside the cluster domain", async () => {
    const kc = cp.kubeConfig();
    const core = kc.makeApiClient(CoreV1Api);
    const svc = await core.createNamespacedService({
      namespace: NS,
      body: {
        metadata: { name: "web" },
        spec: { ports: [{ port: 80, protocol: "TCP" }], selector: { app: "web" } },
      },
    });
    await core.createNamespacedService({
      namespace: NS,
      body: {
        metadata: { name: "db" },
        spec: { clusterIP: "None", ports: [{ port: 5432, protocol: "TCP" }] },
      },
    });
    await kc.makeApiClient(DiscoveryV1Api).createNamespacedEndpointSlice({
      namespace: NS,
      body: {
        metadata: { name: "db-1", labels: { "kubernetes.io/service-name": "db" } },
        addressType: "IPv4",
        endpoints: [{ addresses: ["10.9.8.7"], hostname: "db-0", conditions: { ready: true } }],
        ports: [{ port: 5432, protocol: "TCP" }],
      },
    });
    const r = dns.resolver();
    const clusterIp = svc.spec?.clusterIP ?? "";
    expect(clusterIp).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    await waitUntil(
      async () =>
        (await r.resolve4(`web.${NS}.svc.cluster.local`).catch(() => [])).join() === clusterIp &&
        (await r.resolve4(`db-0.db.${NS}.svc.cluster.local`).catch(() => [])).join() === "10.9.8.7",
      { what: "CoreDNS answering for the new Services", timeoutMs: 30_000 },
    );
    expect(await r.resolve4(`db.${NS}.svc.cluster.local`)).toEqual(["10.9.8.7"]);
    const api = await core.readNamespacedService({ name: "kubernetes", namespace: "default" });
    expect(await r.resolve4("kubernetes.default.svc.cluster.local")).toEqual([api.spec?.clusterIP]);
    await expect(r.resolve4("example.com")).rejects.toMatchObject({ code: expect.any(String) });
    await expect(r.resolve4(`nothing.${NS}.svc.cluster.local`)).rejects.toMatchObject({
      code: "ENOTFOUND",
    });
  });

  it("stop ends the process and takes its RBAC away", async () => {
    const kc = cp.kubeConfig();
    const second = await startClusterDns({
      controlPlane: cp,
      address: address(),
      port: await freePort(),
    });
    // By its own pid: other test files may run a CoreDNS of their own meanwhile.
    const alive = () => processes().some((p) => p.pid === second.pid);
    expect(alive()).toBe(true);
    await second.stop();
    await expect(
      second.resolver().resolve4("kubernetes.default.svc.cluster.local"),
    ).rejects.toThrow();
    expect(alive()).toBe(false);
    await expect(
      kc.makeApiClient(RbacAuthorizationV1Api).readClusterRole({ name: second.roleName }),
    ).rejects.toMatchObject({ code: 404 });
  });
});
