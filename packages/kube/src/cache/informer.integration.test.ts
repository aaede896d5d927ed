/**
 * The informer cache against a real kube-apiserver + etcd: sync, field selectors, one timestamp
 * form, throwing handlers, resync, 100 objects churned through informer → queue → reconcile with
 * no update lost, and (on a control plane of its own) an apiserver restart and a 410 Gone.
 */
import { randomBytes } from "node:crypto";
import {
  CoreV1Api,
  type KubeConfig,
  type KubernetesListObject,
  RbacAuthorizationV1Api,
  type V1ConfigMap,
  type V1Pod,
} from "@kubernetes/client-node";
import { type ControlPlane, startControlPlane } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Controller } from "../controller/controller.js";
import { Informer, type InformerEvent, podInformer } from "./informer.js";
import { withSignal } from "./request-options.js";

const namespace = `informer-${randomBytes(4).toString("hex")}`;
let kc: KubeConfig;
let core: CoreV1Api;
const stops: AbortController[] = [];

beforeAll(async () => {
  kc = useTestPeers().controlPlane.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});

afterAll(async () => {
  for (const stop of stops) stop.abort();
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
});

/** Polls `condition` every 20 ms until true; fails after `timeoutMs`. */
async function until(
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition not met before the deadline");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function started<T extends { metadata?: object }>(
  informer: { run(s: AbortSignal): Promise<void> } & T,
): AbortController {
  const stop = new AbortController();
  stops.push(stop);
  void informer.run(stop.signal);
  return stop;
}

const pod = (name: string, nodeName?: string, labels?: Record<string, string>): V1Pod => ({
  metadata: { name, ...(labels === undefined ? {} : { labels }) },
  spec: {
    ...(nodeName === undefined ? {} : { nodeName }),
    containers: [{ name: "c", image: "busybox" }],
  },
});

function configMapInformer(
  config: KubeConfig,
  ns: string,
  name: string,
  list?: () => void,
): Informer<V1ConfigMap> {
  const api = config.makeApiClient(CoreV1Api);
  return new Informer<V1ConfigMap>({
    kubeConfig: config,
    name,
    path: `/api/v1/namespaces/${ns}/configmaps`,
    objectType: "V1ConfigMap",
    restartBackoff: { initialMs: 100, maxMs: 1000 },
    list: (selectors) => {
      list?.();
      return api.listNamespacedConfigMap({ namespace: ns, ...selectors }) as Promise<
        KubernetesListObject<V1ConfigMap>
      >;
    },
  });
}

