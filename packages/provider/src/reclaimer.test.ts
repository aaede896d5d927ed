import { describe, expect, it, vi } from "vitest";
import { ProviderError } from "./errors.js";
import { Reclaimer } from "./reclaimer.js";
import { observe } from "./record.js";
import { addOwnedInstance, observed, T0, testContext, testRecord } from "./testing/context.js";
import type { FakeInstance } from "./testing/fake-gateway.js";
import { testPod } from "./testing/fixtures.js";

const OTHER_PROFILE = "arn:aws:iam::123456789012:instance-profile/someone-else";

function setup(overrides: Parameters<typeof testContext>[0] = {}) {
  const t = testContext(overrides);
  const reclaimer = new Reclaimer(t.ctx);
  const found: string[] = [];
  reclaimer.onFound = (record) => void found.push(record.facts.uid);
  return { ...t, reclaimer, found };
}

/** The code a promise rejects with (fails the test when it resolves). */
async function codeOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return (error as ProviderError).code;
}

describe("Reclaimer.findInstance", () => {
  it("finds the recorded instance, observes it for its Pod and tells the provider", async () => {
    const { ctx, gateway, reclaimer, found } = setup();
    const instance = addOwnedInstance(gateway, "uid-1");
    const record = testRecord(ctx, testPod("a", "uid-1"), {
      instanceId: instance.InstanceId,
      launchRequested: true,
      launchedAt: new Date(T0 - 600_000),
    });
    expect(await reclaimer.findInstance("uid-1")).toEqual({
      instanceId: instance.InstanceId,
      state: "running",
    });
    expect(record.seen).toBe(true);
    expect(record.observed?.instanceId).toBe(instance.InstanceId);
    expect(record.state).toBeDefined();
    expect(found).toEqual(["uid-1"]);
    expect(gateway.count("describeInstance")).toBe(1);
  });

  it("a poll's listing older than the node's own later read (an event's) neither hides the stop it saw nor replaces it", async () => {
    const { ctx, gateway, reclaimer, clock } = setup();
    const instance = addOwnedInstance(gateway, "uid-1");
    const record = testRecord(ctx, testPod("a", "uid-1"), {
      instanceId: instance.InstanceId,
      launchRequested: true,
      launchedAt: new Date(T0 - 600_000),
    });
    // The poll listed it running (a minute's safety net with the event channel) …
    ctx.listing = [observed(instance)];
    ctx.listingReadAt = clock.now;
    observe(ctx, record, observed(instance), clock.now);
    // … then the channel read it stopped.
    clock.advance(5_000);
    gateway.setState(instance.InstanceId, "stopped");
    observe(ctx, record, observed(instance), clock.now);
    expect(await reclaimer.findInstance("uid-1")).toEqual({
      instanceId: instance.InstanceId,
      state: "stopped",
    });
    expect(record.observed?.state).toBe("stopped");
    expect(gateway.count("describeInstance")).toBe(0);
    // A newer listing wins again.
    clock.advance(5_000);
    gateway.setState(instance.InstanceId, "terminated");
    ctx.listing = [observed(instance)];
    ctx.listingReadAt = clock.now;
    expect(await reclaimer.findInstance("uid-1")).toMatchObject({ state: "terminated" });
    expect(record.observed?.state).toBe("terminated");
  });

  it("falls back to the Pod UID tag when nothing was recorded (a crash before the ledger write)", async () => {
    const { gateway, reclaimer, ledger } = setup();
    const instance = addOwnedInstance(gateway, "uid-2");
    expect(await reclaimer.findInstance("uid-2")).toEqual({
      instanceId: instance.InstanceId,
      state: "running",
    });
    expect(gateway.calls.map((c) => c.action)).toEqual(["instancesOfPod"]);
    expect(await ledger.get("uid-2")).toBeUndefined();
  });

  it("answers undefined for a Pod with no instance, outside the consistency window", async () => {
    const { ctx, reclaimer, clock } = setup();
    expect(await reclaimer.findInstance("uid-none")).toBeUndefined();
    testRecord(ctx, testPod("b", "uid-old"), { launchRequested: true, requestedAt: T0 - 121_000 });
    expect(await reclaimer.findInstance("uid-old")).toBeUndefined();
    // A launch just requested: "not found" is no answer yet.
    testRecord(ctx, testPod("c", "uid-new"), { launchRequested: true, requestedAt: T0 - 5_000 });
    expect(await codeOf(reclaimer.findInstance("uid-new"))).toBe("NotVisibleYet");
    clock.advance(120_000);
    expect(await reclaimer.findInstance("uid-new")).toBeUndefined();
  });

  it("rejects NotVisibleYet within the window of a launch only the ledger remembers (after a restart)", async () => {
    const { ledger, reclaimer, clock } = setup();
    await ledger.recordLaunch(
      { podUid: "uid-l", namespace: "default", name: "l" },
      { requestedAt: T0 - 1_000, clientToken: "uid-l" },
    );
    expect(await codeOf(reclaimer.findInstance("uid-l"))).toBe("NotVisibleYet");
    clock.advance(200_000);
    expect(await reclaimer.findInstance("uid-l")).toBeUndefined();
  });

  it("rejects NotVisibleYet while a RunInstances is under way, without a call", async () => {
    const { ctx, gateway, reclaimer } = setup();
    testRecord(ctx, testPod("d", "uid-d"), { launching: true });
    expect(await codeOf(reclaimer.findInstance("uid-d"))).toBe("NotVisibleYet");
    expect(gateway.calls).toEqual([]);
  });

  it("does not answer with an instance that does not prove it is the Pod's", async () => {
    const { ctx, gateway, reclaimer, logs, found } = setup();
    const forged = gateway.addInstance("uid-f", {
      ClientToken: "uid-f",
      IamInstanceProfile: { Arn: OTHER_PROFILE },
    });
    testRecord(ctx, testPod("f", "uid-f"), {
      instanceId: forged.InstanceId,
      launchRequested: true,
      launchedAt: new Date(T0 - 600_000),
    });
    expect(await reclaimer.findInstance("uid-f")).toBeUndefined();
    expect(found).toEqual([]);
    expect(logs.some((l) => l.message.includes(`not acting on ${forged.InstanceId}`))).toBe(true);
  });

  it("reports a terminated instance of the Pod even when EC2 no longer shows its profile", async () => {
    const { ctx, gateway, reclaimer } = setup();
    const gone = gateway.addInstance("uid-t", { State: { Name: "terminated" } });
    delete gone.IamInstanceProfile;
    testRecord(ctx, testPod("t", "uid-t"), { instanceId: gone.InstanceId, launchRequested: true });
    expect(await reclaimer.findInstance("uid-t")).toEqual({
      instanceId: gone.InstanceId,
      state: "terminated",
    });
  });
});

