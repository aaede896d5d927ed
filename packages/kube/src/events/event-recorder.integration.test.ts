/**
 * EventRecorder against a real kube-apiserver + etcd (from @nebula/test-peers): series
 * aggregation, distinct Events per reason, per-object and global rate limits, MicroTime on the
 * wire, cluster-scoped subjects, and failures that never reach the caller.
 */
import { randomBytes } from "node:crypto";
import {
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  type EventsV1Event,
  type KubeConfig,
} from "@kubernetes/client-node";
import { startControlPlane } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventRecorder, type EventRecorderOptionsInput } from "./event-recorder.js";

const namespace = `events-${randomBytes(4).toString("hex")}`;
let kc: KubeConfig;
let core: CoreV1Api;
let events: EventsV1Api;
let clientFor: (user: string, groups: string[]) => KubeConfig;

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  kc = controlPlane.kubeConfig();
  clientFor = (user, groups) => controlPlane.clientFor(user, groups);
  core = kc.makeApiClient(CoreV1Api);
  events = kc.makeApiClient(EventsV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});

afterAll(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
});

const pod = (name: string) => ({
  apiVersion: "v1",
  kind: "Pod",
  namespace,
  name,
  uid: `uid-${name}`,
});

function recorder(extra: Partial<EventRecorderOptionsInput> = {}): EventRecorder {
  return new EventRecorder(kc, {
    reportingController: "nebula.dev/test",
    reportingInstance: "test-0",
    flushIntervalMs: 60_000, // series go out on flush() only: the writes are then exact
    ...extra,
  });
}

async function eventsAbout(name: string, ns = namespace): Promise<EventsV1Event[]> {
  const list = await events.listNamespacedEvent({ namespace: ns });
  return list.items.filter((e) => e.regarding?.name === name);
}