describe("Informer against the real apiserver", () => {
  it("syncs, then follows adds, updates and deletes; keys are namespace/name", async () => {
    await core.createNamespacedPod({ namespace, body: pod("before", "node-x") });
    const pods = podInformer(kc, { namespace, fieldSelector: "spec.nodeName=node-x" });
    const events: string[] = [];
    pods.onEvent((e) => events.push(`${e.type} ${e.key}`));
    expect(pods.hasSynced()).toBe(false);
    started(pods);
    expect(await pods.waitForSync(undefined, 30_000)).toBe(true);
    expect(pods.keys()).toEqual([`${namespace}/before`]);
    await core.createNamespacedPod({ namespace, body: pod("after", "node-x") });
    await until(() => pods.get(`${namespace}/after`) !== undefined);
    await core.patchNamespacedPod({
      namespace,
      name: "after",
      body: [{ op: "add", path: "/metadata/labels", value: { changed: "yes" } }],
    });
    await until(() => pods.get(`${namespace}/after`)?.metadata?.labels?.changed === "yes");
    await core.deleteNamespacedPod({ namespace, name: "before", gracePeriodSeconds: 0 });
    await until(() => pods.get(`${namespace}/before`) === undefined);
    expect(events.filter((e) => !e.startsWith("update"))).toEqual([
      `add ${namespace}/before`,
      `add ${namespace}/after`,
      `delete ${namespace}/before`,
    ]);
    expect(events).toContain(`update ${namespace}/after`);
    expect(pods.list(namespace).map((p) => p.metadata?.name)).toEqual(["after"]);
  });

  it("a field selector (spec.nodeName=<node>) keeps other nodes' Pods out", async () => {
    for (const [name, node] of [
      ["on-a-1", "node-a"],
      ["on-b-1", "node-b"],
      ["unbound", undefined],
    ] as const) {
      await core.createNamespacedPod({ namespace, body: pod(name, node, { set: "field" }) });
    }
    const pods = podInformer(kc, {
      namespace,
      fieldSelector: "spec.nodeName=node-a",
      labelSelector: "set=field",
    });
    started(pods);
    expect(await pods.waitForSync(undefined, 30_000)).toBe(true);
    await core.createNamespacedPod({ namespace, body: pod("on-a-2", "node-a", { set: "field" }) });
    await core.createNamespacedPod({ namespace, body: pod("on-b-2", "node-b", { set: "field" }) });
    await core.createNamespacedPod({ namespace, body: pod("on-a-3", "node-a", { set: "other" }) });
    await until(() => pods.get(`${namespace}/on-a-2`) !== undefined);
    // on-b-2 and on-a-3 must never show up; a later marker proves the watch moved past them.
    await core.createNamespacedPod({ namespace, body: pod("on-a-4", "node-a", { set: "field" }) });
    await until(() => pods.get(`${namespace}/on-a-4`) !== undefined);
    expect([...pods.keys()].sort()).toEqual([
      `${namespace}/on-a-1`,
      `${namespace}/on-a-2`,
      `${namespace}/on-a-4`,
    ]);
  });

  it("objects from the list and from the watch carry timestamps in one form", async () => {
    await core.createNamespacedPod({
      namespace,
      body: pod("dates-listed", "node-d", { set: "dates" }),
    });
    const typed = podInformer(kc, { namespace, labelSelector: "set=dates" });
    const plain = new Informer<V1Pod>({
      kubeConfig: kc,
      name: "plain-pods",
      path: `/api/v1/namespaces/${namespace}/pods`,
      labelSelector: "set=dates",
      list: (selectors) => core.listNamespacedPod({ namespace, ...selectors }),
    });
    started(typed);
    started(plain);
    expect(await typed.waitForSync(undefined, 30_000)).toBe(true);
    expect(await plain.waitForSync(undefined, 30_000)).toBe(true);
    await core.createNamespacedPod({
      namespace,
      body: pod("dates-watched", "node-d", { set: "dates" }),
    });
    await until(
      () =>
        typed.get(`${namespace}/dates-watched`) !== undefined &&
        plain.get(`${namespace}/dates-watched`) !== undefined,
    );
    for (const name of ["dates-listed", "dates-watched"]) {
      const created = typed.get(`${namespace}/${name}`)?.metadata?.creationTimestamp;
      expect(created).toBeInstanceOf(Date);
      expect(Number.isNaN((created as Date).getTime())).toBe(false);
      expect(typeof plain.get(`${namespace}/${name}`)?.metadata?.creationTimestamp).toBe("string");
    }
  });

  it("a throwing handler neither crashes the process nor stops the others; resync re-delivers", async () => {
    const cms = configMapInformer(kc, namespace, "throwing");
    const seen: InformerEvent<V1ConfigMap>[] = [];
    cms.onEvent(() => {
      throw new Error("handler bug");
    });
    cms.onEvent((e) => seen.push(e));
    const resyncing = new Informer<V1ConfigMap>({
      kubeConfig: kc,
      name: "resync",
      path: `/api/v1/namespaces/${namespace}/configmaps`,
      resyncPeriodMs: 100,
      list: (selectors) =>
        core.listNamespacedConfigMap({ namespace, ...selectors }) as Promise<
          KubernetesListObject<V1ConfigMap>
        >,
    });
    const resyncs = new Set<string>();
    resyncing.onEvent((e) => {
      if (e.type === "resync") resyncs.add(e.key);
    });
    started(cms);
    started(resyncing);
    await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: "thrown-at" }, data: { v: "1" } },
    });
    await until(() => seen.some((e) => e.key === `${namespace}/thrown-at`));
    await until(() => resyncs.has(`${namespace}/thrown-at`));
    expect(cms.get(`${namespace}/thrown-at`)?.data).toEqual({ v: "1" });
  });

  it("a stop does not wait for a list in flight; list requests carry the abort signal", async () => {
    let listSignal: AbortSignal | undefined;
    const hanging = new Informer<V1ConfigMap>({
      kubeConfig: kc,
      name: "hanging",
      path: `/api/v1/namespaces/${namespace}/configmaps`,
      list: (_selectors, signal) => {
        listSignal = signal;
        return new Promise((_resolve, reject) =>
          signal.addEventListener("abort", () => reject(signal.reason), { once: true }),
        );
      },
    });
    const stop = new AbortController();
    const run = hanging.run(stop.signal);
    await until(() => listSignal !== undefined);
    stop.abort();
    await run;
    expect(listSignal?.aborted).toBe(true);
    expect(hanging.hasSynced()).toBe(false);
    // The signal really reaches the HTTP request of a generated API call.
    await expect(
      core.listNamespacedConfigMap({ namespace }, withSignal(AbortSignal.abort())),
    ).rejects.toThrow(/abort/i);
    expect(
      (await core.listNamespacedConfigMap({ namespace }, withSignal(AbortSignal.timeout(10_000))))
        .items,
    ).toBeDefined();
  });

  it("a 403 stops client-node's ListWatch for good; the informer keeps restarting until allowed", async () => {
    const user = `watcher-${randomBytes(3).toString("hex")}`;
    const denied = useTestPeers().controlPlane.clientFor(user, []);
    const cms = configMapInformer(denied, namespace, "forbidden");
    const stop = started(cms);
    await until(() => cms.restarts() >= 3);
    expect(cms.hasSynced()).toBe(false);
    const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace,
      body: {
        metadata: { name: user },
        rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["list", "watch"] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: user },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: user },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: user }],
      },
    });
    expect(await cms.waitForSync(undefined, 30_000)).toBe(true);
    stop.abort();
  });

  it("100 objects churned through informer → queue → reconcile: no update lost", async () => {
    const ns = `${namespace}-churn`;
    await core.createNamespace({ body: { metadata: { name: ns } } });
    try {
      const cms = configMapInformer(kc, ns, "churn");
      const reconciled = new Map<string, string | undefined>();
      const controller = new Controller({
        name: "churn",
        workers: 4,
        reconcile: async (key) => {
          // Reads the cache as a real reconcile would; a deleted object reads as absent.
          reconciled.set(key, cms.get(key)?.data?.v);
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 3));
          return undefined;
        },
      }).watch(cms);
      const stop = started(cms);
      const controllerStop = new AbortController();
      stops.push(controllerStop);
      const run = controller.run({ signal: controllerStop.signal });
      expect(await cms.waitForSync(undefined, 30_000)).toBe(true);
      const names = Array.from({ length: 100 }, (_, i) => `cm-${i}`);
      const inBatches = async (fn: (name: string, i: number) => Promise<unknown>) => {
        for (let i = 0; i < names.length; i += 20) {
          await Promise.all(names.slice(i, i + 20).map((name, j) => fn(name, i + j)));
        }
      };
      await inBatches((name) =>
        core.createNamespacedConfigMap({
          namespace: ns,
          body: { metadata: { name }, data: { v: "0" } },
        }),
      );
      for (let round = 1; round <= 3; round += 1) {
        await inBatches((name) =>
          core.replaceNamespacedConfigMap({
            namespace: ns,
            name,
            body: { metadata: { name }, data: { v: String(round) } },
          }),
        );
      }
      const deleted = new Set(names.filter((_, i) => i % 5 === 0));
      await inBatches((name) =>
        deleted.has(name)
          ? core.deleteNamespacedConfigMap({ namespace: ns, name })
          : core.replaceNamespacedConfigMap({
              namespace: ns,
              name,
              body: { metadata: { name }, data: { v: "final" } },
            }),
      );
      const expected = new Map(
        names.map((name) => [`${ns}/${name}`, deleted.has(name) ? undefined : "final"]),
      );
      await until(
        () =>
          controller.queue.len() === 0 &&
          controller.queue.inFlight() === 0 &&
          [...expected].every(([key, v]) => reconciled.has(key) && reconciled.get(key) === v),
        60_000,
      );
      // The cache equals the server, resourceVersion for resourceVersion.
      const server = await core.listNamespacedConfigMap({ namespace: ns });
      const fromServer = server.items
        .filter((c) => c.metadata?.name?.startsWith("cm-"))
        .map((c) => `${c.metadata?.name}@${c.metadata?.resourceVersion}`)
        .sort();
      const fromCache = cms
        .list(ns)
        .filter((c) => c.metadata?.name?.startsWith("cm-"))
        .map((c) => `${c.metadata?.name}@${c.metadata?.resourceVersion}`)
        .sort();
      expect(fromCache).toEqual(fromServer);
      expect(fromCache).toHaveLength(80);
      controllerStop.abort();
      stop.abort();
      await run;
    } finally {
      await core.deleteNamespace({ name: ns }).catch(() => undefined);
    }
  });
});

