import type { V1Pod, V1PodSpec, V1PodStatus } from "@kubernetes/client-node";
import { MemoryPodLedger } from "@nebula/teardown";
import { describe, expect, it } from "vitest";
import { INSTANCE_ANNOTATIONS, parseVirtualNodeConfig } from "./config.js";
import type {
  FoundInstance,
  InstanceReclaimer,
  PodInstanceInfo,
  PodLifecycle,
} from "./lifecycle.js";
import type { PodApi, PodRef } from "./pod-api.js";
import { type LaunchLedger, PodController, type RecordedLaunch } from "./pod-controller.js";
import { PodTeardown } from "./pod-teardown.js";

const FINALIZER = "nebula.dev/instance-reclaim";
const INSTANCE = "i-0123456789abcdef0";

/**
 * The world the controller drives, reduced to its interfaces, with one log of every call in order:
 * the provider (what it was told), the reclaimer (EC2 as the teardown sees it) and the Pod API.
 * (The real provider against moto and the real API server run in the app's end-to-end tests.)
 */
class World implements PodLifecycle, InstanceReclaimer {
  readonly log: string[] = [];
  readonly pods = new Map<string, V1Pod>();
  readonly states = new Map<string, string>();
  readonly present = new Set<string>();
  /** The annotations each `annotate` call wrote, in order. */
  readonly annotated: Record<string, string>[] = [];
  failAddFinalizer = false;
  async createPod(pod: V1Pod): Promise<void> {
    this.log.push(`createPod ${pod.metadata?.name}`);
  }
  async updatePod(pod: V1Pod): Promise<void> {
    this.log.push(
      `updatePod ${pod.metadata?.name}${pod.metadata?.deletionTimestamp ? " (deleting)" : ""}`,
    );
  }
  getPodStatus(): V1PodStatus | undefined {
    return undefined;
  }
  listPods(): readonly V1Pod[] {
    return [];
  }
  notifyPods(): () => void {
    return () => undefined;
  }
  forgetPod(uid: string): void {
    this.log.push(`forgetPod ${uid}`);
  }
  async findInstance(podUid: string): Promise<FoundInstance | undefined> {
    this.log.push(`findInstance ${podUid}`);
    const state = this.states.get(podUid);
    return state === undefined ? undefined : { instanceId: INSTANCE, state };
  }
  async stopInstance(id: string): Promise<void> {
    this.log.push(`stop ${id}`);
    for (const [uid, state] of this.states)
      if (state === "running") this.states.set(uid, "stopped");
  }
  async terminateInstance(id: string): Promise<void> {
    this.log.push(`terminate ${id}`);
    for (const uid of this.states.keys()) this.states.set(uid, "terminated");
  }
}

function setup(
  launches: readonly RecordedLaunch[] = [],
  ledgerOverride?: LaunchLedger,
  log?: (level: string, message: string) => void,
) {
  const world = new World();
  const ledger = new MemoryPodLedger();
  const api: PodApi = {
    addFinalizer: async (ref: PodRef, finalizer: string) => {
      world.log.push(`addFinalizer ${ref.name}`);
      if (world.failAddFinalizer) throw new Error("the API server refused the patch");
      const pod = world.pods.get(`${ref.namespace}/${ref.name}`);
      if (pod?.metadata) pod.metadata.finalizers = [...(pod.metadata.finalizers ?? []), finalizer];
    },
    removeFinalizer: async (ref: PodRef) => void world.log.push(`removeFinalizer ${ref.name}`),
    annotate: async (_ref: PodRef, annotations: Record<string, string>) =>
      void world.annotated.push({ ...annotations }),
    deleteNow: async (ref: PodRef) => {
      world.log.push(`deleteNow ${ref.name}`);
      world.present.delete(ref.uid);
    },
    exists: async (ref: PodRef) => world.present.has(ref.uid),
  };
  const teardown = new PodTeardown({
    store: ledger,
    prepare: async (ref) => {
      await ledger.ensure({ podUid: ref.uid, namespace: ref.namespace, name: ref.name });
    },
    reclaimer: world,
    removePod: (ref) => api.deleteNow(ref),
    podPresent: (ref) => api.exists(ref),
    headroomSeconds: 1,
  });
  const queued: string[] = [];
  const launchLedger: LaunchLedger = ledgerOverride ?? { launches: async () => launches };
  const controller = new PodController({
    config: parseVirtualNodeConfig({ nodeName: "vnode-test" }),
    pods: {
      get: (key) => world.pods.get(key),
      list: () => [...world.pods.values()],
    },
    provider: world,
    teardown,
    api,
    status: { write: async () => ({ outcome: "unchanged" as const }) },
    enqueue: (key) => void queued.push(key),
    ledger: launchLedger,
    ...(log === undefined ? {} : { log }),
  });
  return { world, ledger, controller, queued };
}