describe("Reclaimer.stopInstance", () => {
  it("tags the stop's grace first, then stops the proven instance", async () => {
    const { gateway, reclaimer } = setup();
    const instance = addOwnedInstance(gateway, "uid-s");
    await reclaimer.stopInstance(instance.InstanceId, { graceSeconds: 12.9 });
    expect(gateway.calls.map((c) => c.action)).toEqual([
      "describeInstance",
      "tagInstances",
      "stopInstance",
    ]);
    expect(gateway.calls[1]?.arg).toEqual({
      instanceIds: [instance.InstanceId],
      key: "nebula:stop-grace-seconds",
      value: "12",
    });
    expect(instance.State.Name).toBe("stopped");
  });

  it("caps the grace it tags at maxGracePeriodSeconds (a year-long or non-finite grace included)", async () => {
    const { gateway, reclaimer } = setup({ maxGracePeriodSeconds: 300 });
    const year = addOwnedInstance(gateway, "uid-year");
    await reclaimer.stopInstance(year.InstanceId, { graceSeconds: 31_536_001 });
    const nan = addOwnedInstance(gateway, "uid-nan");
    await reclaimer.stopInstance(nan.InstanceId, { graceSeconds: Number.NaN });
    const tagged = gateway.calls.filter((c) => c.action === "tagInstances").map((c) => c.arg);
    expect(tagged).toEqual([
      { instanceIds: [year.InstanceId], key: "nebula:stop-grace-seconds", value: "300" },
      { instanceIds: [nan.InstanceId], key: "nebula:stop-grace-seconds", value: "0" },
    ]);
    expect([year.State.Name, nan.State.Name]).toEqual(["stopped", "stopped"]);
  });

  it("with the Pod's UID, stops only an instance that proves it is that Pod's (a tampered ledger aims at nothing)", async () => {
    const { gateway, reclaimer } = setup();
    const other = addOwnedInstance(gateway, "uid-other");
    expect(await codeOf(reclaimer.stopInstance(other.InstanceId, { podUid: "uid-mine" }))).toBe(
      "NotOwned",
    );
    expect(
      await codeOf(reclaimer.terminateInstance(other.InstanceId, { podUid: "uid-mine" })),
    ).toBe("NotOwned");
    expect(gateway.count("stopInstance") + gateway.count("terminateInstance")).toBe(0);
    expect(other.State.Name).toBe("running");
    await reclaimer.terminateInstance(other.InstanceId, { podUid: "uid-other" });
    expect(other.State.Name).toBe("terminated");
  });

  it("does not tag a grace the instance already carries, nor stop a stopped instance", async () => {
    const { gateway, reclaimer } = setup();
    const instance = addOwnedInstance(gateway, "uid-s2");
    instance.Tags.push({ Key: "nebula:stop-grace-seconds", Value: "30" });
    await reclaimer.stopInstance(instance.InstanceId, { graceSeconds: 30 });
    expect(gateway.count("tagInstances")).toBe(0);
    expect(gateway.count("stopInstance")).toBe(1);
    await reclaimer.stopInstance(instance.InstanceId, { graceSeconds: 5 });
    expect(gateway.count("stopInstance")).toBe(1);
    expect(gateway.count("tagInstances")).toBe(0);
  });

  it("stops anyway when the grace tag cannot be written (the host then uses the Pod's own grace)", async () => {
    const { gateway, reclaimer, logs } = setup();
    const instance = addOwnedInstance(gateway, "uid-s3");
    gateway.fail("tagInstances", new ProviderError("Throttled", "slow down"));
    await reclaimer.stopInstance(instance.InstanceId, { graceSeconds: 10 });
    expect(gateway.count("stopInstance")).toBe(1);
    expect(logs.some((l) => l.level === "warn" && /own grace/.test(l.message))).toBe(true);
  });

  const retag = (i: FakeInstance, key: string, value: string) => {
    i.Tags = i.Tags.map((t) => (t.Key === key ? { ...t, Value: value } : t));
  };
  it.each<[string, (instance: FakeInstance) => void]>([
    [
      "another instance profile",
      (i) => {
        i.IamInstanceProfile = { Arn: OTHER_PROFILE };
      },
    ],
    ["no instance profile", (i) => delete i.IamInstanceProfile],
    ["no ClientToken", (i) => delete i.ClientToken],
    [
      "another ClientToken",
      (i) => {
        i.ClientToken = "someone-else";
      },
    ],
    ["another cluster's tag", (i) => retag(i, "nebula:cluster", "other")],
    ["another node's tag", (i) => retag(i, "nebula:node", "other")],
    [
      "no Pod UID tag",
      (i) => {
        i.Tags = i.Tags.filter((t) => t.Key !== "nebula:pod-uid");
      },
    ],
  ])("never stops nor terminates an instance with %s (NotOwned)", async (_what, disown) => {
    const { gateway, reclaimer } = setup();
    const instance = addOwnedInstance(gateway, "uid-x");
    disown(instance);
    expect(await codeOf(reclaimer.stopInstance(instance.InstanceId, { graceSeconds: 5 }))).toBe(
      "NotOwned",
    );
    expect(await codeOf(reclaimer.terminateInstance(instance.InstanceId))).toBe("NotOwned");
    expect(gateway.count("stopInstance")).toBe(0);
    expect(gateway.count("terminateInstance")).toBe(0);
    expect(gateway.count("tagInstances")).toBe(0);
    expect(instance.State.Name).toBe("running");
  });

  it("a terminated or shutting-down instance is done, with no call and no proof asked", async () => {
    const { gateway, reclaimer } = setup();
    for (const state of ["terminated", "shutting-down"]) {
      const gone = gateway.addInstance("uid-g", {
        State: { Name: state },
        IamInstanceProfile: { Arn: OTHER_PROFILE },
      });
      await reclaimer.stopInstance(gone.InstanceId, { graceSeconds: 5 });
      await reclaimer.terminateInstance(gone.InstanceId);
    }
    expect(gateway.calls.map((c) => c.action)).toEqual([
      "describeInstance",
      "describeInstance",
      "describeInstance",
      "describeInstance",
    ]);
  });

  it("an instance EC2 does not know is done outside the window, NotVisibleYet inside it", async () => {
    const { ctx, gateway, reclaimer, clock } = setup();
    await reclaimer.stopInstance("i-0000000000000dead");
    await reclaimer.terminateInstance("i-0000000000000dead");
    testRecord(ctx, testPod("n", "uid-n"), {
      instanceId: "i-00000000000000new",
      launchRequested: true,
      launchedAt: new Date(T0 - 10_000),
    });
    expect(await codeOf(reclaimer.stopInstance("i-00000000000000new"))).toBe("NotVisibleYet");
    expect(await codeOf(reclaimer.terminateInstance("i-00000000000000new"))).toBe("NotVisibleYet");
    clock.advance(120_000);
    await reclaimer.terminateInstance("i-00000000000000new");
    expect(gateway.count("stopInstance") + gateway.count("terminateInstance")).toBe(0);
  });

  it("terminates instead when EC2 refuses the stop for good (UnsupportedOperation)", async () => {
    const { gateway, reclaimer } = setup();
    const spot = addOwnedInstance(gateway, "uid-spot");
    gateway.fail(
      "stopInstance",
      new ProviderError("InvalidRequest", "cannot stop a Spot instance", {
        awsCode: "UnsupportedOperation",
      }),
    );
    await reclaimer.stopInstance(spot.InstanceId);
    expect(gateway.count("terminateInstance")).toBe(1);
    expect(spot.State.Name).toBe("terminated");
  });

  it("terminates a Spot instance it is asked to stop, after tagging the grace, with no StopInstances", async () => {
    const { gateway, reclaimer } = setup();
    const spot = addOwnedInstance(gateway, "uid-spot-2", { InstanceLifecycle: "spot" });
    await reclaimer.stopInstance(spot.InstanceId, { graceSeconds: 45 });
    expect(gateway.calls.map((c) => c.action)).toEqual(
      expect.arrayContaining(["tagInstances", "terminateInstance"]),
    );
    expect(gateway.count("stopInstance")).toBe(0);
    expect(spot.State.Name).toBe("terminated");
    expect(spot.Tags.find((t) => t.Key === "nebula:stop-grace-seconds")?.Value).toBe("45");
  });

  it("rethrows a stop failure that a retry can fix, without terminating", async () => {
    const { gateway, reclaimer } = setup();
    const instance = addOwnedInstance(gateway, "uid-thr");
    gateway.fail("stopInstance", new ProviderError("Throttled", "RequestLimitExceeded"));
    expect(await codeOf(reclaimer.stopInstance(instance.InstanceId))).toBe("Throttled");
    expect(gateway.count("terminateInstance")).toBe(0);
    expect(instance.State.Name).toBe("running");
  });
});

