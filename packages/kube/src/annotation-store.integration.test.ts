/**
 * KubernetesAnnotationStore against a real kube-apiserver + etcd (from @nebula/test-peers):
 * compare-and-swap with stale resourceVersions, a subject recreated under the same name, and a
 * teardown deadline that passes while the process is down.
 */
import { randomBytes } from "node:crypto";
import {
  CoreV1Api,
  type KubeConfig,
  KubernetesObjectApi,
  PatchStrategy,
  RbacAuthorizationV1Api,
  type V1Pod,
} from "@kubernetes/client-node";
import {
  decodeRecord,
  encodeRecord,
  type InstanceObservation,
  type PodTeardownEffect,
  type PodTeardownObservation,
  type PodTeardownParamsInput,
  podTeardown,
  type StoreSnapshot,
  type TeardownEvent,
  TeardownExecutor,
  type TeardownStore,
} from "@nebula/teardown";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KubernetesAnnotationStore } from "./annotation-store.js";
import { deleteWithPreconditions } from "./delete.js";
import { KubeError } from "./errors.js";

const ANNOTATION = "teardown.nebula.dev/record";
const namespace = `teardown-${randomBytes(4).toString("hex")}`;
let kc: KubeConfig;
let core: CoreV1Api;
let objects: KubernetesObjectApi;
let clientFor: (user: string, groups: string[]) => KubeConfig;

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  kc = controlPlane.kubeConfig();
  clientFor = (user, groups) => controlPlane.clientFor(user, groups);
  core = kc.makeApiClient(CoreV1Api);
  objects = KubernetesObjectApi.makeApiClient(kc);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});

afterAll(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
});

async function createPod(name: string, extra: Partial<V1Pod["spec"]> = {}): Promise<V1Pod> {
  return core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name },
      spec: {
        containers: [{ name: "app", image: "busybox" }],
        terminationGracePeriodSeconds: 20,
        ...extra,
      },
    },
  });
}

async function readPod(name: string): Promise<V1Pod | undefined> {
  try {
    return await core.readNamespacedPod({ name, namespace });
  } catch {
    return undefined;
  }
}

function params(pod: V1Pod, auxiliaries: PodTeardownParamsInput["auxiliaries"] = []) {
  return {
    namespace,
    name: pod.metadata?.name ?? "",
    podUid: pod.metadata?.uid ?? "",
    instanceId: "i-0123456789abcdef0",
    gracePeriodSeconds: pod.spec?.terminationGracePeriodSeconds ?? 30,
    headroomSeconds: 30,
    auxiliaries,
  } satisfies PodTeardownParamsInput;
}

/** A simulated EC2 instance (the one part that is not real here) plus real Kubernetes deletes. */
function world() {
  const state = { instance: "running" as InstanceObservation, hung: true, calls: [] as string[] };
  const handlers = {
    StopInstance: () => {
      state.calls.push("StopInstance");
      if (!state.hung) state.instance = "stopped";
      else if (state.instance === "running") state.instance = "stopping";
    },
    TerminateInstance: () => {
      state.calls.push("TerminateInstance");
      state.instance = "terminated";
    },
    DeleteAuxiliary: async ({
      object,
    }: Extract<PodTeardownEffect, { kind: "DeleteAuxiliary" }>) => {
      state.calls.push(`DeleteAuxiliary ${object.name}`);
      if (object.uid === undefined) throw new Error("auxiliaries in this test carry UIDs");
      await deleteWithPreconditions(objects, { ...object, uid: object.uid });
    },
    DeletePod: async (effect: Extract<PodTeardownEffect, { kind: "DeletePod" }>) => {
      state.calls.push(`DeletePod grace=${effect.gracePeriodSeconds}`);
      await deleteWithPreconditions(objects, { ...effect, apiVersion: "v1", kind: "Pod" });
    },
  };
  const observe = async (): Promise<PodTeardownObservation> => ({
    instance: state.instance,
    pod: "present",
  });
  return { state, handlers, observe };
}

