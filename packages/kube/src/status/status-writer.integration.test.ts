/**
 * StatusWriter against a real kube-apiserver + etcd (from @nebula/test-peers): writes counted by
 * a watch on the object, conditions owned by others, conflicts, deleted and recreated objects,
 * millisecond times, server-side apply, and a custom resource's status subresource.
 */
import { randomBytes } from "node:crypto";
import {
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
  type V1PodCondition,
  Watch,
} from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { buildCrd, installCrd } from "../crd/crd.js";
import { PODS, ResourceClient } from "./resource-client.js";
import type { JsonObject } from "./status-values.js";
import { StatusWriter } from "./status-writer.js";

const namespace = `status-${randomBytes(4).toString("hex")}`;
let kc: KubeConfig;
let core: CoreV1Api;

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  kc = controlPlane.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});

afterAll(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
});

async function createPod(name: string): Promise<V1Pod> {
  return core.createNamespacedPod({
    namespace,
    body: { metadata: { name }, spec: { containers: [{ name: "app", image: "busybox" }] } },
  });
}

/** Conditions another component owns, written by that component (its own field manager). */
async function addForeignConditions(name: string): Promise<V1PodCondition[]> {
  const conditions = [
    { type: "PodScheduled", status: "True", lastTransitionTime: "2026-01-02T03:04:05Z" },
    {
      type: "DisruptionTarget",
      status: "True",
      reason: "EvictionByEvictionAPI",
      message: "Eviction API: evicting",
      lastTransitionTime: "2026-01-02T03:04:06Z",
    },
  ];
  // A merge patch replaces the whole list: this writer keeps what is there, as it should.
  const existing = ((await rawPod(name)).status as { conditions?: JsonObject[] }).conditions ?? [];
  const pod = await core.patchNamespacedPodStatus(
    {
      name,
      namespace,
      body: { status: { conditions: [...existing, ...conditions] } },
      fieldManager: "kube-scheduler",
    },
    setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
  );
  return pod.status?.conditions ?? [];
}

/** Raw JSON of a Pod (times as the server stores them, not as client-node's Dates). */
async function rawPod(name: string): Promise<JsonObject> {
  return new ResourceClient(kc, PODS).get({ namespace, name });
}