describe("Informer on a control plane of its own", () => {
  let plane: ControlPlane;
  let own: CoreV1Api;
  const ns = "restarts";

  beforeAll(async () => {
    // Watches served from etcd (no watch cache) and etcd compacted every second, so a watch
    // resumed from an old resourceVersion gets 410 Gone.
    plane = await startControlPlane({
      apiserverArgs: ["--watch-cache=false", "--etcd-compaction-interval=1s"],
    });
    own = plane.kubeConfig().makeApiClient(CoreV1Api);
    await own.createNamespace({ body: { metadata: { name: ns } } });
  });

  afterAll(async () => {
    await plane?.stop();
  });

  it("survives a kube-apiserver restart (restarts with back-off, then sees new objects)", async () => {
    const cms = configMapInformer(plane.kubeConfig(), ns, "restart");
    const stop = started(cms);
    expect(await cms.waitForSync(undefined, 30_000)).toBe(true);
    await own.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: "before-restart" } },
    });
    await until(() => cms.get(`${ns}/before-restart`) !== undefined);
    await plane.restartApiServer({ downMs: 2000 });
    await own.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: "after-restart" } },
    });
    await until(() => cms.get(`${ns}/after-restart`) !== undefined, 60_000);
    expect(cms.restarts()).toBeGreaterThan(0);
    expect(cms.get(`${ns}/before-restart`)).toBeDefined();
    stop.abort();
  });

  it("re-lists after 410 Gone and drops what was deleted meanwhile", async () => {
    let lists = 0;
    const cms = new Informer<V1ConfigMap>({
      kubeConfig: plane.kubeConfig(),
      name: "gone",
      path: `/api/v1/namespaces/${ns}/configmaps`,
      labelSelector: "set=gone",
      restartBackoff: { initialMs: 100, maxMs: 1000 },
      list: (selectors) => {
        lists += 1;
        return own.listNamespacedConfigMap({ namespace: ns, ...selectors }) as Promise<
          KubernetesListObject<V1ConfigMap>
        >;
      },
    });
    const labels = { set: "gone" };
    await own.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: "stays", labels } },
    });
    await own.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: "goes", labels } },
    });
    const stop = started(cms);
    expect(await cms.waitForSync(undefined, 30_000)).toBe(true);
    expect(lists).toBe(1);
    // Writes the informer does not see (other labels) move the cluster's resourceVersion on;
    // compaction then drops the informer's resourceVersion from etcd.
    for (let i = 0; i < 5; i += 1) {
      await own.createNamespacedConfigMap({
        namespace: ns,
        body: { metadata: { name: `noise-${i}` } },
      });
    }
    // Let compaction pass the informer's resourceVersion (its live watch is unaffected), then
    // break the watch: it resumes from a compacted resourceVersion.
    await new Promise((resolve) => setTimeout(resolve, 4000));
    await plane.restartApiServer();
    await own.deleteNamespacedConfigMap({ namespace: ns, name: "goes" });
    await own.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: "new", labels } },
    });
    await until(
      () => cms.get(`${ns}/new`) !== undefined && cms.get(`${ns}/goes`) === undefined,
      60_000,
    );
    expect(lists).toBeGreaterThan(1);
    expect([...cms.keys()].sort()).toEqual([`${ns}/new`, `${ns}/stays`]);
    stop.abort();
  });
});
