import { V1MicroTime } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseVirtualNodeConfig, VirtualNodeConfigSchema } from "./config.js";
import { VirtualNodeError } from "./errors.js";
import {
  buildLease,
  buildNode,
  DRAIN_CORDON_ANNOTATION,
  drainCondition,
  isDrained,
  nodeConditions,
  nodeSpecPatch,
  nodeStatus,
  nodeStatusChanged,
} from "./node.js";

const config = parseVirtualNodeConfig({
  nodeName: "nebula-1",
  capacity: { cpu: "64", memory: "256Gi", pods: "30" },
  labels: { "topology.kubernetes.io/zone": "us-east-1a" },
});
const healthy = { ready: true, reason: "EC2Reachable", message: "EC2 answers the poll" };
const down = { ready: false, reason: "EC2Unavailable", message: "EC2 failed 3 polls" };
const t0 = new Date("2026-11-30T15:00:00.750Z");

describe("buildNode", () => {
  it("carries the virtual-kubelet labels, the provider label, the taint and the configured capacity", () => {
    const node = buildNode(config, healthy, t0);
    expect(node.metadata?.labels).toMatchObject({
      type: "virtual-kubelet",
      "kubernetes.io/role": "agent",
      "kubernetes.io/os": "linux",
      "nebula.dev/provider": "nebula",
      "kubernetes.io/hostname": "nebula-1",
      "topology.kubernetes.io/zone": "us-east-1a",
    });
    expect(node.spec?.taints).toEqual([
      { key: "virtual-kubelet.io/provider", value: "nebula", effect: "NoSchedule" },
    ]);
    expect(node.status?.capacity).toEqual({ cpu: "64", memory: "256Gi", pods: "30" });
    expect(node.status?.allocatable).toEqual({ cpu: "64", memory: "256Gi", pods: "30" });
    expect(node.status?.daemonEndpoints?.kubeletEndpoint?.Port).toBe(10250);
    expect(node.status?.addresses).toContainEqual({ type: "InternalIP", address: "127.0.0.1" });
    expect(node.status?.nodeInfo).toMatchObject({
      operatingSystem: "linux",
      architecture: "amd64",
    });
  });

  it("allocatable can differ from capacity", () => {
    const c = parseVirtualNodeConfig({
      nodeName: "n",
      capacity: { pods: "10" },
      allocatable: { pods: "8" },
    });
    expect(nodeStatus(c, healthy, t0).allocatable).toEqual({ pods: "8" });
  });
});

describe("nodeConditions", () => {
  it("Ready follows the provider's health, the pressures are False, times are whole seconds", () => {
    const conditions = nodeConditions(healthy, t0, undefined);
    expect(conditions.map((c) => [c.type, c.status])).toEqual([
      ["Ready", "True"],
      ["MemoryPressure", "False"],
      ["DiskPressure", "False"],
      ["PIDPressure", "False"],
      ["NetworkUnavailable", "False"],
    ]);
    expect(conditions[0]).toMatchObject({
      reason: "EC2Reachable",
      message: "EC2 answers the poll",
    });
    expect(conditions[0]?.lastHeartbeatTime?.toISOString()).toBe("2026-11-30T15:00:00.000Z");
    const outage = nodeConditions(down, new Date(t0.getTime() + 60_000), conditions);
    expect(outage[0]).toMatchObject({ status: "False", reason: "EC2Unavailable" });
    expect(outage[0]?.lastTransitionTime?.toISOString()).toBe("2026-11-30T15:01:00.000Z");
    // Unchanged conditions keep their transition time.
    expect(outage[1]?.lastTransitionTime?.toISOString()).toBe("2026-11-30T15:00:00.000Z");
  });

  it("property: the transition time moves only when the status changes", () => {
    fc.assert(
      fc.property(fc.array(fc.boolean(), { minLength: 1, maxLength: 20 }), (readies) => {
        let previous: ReturnType<typeof nodeConditions> | undefined;
        let lastChange = 0;
        readies.forEach((ready, i) => {
          const now = new Date(t0.getTime() + i * 10_000);
          const next = nodeConditions(ready ? healthy : down, now, previous);
          const before = previous?.[0]?.status;
          if (before !== (ready ? "True" : "False")) lastChange = i;
          expect(next[0]?.lastTransitionTime?.getTime()).toBe(
            Math.floor((t0.getTime() + lastChange * 10_000) / 1000) * 1000,
          );
          previous = next;
        });
      }),
    );
  });
});

