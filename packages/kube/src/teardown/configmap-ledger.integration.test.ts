/**
 * ConfigMapPodLedger against a real kube-apiserver + etcd: launch entries, the teardown record
 * written with compare-and-swap, resume from a fresh ledger object, and RBAC: a tenant who may
 * edit Pods in its own namespace cannot write (or even read) the controller's ledger.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { CoreV1Api, type KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { podTeardown, TeardownExecutor } from "@nebula/teardown";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubeError } from "../errors.js";
import { ConfigMapPodLedger, LEDGER_LAUNCH_KEY } from "./configmap-ledger.js";

const suffix = randomBytes(4).toString("hex");
const controllerNs = `nebula-system-${suffix}`;
const tenantNs = `tenant-${suffix}`;
let kc: KubeConfig;
let core: CoreV1Api;
let clientFor: (user: string, groups: string[]) => KubeConfig;

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  kc = controlPlane.kubeConfig();
  clientFor = (user, groups) => controlPlane.clientFor(user, groups);
  core = kc.makeApiClient(CoreV1Api);
  for (const name of [controllerNs, tenantNs]) {
    await core.createNamespace({ body: { metadata: { name } } });
  }
});

afterAll(async () => {
  for (const name of [controllerNs, tenantNs]) {
    await core.deleteNamespace({ name }).catch(() => undefined);
  }
});

const INSTANCE = "i-0123456789abcdef0";

describe("ConfigMapPodLedger", () => {
  it("records the launch, keeps it across teardown writes, lists and removes by Pod UID", async () => {
    const ledger = new ConfigMapPodLedger(kc, { namespace: controllerNs });
    const podUid = randomUUID();
    const base = { podUid, namespace: tenantNs, name: "web-0" };
    await ledger.recordLaunch(base, { requestedAt: 1_000, clientToken: podUid });
    await ledger.recordLaunch(base, { instanceId: INSTANCE, launchedAt: 2_000 });
    // A restarted controller (a fresh ledger object) reads it back.
    const fresh = new ConfigMapPodLedger(kc, { namespace: controllerNs });
    expect((await fresh.get(podUid))?.launch).toEqual({
      ...base,
      requestedAt: 1_000,
      clientToken: podUid,
      instanceId: INSTANCE,
      launchedAt: 2_000,
    });
    expect((await fresh.ensure({ ...base, name: "other" })).launch.name).toBe("web-0");

    const executor = new TeardownExecutor({
      teardown: podTeardown,
      store: fresh,
      handlers: {
        StopInstance: () => undefined,
        TerminateInstance: () => undefined,
        DeleteAuxiliary: () => undefined,
        DeletePod: () => undefined,
      },
      observe: () => ({ instance: "terminated" as const, pod: "present" as const }),
    });
    await executor.request(podUid, {
      params: { ...base, podUid, instanceId: INSTANCE, finish: "clear" },
      cause: "DeletionRequested",
      uid: podUid,
    });
    expect((await executor.settle(podUid)).status).toBe("complete");
    const entry = await ledger.get(podUid);
    expect(entry?.launch.instanceId).toBe(INSTANCE);
    expect(entry?.record).toContain('"phase":"complete"');
    // A stale request finds it complete and writes nothing.
    const before = (
      await core.readNamespacedConfigMap({ name: ledger.nameOf(podUid), namespace: controllerNs })
    ).metadata?.resourceVersion;
    expect(
      (await executor.request(podUid, { params: { ...base, podUid }, cause: "Stale", uid: podUid }))
        .status,
    ).toBe("complete");
    const after = (
      await core.readNamespacedConfigMap({ name: ledger.nameOf(podUid), namespace: controllerNs })
    ).metadata?.resourceVersion;
    expect(after).toBe(before);

    expect((await ledger.list()).map((e) => e.launch.podUid)).toContain(podUid);
    await ledger.remove(podUid);
    await ledger.remove(podUid);
    expect(await ledger.get(podUid)).toBeUndefined();
  });

  it("two writers with the same stale version: exactly one wins", async () => {
    const ledger = new ConfigMapPodLedger(kc, { namespace: controllerNs });
    const podUid = randomUUID();
    await ledger.ensure({ podUid, namespace: tenantNs, name: "web-1" });
    const snapshot = await ledger.read(podUid);
    if (!snapshot.found) throw new Error("not found");
    const outcomes = await Promise.all([
      ledger.write(podUid, { record: "a" }, snapshot.version, podUid),
      ledger.write(podUid, { record: "b" }, snapshot.version, podUid),
    ]);
    expect(outcomes.map((o) => o.status).sort()).toEqual(["conflict", "written"]);
    // A record written for another Pod UID is refused without a request.
    expect(await ledger.write(podUid, { record: "c" }, snapshot.version, randomUUID())).toEqual({
      status: "gone",
    });
  });

  it("a delete conditioned on the listed version deletes nothing once the entry changed since", async () => {
    const ledger = new ConfigMapPodLedger(kc, { namespace: controllerNs });
    const podUid = randomUUID();
    await ledger.ensure({ podUid, namespace: tenantNs, name: "web-2" });
    const listed = (await ledger.list()).find((e) => e.launch.podUid === podUid);
    expect(listed?.version).toMatch(/^\d+$/);
    // Written after it was listed (a launch recorded by another process).
    await ledger.recordLaunch({ podUid, namespace: tenantNs, name: "web-2" }, { requestedAt: 1 });
    expect(await ledger.remove(podUid, { ifVersion: listed?.version })).toBe(false);
    expect((await ledger.get(podUid))?.launch.requestedAt).toBe(1);
    const now = await ledger.get(podUid);
    expect(await ledger.remove(podUid, { ifVersion: now?.version })).toBe(true);
    expect(await ledger.get(podUid)).toBeUndefined();
    // Already gone counts as done.
    expect(await ledger.remove(podUid, { ifVersion: now?.version })).toBe(true);
  });

  it("a tenant who can edit Pods in its namespace can neither read nor forge the ledger", async () => {
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace: tenantNs,
      body: {
        metadata: { name: "pod-editor" },
        rules: [
          {
            apiGroups: [""],
            resources: ["pods", "configmaps"],
            verbs: ["get", "list", "create", "update", "patch", "delete"],
          },
        ],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: tenantNs,
      body: {
        metadata: { name: "mallory" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-editor" },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: "mallory" }],
      },
    });
    const podUid = randomUUID();
    const controller = new ConfigMapPodLedger(kc, { namespace: controllerNs });
    await controller.recordLaunch(
      { podUid, namespace: tenantNs, name: "victim" },
      { instanceId: INSTANCE },
    );
    const mallory = new ConfigMapPodLedger(clientFor("mallory", []), { namespace: controllerNs });
    const forged = { podUid, namespace: tenantNs, name: "victim" };
    await expect(
      mallory.recordLaunch(forged, { instanceId: "i-0fedcba9876543210" }),
    ).rejects.toMatchObject({
      code: "RequestFailed",
    });
    await expect(mallory.get(podUid)).rejects.toBeInstanceOf(KubeError);
    const stored = await core.readNamespacedConfigMap({
      name: controller.nameOf(podUid),
      namespace: controllerNs,
    });
    expect(JSON.parse(stored.data?.[LEDGER_LAUNCH_KEY] ?? "{}").instanceId).toBe(INSTANCE);
  });

  it("refuses keys that are not Pod UIDs", async () => {
    const ledger = new ConfigMapPodLedger(kc, { namespace: controllerNs });
    await expect(ledger.read("../kube-system/x")).rejects.toMatchObject({ code: "InvalidKey" });
    expect(() => new ConfigMapPodLedger(kc, { namespace: "Not A Namespace" })).toThrow(KubeError);
  });
});