/** Counts MODIFIED events of one Pod from a real watch, starting at `resourceVersion`. */
async function watchModifications(name: string, resourceVersion: string) {
  const seen: string[] = [];
  const controller = await new Watch(kc).watch(
    `/api/v1/namespaces/${namespace}/pods`,
    { fieldSelector: `metadata.name=${name}`, resourceVersion, allowWatchBookmarks: false },
    (phase, object: V1Pod) => {
      if (phase === "MODIFIED") seen.push(object.metadata?.resourceVersion ?? "");
    },
    () => undefined,
  );
  return {
    seen,
    stop: () => controller.abort(),
    /** Waits (deadline 10 s) until at least `count` modifications were seen. */
    async waitFor(count: number) {
      const deadline = Date.now() + 10_000;
      while (seen.length < count && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}

describe("StatusWriter on Pods (merge patch)", () => {
  const desired = (now: Date) => ({
    phase: "Running",
    hostIP: "10.0.0.7",
    podIP: "10.0.0.8",
    startTime: new Date("2026-11-30T10:00:00.000Z"),
    conditions: [
      { type: "Initialized", status: "True", lastTransitionTime: now },
      { type: "Ready", status: "True", lastTransitionTime: now },
    ],
  });

  it("writes once, then 0 writes over 100 reconciles of the unchanged object (counted by a watch)", async () => {
    await createPod("steady");
    await addForeignConditions("steady");
    const writer = new StatusWriter(kc, { resource: PODS, fieldManager: "nebula-vnode" });
    const first = await writer.write({ namespace, name: "steady" }, desired(new Date()));
    expect(first.outcome).toBe("written");
    if (first.outcome !== "written") return;

    const watch = await watchModifications("steady", first.resourceVersion);
    const outcomes = new Map<string, number>();
    for (let i = 0; i < 100; i++) {
      // Each reconcile computes its status afresh, "now" included, as a controller does; half of
      // them compare against a fresh GET by the writer, half against the object read by the caller.
      const current =
        i % 2 === 0 ? undefined : await core.readNamespacedPod({ name: "steady", namespace });
      const result = await writer.write(
        { namespace, name: "steady" },
        desired(new Date()),
        current ? { current } : {},
      );
      outcomes.set(result.outcome, (outcomes.get(result.outcome) ?? 0) + 1);
    }
    expect(Object.fromEntries(outcomes)).toEqual({ unchanged: 100 });

    // The watch is live: one real change is seen, and it is the only modification since the first write.
    const change = await writer.write(
      { namespace, name: "steady" },
      { ...desired(new Date()), phase: "Succeeded" },
    );
    expect(change.outcome).toBe("written");
    await watch.waitFor(1);
    watch.stop();
    expect(watch.seen).toEqual([change.outcome === "written" ? change.resourceVersion : ""]);
  });

  it("keeps conditions it does not own exactly as stored", async () => {
    await createPod("foreign");
    const writer = new StatusWriter(kc, { resource: PODS, fieldManager: "nebula-vnode" });
    await writer.write({ namespace, name: "foreign" }, desired(new Date()));
    await addForeignConditions("foreign");
    const before = (await rawPod("foreign")).status as { conditions: JsonObject[] };
    const foreign = before.conditions.filter(
      (c) => c.type === "PodScheduled" || c.type === "DisruptionTarget",
    );
    expect(foreign).toHaveLength(2);

    const result = await writer.write(
      { namespace, name: "foreign" },
      {
        ...desired(new Date()),
        conditions: [
          { type: "Ready", status: "False", reason: "Stopping", lastTransitionTime: new Date() },
        ],
      },
    );
    expect(result.outcome).toBe("written");
    const after = (await rawPod("foreign")).status as { conditions: JsonObject[]; phase: string };
    expect(
      after.conditions.filter((c) => c.type === "PodScheduled" || c.type === "DisruptionTarget"),
    ).toEqual(foreign);
    expect(after.conditions.find((c) => c.type === "Ready")).toMatchObject({
      status: "False",
      reason: "Stopping",
    });
    // Initialized was written by this writer earlier and is not in this desired list: types not
    // declared as owned are left alone, so it stays.
    expect(after.conditions.map((c) => c.type).sort()).toEqual([
      "DisruptionTarget",
      "Initialized",
      "PodScheduled",
      "Ready",
    ]);
  });

  it("removes an owned condition type the desired status leaves out, and only that one", async () => {
    await createPod("owned");
    const writer = new StatusWriter(kc, {
      resource: PODS,
      ownedConditions: ["Initialized", "Ready", "ContainersReady"],
    });
    await writer.write({ namespace, name: "owned" }, desired(new Date()));
    await addForeignConditions("owned");
    const result = await writer.write(
      { namespace, name: "owned" },
      { conditions: [{ type: "Ready", status: "True", lastTransitionTime: new Date() }] },
    );
    expect(result.outcome).toBe("written");
    const after = (await rawPod("owned")).status as { conditions: JsonObject[] };
    expect(after.conditions.map((c) => c.type).sort()).toEqual([
      "DisruptionTarget",
      "PodScheduled",
      "Ready",
    ]);
  });

  it("reports a conflict when the object changed since it was read, and writes nothing", async () => {
    await createPod("conflict");
    const writer = new StatusWriter(kc, { resource: PODS });
    const stale = await core.readNamespacedPod({ name: "conflict", namespace });
    await core.patchNamespacedPod(
      { name: "conflict", namespace, body: { metadata: { labels: { touched: "yes" } } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    const before = await rawPod("conflict");
    const result = await writer.write({ namespace, name: "conflict" }, desired(new Date()), {
      current: stale,
    });
    expect(result).toEqual({ outcome: "conflict" });
    const after = await rawPod("conflict");
    expect((after.metadata as JsonObject).resourceVersion).toBe(
      (before.metadata as JsonObject).resourceVersion,
    );
  });

  it("reports gone for a deleted object and for one recreated under the same name", async () => {
    const writer = new StatusWriter(kc, { resource: PODS });
    expect(await writer.write({ namespace, name: "never-existed" }, desired(new Date()))).toEqual({
      outcome: "gone",
    });

    const old = await createPod("recreated");
    await core.deleteNamespacedPod({ name: "recreated", namespace, gracePeriodSeconds: 0 });
    expect(
      await writer.write({ namespace, name: "recreated" }, desired(new Date()), { current: old }),
    ).toEqual({
      outcome: "gone",
    });
    const fresh = await createPod("recreated");
    // A write for the old incarnation: by its cached object, and by its UID.
    expect(
      await writer.write({ namespace, name: "recreated" }, desired(new Date()), { current: old }),
    ).toEqual({
      outcome: "gone",
    });
    expect(
      await writer.write({ namespace, name: "recreated" }, desired(new Date()), {
        uid: old.metadata?.uid ?? "",
      }),
    ).toEqual({ outcome: "gone" });
    const untouched = await core.readNamespacedPod({ name: "recreated", namespace });
    expect(untouched.metadata?.resourceVersion).toBe(fresh.metadata?.resourceVersion);
  });

  it("writes a millisecond time once, truncated to whole seconds, then reports it unchanged", async () => {
    await createPod("millis");
    const writer = new StatusWriter(kc, { resource: PODS });
    const at = new Date("2026-11-30T12:34:56.789Z");
    const status = {
      phase: "Running",
      startTime: at,
      conditions: [
        { type: "Ready", status: "True", lastTransitionTime: "2026-11-30T12:34:57.123456Z" },
      ],
    };
    const first = await writer.write({ namespace, name: "millis" }, status);
    expect(first.outcome).toBe("written");
    const stored = (await rawPod("millis")).status as JsonObject & { conditions: JsonObject[] };
    expect(stored.startTime).toBe("2026-11-30T12:34:56Z");
    expect(stored.conditions.find((c) => c.type === "Ready")?.lastTransitionTime).toBe(
      "2026-11-30T12:34:57Z",
    );
    const again = [];
    for (let i = 0; i < 5; i++)
      again.push((await writer.write({ namespace, name: "millis" }, status)).outcome);
    expect(again).toEqual(["unchanged", "unchanged", "unchanged", "unchanged", "unchanged"]);
  });

  it("with exact time precision and a millisecond time, a Pod's status is written every time (the loop the default prevents)", async () => {
    await createPod("loop");
    const writer = new StatusWriter(kc, { resource: PODS, timePrecision: "exact" });
    const status = { phase: "Running", startTime: new Date("2026-11-30T12:34:56.789Z") };
    const outcomes = [];
    for (let i = 0; i < 3; i++)
      outcomes.push((await writer.write({ namespace, name: "loop" }, status)).outcome);
    expect(outcomes).toEqual(["written", "written", "written"]);
  });

  it("uses the caller's equality when given", async () => {
    await createPod("custom-equal");
    const writer = new StatusWriter<{ phase: string; message?: string }>(kc, {
      resource: PODS,
      // Only the phase matters to this caller: a new message alone is not worth a write.
      equal: (stored, next) => (stored as { phase?: string } | undefined)?.phase === next.phase,
    });
    expect(
      (await writer.write({ namespace, name: "custom-equal" }, { phase: "Running", message: "a" }))
        .outcome,
    ).toBe("written");
    expect(
      (await writer.write({ namespace, name: "custom-equal" }, { phase: "Running", message: "b" }))
        .outcome,
    ).toBe("unchanged");
    expect(((await rawPod("custom-equal")).status as JsonObject).message).toBe("a");
  });
});

describe("StatusWriter on Pods (server-side apply)", () => {
  it("applies with its field manager, keeps others' conditions, and skips unchanged writes", async () => {
    await createPod("apply");
    await addForeignConditions("apply");
    const writer = new StatusWriter(kc, {
      resource: PODS,
      strategy: "apply",
      fieldManager: "nebula-vnode",
    });
    const status = {
      phase: "Running",
      conditions: [{ type: "Ready", status: "True", lastTransitionTime: new Date() }],
    };
    expect((await writer.write({ namespace, name: "apply" }, status)).outcome).toBe("written");
    expect((await writer.write({ namespace, name: "apply" }, status)).outcome).toBe("unchanged");
    const pod = await rawPod("apply");
    const conditions = (pod.status as { conditions: JsonObject[] }).conditions;
    expect(conditions.map((c) => c.type).sort()).toEqual([
      "DisruptionTarget",
      "PodScheduled",
      "Ready",
    ]);
    const managers = ((pod.metadata as JsonObject).managedFields as JsonObject[]).map(
      (m) => `${m.manager}/${m.operation}`,
    );
    expect(managers).toContain("nebula-vnode/Apply");
  });
});

describe("StatusWriter on a custom resource", () => {
  const group = "status.test.nebula.dev";
  const resource = { group, version: "v1alpha1", plural: "gadgets", kind: "Gadget" };

  beforeAll(async () => {
    const condition = z.object({
      type: z.string(),
      status: z.enum(["True", "False", "Unknown"]),
      reason: z.string().optional(),
      lastTransitionTime: z.iso.datetime(),
    });
    await installCrd(
      kc,
      buildCrd({
        group,
        kind: "Gadget",
        plural: "gadgets",
        versions: [
          {
            name: "v1alpha1",
            spec: z.object({ size: z.number().int().min(0) }),
            status: z.object({
              observedGeneration: z.number().int().optional(),
              phase: z.string().optional(),
              conditions: z.array(condition).optional(),
            }),
          },
        ],
      }),
      { timeoutMs: 60_000 },
    );
  });

  it("writes the status subresource only on change and keeps foreign conditions", async () => {
    const objects = kc.makeApiClient(CustomObjectsApi);
    await objects.createNamespacedCustomObject({
      group,
      version: "v1alpha1",
      namespace,
      plural: "gadgets",
      body: {
        apiVersion: `${group}/v1alpha1`,
        kind: "Gadget",
        metadata: { name: "g1" },
        spec: { size: 3 },
      },
    });
    await objects.patchNamespacedCustomObjectStatus(
      {
        group,
        version: "v1alpha1",
        namespace,
        plural: "gadgets",
        name: "g1",
        body: {
          status: {
            conditions: [
              { type: "Audited", status: "True", lastTransitionTime: "2026-01-01T00:00:00Z" },
            ],
          },
        },
      },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    const writer = new StatusWriter(kc, { resource, fieldManager: "nebula-operator" });
    const status = {
      observedGeneration: 1,
      phase: "Ready",
      conditions: [{ type: "Ready", status: "True", lastTransitionTime: new Date() }],
    };
    expect((await writer.write({ namespace, name: "g1" }, status)).outcome).toBe("written");
    const outcomes = [];
    for (let i = 0; i < 10; i++)
      outcomes.push(
        (
          await writer.write(
            { namespace, name: "g1" },
            {
              ...status,
              conditions: [{ type: "Ready", status: "True", lastTransitionTime: new Date() }],
            },
          )
        ).outcome,
      );
    expect(new Set(outcomes)).toEqual(new Set(["unchanged"]));
    const stored = (await objects.getNamespacedCustomObject({
      group,
      version: "v1alpha1",
      namespace,
      plural: "gadgets",
      name: "g1",
    })) as {
      status: { phase: string; conditions: JsonObject[] };
      spec: { size: number };
    };
    expect(stored.spec.size).toBe(3);
    expect(stored.status.phase).toBe("Ready");
    expect(stored.status.conditions.find((c) => c.type === "Audited")).toEqual({
      type: "Audited",
      status: "True",
      lastTransitionTime: "2026-01-01T00:00:00Z",
    });
    await objects.deleteNamespacedCustomObject({
      group,
      version: "v1alpha1",
      namespace,
      plural: "gadgets",
      name: "g1",
    });
    expect(await writer.write({ namespace, name: "g1" }, { ...status, phase: "Gone" })).toEqual({
      outcome: "gone",
    });
  });
});