describe("nodeStatusChanged", () => {
  it("ignores heartbeat times, sees health and capacity changes", () => {
    const a = nodeStatus(config, healthy, t0);
    const b = nodeStatus(config, healthy, new Date(t0.getTime() + 30_000), a.conditions);
    expect(nodeStatusChanged(a, b)).toBe(false);
    expect(nodeStatusChanged(a, nodeStatus(config, down, t0))).toBe(true);
    const bigger = parseVirtualNodeConfig({ ...config, capacity: { pods: "31" } });
    expect(nodeStatusChanged(a, nodeStatus(bigger, healthy, t0))).toBe(true);
    expect(nodeStatusChanged(undefined, a)).toBe(true);
  });

  it("reads quantities by value, as the API server stores them (1000 comes back as 1k)", () => {
    const written = nodeStatus(
      parseVirtualNodeConfig({
        ...config,
        capacity: { cpu: "1000", memory: "4398046511104", pods: "1000", storage: "0.5" },
      }),
      healthy,
      t0,
    );
    const stored = {
      ...written,
      capacity: { cpu: "1k", memory: "4Ti", pods: "1e3", storage: "500m" },
      allocatable: { cpu: "1k", memory: "4Ti", pods: "1e3", storage: "500m" },
    };
    expect(nodeStatusChanged(stored, written)).toBe(false);
    expect(
      nodeStatusChanged({ ...stored, capacity: { ...stored.capacity, pods: "1001" } }, written),
    ).toBe(true);
    expect(
      nodeStatusChanged({ ...stored, capacity: { ...stored.capacity, pods: "x" } }, written),
    ).toBe(true);
  });
});

describe("buildLease", () => {
  it("is owned by the Node, held by its name, 40 s, renewTime a MicroTime with 6 digits", () => {
    const lease = buildLease(config, "node-uid-1", t0);
    expect(lease.metadata).toMatchObject({
      name: "nebula-1",
      namespace: "kube-node-lease",
      ownerReferences: [{ kind: "Node", name: "nebula-1", uid: "node-uid-1" }],
    });
    expect(lease.spec?.leaseDurationSeconds).toBe(40);
    expect(lease.spec?.holderIdentity).toBe("nebula-1");
    expect(lease.spec?.renewTime).toBeInstanceOf(V1MicroTime);
    expect(lease.spec?.renewTime?.toISOString()).toBe("2026-11-30T15:00:00.750000Z");
  });
});

