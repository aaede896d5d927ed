import { describe, expect, it, vi } from "vitest";
import { ProviderError } from "./errors.js";
import { ParameterDelivery } from "./parameter-delivery.js";
import { PREPARED_REASON } from "./pool-plan.js";
import { refreshState } from "./record.js";
import { testContext, testRecord } from "./testing/context.js";
import type { FakeInstance } from "./testing/fake-gateway.js";
import { testPod } from "./testing/fixtures.js";
import { WarmPool } from "./warm-pool.js";

const ENTRY = { name: "small", instanceType: "m7i.large", size: 2 };

function setup() {
  const t = testContext({ warmPool: [ENTRY] });
  const parameters = new ParameterDelivery(t.ctx);
  const pool = new WarmPool(t.ctx, parameters);
  return { ...t, pool };
}

/** Lists the fake's instances as the poll would (the latest listing). */
async function poll(t: ReturnType<typeof setup>) {
  t.ctx.listing = (await t.gateway.listNodeInstances()).instances;
  t.ctx.listingReadAt = t.clock.now;
}

/** Plays the hosts the pool launched as booted, prepared and powered off. */
function prepareAll(t: ReturnType<typeof setup>): FakeInstance[] {
  const hosts = [...t.gateway.instances.values()].filter((i) =>
    i.Tags.some((tag) => tag.Key === "nebula:pool"),
  );
  for (const host of hosts) {
    if (host.State.Name === "pending" || host.State.Name === "running") {
      host.State = { Name: "stopped" };
      (host as FakeInstance & { StateReason?: unknown }).StateReason = {
        Code: PREPARED_REASON,
        Message: "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
      };
    }
  }
  return hosts;
}

async function readyPool(t: ReturnType<typeof setup>): Promise<FakeInstance[]> {
  await poll(t);
  await t.pool.reconcile();
  const hosts = prepareAll(t);
  await poll(t);
  await t.pool.reconcile();
  expect(t.pool.status().entries[0]).toMatchObject({ ready: 2, target: 2 });
  return hosts;
}

const uid = (n: number) => `44444444-0000-4000-8000-${n.toString().padStart(12, "0")}`;

