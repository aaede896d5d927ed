import type { PodSources } from "@nebula/userdata";
import type { PodStatusChange } from "@nebula/virtual-node";
import { describe, expect, it } from "vitest";
import { Admitter, type AdmitterOptions } from "./admitter.js";
import { ProviderError } from "./errors.js";
import { Launcher } from "./launcher.js";
import { ParameterDelivery } from "./parameter-delivery.js";
import { podFacts } from "./pod.js";
import { PodTokens } from "./pod-tokens.js";
import { Poller, type PollResult } from "./poller.js";
import { StatusPublisher } from "./publisher.js";
import { Reclaimer } from "./reclaimer.js";
import { addOwnedInstance, T0, testContext, testRecord } from "./testing/context.js";
import { testPod } from "./testing/fixtures.js";

function setup(overrides: Parameters<typeof testContext>[0] = {}, options: AdmitterOptions = {}) {
  const t = testContext(overrides);
  const admitter = new Admitter(t.ctx, options, new PodTokens(t.ctx, undefined, "test"));
  const parameters = new ParameterDelivery(t.ctx);
  const publisher = new StatusPublisher(t.ctx);
  const reclaimer = new Reclaimer(t.ctx);
  const launcher = new Launcher(t.ctx, parameters, reclaimer);
  const poller = new Poller(t.ctx, { admitter, launcher, parameters, publisher });
  const changes: PodStatusChange[] = [];
  publisher.subscribe(async (change) => void changes.push(change));
  const results: PollResult[] = [];
  poller.onPoll((result) => void results.push(result));
  return { ...t, admitter, publisher, poller, changes, results };
}

/** A launched record of Pod `uid` whose instance is `instanceId`. */
function launchedRecord(
  t: ReturnType<typeof setup>,
  uid: string,
  instanceId: string,
  launchedAt = T0 - 3_600_000,
) {
  return testRecord(t.ctx, testPod(`pod-${uid}`, uid), {
    instanceId,
    launchRequested: true,
    launchedAt: new Date(launchedAt),
  });
}