async function settle(controller: PodController, key: string): Promise<void> {
  for (let i = 0; i < 30; i++) {
    const { requeueAfter } = await controller.reconcile(key);
    if (requeueAfter === undefined) return;
    await new Promise((resolve) => setTimeout(resolve, Math.min(requeueAfter, 20)));
  }
  throw new Error(`${key} did not settle`);
}

/**
 * A Pod already launched (`default/job-0`, UID `uid-1`, with the finalizer; the `spec` and `status`
 * given: its instance in `state`, recorded in the ledger, the Pod present) and a controller whose
 * status writes land in the world, as the informer shows the API server: the written status is
 * what the next reconcile reads. Every write is kept in `written` (then `afterWrite` runs), every
 * Event in `events`.
 */
async function launched(
  { spec, status }: { spec: V1PodSpec; status: V1PodStatus },
  state: string,
  now: { t: number },
  options: {
    readonly afterWrite?: () => void;
    readonly metrics?: ConstructorParameters<typeof PodController>[0]["metrics"];
  } = {},
) {
  const world = new World();
  world.states.set("uid-1", state);
  world.present.add("uid-1");
  const pod: V1Pod = {
    metadata: {
      namespace: "default",
      name: "job-0",
      uid: "uid-1",
      finalizers: [FINALIZER],
      resourceVersion: "1",
    },
    spec,
    status,
  };
  world.pods.set("default/job-0", pod);
  const ledger = new MemoryPodLedger();
  await ledger.recordLaunch(
    { podUid: "uid-1", namespace: "default", name: "job-0" },
    { instanceId: INSTANCE },
  );
  const api: PodApi = {
    addFinalizer: async () => undefined,
    removeFinalizer: async (ref: PodRef) => void world.log.push(`removeFinalizer ${ref.name}`),
    annotate: async () => undefined,
    deleteNow: async () => undefined,
    exists: async (ref: PodRef) => world.present.has(ref.uid),
  };
  const teardown = new PodTeardown({
    store: ledger,
    reclaimer: world,
    removePod: (ref) => api.deleteNow(ref),
    podPresent: (ref) => api.exists(ref),
    headroomSeconds: 1,
    now: () => now.t,
    onTerminateSent: (uid) => controller.terminateSent(uid),
  });
  const written: V1PodStatus[] = [];
  const events: string[] = [];
  const controller: PodController = new PodController({
    config: parseVirtualNodeConfig({ nodeName: "vnode-test" }),
    pods: { get: (key) => world.pods.get(key), list: () => [...world.pods.values()] },
    provider: world,
    teardown,
    api,
    status: {
      write: async (address, desired) => {
        const stored = world.pods.get(`${address.namespace}/${address.name}`);
        if (stored !== undefined)
          world.pods.set(`${address.namespace}/${address.name}`, { ...stored, status: desired });
        written.push(structuredClone(desired));
        options.afterWrite?.();
        return { outcome: "written" as const };
      },
    },
    events: { record: async (e) => void events.push(`${e.type} ${e.reason}: ${e.note}`) },
    enqueue: () => undefined,
    ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
    now: () => now.t,
  });
  return { world, controller, written, events };
}