describe("EventRecorder", () => {
  it("aggregates 50 identical occurrences into 1 Event whose series count is 50", async () => {
    const r = recorder();
    const outcomes: string[] = [];
    for (let i = 0; i < 50; i++) {
      outcomes.push(
        await r.record({
          regarding: pod("crashing"),
          type: "Warning",
          reason: "BackOff",
          action: "Restart",
          note: `restart ${i}`,
        }),
      );
    }
    await r.close();
    expect(outcomes[0]).toBe("created");
    expect(outcomes.slice(1).every((o) => o === "aggregated")).toBe(true);
    expect(r.stats()).toEqual({ created: 1, patched: 1, aggregated: 49, dropped: 0, failed: 0 });

    const stored = await eventsAbout("crashing");
    expect(stored).toHaveLength(1);
    const [event] = stored;
    expect(event?.series?.count).toBe(50);
    expect(event?.note).toBe("restart 0");
    expect(event).toMatchObject({
      type: "Warning",
      reason: "BackOff",
      action: "Restart",
      reportingController: "nebula.dev/test",
      reportingInstance: "test-0",
      regarding: { kind: "Pod", name: "crashing", namespace, uid: "uid-crashing" },
    });
  });

  it("writes eventTime and series.lastObservedTime as MicroTime (six fractional digits)", async () => {
    const r = recorder();
    await r.record({ regarding: pod("micro"), type: "Normal", reason: "Started", action: "Start" });
    await r.record({ regarding: pod("micro"), type: "Normal", reason: "Started", action: "Start" });
    await r.close();
    // Raw JSON (client-node's typed client would turn the times into Dates).
    const parsed = (await kc.makeApiClient(CustomObjectsApi).listNamespacedCustomObject({
      group: "events.k8s.io",
      version: "v1",
      namespace,
      plural: "events",
      fieldSelector: "regarding.name=micro",
    })) as {
      items: Array<{ eventTime: string; series: { count: number; lastObservedTime: string } }>;
    };
    expect(parsed.items).toHaveLength(1);
    expect(parsed.items[0]?.eventTime).toMatch(/\.\d{6}Z$/);
    expect(parsed.items[0]?.series.lastObservedTime).toMatch(/\.\d{6}Z$/);
    expect(parsed.items[0]?.series.count).toBe(2);
  });

  it("makes distinct Events for distinct reasons, actions and types", async () => {
    const r = recorder();
    const base = { regarding: pod("distinct") } as const;
    await r.record({ ...base, type: "Normal", reason: "Scheduled", action: "Bind" });
    await r.record({ ...base, type: "Normal", reason: "Pulled", action: "Bind" });
    await r.record({ ...base, type: "Normal", reason: "Pulled", action: "Pull" });
    await r.record({ ...base, type: "Warning", reason: "Pulled", action: "Pull" });
    await r.record({ ...base, type: "Warning", reason: "Pulled", action: "Pull" });
    await r.close();
    const stored = await eventsAbout("distinct");
    expect(
      stored.map((e) => `${e.type}/${e.reason}/${e.action}/${e.series?.count ?? 1}`).sort(),
    ).toEqual([
      "Normal/Pulled/Bind/1",
      "Normal/Pulled/Pull/1",
      "Normal/Scheduled/Bind/1",
      "Warning/Pulled/Pull/2",
    ]);
  });

  it("starts a new Event when a repeat comes after the series window", async () => {
    let now = Date.parse("2026-11-30T12:00:00Z");
    const r = recorder({ seriesWindowMs: 60_000, now: () => now });
    const occurrence = {
      regarding: pod("windowed"),
      type: "Normal",
      reason: "Synced",
      action: "Sync",
    } as const;
    expect(await r.record(occurrence)).toBe("created");
    now += 30_000;
    expect(await r.record(occurrence)).toBe("aggregated");
    now += 61_000;
    expect(await r.record(occurrence)).toBe("created");
    await r.close();
    const counts = (await eventsAbout("windowed")).map((e) => e.series?.count ?? 1).sort();
    expect(counts).toEqual([1, 2]);
  });

  it("drops new Events beyond the per-object burst and counts them; other objects are unaffected", async () => {
    const r = recorder({ perObject: { burst: 5, perSecond: 0 } });
    const outcomes: string[] = [];
    for (let i = 0; i < 8; i++) {
      outcomes.push(
        await r.record({
          regarding: pod("noisy"),
          type: "Normal",
          reason: `Reason${i}`,
          action: "Act",
        }),
      );
    }
    outcomes.push(
      await r.record({ regarding: pod("quiet"), type: "Normal", reason: "Reason0", action: "Act" }),
    );
    await r.close();
    expect(outcomes).toEqual([...Array(5).fill("created"), ...Array(3).fill("dropped"), "created"]);
    expect(r.stats()).toMatchObject({ created: 6, dropped: 3 });
    expect(await eventsAbout("noisy")).toHaveLength(5);
    expect(await eventsAbout("quiet")).toHaveLength(1);
  });

  it("drops beyond the global burst across objects, and keeps counting repeats it cannot write yet", async () => {
    const r = recorder({ global: { burst: 3, perSecond: 0 } });
    const outcomes: string[] = [];
    for (let i = 0; i < 5; i++) {
      outcomes.push(
        await r.record({
          regarding: pod(`global-${i}`),
          type: "Normal",
          reason: "Made",
          action: "Make",
        }),
      );
    }
    // A repeat of an existing Event is still counted; its series patch has no token left.
    outcomes.push(
      await r.record({
        regarding: pod("global-0"),
        type: "Normal",
        reason: "Made",
        action: "Make",
      }),
    );
    await r.close();
    expect(outcomes).toEqual(["created", "created", "created", "dropped", "dropped", "aggregated"]);
    expect(r.stats()).toEqual({ created: 3, patched: 0, aggregated: 1, dropped: 2, failed: 0 });
    const stored = (await events.listNamespacedEvent({ namespace })).items.filter((e) =>
      e.regarding?.name?.startsWith("global-"),
    );
    expect(stored.map((e) => e.regarding?.name).sort()).toEqual([
      "global-0",
      "global-1",
      "global-2",
    ]);
  });

  it("records Events about a cluster-scoped object in the default namespace", async () => {
    const r = recorder();
    const node = { apiVersion: "v1", kind: "Node", name: `vnode-${namespace}` };
    expect(
      await r.record({ regarding: node, type: "Normal", reason: "NodeReady", action: "Register" }),
    ).toBe("created");
    await r.close();
    const stored = await eventsAbout(node.name, "default");
    expect(stored).toHaveLength(1);
    await events.deleteNamespacedEvent({
      name: stored[0]?.metadata?.name ?? "",
      namespace: "default",
    });
  });

  it("never throws: a forbidden write and an invalid occurrence come back as failed and are logged", async () => {
    const warnings: string[] = [];
    const r = new EventRecorder(clientFor("nobody", []), {
      reportingController: "nebula.dev/test",
      reportingInstance: "test-0",
      logger: { warn: (_fields, message) => warnings.push(message) },
    });
    expect(
      await r.record({ regarding: pod("forbidden"), type: "Normal", reason: "X", action: "Y" }),
    ).toBe("failed");
    expect(
      await r.record({
        regarding: pod("forbidden"),
        type: "Loud" as "Normal",
        reason: "X",
        action: "Y",
      }),
    ).toBe("failed");
    await r.close();
    expect(
      await r.record({ regarding: pod("forbidden"), type: "Normal", reason: "X", action: "Y" }),
    ).toBe("dropped");
    expect(r.stats()).toEqual({ created: 0, patched: 0, aggregated: 0, dropped: 1, failed: 2 });
    expect(warnings).toEqual([
      "event recorder: creating an Event failed",
      "event recorder: invalid event dropped",
    ]);
    expect(await eventsAbout("forbidden")).toHaveLength(0);
  });

  it("writes pending series on its own timer", async () => {
    const r = recorder({ flushIntervalMs: 100 });
    const occurrence = {
      regarding: pod("timer"),
      type: "Normal",
      reason: "Tick",
      action: "Tick",
    } as const;
    for (let i = 0; i < 3; i++) await r.record(occurrence);
    const deadline = Date.now() + 10_000;
    while (r.stats().patched === 0 && Date.now() < deadline)
      await new Promise((ok) => setTimeout(ok, 50));
    expect(r.stats().patched).toBe(1);
    expect((await eventsAbout("timer"))[0]?.series?.count).toBe(3);
    await r.close();
  });

  it("retries a create the API server could not take, and the Event is written once it is back", async () => {
    // Its own control plane: this test stops the API server.
    const plane = await startControlPlane();
    try {
      const own = plane.kubeConfig();
      await own.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: "retry" } } });
      const warnings: string[] = [];
      const r = new EventRecorder(own, {
        reportingController: "nebula.dev/test",
        reportingInstance: "test-0",
        createAttempts: 6,
        logger: { warn: (_fields, message) => warnings.push(message) },
      });
      await plane.stopApiServer();
      const recording = r.record({
        regarding: { ...pod("while-down"), namespace: "retry" },
        type: "Warning",
        reason: "MandatorySecretNotFound",
        action: "Launch",
        note: 'secret "late" not found',
      });
      await new Promise((resolve) => setTimeout(resolve, 1500));
      await plane.startApiServer();
      expect(await recording).toBe("created");
      expect(warnings).toEqual([]);
      const written = await own
        .makeApiClient(EventsV1Api)
        .listNamespacedEvent({ namespace: "retry" });
      expect(written.items.map((e) => e.reason)).toEqual(["MandatorySecretNotFound"]);
      await r.close();
    } finally {
      await plane.stop();
    }
  }, 120_000);
});
