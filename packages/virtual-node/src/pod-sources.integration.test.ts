/**
 * `podSourceReader` against a real kube-apiserver, as the vnode's ServiceAccount under the shipped
 * RBAC (deploy/vnode/rbac.yaml): the ConfigMaps and Secrets a Pod references by name, and the
 * Services of its containers' environment.
 */
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { beforeAll, describe, expect, it } from "vitest";
import { podSourceReader } from "./pod-sources.js";
import { applyManifest, SERVICE_ACCOUNT_GROUPS, VNODE_SERVICE_ACCOUNT } from "./testing/rbac.js";

const { controlPlane } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const NS = "pod-sources-it";

const pod = (namespace: string, enableServiceLinks?: boolean): V1Pod => ({
  metadata: { name: "web", namespace },
  spec: {
    containers: [{ name: "app", image: "busybox" }],
    ...(enableServiceLinks === undefined ? {} : { enableServiceLinks }),
  },
});

const serviceNames = (services: ReadonlyArray<{ metadata: { namespace: string; name: string } }>) =>
  services.map((s) => `${s.metadata.namespace}/${s.metadata.name}`).sort();

beforeAll(async () => {
  await applyManifest(admin, "namespace.yaml");
  await applyManifest(admin, "rbac.yaml");
  await core.createNamespace({ body: { metadata: { name: NS } } });
  await core.createNamespacedConfigMap({
    namespace: NS,
    body: { metadata: { name: "settings" }, data: { MODE: "blue" } },
  });
  for (const [namespace, name] of [
    [NS, "cache"],
    ["default", "shared-db"],
  ] as const) {
    await core.createNamespacedService({
      namespace,
      body: { metadata: { name }, spec: { ports: [{ name: "main", port: 6379 }] } },
    });
  }
});

describe("podSourceReader", () => {
  const read = () =>
    podSourceReader(controlPlane.clientFor(VNODE_SERVICE_ACCOUNT, SERVICE_ACCOUNT_GROUPS));

  it("reads the referenced ConfigMap, leaves out a missing Secret, and lists the namespace's Services and default/kubernetes", async () => {
    const sources = await read()(pod(NS), { configMaps: ["settings"], secrets: ["absent"] });
    expect(sources.configMaps).toEqual({ settings: { data: { MODE: "blue" } } });
    expect(sources.secrets).toEqual({});
    expect(serviceNames(sources.services)).toEqual(["default/kubernetes", `${NS}/cache`]);
    const cache = sources.services.find((s) => s.metadata.name === "cache");
    expect(cache?.spec.clusterIP).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    expect(cache?.spec.ports).toEqual([{ name: "main", port: 6379, protocol: "TCP" }]);
  });

  it("with enableServiceLinks: false lists only default/kubernetes", async () => {
    const sources = await read()(pod(NS, false), { configMaps: [], secrets: [] });
    expect(serviceNames(sources.services)).toEqual(["default/kubernetes"]);
  });

  it("a Pod of the default namespace gets its namespace's Services once, kubernetes among them", async () => {
    const sources = await read()(pod("default"), { configMaps: [], secrets: [] });
    expect(serviceNames(sources.services)).toEqual(["default/kubernetes", "default/shared-db"]);
    const alone = await read()(pod("default", false), { configMaps: [], secrets: [] });
    expect(serviceNames(alone.services)).toEqual(["default/kubernetes"]);
  });
});
