import { COMPLETE_PHASE, encodeRecord } from "@nebula/teardown";
import type { LeakCollected } from "@nebula/virtual-node";
import { describe, expect, it } from "vitest";
import { ProviderError } from "./errors.js";
import { type CollectedParameterLeak, LeakCollector } from "./leak-collector.js";
import { addOwnedInstance, T0, testContext, testRecord } from "./testing/context.js";
import { testPod } from "./testing/fixtures.js";

const ORPHANED = "nebula:orphaned-at";

function setup(overrides: Parameters<typeof testContext>[0] = {}) {
  const t = testContext(overrides);
  const live = new Set<string>();
  const collector = new LeakCollector(t.ctx, () => live);
  const leaks: LeakCollected[] = [];
  const parameterLeaks: CollectedParameterLeak[] = [];
  collector.onLeak((leak) => void leaks.push(leak));
  collector.onParameterLeak((leak) => void parameterLeaks.push(leak));
  /** A poll, then a pass (the collector works on the latest poll's listing). */
  const pass = async () => {
    t.ctx.listing = (await t.gateway.listNodeInstances()).instances;
    return collector.collect();
  };
  return { ...t, live, collector, leaks, parameterLeaks, pass };
}

const hasMark = (instance: { Tags: { Key: string }[] }) =>
  instance.Tags.some((tag) => tag.Key === ORPHANED);

describe("LeakCollector instances", () => {
  it("refuses to run without a listing", async () => {
    const { collector, gateway } = setup();
    await expect(collector.collect()).rejects.toMatchObject({ code: "Unavailable" });
    expect(gateway.calls).toEqual([]);
  });

  it("marks an orphan first and terminates it only on a later pass, after the confirmation delay", async () => {
    const { gateway, pass, clock, leaks } = setup();
    const orphan = addOwnedInstance(gateway, "uid-gone");
    const first = await pass();
    expect(first.mark).toEqual([orphan.InstanceId]);
    expect(first.terminate).toEqual([]);
    expect(hasMark(orphan)).toBe(true);
    expect(gateway.count("terminateInstance")).toBe(0);
    // A pass soon after (under a minute, and half the interval) still does not terminate.
    clock.advance(30_000);
    expect((await pass()).terminate).toEqual([]);
    expect(gateway.count("terminateInstance")).toBe(0);
    clock.advance(30_000);
    const third = await pass();
    expect(third.terminate).toEqual([orphan.InstanceId]);
    expect(orphan.State.Name).toBe("terminated");
    expect(leaks).toEqual([
      expect.objectContaining({ instanceId: orphan.InstanceId, podUid: "uid-gone" }),
    ]);
  });

  it("leaves a warm-pool host no Pod took to the pool (no mark, no warning); collects one whose Pod is gone", async () => {
    const { gateway, pass, clock, logs } = setup();
    const poolTags = [
      { Key: "nebula:cluster", Value: "test" },
      { Key: "nebula:node", Value: "nebula-node" },
      { Key: "nebula:pool", Value: "small" },
    ];
    const idle = gateway.addInstance("", {
      Tags: poolTags,
      State: { Name: "stopped" },
      ClientToken: "pool-1",
    });
    const used = gateway.addInstance("uid-gone", {
      Tags: [...poolTags, { Key: "nebula:pod-uid", Value: "uid-gone" }],
      ClientToken: "pool-2",
    });
    clock.advance(600_000);
    const first = await pass();
    expect(first.mark).toEqual([used.InstanceId]);
    clock.advance(60_000);
    expect((await pass()).terminate).toEqual([used.InstanceId]);
    expect(hasMark(idle)).toBe(false);
    expect(idle.State.Name).toBe("stopped");
    expect(logs.filter((l) => l.message.includes(idle.InstanceId))).toEqual([]);
  });

  it("unmarks an instance whose Pod became live, and never terminates it", async () => {
    const { gateway, pass, clock, live } = setup();
    const instance = addOwnedInstance(gateway, "uid-back");
    await pass();
    expect(hasMark(instance)).toBe(true);
    live.add("uid-back");
    clock.advance(120_000);
    const plan = await pass();
    expect(plan.unmark).toEqual([instance.InstanceId]);
    expect(plan.terminate).toEqual([]);
    expect(hasMark(instance)).toBe(false);
    // Orphaned again later: marked afresh, not terminated on the old mark.
    live.delete("uid-back");
    clock.advance(120_000);
    expect((await pass()).mark).toEqual([instance.InstanceId]);
    expect(gateway.count("terminateInstance")).toBe(0);
  });

  it("a Pod the provider knows counts as live even when the informer does not list it yet", async () => {
    const { ctx, gateway, pass } = setup();
    addOwnedInstance(gateway, "uid-known");
    testRecord(ctx, testPod("known", "uid-known"));
    expect((await pass()).mark).toEqual([]);
    expect(gateway.count("tagInstances")).toBe(0);
  });

  it("leaves an instance that does not prove Nebula launched it alone, and says why", async () => {
    const { gateway, pass, clock, logs } = setup();
    const foreign = gateway.addInstance("uid-foreign", { ClientToken: "someone-else" });
    await pass();
    clock.advance(600_000);
    const plan = await pass();
    expect(plan.unproven.map((u) => u.instanceId)).toEqual([foreign.InstanceId]);
    expect(hasMark(foreign)).toBe(false);
    expect(gateway.count("terminateInstance")).toBe(0);
    expect(logs.some((l) => l.message.includes(`leaves ${foreign.InstanceId} alone`))).toBe(true);
  });

  it("leaves an orphan younger than the grace (a launch in flight)", async () => {
    const { gateway, pass, clock } = setup();
    const young = addOwnedInstance(gateway, "uid-young", { LaunchTime: new Date(T0 - 60_000) });
    expect((await pass()).mark).toEqual([]);
    clock.advance(240_000); // 300 s old now
    expect((await pass()).mark).toEqual([young.InstanceId]);
  });

  it("a failed mark is logged; the instance is still terminated only after a later pass", async () => {
    const { gateway, pass, clock, logs } = setup();
    const orphan = addOwnedInstance(gateway, "uid-m");
    gateway.fail("tagInstances", new ProviderError("Throttled", "slow down"));
    await pass();
    expect(logs.some((l) => l.level === "warn")).toBe(true);
    expect(gateway.count("terminateInstance")).toBe(0);
    clock.advance(60_000);
    expect((await pass()).terminate).toEqual([orphan.InstanceId]);
  });
});