describe("KubernetesAnnotationStore against a real API server", () => {
  it("reads and writes the record as an annotation, guarded by resourceVersion", async () => {
    const pod = await createPod("cas-0");
    const store = new KubernetesAnnotationStore(kc);
    const key = `${namespace}/cas-0`;
    const snapshot = await store.read(key);
    expect(snapshot).toMatchObject({
      found: true,
      uid: pod.metadata?.uid,
      version: pod.metadata?.resourceVersion,
      record: undefined,
    });
    if (!snapshot.found) throw new Error("unreachable");
    const written = await store.write(key, { record: '{"hello":1}' }, snapshot.version);
    expect(written.status).toBe("written");
    const after = await readPod("cas-0");
    expect(after?.metadata?.annotations?.[ANNOTATION]).toBe('{"hello":1}');
    expect(written).toEqual({ status: "written", version: after?.metadata?.resourceVersion });
    // Clearing removes the annotation.
    if (written.status !== "written") throw new Error("unreachable");
    expect((await store.write(key, { record: null }, written.version)).status).toBe("written");
    expect((await readPod("cas-0"))?.metadata?.annotations?.[ANNOTATION]).toBeUndefined();
    expect(await store.read(`${namespace}/no-such-pod`)).toEqual({ found: false });
    expect(await store.write(`${namespace}/no-such-pod`, { record: "x" }, "1")).toEqual({
      status: "gone",
    });
  });

  it("two writers with stale resourceVersions: exactly one wins, the loser changes nothing", async () => {
    await createPod("cas-1");
    const key = `${namespace}/cas-1`;
    const a = new KubernetesAnnotationStore(kc);
    const b = new KubernetesAnnotationStore(kc);
    const [sa, sb] = await Promise.all([a.read(key), b.read(key)]);
    if (!sa.found || !sb.found) throw new Error("the Pod exists");
    expect(sa.version).toBe(sb.version);
    const [wa, wb] = await Promise.all([
      a.write(key, { record: "from-a" }, sa.version, sa.uid),
      b.write(key, { record: "from-b" }, sb.version, sb.uid),
    ]);
    expect([wa.status, wb.status].sort()).toEqual(["conflict", "written"]);
    const winner = wa.status === "written" ? "from-a" : "from-b";
    expect((await readPod("cas-1"))?.metadata?.annotations?.[ANNOTATION]).toBe(winner);

    // Someone else touches the Pod (a label): a writer holding the older version conflicts too.
    const fresh = await a.read(key);
    if (!fresh.found) throw new Error("the Pod exists");
    await objects.patch(
      { apiVersion: "v1", kind: "Pod", metadata: { name: "cas-1", namespace, labels: { x: "y" } } },
      undefined,
      undefined,
      undefined,
      undefined,
      PatchStrategy.MergePatch,
    );
    expect(await a.write(key, { record: "late" }, fresh.version, fresh.uid)).toEqual({
      status: "conflict",
    });
    expect((await readPod("cas-1"))?.metadata?.annotations?.[ANNOTATION]).toBe(winner);
  });

  it("two executors racing on one Pod: the stale one runs no effect and retries cleanly next tick", async () => {
    const pod = await createPod("race-0");
    const key = `${namespace}/race-0`;
    const store = new KubernetesAnnotationStore(kc);
    const stale = await store.read(key);
    // Process B read the Pod before process A recorded the teardown.
    let useStale = true;
    const staleStore: TeardownStore = {
      read: async (k): Promise<StoreSnapshot> => {
        if (useStale) {
          useStale = false;
          return stale;
        }
        return store.read(k);
      },
      write: (k, change, version, uid) => store.write(k, change, version, uid),
    };
    const wa = world();
    const wb = world();
    const eventsB: TeardownEvent[] = [];
    const a = new TeardownExecutor({
      teardown: podTeardown,
      store,
      handlers: wa.handlers,
      observe: wa.observe,
    });
    const b = new TeardownExecutor({
      teardown: podTeardown,
      store: staleStore,
      handlers: wb.handlers,
      observe: wb.observe,
      onEvent: (e) => eventsB.push(e),
    });
    const input = { params: params(pod), cause: "DeletionRequested" };
    expect((await a.request(key, input)).status).toBe("progressed");
    expect(await b.request(key, input)).toEqual({ status: "conflict" });
    expect(wb.state.calls).toEqual([]);
    expect(eventsB.map((e) => e.type)).toEqual(["conflict"]);
    // Next tick B re-reads and resumes A's teardown instead of restarting it.
    const resumed = await b.tick(key);
    expect(resumed).toMatchObject({ status: "waiting", record: { phase: "stopping", attempt: 1 } });
    expect(wa.state.calls).toEqual(["StopInstance"]);
  });

  it("a subject recreated under the same name (new UID) is never written or deleted by stale views", async () => {
    const old = await createPod("reborn-0");
    const key = `${namespace}/reborn-0`;
    const store = new KubernetesAnnotationStore(kc);
    const w = world();
    const executor = new TeardownExecutor({
      teardown: podTeardown,
      store,
      handlers: w.handlers,
      observe: w.observe,
    });
    await executor.request(key, { params: params(old), cause: "DeletionRequested" });
    const staleView = await store.read(key);
    if (!staleView.found || staleView.record === undefined) throw new Error("recorded");

    await core.deleteNamespacedPod({ name: "reborn-0", namespace, gracePeriodSeconds: 0 });
    const reborn = await createPod("reborn-0");
    expect(reborn.metadata?.uid).not.toBe(old.metadata?.uid);

    // A stale writer (old version, old UID) finds its subject gone; the new Pod is untouched.
    expect(
      await store.write(key, { record: staleView.record }, staleView.version, staleView.uid),
    ).toEqual({ status: "gone" });
    expect((await readPod("reborn-0"))?.metadata?.annotations?.[ANNOTATION]).toBeUndefined();
    // The executor sees no teardown on the new Pod.
    expect(await executor.tick(key)).toEqual({ status: "idle" });

    // A record copied onto the new Pod (say, by a backup restore) is refused as foreign.
    const now = await store.read(key);
    if (!now.found) throw new Error("the new Pod exists");
    await store.write(key, { record: staleView.record }, now.version);
    expect(await executor.tick(key)).toMatchObject({ status: "foreign" });

    // The old Pod's delete (UID precondition) leaves the new Pod alone.
    const target = { apiVersion: "v1", kind: "Pod", namespace, name: "reborn-0" };
    const oldUid = old.metadata?.uid ?? "";
    const newUid = reborn.metadata?.uid ?? "";
    expect(await deleteWithPreconditions(objects, { ...target, uid: oldUid })).toBe("replaced");
    expect((await readPod("reborn-0"))?.metadata?.uid).toBe(newUid);
    expect(
      await deleteWithPreconditions(objects, { ...target, uid: newUid, gracePeriodSeconds: 0 }),
    ).toBe("deleted");
    expect(await deleteWithPreconditions(objects, { ...target, uid: newUid })).toBe("absent");
  });

  it("a deadline that passes while the process is down is honoured at the first tick after restart", async () => {
    // A Pod bound to a node, so the API server deletes it gracefully, as on the virtual node.
    const pod = await createPod("down-0", { nodeName: "vnode-1" });
    const secret = await core.createNamespacedSecret({
      namespace,
      body: { metadata: { name: "down-0-env" }, stringData: { A: "1" } },
    });
    const key = `${namespace}/down-0`;
    const store = new KubernetesAnnotationStore(kc);
    const w = world();
    const t0 = Date.parse("2026-11-30T06:00:00Z");
    const first = new TeardownExecutor({
      teardown: podTeardown,
      store,
      handlers: w.handlers,
      observe: w.observe,
      now: () => t0,
    });
    const aux = [
      {
        apiVersion: "v1",
        kind: "Secret",
        namespace,
        name: "down-0-env",
        uid: secret.metadata?.uid ?? "missing",
      },
    ];
    await first.request(key, { params: params(pod, aux), cause: "DeletionRequested" });
    const recorded = decodeRecord((await readPod("down-0"))?.metadata?.annotations?.[ANNOTATION]);
    if (!recorded.ok) throw new Error(recorded.reason);
    expect(recorded.record).toMatchObject({ phase: "stopping", issuedAt: t0 });
    expect(recorded.record.deadline).toBe(t0 + (20 + 30) * 1000);
    expect(podTeardown.describe(recorded.record, t0 + 5_000).text).toContain(
      "waiting for the instance to stop; deadline in 45s",
    );

    // The process is down for ten minutes; the instance never stopped. A fresh process and clock:
    let now = t0 + 10 * 60_000;
    const transitions: string[] = [];
    const second = new TeardownExecutor({
      teardown: podTeardown,
      store,
      handlers: w.handlers,
      observe: async (): Promise<PodTeardownObservation> => ({
        instance: w.state.instance,
        pod: (await readPod("down-0")) ? "present" : "absent",
        auxiliariesRemaining: (await core
          .readNamespacedSecret({ name: "down-0-env", namespace })
          .then(() => 1)
          .catch(() => 0)) as number,
      }),
      now: () => now,
      onEvent: (e) => {
        if (e.type === "transition") transitions.push(`${e.transition.to}:${e.transition.reason}`);
      },
    });
    const firstTick = await second.tick(key);
    expect(firstTick).toMatchObject({ status: "progressed", record: { phase: "terminating" } });
    expect(transitions).toEqual(["terminating:DeadlineExpired"]);
    for (let i = 0; i < 20; i++) {
      now += 1_000;
      const result = await second.tick(key);
      if (result.status === "absent") break;
    }
    expect(transitions).toEqual(["terminating:DeadlineExpired", "releasing:Done", "removing:Done"]);
    expect(w.state.calls).toEqual([
      "StopInstance",
      "TerminateInstance",
      "DeleteAuxiliary down-0-env",
      "DeletePod grace=0",
    ]);
    expect(await readPod("down-0")).toBeUndefined();
  });

  it("writes the subject change and the record in one resourceVersion", async () => {
    const cm = await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: "sandbox-0" }, data: { replicas: "1" } },
    });
    const store = new KubernetesAnnotationStore(kc, { kind: "ConfigMap" });
    const key = `${namespace}/sandbox-0`;
    const started = podTeardown.start(
      { params: { namespace, name: "sandbox-0", podUid: cm.metadata?.uid ?? "" }, cause: "Test" },
      0,
    );
    if (started.kind !== "step") throw new Error(started.reason);
    const written = await store.write(
      key,
      { record: encodeRecord(started.record), subject: { data: { replicas: "0" } } },
      cm.metadata?.resourceVersion ?? "",
      cm.metadata?.uid,
    );
    const after = await core.readNamespacedConfigMap({ name: "sandbox-0", namespace });
    expect(written).toEqual({ status: "written", version: after.metadata?.resourceVersion });
    expect(after.data).toEqual({ replicas: "0" });
    expect(after.metadata?.annotations?.[ANNOTATION]).toBe(encodeRecord(started.record));
  });
  it("works with exactly get and patch on Pods, and reports a refused write as RequestFailed", async () => {
    const pod = await createPod("rbac-0");
    const key = `${namespace}/rbac-0`;
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace,
      body: {
        metadata: { name: "teardown-reader" },
        rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get"] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: "teardown-reader" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "teardown-reader" },
        subjects: [{ kind: "User", name: "teardown-bot", apiGroup: "rbac.authorization.k8s.io" }],
      },
    });
    const store = new KubernetesAnnotationStore(clientFor("teardown-bot", []));
    const snapshot = await store.read(key);
    if (!snapshot.found) throw new Error("the Pod exists");
    expect(snapshot.uid).toBe(pod.metadata?.uid);
    const refused = await store.write(key, { record: "x" }, snapshot.version).catch((e) => e);
    expect(refused).toBeInstanceOf(KubeError);
    expect(refused).toMatchObject({ code: "RequestFailed" });
    expect(String(refused.message)).toContain("HTTP 403");

    await rbac.replaceNamespacedRole({
      name: "teardown-reader",
      namespace,
      body: {
        metadata: { name: "teardown-reader" },
        rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "patch"] }],
      },
    });
    // RBAC changes reach the authorizer through its informer: poll briefly until the write passes.
    let outcome: Awaited<ReturnType<typeof store.write>> | undefined;
    for (let i = 0; i < 50 && outcome === undefined; i++) {
      outcome = await store
        .write(key, { record: "x" }, snapshot.version, snapshot.uid)
        .catch(async () => {
          await new Promise((resolve) => setTimeout(resolve, 100));
          return undefined;
        });
    }
    expect(outcome?.status).toBe("written");
  });
});