describe("WarmPool", () => {
  it("launches pool hosts with the pool's token, tags and stop-on-power-off", async () => {
    const t = setup();
    await poll(t);
    await t.pool.reconcile();
    const runs = t.gateway.calls.filter((c) => c.action === "runInstances");
    expect(runs).toHaveLength(2);
    const input = runs[0]?.arg as {
      ClientToken: string;
      InstanceInitiatedShutdownBehavior: string;
      TagSpecifications: { Tags: { Key: string; Value: string }[] }[];
    };
    expect(input.ClientToken).toMatch(/^pool-[0-9a-f-]{36}$/);
    expect(input.InstanceInitiatedShutdownBehavior).toBe("stop");
    const tags = Object.fromEntries(
      (input.TagSpecifications[0]?.Tags ?? []).map((x) => [x.Key, x.Value]),
    );
    expect(tags).toMatchObject({ "nebula:pool": "small", "nebula:node": "nebula-node" });
    expect(tags["nebula:pod-uid"]).toBeUndefined();
    // Launched and not yet listed: not launched again by the next pass.
    await t.pool.reconcile();
    expect(t.gateway.calls.filter((c) => c.action === "runInstances")).toHaveLength(2);
  });

  it("two Pods created at once take two different hosts; a third finds none and launches cold", async () => {
    const t = setup();
    const hosts = await readyPool(t);
    const records = [1, 2, 3].map((n) => {
      const record = testRecord(t.ctx, testPod(`p${n}`, uid(n)));
      t.ctx.records.set(record.facts.uid, record);
      return record;
    });
    const taken = await Promise.all(records.map((r) => t.pool.take(r)));
    expect(taken).toEqual([true, true, false]);
    const ids = records.map((r) => r.instanceId);
    expect(new Set(ids.slice(0, 2)).size).toBe(2);
    expect(ids[2]).toBeUndefined();
    expect(hosts.map((h) => h.InstanceId).sort()).toEqual([...ids.slice(0, 2)].sort());
    // The order of a take: the ledger, the Pod tags, the user-data, the start.
    const id = ids[0] ?? "";
    const order = t.gateway.calls
      .filter(
        (c) =>
          (c.action === "tagInstance" && (c.arg as { instanceId: string }).instanceId === id) ||
          ((c.action === "setUserData" || c.action === "startInstance") && c.arg === id),
      )
      .map((c) => c.action);
    expect(order).toEqual(["tagInstance", "setUserData", "startInstance"]);
    expect((await t.ledger.get(uid(1)))?.launch).toMatchObject({
      instanceId: records[0]?.instanceId,
      clientToken: expect.stringMatching(/^pool-/),
    });
    expect(records[0]?.warm).toEqual({ entry: "small", started: true });
  });

  it("a host the pool is terminating is never taken, while its termination is under way", async () => {
    const t = setup();
    await readyPool(t);
    // The entry shrinks to one: the pass terminates one ready host.
    (t.ctx.config.warmPool[0] as { size: number }).size = 1;
    let release = (): void => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const terminated: string[] = [];
    const terminate = t.gateway.terminateInstance.bind(t.gateway);
    t.gateway.terminateInstance = async (id) => {
      terminated.push(id);
      await held;
      return terminate(id);
    };
    await poll(t);
    const pass = t.pool.reconcile();
    await vi.waitFor(() => expect(terminated).toHaveLength(1));
    const record = testRecord(t.ctx, testPod("p", uid(1)));
    t.ctx.records.set(record.facts.uid, record);
    expect(await t.pool.take(record)).toBe(true);
    expect(record.instanceId).toBeDefined();
    expect(record.instanceId).not.toBe(terminated[0]);
    release();
    await pass;
  });

  it("a Pod whose assignment the ledger refuses launches cold, and the host stays the pool's", async () => {
    const t = setup();
    await readyPool(t);
    const record = testRecord(t.ctx, testPod("p", uid(1)));
    t.ctx.records.set(record.facts.uid, record);
    vi.spyOn(t.ledger, "recordLaunch").mockRejectedValueOnce(new Error("conflict"));
    const events: string[] = [];
    t.pool.onEvent((e) => events.push(e.kind === "miss" ? `miss:${e.reason}` : e.kind));
    expect(await t.pool.take(record)).toBe(false);
    expect(record.instanceId).toBeUndefined();
    expect(events).toEqual(["miss:unrecorded"]);
    expect(t.gateway.calls.some((c) => c.action === "startInstance")).toBe(false);
    await poll(t);
    await t.pool.reconcile();
    expect(t.pool.status().entries[0]?.ready).toBe(2);
  });

  it("until StartInstances is answered, the Pod is pending, not read from the stopped host", async () => {
    const t = setup();
    await readyPool(t);
    const record = testRecord(t.ctx, testPod("p", uid(1)));
    t.ctx.records.set(record.facts.uid, record);
    t.gateway.fail("startInstance", new ProviderError("Unavailable", "down"));
    expect(await t.pool.take(record)).toBe(true);
    expect(record.warm).toEqual({ entry: "small", started: false });
    expect(record.launchError?.message).toMatch(/could not be started yet/);
    await poll(t);
    const listed = t.ctx.listing?.find((i) => i.instanceId === record.instanceId);
    expect(listed?.state).toBe("stopped");
    record.observed = listed;
    record.seen = true;
    refreshState(t.ctx, record);
    expect(record.state?.kind).toBe("Pending");
    // The next resume finishes it.
    await t.pool.resume(record);
    expect(record.warm?.started).toBe(true);
  });

  it("a new process finds the assignment in the ledger and resumes the take on the same host", async () => {
    const t = setup();
    await readyPool(t);
    const record = testRecord(t.ctx, testPod("p", uid(1)));
    t.ctx.records.set(record.facts.uid, record);
    t.gateway.fail("setUserData", new ProviderError("Unavailable", "killed"));
    await t.pool.take(record);
    const host = record.instanceId;
    // The next process: a fresh pool over the same ledger and EC2, the record as the ledger has it.
    const next = new WarmPool(t.ctx, new ParameterDelivery(t.ctx));
    const entry = (await t.ledger.get(uid(1)))?.launch;
    const again = testRecord(t.ctx, testPod("p", uid(1)), {
      launchRequested: true,
      instanceId: entry?.instanceId ?? "",
      clientToken: entry?.clientToken ?? "",
    });
    t.ctx.records.set(uid(1), again);
    await poll(t);
    expect(next.recover(again)).toBe(true);
    expect(again.warm).toEqual({ entry: "small", started: false });
    await next.resume(again);
    expect(again.warm?.started).toBe(true);
    expect(again.instanceId).toBe(host);
    // The pool of the next process does not count the assigned host as its own: one ready, and
    // one launched to replace the taken one.
    await poll(t);
    const launchesBefore = t.gateway.count("runInstances");
    await next.reconcile();
    expect(next.status().entries[0]).toMatchObject({ ready: 1, preparing: 0 });
    expect(t.gateway.count("runInstances")).toBe(launchesBefore + 1);
  });
});