describe("Reclaimer.terminateInstance", () => {
  it("terminates a proven instance (a stopped one too)", async () => {
    const { gateway, reclaimer } = setup();
    const instance = addOwnedInstance(gateway, "uid-term", { State: { Name: "stopped" } });
    await reclaimer.terminateInstance(instance.InstanceId);
    expect(gateway.count("terminateInstance")).toBe(1);
    expect(instance.State.Name).toBe("terminated");
  });

  it("a NotFound from TerminateInstances is NotVisibleYet for a fresh launch, done for an old one", async () => {
    const { ctx, gateway, reclaimer } = setup();
    const fresh = addOwnedInstance(gateway, "uid-fresh");
    testRecord(ctx, testPod("fresh", "uid-fresh"), {
      instanceId: fresh.InstanceId,
      launchRequested: true,
      launchedAt: new Date(T0 - 1_000),
    });
    const old = addOwnedInstance(gateway, "uid-old", { LaunchTime: new Date(T0 - 3_600_000) });
    vi.spyOn(gateway, "terminateInstance").mockResolvedValue("notFound");
    expect(await codeOf(reclaimer.terminateInstance(fresh.InstanceId))).toBe("NotVisibleYet");
    await expect(reclaimer.terminateInstance(old.InstanceId)).resolves.toBeUndefined();
  });
});

describe("Reclaimer.provenInstance", () => {
  it("prefers the latest listing for the recorded instance while EC2 is healthy", async () => {
    const { ctx, gateway, reclaimer } = setup();
    const instance = addOwnedInstance(gateway, "uid-p");
    ctx.listing = (await gateway.listNodeInstances()).instances;
    gateway.calls.length = 0;
    expect((await reclaimer.provenInstance("uid-p", instance.InstanceId))?.instanceId).toBe(
      instance.InstanceId,
    );
    expect(gateway.calls).toEqual([]);
  });

  it("of several proven instances by tag, keeps a live one over a terminated one", async () => {
    const { gateway, reclaimer } = setup();
    gateway.addInstance("uid-m", { State: { Name: "terminated" }, LaunchTime: new Date(1) });
    const live = addOwnedInstance(gateway, "uid-m", { LaunchTime: new Date(2) });
    addOwnedInstance(gateway, "uid-other");
    expect((await reclaimer.provenInstance("uid-m", undefined))?.instanceId).toBe(live.InstanceId);
  });
});
