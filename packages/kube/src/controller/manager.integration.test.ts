/**
 * The manager against a real kube-apiserver: the ordered shutdown (stop leading → drain → release
 * the Lease → close the server), a standby that is Ready without leading, and a failover that
 * hands the work to the standby.
 */
import { randomBytes } from "node:crypto";
import {
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  type KubernetesListObject,
  type V1ConfigMap,
  V1MicroTime,
} from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Informer } from "../cache/informer.js";
import { Controller, type Reconciler } from "./controller.js";
import { Manager, type ShutdownPhase } from "./manager.js";

const namespace = `manager-${randomBytes(4).toString("hex")}`;
let kc: KubeConfig;
let core: CoreV1Api;
let leases: CoordinationV1Api;
const stops: AbortController[] = [];

beforeAll(async () => {
  kc = useTestPeers().controlPlane.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  leases = kc.makeApiClient(CoordinationV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});

afterAll(async () => {
  for (const stop of stops) stop.abort();
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
});

async function until(
  condition: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function get(
  url: string | undefined,
  path: string,
): Promise<{ status: number; body: string }> {
  const response = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(5000) });
  return { status: response.status, body: await response.text() };
}

const timing = { leaseDurationMs: 3000, renewDeadlineMs: 2000, retryPeriodMs: 200 };

function app(identity: string, lease: string, labelSelector: string, reconcile: Reconciler) {
  const phases: ShutdownPhase[] = [];
  const manager = new Manager({
    name: "test-app",
    kubeConfig: kc,
    metricsBindAddress: "127.0.0.1:0",
    healthProbeBindAddress: "127.0.0.1:0",
    handleSignals: false,
    leaderElection: { namespace, name: lease, identity, ...timing },
    onShutdownPhase: (phase) => phases.push(phase),
  });
  const informer = new Informer<V1ConfigMap>({
    kubeConfig: kc,
    name: `configmaps-${identity}`,
    path: `/api/v1/namespaces/${namespace}/configmaps`,
    labelSelector,
    metrics: manager.metrics,
    list: (selectors) =>
      core.listNamespacedConfigMap({ namespace, ...selectors }) as Promise<
        KubernetesListObject<V1ConfigMap>
      >,
  });
  manager.addController(
    new Controller({ name: `cm-${identity}`, reconcile, metrics: manager.metrics }).watch(informer),
  );
  const stop = new AbortController();
  stops.push(stop);
  const exit = manager.run(stop.signal);
  return { manager, phases, stop, exit };
}

describe("Manager against the real apiserver", () => {
  it("stops in order: stop leading → drain in-flight work → release the Lease → close the server", async () => {
    let release: () => void = () => {};
    let reconcileSignal: AbortSignal | undefined;
    const reconciling: string[] = [];
    const a = app("a", "ordered", "app=ordered", async (key, signal) => {
      reconciling.push(key);
      reconcileSignal = signal;
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return undefined;
    });
    await until(() => a.manager.isLeader());
    const urls = a.manager.urls();
    await until(async () => (await get(urls.health, "/readyz")).status === 200);
    await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: "slow", labels: { app: "ordered" } } },
    });
    await until(() => reconciling.length === 1);

    a.stop.abort();
    await until(() => a.phases.includes("stop-leading"));
    // Draining: the reconcile still runs, the Lease is still ours, the server still answers.
    expect(a.phases).toEqual(["stop-leading"]);
    expect(
      (await leases.readNamespacedLease({ namespace, name: "ordered" })).spec?.holderIdentity,
    ).toBe("a");
    expect(await get(urls.health, "/readyz")).toEqual({ status: 503, body: "shutting down\n" });
    expect((await get(urls.health, "/healthz")).status).toBe(200);
    expect((await get(urls.metrics, "/metrics")).body).toContain(
      "nebula_leader_election_is_leader",
    );

    release();
    expect(await a.exit).toEqual({ reason: "stopped", exitCode: 0 });
    expect(a.phases).toEqual(["stop-leading", "drained", "lease-released", "server-closed"]);
    expect(reconcileSignal?.aborted).toBe(false);
    expect(
      (await leases.readNamespacedLease({ namespace, name: "ordered" })).spec?.holderIdentity ?? "",
    ).toBe("");
    await expect(get(urls.health, "/healthz")).rejects.toThrow();
  });

  it("a standby is Ready without leading and takes the work over when the leader stops", async () => {
    await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: "shared", labels: { app: "failover" } } },
    });
    const byA: string[] = [];
    const byB: string[] = [];
    const a = app("a2", "failover", "app=failover", (key) => {
      byA.push(key);
      return undefined;
    });
    await until(() => a.manager.isLeader());
    await until(() => byA.length === 1);
    const b = app("b2", "failover", "app=failover", (key) => {
      byB.push(key);
      return undefined;
    });
    await until(
      async () =>
        b.manager.urls().health !== undefined &&
        (await get(b.manager.urls().health, "/readyz")).status === 200,
    );
    const bUrls = b.manager.urls();
    expect(b.manager.isLeader()).toBe(false);
    expect(byB).toEqual([]);
    const metrics = await get(bUrls.metrics, "/metrics");
    expect(metrics.body).toContain('nebula_informer_synced{informer="configmaps-b2"} 1');

    a.stop.abort();
    expect(await a.exit).toEqual({ reason: "stopped", exitCode: 0 });
    // Released, so the standby leads before the 3 s lease could have expired, then reconciles.
    await until(() => b.manager.isLeader(), timing.leaseDurationMs);
    await until(() => byB.length === 1);
    expect(byB).toEqual([`${namespace}/shared`]);
    b.stop.abort();
    expect(await b.exit).toEqual({ reason: "stopped", exitCode: 0 });
  });

  it("a lost Lease aborts in-flight reconciles and ends the run with exit code 1", async () => {
    let reconcileSignal: AbortSignal | undefined;
    const a = app("a3", "lost", "app=lost", (_key, signal) => {
      reconcileSignal = signal;
      return new Promise<undefined>((resolve) =>
        signal.addEventListener("abort", () => resolve(undefined), { once: true }),
      );
    });
    await until(() => a.manager.isLeader());
    await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: "stuck", labels: { app: "lost" } } },
    });
    await until(() => reconcileSignal !== undefined);
    const lease = await leases.readNamespacedLease({ namespace, name: "lost" });
    const now = new V1MicroTime();
    await leases.replaceNamespacedLease({
      namespace,
      name: "lost",
      body: {
        ...lease,
        spec: {
          ...lease.spec,
          holderIdentity: "intruder",
          leaseDurationSeconds: 60,
          renewTime: now,
        },
      },
    });
    expect(await a.exit).toEqual({ reason: "leadership-lost", exitCode: 1 });
    expect(reconcileSignal?.aborted).toBe(true);
    expect(a.phases).toEqual(["stop-leading", "drained", "server-closed"]);
  });
});