describe("Poller.pollOnce", () => {
  it("observes a listed instance and publishes the Pod's status with it", async () => {
    const t = setup();
    const instance = addOwnedInstance(t.gateway, "uid-1");
    const record = launchedRecord(t, "uid-1", instance.InstanceId);
    const result = await t.poller.pollOnce();
    expect(result).toMatchObject({ ok: true, instances: 1, describeCalls: 1, consoleCalls: 0 });
    expect(t.results).toEqual([result]);
    expect(record.seen).toBe(true);
    expect(record.observed?.state).toBe("running");
    expect(t.ctx.listing?.map((i) => i.instanceId)).toEqual([instance.InstanceId]);
    expect(t.changes).toHaveLength(1);
    expect(t.changes[0]?.instance?.instanceId).toBe(instance.InstanceId);
    // No describe by ID for a listed instance.
    expect(t.gateway.count("describeInstances")).toBe(0);
    // An unchanged world publishes nothing more.
    await t.poller.pollOnce();
    expect(t.changes).toHaveLength(1);
  });

  it("describes an unlisted recorded instance by ID and observes it terminated", async () => {
    const t = setup();
    const gone = addOwnedInstance(t.gateway, "uid-2", { State: { Name: "terminated" } });
    const record = launchedRecord(t, "uid-2", gone.InstanceId);
    await t.poller.pollOnce();
    expect(t.gateway.calls.find((c) => c.action === "describeInstances")?.arg).toEqual([
      gone.InstanceId,
    ]);
    expect(record.observed?.state).toBe("terminated");
    expect(record.missing).toBe(false);
    // Known terminated: not described again.
    await t.poller.pollOnce();
    expect(t.gateway.count("describeInstances")).toBe(1);
  });

  it("marks a recorded instance EC2 does not know missing only outside the consistency window", async () => {
    const t = setup();
    const record = launchedRecord(t, "uid-3", "i-00000000000000abc", T0 - 10_000);
    await t.poller.pollOnce();
    expect(t.gateway.count("describeInstances")).toBe(1);
    expect(record.missing).toBe(false);
    expect(record.seen).toBe(false);
    expect(t.changes).toEqual([]);
    t.clock.advance(120_000);
    await t.poller.pollOnce();
    expect(record.missing).toBe(true);
    expect(record.seen).toBe(true);
    expect(record.observed).toBeUndefined();
    expect(t.changes).toHaveLength(1);
    // Proven absent: no more lookups by ID.
    await t.poller.pollOnce();
    expect(t.gateway.count("describeInstances")).toBe(2);
  });

  it("concludes nothing when the describe by ID fails", async () => {
    const t = setup();
    const record = launchedRecord(t, "uid-4", "i-00000000000000abd");
    t.gateway.fail("describeInstances", new ProviderError("Throttled", "slow down"));
    const result = await t.poller.pollOnce();
    expect(result.ok).toBe(true);
    expect(record.missing).toBe(false);
    expect(record.seen).toBe(false);
    expect(t.logs.some((l) => l.message.includes("describing unlisted instances"))).toBe(true);
  });

  it("terminates a duplicate instance of a Pod and keeps the recorded one", async () => {
    const t = setup();
    const mine = addOwnedInstance(t.gateway, "uid-5", { LaunchTime: new Date(T0 - 100_000) });
    const duplicate = addOwnedInstance(t.gateway, "uid-5", {
      LaunchTime: new Date(T0 - 200_000),
      ClientToken: "uid-5.1",
    });
    const record = launchedRecord(t, "uid-5", mine.InstanceId);
    await t.poller.pollOnce();
    await t.poller.idle();
    await new Promise((resolve) => setImmediate(resolve));
    expect(
      t.gateway.calls.filter((c) => c.action === "terminateInstance").map((c) => c.arg),
    ).toEqual([duplicate.InstanceId]);
    expect(duplicate.State.Name).toBe("terminated");
    expect(mine.State.Name).toBe("running");
    expect(record.observed?.instanceId).toBe(mine.InstanceId);
  });

  it("never terminates a listed instance that does not prove it is the Pod's", async () => {
    const t = setup();
    const mine = addOwnedInstance(t.gateway, "uid-6");
    const forged = t.gateway.addInstance("uid-6", { ClientToken: "not-the-pod" });
    const record = launchedRecord(t, "uid-6", mine.InstanceId);
    await t.poller.pollOnce();
    await new Promise((resolve) => setImmediate(resolve));
    expect(t.gateway.count("terminateInstance")).toBe(0);
    expect(forged.State.Name).toBe("running");
    expect(record.observed?.instanceId).toBe(mine.InstanceId);
  });

  it("adopts the instance a lost RunInstances answer left, when the listing shows it", async () => {
    const t = setup();
    const record = testRecord(t.ctx, testPod("lost", "uid-lost"), {
      launchRequested: true,
      unknownOutcome: true,
      requestedAt: T0 - 1_000,
      clientToken: "uid-lost",
    });
    const instance = addOwnedInstance(t.gateway, "uid-lost");
    await t.poller.pollOnce();
    expect(record.instanceId).toBe(instance.InstanceId);
    expect(record.seen).toBe(true);
    expect(t.gateway.count("runInstances")).toBe(0);
  });

  // An instance a lost RunInstances answer left, listed by a poll, is written to the ledger
  // like one the launcher adopts (this failed before the fix).
  it("records in the ledger the instance a lost RunInstances answer left, once a poll lists it", async () => {
    const t = setup();
    await t.ledger.recordLaunch(
      { podUid: "uid-lost2", namespace: "default", name: "lost2" },
      { requestedAt: T0 - 1_000, clientToken: "uid-lost2" },
    );
    testRecord(t.ctx, testPod("lost2", "uid-lost2"), {
      launchRequested: true,
      unknownOutcome: true,
      requestedAt: T0 - 1_000,
      clientToken: "uid-lost2",
    });
    const instance = addOwnedInstance(t.gateway, "uid-lost2");
    await t.poller.pollOnce();
    await t.poller.pollOnce();
    expect((await t.ledger.get("uid-lost2"))?.launch.instanceId).toBe(instance.InstanceId);
  });

  it("launches a Pod not launched yet, and publishes its Launched Event", async () => {
    const t = setup();
    const record = testRecord(t.ctx, testPod("new", "uid-7"));
    await t.poller.pollOnce();
    expect(t.gateway.count("runInstances")).toBe(1);
    expect(record.instanceId).toBeDefined();
    expect(t.changes.flatMap((c) => c.events ?? []).map((e) => e.reason)).toEqual(["Launched"]);
  });

  it("does not launch a deleted Pod", async () => {
    const t = setup();
    testRecord(t.ctx, testPod("del", "uid-8"), { deleted: true });
    await t.poller.pollOnce();
    expect(t.gateway.count("runInstances")).toBe(0);
  });

  it("a failed listing reports the error, keeps the last view and feeds the health", async () => {
    const t = setup({ outageAfterFailures: 1 });
    const instance = addOwnedInstance(t.gateway, "uid-9");
    const record = launchedRecord(t, "uid-9", instance.InstanceId);
    await t.poller.pollOnce();
    const before = t.ctx.listing;
    t.gateway.fail("listNodeInstances", new ProviderError("Unavailable", "503"));
    const result = await t.poller.pollOnce();
    expect(result).toMatchObject({ ok: false, instances: 0, error: { code: "Unavailable" } });
    expect(t.ctx.listing).toBe(before);
    expect(t.ctx.health.current.reason).toBe("EC2Unavailable");
    // The outage is in every Pod's status at once.
    const last = t.changes.at(-1);
    expect(last?.status.conditions?.find((c) => c.type === "Ready")?.reason).toBe("EC2Unavailable");
    expect(record.observed?.state).toBe("running");
  });

  it("joins a cycle in progress instead of starting a second", async () => {
    const t = setup();
    const [a, b] = [t.poller.pollOnce(), t.poller.pollOnce()];
    expect(a).toBe(b);
    await a;
    expect(t.gateway.count("listNodeInstances")).toBe(1);
  });

  it("re-renders a Pod held for a missing Secret and launches it once the Secret exists", async () => {
    let sources: PodSources = { configMaps: {}, secrets: {} };
    const t = setup({ podDelivery: "parameters" }, { readSources: async () => sources });
    const pod = testPod("needs-db", "uid-10");
    const container = pod.spec?.containers[0];
    if (container) {
      container.env = [{ name: "DB", valueFrom: { secretKeyRef: { name: "db", key: "pw" } } }];
    }
    const record = await t.admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("config");
    await t.poller.pollOnce();
    expect(record.mode).toBe("config");
    expect(t.gateway.count("runInstances")).toBe(0);
    sources = { configMaps: {}, secrets: { db: { data: { pw: "c2VjcmV0" } } } };
    await t.poller.pollOnce();
    expect(record.mode).toBe("launch");
    expect(t.gateway.count("writePodParameters")).toBe(1);
    expect(t.gateway.count("runInstances")).toBe(1);
  });
});