describe("LeakCollector parameters", () => {
  function put(gateway: ReturnType<typeof testContext>["gateway"], uid: string, ageMs: number) {
    const name = `/nebula/test/pods/${uid}/0`;
    gateway.parameters.set(name, { value: "x", tags: new Map(), lastModified: T0 - ageMs });
    return name;
  }

  it("deletes the old parameters no live Pod, teardown or live instance accounts for", async () => {
    const { gateway, ledger, pass, live, parameterLeaks } = setup({ podDelivery: "parameters" });
    const leaked = put(gateway, "uid-leak", 3_600_000);
    const young = put(gateway, "uid-young", 60_000);
    const liveOne = put(gateway, "uid-live", 3_600_000);
    live.add("uid-live");
    const tearing = put(gateway, "uid-tearing", 3_600_000);
    await ledger.recordLaunch(
      { podUid: "uid-tearing", namespace: "default", name: "t" },
      { requestedAt: T0 - 3_600_000, instanceId: "i-0123456789abcdef0" },
    );
    // A Pod of another virtual node of the cluster: its instance is live (another node's tag).
    const elsewhere = put(gateway, "uid-elsewhere", 3_600_000);
    gateway.addInstance("uid-elsewhere", {
      ClientToken: "uid-elsewhere",
      Tags: [
        { Key: "nebula:cluster", Value: "test" },
        { Key: "nebula:node", Value: "another-node" },
        { Key: "nebula:pod-uid", Value: "uid-elsewhere" },
      ],
    });

    const plan = await pass();
    expect(plan.parameters).toEqual({ delete: [leaked], podUids: ["uid-leak"] });
    expect([...gateway.parameters.keys()].sort()).toEqual(
      [young, liveOne, tearing, elsewhere].sort(),
    );
    expect(parameterLeaks.map((l) => l.podUid)).toEqual(["uid-leak"]);
  });

  it("deletes nothing when the live instances cannot be read", async () => {
    const { gateway, pass } = setup({ podDelivery: "parameters" });
    put(gateway, "uid-leak", 3_600_000);
    gateway.fail("podsWithLiveInstances", new ProviderError("Unavailable", "503"));
    const plan = await pass();
    expect(plan.parameters).toEqual({ delete: [], podUids: [] });
    expect(gateway.count("deleteParameters")).toBe(0);
    expect(gateway.parameters.size).toBe(1);
  });

  it("lists no parameters with user-data delivery", async () => {
    const { gateway, pass } = setup();
    put(gateway, "uid-leak", 3_600_000);
    await pass();
    expect(gateway.count("clusterPodParameters")).toBe(0);
    expect(gateway.parameters.size).toBe(1);
  });
});

describe("LeakCollector ledger sweep", () => {
  it("removes the entries of gone Pods never launched or whose teardown completed, and no other", async () => {
    const { ctx, ledger, pass, live } = setup();
    const base = (uid: string) => ({ podUid: uid, namespace: "default", name: uid });
    await ledger.ensure(base("uid-never"));
    await ledger.recordLaunch(base("uid-done"), {
      requestedAt: 1,
      instanceId: "i-0123456789abcdef0",
    });
    const done = await ledger.get("uid-done");
    const record = encodeRecord({
      v: 1,
      def: "nebula.dev/pod",
      cause: "DeletionRequested",
      startedAt: 1,
      phase: COMPLETE_PHASE,
      idx: 3,
      since: 2,
      attempt: 0,
      params: {},
    });
    expect(await ledger.write("uid-done", { record }, done?.version ?? "")).toMatchObject({
      status: "written",
    });
    await ledger.recordLaunch(base("uid-unfinished"), { requestedAt: 1 });
    await ledger.ensure(base("uid-live"));
    live.add("uid-live");
    await ledger.ensure(base("uid-known"));
    testRecord(ctx, testPod("known", "uid-known"));

    await pass();
    const left = (await ledger.list()).map((e) => e.launch.podUid).sort();
    expect(left).toEqual(["uid-known", "uid-live", "uid-unfinished"]);
  });
});