describe("PodController", () => {
  it("a new Pod gets the reclaim finalizer before the provider hears of it; no finalizer, no launch", async () => {
    const { world, controller } = setup();
    const pod = (name: string, uid: string): V1Pod => ({
      metadata: { namespace: "default", name, uid },
      spec: { nodeName: "vnode-test", containers: [{ name: "app", image: "busybox" }] },
    });
    world.pods.set("default/web-1", pod("web-1", "uid-new"));
    // A running Pod is reconciled again and again (its status): three rounds are enough here.
    for (let i = 0; i < 3; i++) await controller.reconcile("default/web-1");
    const added = world.log.indexOf("addFinalizer web-1");
    expect(added).toBeGreaterThanOrEqual(0);
    expect(added).toBeLessThan(world.log.indexOf("createPod web-1"));
    expect(world.pods.get("default/web-1")?.metadata?.finalizers).toEqual([FINALIZER]);

    world.failAddFinalizer = true;
    world.pods.set("default/web-2", pod("web-2", "uid-refused"));
    await controller.reconcile("default/web-2").catch(() => undefined);
    await controller.reconcile("default/web-2").catch(() => undefined);
    expect(world.log).toContain("addFinalizer web-2");
    expect(world.log).not.toContain("createPod web-2");
  });

  it("shows what a Pod runs on in its annotations, its price at launch too (Spot or On-Demand)", async () => {
    const { world, controller } = setup();
    const pod = (name: string, uid: string): V1Pod => ({
      metadata: { namespace: "default", name, uid, finalizers: [FINALIZER] },
      spec: { nodeName: "vnode-test", containers: [{ name: "app", image: "busybox" }] },
    });
    const placed = async (p: V1Pod, instance: PodInstanceInfo) => {
      const key = `default/${p.metadata?.name}`;
      world.pods.set(key, p);
      await controller.reconcile(key);
      const delivered = controller.onStatusChange({
        pod: p,
        status: { phase: "Pending" },
        terminal: false,
        instance,
      });
      await controller.reconcile(key);
      await delivered;
      return world.annotated.at(-1);
    };
    expect(
      await placed(pod("od", "uid-od"), {
        instanceId: INSTANCE,
        instanceType: "m7i.large",
        availabilityZone: "us-east-1a",
        capacityType: "on-demand",
        priceUsdPerHour: "0.1008000000",
      }),
    ).toEqual({
      [INSTANCE_ANNOTATIONS.instanceId]: INSTANCE,
      [INSTANCE_ANNOTATIONS.instanceType]: "m7i.large",
      [INSTANCE_ANNOTATIONS.availabilityZone]: "us-east-1a",
      [INSTANCE_ANNOTATIONS.capacityType]: "on-demand",
      "nebula.dev/price-usd-per-hour": "0.1008000000",
    });
    expect(
      await placed(pod("spot", "uid-spot"), {
        instanceId: INSTANCE,
        capacityType: "spot",
        spotPriceUsdPerHour: "0.031200",
        priceUsdPerHour: "0.031200",
      }),
    ).toMatchObject({
      "nebula.dev/spot-price-usd-per-hour": "0.031200",
      "nebula.dev/price-usd-per-hour": "0.031200",
    });
    // No price known: no price annotation.
    expect(
      await placed(pod("unpriced", "uid-unpriced"), {
        instanceId: INSTANCE,
        capacityType: "on-demand",
      }),
    ).not.toHaveProperty(INSTANCE_ANNOTATIONS.price);
  });

  it("a Pod being deleted: the provider hears of the deletion before anything looks for its instance", async () => {
    const { world, controller } = setup();
    const pod: V1Pod = {
      metadata: {
        namespace: "default",
        name: "web-0",
        uid: "uid-1",
        finalizers: [FINALIZER],
        deletionTimestamp: new Date(),
        deletionGracePeriodSeconds: 30,
      },
      spec: { containers: [{ name: "app", image: "busybox" }] },
    };
    world.pods.set("default/web-0", pod);
    await controller.reconcile("default/web-0");
    const told = world.log.indexOf("updatePod web-0 (deleting)");
    expect(told).toBeGreaterThanOrEqual(0);
    expect(told).toBeLessThan(world.log.indexOf("findInstance uid-1"));
  });

  it("terminalToTerminate: from the terminal status written to the teardown's TerminateInstances, once per Pod", async () => {
    const now = { t: 1_000_000 };
    const finished = new Date(now.t - 500).toISOString();
    const measured: number[] = [];
    const { world, controller } = await launched(
      {
        spec: {
          nodeName: "vnode-test",
          restartPolicy: "Never",
          containers: [{ name: "app", image: "busybox" }],
        },
        status: { phase: "Running" },
      },
      "stopped",
      now,
      {
        afterWrite: () => {
          now.t += 100;
        },
        metrics: { terminalToTerminate: (seconds) => measured.push(seconds) },
      },
    );
    world.getPodStatus = () => ({
      phase: "Succeeded",
      containerStatuses: [
        {
          name: "app",
          image: "busybox",
          imageID: "",
          ready: false,
          restartCount: 0,
          state: {
            terminated: { exitCode: 0, reason: "Completed", finishedAt: new Date(finished) },
          },
        },
      ],
    });
    const written = now.t + 100;
    for (let i = 0; i < 10 && !world.log.includes(`terminate ${INSTANCE}`); i++) {
      await controller.reconcile("default/job-0");
      now.t += 250;
    }
    expect(world.log).toContain(`terminate ${INSTANCE}`);
    // Measured from the status written (not from the exit, 0.6 s earlier), once.
    expect(measured).toHaveLength(1);
    expect(measured[0]).toBeGreaterThan(0);
    expect(measured[0]).toBeCloseTo((now.t - 250 - written) / 1000, 5);
    controller.terminateSent("uid-1");
    controller.terminateSent("uid-other");
    expect(measured).toHaveLength(1);
  });

  it("activeDeadlineSeconds: looked at again when the deadline passes, then Failed/DeadlineExceeded as the kubelet writes it, then its containers stopped and its instance terminated", async () => {
    const now = { t: Date.parse("2026-12-03T08:00:00Z") };
    const running = {
      name: "app",
      image: "busybox",
      imageID: "",
      ready: true,
      restartCount: 0,
      state: { running: { startedAt: new Date(now.t - 9_000) } },
    };
    const { world, controller, written, events } = await launched(
      {
        spec: {
          nodeName: "vnode-test",
          activeDeadlineSeconds: 30,
          terminationGracePeriodSeconds: 5,
          containers: [{ name: "app", image: "busybox" }],
        },
        status: {
          phase: "Running",
          startTime: new Date(now.t - 10_000),
          conditions: [{ type: "Ready", status: "True" }],
          containerStatuses: [running],
        },
      },
      "running",
      now,
    );
    world.getPodStatus = () => ({
      phase: "Running",
      conditions: [{ type: "Ready", status: "True" }],
      containerStatuses: [running],
    });
    // 20 s left: the next look is then, not at the minute's resync.
    expect(await controller.reconcile("default/job-0")).toEqual({ requeueAfter: 20_000 });
    expect(world.pods.get("default/job-0")?.status?.phase).toBe("Running");
    now.t += 20_000;
    await controller.reconcile("default/job-0");
    const failed = world.pods.get("default/job-0")?.status;
    expect(failed).toMatchObject({
      phase: "Failed",
      reason: "DeadlineExceeded",
      message: "Pod was active on the node longer than the specified deadline",
    });
    expect(failed?.conditions?.find((c) => c.type === "Ready")).toMatchObject({
      status: "False",
      reason: "PodCompleted",
    });
    expect(failed?.containerStatuses?.[0]?.ready).toBe(false);
    expect(events).toContain(
      "Normal DeadlineExceeded: Pod was active on the node longer than the specified deadline",
    );
    expect(world.log).not.toContain(`stop ${INSTANCE}`);
    // Terminal now: the teardown stops the instance with the Pod's grace.
    await controller.reconcile("default/job-0");
    expect(world.log).toContain(`stop ${INSTANCE}`);
    // The host's final report: the container stopped. The Pod stays Failed/DeadlineExceeded and
    // shows the container's end.
    world.getPodStatus = () => ({
      phase: "Failed",
      containerStatuses: [
        {
          ...running,
          ready: false,
          state: {
            terminated: {
              exitCode: 143,
              reason: "Error",
              startedAt: running.state.running.startedAt,
              finishedAt: new Date(now.t + 1_000),
            },
          },
        },
      ],
    });
    for (let i = 0; i < 10 && !world.log.includes(`terminate ${INSTANCE}`); i++) {
      await controller.reconcile("default/job-0");
      now.t += 2_000;
    }
    expect(world.log).toContain(`terminate ${INSTANCE}`);
    const last = world.pods.get("default/job-0")?.status;
    expect(last).toMatchObject({ phase: "Failed", reason: "DeadlineExceeded" });
    expect(last?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 143,
      reason: "Error",
    });
    // Every status written after the failure kept it.
    const after = written.slice(written.findIndex((s) => s.phase === "Failed"));
    expect(after.every((s) => s.phase === "Failed" && s.reason === "DeadlineExceeded")).toBe(true);
  });

  it("sweepLedger: a launch whose Pod is gone (proven by a read) is torn down and forgotten; a live Pod's and another node's are left alone", async () => {
    const gone: RecordedLaunch = {
      podUid: "uid-gone",
      namespace: "a",
      name: "gone",
      reclaimable: true,
    };
    const live: RecordedLaunch = {
      podUid: "uid-live",
      namespace: "a",
      name: "live",
      reclaimable: true,
    };
    const foreign: RecordedLaunch = {
      podUid: "uid-foreign",
      namespace: "a",
      name: "foreign",
      reclaimable: false,
    };
    const { world, ledger, controller, queued } = setup([gone, live, foreign]);
    // "live" is not in the informer's cache yet, but the API server has it.
    world.present.add("uid-live");
    world.states.set("uid-gone", "running");
    await ledger.recordLaunch(
      { podUid: "uid-gone", namespace: "a", name: "gone" },
      { instanceId: INSTANCE },
    );
    expect(await controller.sweepLedger()).toBe(1);
    expect(queued).toEqual(["ledger:uid-gone"]);
    // A second sweep while the first is queued queues nothing new.
    expect(await controller.sweepLedger()).toBe(0);
    await settle(controller, "ledger:uid-gone");
    const stop = world.log.indexOf(`stop ${INSTANCE}`);
    const terminate = world.log.indexOf(`terminate ${INSTANCE}`);
    expect(stop).toBeGreaterThanOrEqual(0);
    expect(terminate).toBeGreaterThan(stop);
    expect(world.log.indexOf("forgetPod uid-gone")).toBeGreaterThan(terminate);
    expect(world.log.some((l) => l.includes("uid-live") || l.includes("uid-foreign"))).toBe(false);
  });

  it("sweepLedgerEvery: sweeps after the first wait, then every interval, until aborted; a failed sweep is tried again", async () => {
    let reads = 0;
    const logs: string[] = [];
    const { world, controller, queued } = setup(
      [],
      {
        launches: async () => {
          reads++;
          if (reads === 1) throw new Error("ledger unreadable");
          return [{ podUid: "uid-gone", namespace: "a", name: "gone", reclaimable: true }];
        },
      },
      (level, message) => logs.push(`${level}: ${message}`),
    );
    world.states.set("uid-gone", "running");
    const stop = new AbortController();
    const running = controller.sweepLedgerEvery(stop.signal, { firstAfterMs: 1, everyMs: 5 });
    while (reads < 3) await new Promise((resolve) => setTimeout(resolve, 2));
    stop.abort();
    await running;
    expect(queued).toEqual(["ledger:uid-gone"]);
    expect(logs).toEqual([
      "warn: ledger sweep failed; trying again later: Error: ledger unreadable",
      "info: pod a/gone (UID uid-gone) is gone but its instance was not reclaimed: tearing it down",
      "info: ledger sweep: 1 teardown(s) of gone Pods queued",
    ]);
  });
});