describe("parseVirtualNodeConfig", () => {
  it("applies the kubelet's defaults", () => {
    const c = parseVirtualNodeConfig({ nodeName: "nebula" });
    expect(c).toMatchObject({
      provider: "nebula",
      leaseDurationSeconds: 40,
      leaseRenewIntervalSeconds: 10,
      statusUpdateIntervalSeconds: 60,
      taintEffect: "NoSchedule",
      podFinalizer: "nebula.dev/instance-reclaim",
    });
  });

  it("lists every problem in one InvalidConfiguration error", () => {
    let caught: unknown;
    try {
      parseVirtualNodeConfig({ nodeName: "Bad_Name", capacity: { cpu: "lots" }, extra: 1 });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(VirtualNodeError);
    expect((caught as VirtualNodeError).code).toBe("InvalidConfiguration");
    expect((caught as Error).message).toContain("nodeName");
    expect((caught as Error).message).toContain("capacity.cpu");
    expect((caught as Error).message).toContain("extra");
  });

  it("property: any valid config builds a Node whose labels and taint are well formed", () => {
    fc.assert(
      fc.property(
        fc.stringMatching(/^[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?$/),
        fc.integer({ min: 1, max: 100_000 }),
        (name, pods) => {
          const c = VirtualNodeConfigSchema.parse({
            nodeName: name,
            capacity: { pods: String(pods) },
          });
          const node = buildNode(c, healthy, t0);
          expect(node.metadata?.name).toBe(name);
          expect(node.spec?.taints?.[0]?.key).toBe("virtual-kubelet.io/provider");
          expect(node.status?.capacity?.pods).toBe(String(pods));
        },
      ),
    );
  });
});

describe("drain", () => {
  const draining = parseVirtualNodeConfig({ nodeName: "nebula-2", drain: true });
  const plain = parseVirtualNodeConfig({ nodeName: "nebula-2" });

  it("is off by default; with it the Node registers cordoned and marked as cordoned by the drain", () => {
    expect(plain.drain).toBe(false);
    expect(buildNode(plain, healthy, t0).spec?.unschedulable).toBeUndefined();
    const node = buildNode(draining, healthy, t0, undefined, { pods: 3, instances: 3 });
    expect(node.spec?.unschedulable).toBe(true);
    expect(node.metadata?.annotations).toEqual({ [DRAIN_CORDON_ANNOTATION]: "true" });
    expect(node.status?.conditions?.at(-1)).toMatchObject({
      type: "Drained",
      status: "False",
      reason: "Draining",
    });
    expect(buildNode(plain, healthy, t0).status?.conditions?.map((c) => c.type)).not.toContain(
      "Drained",
    );
  });

  it("is done only when no Pod and no instance is left, both observed", () => {
    expect(isDrained({ pods: 0, instances: 0 })).toBe(true);
    expect(isDrained({ pods: 0, instances: 1 })).toBe(false);
    expect(isDrained({ pods: 1, instances: 0 })).toBe(false);
    expect(isDrained({ pods: undefined, instances: 0 })).toBe(false);
    expect(isDrained({ pods: 0, instances: undefined })).toBe(false);
  });

  it("Drained says what is left, turns True at zero, and keeps its transition time while unchanged", () => {
    const left = drainCondition({ pods: 2, instances: 1 }, t0, undefined);
    expect(left).toMatchObject({ status: "False", reason: "Draining" });
    expect(left.message).toContain("2 Pods bound and 1 instance not terminated");
    expect(drainCondition({ pods: undefined, instances: 0 }, t0, undefined).message).toContain(
      "not known yet",
    );
    const later = new Date(t0.getTime() + 30_000);
    expect(drainCondition({ pods: 1, instances: 1 }, later, [left]).lastTransitionTime).toEqual(
      new Date("2026-11-30T15:00:00.000Z"),
    );
    const done = drainCondition({ pods: 0, instances: 0 }, later, [left]);
    expect(done).toMatchObject({ status: "True", reason: "Drained" });
    expect(done.lastTransitionTime).toEqual(new Date("2026-11-30T15:00:30.000Z"));
    // A count that changes is a status change (written); the same counts are not.
    const status = (p: { pods: number; instances: number }) =>
      nodeStatus(draining, healthy, t0, undefined, p);
    expect(
      nodeStatusChanged(status({ pods: 2, instances: 2 }), status({ pods: 1, instances: 2 })),
    ).toBe(true);
    expect(
      nodeStatusChanged(status({ pods: 2, instances: 2 }), status({ pods: 2, instances: 2 })),
    ).toBe(false);
  });

  const stored = (
    config: typeof plain,
    spec: { unschedulable?: boolean; marked?: boolean; extraTaints?: object[] } = {},
  ) => {
    const node = buildNode(config, healthy, t0);
    return {
      ...node,
      metadata: {
        ...node.metadata,
        annotations: spec.marked ? { [DRAIN_CORDON_ANNOTATION]: "true" } : {},
      },
      spec: {
        taints: [...(node.spec?.taints ?? []), ...((spec.extraTaints ?? []) as [])],
        ...(spec.unschedulable === undefined ? {} : { unschedulable: spec.unschedulable }),
      },
    };
  };

  it("cordons an uncordoned Node and marks it; leaves a cordoned one alone", () => {
    const desired = buildNode(draining, healthy, t0);
    expect(nodeSpecPatch(desired, stored(plain), true)).toEqual({
      metadata: {
        labels: desired.metadata?.labels,
        annotations: { [DRAIN_CORDON_ANNOTATION]: "true" },
      },
      spec: { unschedulable: true },
    });
    // Cordoned by hand (no mark) or by the drain: nothing to do.
    expect(nodeSpecPatch(desired, stored(plain, { unschedulable: true }), true)).toBeUndefined();
    expect(
      nodeSpecPatch(desired, stored(plain, { unschedulable: true, marked: true }), true),
    ).toBeUndefined();
  });

  it("with the drain off, uncordons only a Node the drain cordoned", () => {
    const desired = buildNode(plain, healthy, t0);
    expect(
      nodeSpecPatch(desired, stored(plain, { unschedulable: true, marked: true }), false),
    ).toEqual({
      metadata: {
        labels: desired.metadata?.labels,
        annotations: { [DRAIN_CORDON_ANNOTATION]: null },
      },
      spec: { unschedulable: false },
    });
    expect(nodeSpecPatch(desired, stored(plain, { unschedulable: true }), false)).toBeUndefined();
    expect(nodeSpecPatch(desired, stored(plain), false)).toBeUndefined();
  });

  it("keeps others' taints (the controller manager's unschedulable one) and adds the configured ones", () => {
    const pool = parseVirtualNodeConfig({
      nodeName: "gpu-1",
      labels: { "nebula.dev/pool": "gpu" },
      taints: [{ key: "nebula.dev/pool", value: "gpu", effect: "NoSchedule" }],
    });
    const desired = buildNode(pool, healthy, t0);
    expect(desired.spec?.taints).toEqual([
      { key: "virtual-kubelet.io/provider", value: "nebula", effect: "NoSchedule" },
      { key: "nebula.dev/pool", value: "gpu", effect: "NoSchedule" },
    ]);
    const kcm = { key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" };
    // Registered before the pool's taint was configured, then cordoned.
    const before = stored(plain, { unschedulable: true, extraTaints: [kcm] });
    expect(nodeSpecPatch(desired, before, false)?.spec).toEqual({
      taints: [...(desired.spec?.taints ?? []), kcm],
    });
    // Up to date, with someone else's taint: nothing to write (the order does not matter).
    const current = { ...before, spec: { taints: [kcm, ...(desired.spec?.taints ?? [])] } };
    expect(
      nodeSpecPatch(desired, { ...current, metadata: desired.metadata ?? {} }, false),
    ).toBeUndefined();
  });

  it("rejects a bad taint in the configuration", () => {
    expect(() =>
      parseVirtualNodeConfig({ nodeName: "n", taints: [{ key: "bad key", effect: "NoSchedule" }] }),
    ).toThrow(VirtualNodeError);
    expect(() =>
      parseVirtualNodeConfig({ nodeName: "n", taints: [{ key: "k", effect: "Sometimes" }] }),
    ).toThrow(/taints/);
  });
});
