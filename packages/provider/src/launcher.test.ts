import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import { describe, expect, it, vi } from "vitest";
import { ProviderError } from "./errors.js";
import type { Gateway } from "./gateway.js";
import { pickSubnet } from "./launch.js";
import { Launcher } from "./launcher.js";
import { ParameterDelivery } from "./parameter-delivery.js";
import { Reclaimer } from "./reclaimer.js";
import { deliveryOf } from "./record.js";
import { addOwnedInstance, T0, testContext, testRecord } from "./testing/context.js";
import { testPod } from "./testing/fixtures.js";

const SUBNETS = ["subnet-0a1b2c3d", "subnet-0b1b2c3d"];

function setup(overrides: Parameters<typeof testContext>[0] = {}) {
  const t = testContext(overrides);
  const parameters = new ParameterDelivery(t.ctx);
  const reclaimer = new Reclaimer(t.ctx);
  const launcher = new Launcher(t.ctx, parameters, reclaimer);
  return { ...t, parameters, reclaimer, launcher };
}

/** The `RunInstances` inputs the fake received, in order. */
function runs(gateway: ReturnType<typeof testContext>["gateway"]): RunInstancesCommandInput[] {
  return gateway.calls
    .filter((c) => c.action === "runInstances")
    .map((c) => c.arg as RunInstancesCommandInput);
}

/**
 * Gives the fake gateway an On-Demand price read (the fake has none: `Gateway.onDemandPrice` is
 * optional) answering with `answer`; returns the instance types read, in order.
 */
function onDemandPrices(
  gateway: ReturnType<typeof testContext>["gateway"],
  answer: (instanceType: string) => Promise<string | undefined>,
): string[] {
  const reads: string[] = [];
  const withPrices: Gateway = gateway;
  withPrices.onDemandPrice = (instanceType) => {
    reads.push(instanceType);
    return answer(instanceType);
  };
  return reads;
}

const TWELVE_HOURS = 12 * 60 * 60 * 1000;

const capacityError = () =>
  new ProviderError("InsufficientCapacity", "no m7i.large capacity", {
    awsCode: "InsufficientInstanceCapacity",
  });

describe("Launcher.launch", () => {
  it("records the intent in the ledger before RunInstances, and the instance ID after", async () => {
    const { ctx, gateway, ledger, launcher } = setup();
    const writes: { fields: Record<string, unknown>; runsBefore: number }[] = [];
    const recordLaunch = ledger.recordLaunch.bind(ledger);
    vi.spyOn(ledger, "recordLaunch").mockImplementation(async (base, fields) => {
      writes.push({ fields: { ...fields }, runsBefore: gateway.count("runInstances") });
      return recordLaunch(base, fields);
    });
    const record = testRecord(ctx, testPod("web", "uid-1"));
    await launcher.launch(record);

    expect(writes).toHaveLength(2);
    expect(writes[0]).toEqual({
      fields: { requestedAt: T0, clientToken: "uid-1" },
      runsBefore: 0,
    });
    expect(writes[1]?.runsBefore).toBe(1);
    expect(writes[1]?.fields).toMatchObject({ instanceId: record.instanceId, launchedAt: T0 });
    const entry = await ledger.get("uid-1");
    expect(entry?.launch).toMatchObject({
      podUid: "uid-1",
      requestedAt: T0,
      clientToken: "uid-1",
      instanceId: record.instanceId,
      launchedAt: T0,
    });
    expect(runs(gateway)[0]).toMatchObject({ ClientToken: "uid-1", InstanceType: "m7i.large" });
    expect(record).toMatchObject({
      launchRequested: true,
      seen: true,
      missing: false,
      launching: false,
      unknownOutcome: false,
      ledgerDirty: false,
    });
    expect(record.events.map((e) => e.reason)).toEqual(["Launched"]);
  });

  it("sends no RunInstances when the intent cannot be recorded", async () => {
    const { ctx, gateway, ledger, launcher } = setup();
    vi.spyOn(ledger, "recordLaunch").mockRejectedValueOnce(new Error("apiserver down"));
    const record = testRecord(ctx, testPod("web", "uid-2"));
    await launcher.launch(record);
    expect(gateway.count("runInstances")).toBe(0);
    expect(record.launchError?.code).toBe("Unavailable");
    expect(record.launchRequested).toBe(false);
    expect(record.launching).toBe(false);
  });

  it("keeps the instance when the ledger write after RunInstances fails (ledgerDirty, retried)", async () => {
    const { ctx, gateway, ledger, launcher } = setup();
    const record = testRecord(ctx, testPod("web", "uid-3"));
    const recordLaunch = ledger.recordLaunch.bind(ledger);
    let n = 0;
    vi.spyOn(ledger, "recordLaunch").mockImplementation(async (base, fields) => {
      if (++n === 2) throw new Error("conflict");
      return recordLaunch(base, fields);
    });
    await launcher.launch(record);
    expect(record.instanceId).toBeDefined();
    expect(record.ledgerDirty).toBe(true);
    expect((await ledger.get("uid-3"))?.launch.instanceId).toBeUndefined();
    await launcher.recordInstance(record);
    expect(record.ledgerDirty).toBe(false);
    expect((await ledger.get("uid-3"))?.launch.instanceId).toBe(record.instanceId);
    expect(gateway.count("runInstances")).toBe(1);
  });

  it("a capacity error moves at once to the other subnet, never calling the cooled pool again until it cools", async () => {
    const { ctx, gateway, ledger, launcher, clock } = setup({ subnetIds: SUBNETS });
    const record = testRecord(ctx, testPod("web", "uid-cap"));
    gateway.fail("runInstances", capacityError());
    const intents: unknown[] = [];
    const recordLaunch = ledger.recordLaunch.bind(ledger);
    vi.spyOn(ledger, "recordLaunch").mockImplementation(async (base, fields) => {
      intents.push({ ...fields });
      return recordLaunch(base, fields);
    });
    await launcher.launch(record);
    const first = runs(gateway)[0];
    expect(first?.ClientToken).toBe("uid-cap");
    expect(record.events.map((e) => e.reason)).toEqual(["InsufficientCapacity", "Launched"]);
    // A definite "no" cleared the first intent (no teardown waits for an instance) before the
    // second was recorded.
    expect(intents.slice(0, 2)).toEqual([
      { requestedAt: T0, clientToken: "uid-cap" },
      { requestedAt: undefined, clientToken: undefined },
    ]);

    // The next attempt, in the same call, went to the other subnet with its own token.
    const second = runs(gateway)[1];
    expect(second?.SubnetId).not.toBe(first?.SubnetId);
    expect(second?.ClientToken).toBe("uid-cap.1");
    expect(record.instanceId).toBeDefined();
    expect(record.launchError).toBeUndefined();

    // Other Pods, some of which prefer the cooled pool, do not call it.
    const others = Array.from({ length: 6 }, (_, i) => `uid-other-${i}`);
    expect(others.some((uid) => pickSubnet(uid, SUBNETS) === first?.SubnetId)).toBe(true);
    for (let i = 0; i < 6; i++) {
      await launcher.launch(testRecord(ctx, testPod(`other-${i}`, `uid-other-${i}`)));
    }
    const cooled = (r: RunInstancesCommandInput) =>
      r.SubnetId === first?.SubnetId && r.InstanceType === first?.InstanceType;
    expect(runs(gateway).slice(1).filter(cooled)).toEqual([]);
    // Once the pool has cooled down (poolSeconds, 60 by default), it is used again.
    clock.advance(60_000);
    expect(Array.from({ length: 6 }, (_, i) => pickSubnet(`uid-later-${i}`, SUBNETS))).toContain(
      first?.SubnetId,
    );
    for (let i = 0; i < 6; i++) {
      await launcher.launch(testRecord(ctx, testPod(`later-${i}`, `uid-later-${i}`)));
    }
    expect(runs(gateway).slice(8).filter(cooled).length).toBeGreaterThan(0);
  });

  it("writes the next intent only after the refused one's clear: a slow clear never erases it", async () => {
    const { ctx, gateway, ledger, launcher } = setup({ subnetIds: SUBNETS });
    gateway.fail("runInstances", capacityError());
    const done: string[] = [];
    const recordLaunch = ledger.recordLaunch.bind(ledger);
    vi.spyOn(ledger, "recordLaunch").mockImplementation(async (base, fields) => {
      const clear = "clientToken" in fields && fields.clientToken === undefined;
      // The clear is slow (a compare-and-swap conflict and a retry, say).
      if (clear) await new Promise((resolve) => setTimeout(resolve, 30));
      const out = await recordLaunch(base, fields);
      done.push(clear ? "clear" : String(fields.clientToken ?? "instance"));
      return out;
    });
    const record = testRecord(ctx, testPod("web", "uid-order"));
    await launcher.launch(record);
    expect(done).toEqual(["uid-order", "clear", "uid-order.1", "instance"]);
    expect((await ledger.get("uid-order"))?.launch).toMatchObject({
      clientToken: "uid-order.1",
      instanceId: record.instanceId,
    });
  });

  it("with every pool cooling, waits without a call and says why, with one Warning", async () => {
    const { ctx, gateway, launcher, clock } = setup();
    const record = testRecord(ctx, testPod("web", "uid-wait"));
    gateway.fail("runInstances", capacityError());
    await launcher.launch(record);
    expect(gateway.count("runInstances")).toBe(1);
    await launcher.launch(record); // within the Pod's back-off (10 s)
    clock.advance(10_000);
    await launcher.launch(record); // back-off over, pool still cooling (60 s)
    expect(gateway.count("runInstances")).toBe(1);
    expect(record.launchError?.message).toMatch(/no capacity in any configured subnet/);
    expect(record.events.filter((e) => e.type === "Warning")).toHaveLength(1);
    clock.advance(50_000);
    await launcher.launch(record);
    expect(gateway.count("runInstances")).toBe(2);
    expect(record.instanceId).toBeDefined();
  });

  it("a quota error cools the whole account down for every Pod", async () => {
    const { ctx, gateway, launcher } = setup({ subnetIds: SUBNETS });
    gateway.fail(
      "runInstances",
      new ProviderError("QuotaExceeded", "vCPU limit", { awsCode: "VcpuLimitExceeded" }),
    );
    const a = testRecord(ctx, testPod("a", "uid-qa"));
    await launcher.launch(a);
    const b = testRecord(ctx, testPod("b", "uid-qb"));
    await launcher.launch(b);
    expect(gateway.count("runInstances")).toBe(1);
    expect(a.launchError?.code).toBe("QuotaExceeded");
    expect(b.launchError?.code).toBe("QuotaExceeded");
    expect(b.events.map((e) => e.reason)).toEqual(["QuotaExceeded"]);
  });

  it("a Spot quota stops Spot only: a Spot-only Pod waits and says why, a spot-then-on-demand one goes On-Demand", async () => {
    const { ctx, gateway, launcher } = setup({ subnetIds: SUBNETS });
    gateway.fail(
      "runInstances",
      new ProviderError("QuotaExceeded", "Spot limit", { awsCode: "MaxSpotInstanceCountExceeded" }),
    );
    const first = testRecord(ctx, testPod("a", "uid-sa"));
    first.capacityTypes = ["spot", "on-demand"];
    await launcher.launch(first);
    // Refused for Spot, then On-Demand in the same call.
    expect(first.events.map((e) => e.reason)).toEqual(["QuotaExceeded", "Launched"]);
    const spotOnly = testRecord(ctx, testPod("b", "uid-sb"));
    spotOnly.capacityTypes = ["spot"];
    await launcher.launch(spotOnly);
    expect(spotOnly.launchError?.code).toBe("QuotaExceeded");
    expect(spotOnly.launchError?.message).toContain(
      "quota stops launches (MaxSpotInstanceCountExceeded)",
    );
    expect(spotOnly.events.map((e) => e.reason)).toEqual(["QuotaExceeded"]);
    expect(runs(gateway).map((r) => r.InstanceMarketOptions?.MarketType ?? "on-demand")).toEqual([
      "spot",
      "on-demand",
    ]);
    expect(first.instanceId).toBeDefined();
    expect(spotOnly.instanceId).toBeUndefined();
  });

  it("reads a Spot instance's price at launch: on the record, in the Launched Event; a failed read shows none", async () => {
    const { ctx, gateway, launcher, logs } = setup({ subnetIds: [SUBNETS[0] as string] });
    gateway.zones.set(SUBNETS[0] as string, "us-east-1a");
    gateway.spotPrices.set("m7i.large/us-east-1a", "0.031200");
    const spot = testRecord(ctx, testPod("s", "uid-price"));
    spot.capacityTypes = ["spot"];
    await launcher.launch(spot);
    expect(spot.spotPrice).toBe("0.031200");
    expect(spot.events.find((e) => e.reason === "Launched")?.message).toContain(
      "(m7i.large, Spot at $0.031200/h) in subnet-0a1b2c3d (us-east-1a)",
    );
    // On-Demand: no Spot price read.
    const onDemand = testRecord(ctx, testPod("o", "uid-od"));
    await launcher.launch(onDemand);
    expect(onDemand.spotPrice).toBeUndefined();
    expect(gateway.count("spotPrice")).toBe(1);
    // EC2 refuses the read: launched all the same, without a price, and said in the log.
    gateway.fail("spotPrice", new ProviderError("Unauthorized", "no ec2:DescribeSpotPriceHistory"));
    const unpriced = testRecord(ctx, testPod("u", "uid-unpriced"));
    unpriced.capacityTypes = ["spot"];
    await launcher.launch(unpriced);
    expect(unpriced.instanceId).toBeDefined();
    expect(unpriced.spotPrice).toBeUndefined();
    expect(
      logs.some((l) => /Spot price of m7i.large in us-east-1a could not be read/.test(l.message)),
    ).toBe(true);
  });

  it("goes on without a Spot price that does not come within 5 s: the launch (and a teardown behind it) is not held", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const { ctx, gateway, launcher, logs } = setup({ subnetIds: [SUBNETS[0] as string] });
      vi.spyOn(gateway, "spotPrice").mockImplementation(() => new Promise(() => {}));
      const record = testRecord(ctx, testPod("s", "uid-slow-price"));
      record.capacityTypes = ["spot"];
      let done = false;
      const launched = launcher.launch(record).then(() => {
        done = true;
      });
      await vi.advanceTimersByTimeAsync(4_000);
      expect(done).toBe(false);
      expect(record.instanceId).toBeDefined();
      await vi.advanceTimersByTimeAsync(1_500);
      await launched;
      expect(record.launching).toBe(false);
      expect(record.spotPrice).toBeUndefined();
      expect(logs.some((l) => /no answer within 5000 ms/.test(l.message))).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });

  it("reads an On-Demand instance's price at launch: on the record, in the Launched Event and the Pod's instance facts", async () => {
    const { ctx, gateway, launcher } = setup({ subnetIds: [SUBNETS[0] as string] });
    gateway.zones.set(SUBNETS[0] as string, "us-east-1a");
    gateway.spotPrices.set("m7i.large/us-east-1a", "0.031200");
    const reads = onDemandPrices(gateway, async () => "0.1008000000");
    const onDemand = testRecord(ctx, testPod("o", "uid-od-price"));
    await launcher.launch(onDemand);
    expect(onDemand.price).toBe("0.1008000000");
    expect(onDemand.spotPrice).toBeUndefined();
    expect(onDemand.events.find((e) => e.reason === "Launched")?.message).toContain(
      "(m7i.large, On-Demand at $0.1008000000/h) in subnet-0a1b2c3d (us-east-1a)",
    );
    const [, instance] = deliveryOf(onDemand, undefined);
    expect(instance).toMatchObject({ capacityType: "on-demand", priceUsdPerHour: "0.1008000000" });
    expect(instance).not.toHaveProperty("spotPriceUsdPerHour");
    // The type's price is known: the next On-Demand launch of it reads nothing.
    const again = testRecord(ctx, testPod("o2", "uid-od-again"));
    await launcher.launch(again);
    expect(again.price).toBe("0.1008000000");
    expect(reads).toEqual(["m7i.large"]);
    // A Spot launch's price is its Spot price, in both fields; no Price List read.
    const spot = testRecord(ctx, testPod("s", "uid-spot-price"));
    spot.capacityTypes = ["spot"];
    await launcher.launch(spot);
    expect(spot).toMatchObject({ price: "0.031200", spotPrice: "0.031200" });
    expect(deliveryOf(spot, undefined)[1]).toMatchObject({
      spotPriceUsdPerHour: "0.031200",
      priceUsdPerHour: "0.031200",
    });
    expect(reads).toEqual(["m7i.large"]);
  });

  it("reads no On-Demand price with pricing.onDemand off, nor from a gateway without the read", async () => {
    const off = setup({ pricing: { onDemand: false } });
    const reads = onDemandPrices(off.gateway, async () => "0.1008000000");
    const record = testRecord(off.ctx, testPod("o", "uid-off"));
    await off.launcher.launch(record);
    expect(reads).toEqual([]);
    expect(record.price).toBeUndefined();
    expect(record.events.find((e) => e.reason === "Launched")?.message).toContain("(m7i.large) in");
    const plain = setup();
    const unread = testRecord(plain.ctx, testPod("p", "uid-plain"));
    await plain.launcher.launch(unread);
    expect(unread.instanceId).toBeDefined();
    expect(unread.price).toBeUndefined();
  });

  it("goes on without an On-Demand price that does not come within 5 s, with one read in flight per type", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const { ctx, gateway, launcher, logs, clock } = setup({ subnetIds: [SUBNETS[0] as string] });
      const reads = onDemandPrices(gateway, () => new Promise(() => {}));
      const records = [0, 1].map((i) => testRecord(ctx, testPod(`o${i}`, `uid-hung-${i}`)));
      let done = 0;
      const launched = Promise.all(
        records.map((r) =>
          launcher.launch(r).then(() => {
            done++;
          }),
        ),
      );
      await vi.advanceTimersByTimeAsync(4_000);
      expect(done).toBe(0);
      expect(records.every((r) => r.instanceId !== undefined)).toBe(true);
      await vi.advanceTimersByTimeAsync(1_500);
      await launched;
      expect(records.map((r) => [r.launching, r.price])).toEqual([
        [false, undefined],
        [false, undefined],
      ]);
      expect(reads).toEqual(["m7i.large"]);
      expect(logs.filter((l) => /no answer within 5000 ms/.test(l.message))).toHaveLength(1);
      // Past the bound, a launch does not wait on the hung read at all, nor starts another.
      clock.advance(5_000);
      const later = testRecord(ctx, testPod("o-later", "uid-hung-later"));
      let laterDone = false;
      const third = launcher.launch(later).then(() => {
        laterDone = true;
      });
      await vi.advanceTimersByTimeAsync(0);
      expect(laterDone).toBe(true);
      await third;
      expect(reads).toEqual(["m7i.large"]);
    } finally {
      vi.useRealTimers();
    }
  });

  it("a failed On-Demand price read is tried again only after the cache period (12 h)", async () => {
    const { ctx, gateway, launcher, logs, clock } = setup();
    let fail = true;
    const reads = onDemandPrices(gateway, async () => {
      if (fail)
        throw new ProviderError("Unauthorized", "not authorized to perform pricing:GetProducts");
      return "0.1008000000";
    });
    const launch = async (uid: string) => {
      const record = testRecord(ctx, testPod(uid, uid));
      await launcher.launch(record);
      expect(record.instanceId).toBeDefined();
      return record;
    };
    expect((await launch("uid-f1")).price).toBeUndefined();
    expect(reads).toHaveLength(1);
    const warned = logs.filter(
      (l) => l.level === "warn" && /On-Demand price of m7i.large/.test(l.message),
    );
    expect(warned).toHaveLength(1);
    expect(warned[0]?.message).toContain("pricing:GetProducts");
    fail = false;
    expect((await launch("uid-f2")).price).toBeUndefined();
    clock.advance(TWELVE_HOURS - 1);
    expect((await launch("uid-f3")).price).toBeUndefined();
    expect(reads).toHaveLength(1);
    clock.advance(1);
    expect((await launch("uid-f4")).price).toBe("0.1008000000");
    expect(reads).toHaveLength(2);
  });

  it("a burst of Pods tries an unproven offering once: the others wait for its answer, then go elsewhere", async () => {
    const { ctx, gateway, launcher } = setup({ subnetIds: SUBNETS });
    const run = gateway.runInstances.bind(gateway);
    // EC2 answers after a while; it has no c7i.large anywhere.
    vi.spyOn(gateway, "runInstances").mockImplementation(async (input) => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      if (input.InstanceType === "c7i.large") throw capacityError();
      return run(input);
    });
    const records = Array.from({ length: 10 }, (_, i) => {
      const r = testRecord(ctx, testPod(`p${i}`, `uid-burst-${i}`));
      r.instanceType = "c7i.large";
      r.instanceTypes = ["c7i.large", "m7i.large"];
      return r;
    });
    await Promise.all(records.map((r) => launcher.launch(r)));
    // The Pods whose own try was refused went to their next type in the same call.
    const types = runs(gateway).map((r) => `${r.InstanceType} ${r.SubnetId}`);
    // One try per subnet's pool of the dead type, not one per Pod.
    expect(types.filter((t) => t.startsWith("c7i.large")).length).toBeLessThanOrEqual(
      SUBNETS.length,
    );
    expect(types.filter((t) => t.startsWith("m7i.large"))).toHaveLength(10);
    expect(records.filter((r) => r.instanceId !== undefined)).toHaveLength(10);
  });

  it("a Pod waits at most 10 s for another's launch in an unproven pool: a hung call holds nobody longer", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const { ctx, gateway, launcher } = setup({ subnetIds: [SUBNETS[0] as string] });
      const run = gateway.runInstances.bind(gateway);
      let hang = true;
      vi.spyOn(gateway, "runInstances").mockImplementation(async (input) => {
        if (hang) {
          hang = false;
          await new Promise(() => {}); // never answers
        }
        return run(input);
      });
      void launcher.launch(testRecord(ctx, testPod("stuck", "uid-hung")));
      const behind = testRecord(ctx, testPod("behind", "uid-behind"));
      const launched = launcher.launch(behind);
      await vi.advanceTimersByTimeAsync(9_000);
      expect(behind.instanceId).toBeUndefined();
      await vi.advanceTimersByTimeAsync(1_500);
      await launched;
      expect(behind.instanceId).toBeDefined();
    } finally {
      vi.useRealTimers();
    }
  });

  it("a proven offering takes a burst side by side: no Pod waits for another's launch", async () => {
    const { ctx, gateway, launcher } = setup({ subnetIds: [SUBNETS[0] as string] });
    const run = gateway.runInstances.bind(gateway);
    let inFlight = 0;
    let most = 0;
    vi.spyOn(gateway, "runInstances").mockImplementation(async (input) => {
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((resolve) => setTimeout(resolve, 20));
      inFlight--;
      return run(input);
    });
    await launcher.launch(testRecord(ctx, testPod("first", "uid-proof")));
    most = 0;
    const records = Array.from({ length: 5 }, (_, i) =>
      testRecord(ctx, testPod(`q${i}`, `uid-side-${i}`)),
    );
    await Promise.all(records.map((r) => launcher.launch(r)));
    expect(most).toBe(5);
    expect(records.every((r) => r.instanceId !== undefined)).toBe(true);
  });

  it("an unknown outcome repeats the same request (same client token and subnet): one instance", async () => {
    const { ctx, gateway, ledger, launcher } = setup({ subnetIds: SUBNETS });
    const record = testRecord(ctx, testPod("web", "uid-unk"));
    // The first RunInstances starts an instance, but its answer is lost (a timeout).
    const run = gateway.runInstances.bind(gateway);
    vi.spyOn(gateway, "runInstances")
      .mockImplementationOnce(async (input) => {
        await run(input);
        throw new ProviderError("Unavailable", "socket timeout");
      })
      .mockImplementation(run);
    await launcher.launch(record);
    expect(record.unknownOutcome).toBe(true);
    expect(record.instanceId).toBeUndefined();
    // The intent stays: an instance may exist.
    expect((await ledger.get("uid-unk"))?.launch).toMatchObject({ clientToken: "uid-unk" });
    expect(record.launchRequested).toBe(true);

    await launcher.launch(record);
    const [first, second] = gateway.calls
      .filter((c) => c.action === "runInstances")
      .map((c) => c.arg as RunInstancesCommandInput);
    expect(second?.ClientToken).toBe(first?.ClientToken);
    expect(second?.SubnetId).toBe(first?.SubnetId);
    expect(second?.InstanceType).toBe(first?.InstanceType);
    expect(gateway.instances.size).toBe(1);
    expect(record.instanceId).toBe([...gateway.instances.keys()][0]);
    expect(record.unknownOutcome).toBe(false);
  });

  // A capacity error answering the repeat of an unknown outcome is a definite "no" for that
  // client token: the next attempt backs off and moves on (this failed before the fix).
  it("after an unknown outcome, a capacity error backs off like any other (no call to the cooled pool)", async () => {
    const { ctx, gateway, launcher } = setup({ subnetIds: SUBNETS });
    const record = testRecord(ctx, testPod("web", "uid-unk-cap"));
    gateway.fail("runInstances", new ProviderError("Unavailable", "socket timeout"));
    await launcher.launch(record);
    expect(record.unknownOutcome).toBe(true);
    gateway.fail("runInstances", capacityError());
    await launcher.launch(record); // the repeat: EC2 says no capacity, so no instance has that token
    const cooled = runs(gateway)[1];
    expect(record.events.map((e) => e.reason)).toContain("InsufficientCapacity");
    // ... and the next placement, at once: launched elsewhere.
    expect(record.instanceId).toBeDefined();
    await launcher.launch(record);
    const again = runs(gateway)
      .slice(2)
      .filter((r) => r.SubnetId === cooled?.SubnetId && r.InstanceType === cooled?.InstanceType);
    expect(again).toEqual([]);
  });

  it("an answer without an instance ID is an unknown outcome", async () => {
    const { ctx, gateway, launcher } = setup();
    vi.spyOn(gateway, "runInstances").mockResolvedValueOnce({
      instanceId: undefined,
      ownerId: undefined,
    });
    const record = testRecord(ctx, testPod("web", "uid-none"));
    await launcher.launch(record);
    expect(record.unknownOutcome).toBe(true);
    expect(record.launchError?.code).toBe("Unavailable");
  });

  it("throws an error no retry fixes, with one LaunchFailed Warning", async () => {
    const { ctx, gateway, launcher } = setup();
    const record = testRecord(ctx, testPod("web", "uid-auth"));
    gateway.fail("runInstances", new ProviderError("Unauthorized", "not allowed"), 2);
    await expect(launcher.launch(record)).rejects.toMatchObject({ code: "Unauthorized" });
    await expect(launcher.launch(record)).rejects.toMatchObject({ code: "Unauthorized" });
    expect(record.events.map((e) => e.reason)).toEqual(["LaunchFailed"]);
    expect(record.launching).toBe(false);
  });

  it("launches nothing for a Pod deleted while its intent was written, and clears the intent", async () => {
    const { ctx, gateway, ledger, launcher } = setup();
    const record = testRecord(ctx, testPod("web", "uid-del"));
    const recordLaunch = ledger.recordLaunch.bind(ledger);
    vi.spyOn(ledger, "recordLaunch").mockImplementation(async (base, fields) => {
      record.deleted = true;
      return recordLaunch(base, fields);
    });
    await launcher.launch(record);
    expect(gateway.count("runInstances")).toBe(0);
    expect(record.launchRequested).toBe(false);
    await vi.waitFor(async () =>
      expect((await ledger.get("uid-del"))?.launch.requestedAt).toBeUndefined(),
    );
  });

  it("terminates at once an instance launched for a Pod forgotten during RunInstances", async () => {
    const { ctx, gateway, launcher } = setup();
    const record = testRecord(ctx, testPod("web", "uid-forgot"));
    const run = gateway.runInstances.bind(gateway);
    vi.spyOn(gateway, "runInstances").mockImplementation(async (input) => {
      ctx.records.delete("uid-forgot");
      return run(input);
    });
    await launcher.launch(record);
    expect(gateway.count("terminateInstance")).toBe(1);
    expect([...gateway.instances.values()][0]?.State.Name).toBe("terminated");
    expect(record.instanceId).toBeUndefined();
  });

  it("does nothing for a record that was never rendered", async () => {
    const { ctx, gateway, launcher } = setup();
    const record = testRecord(ctx, testPod("web", "uid-raw"));
    delete record.userData;
    await launcher.launch(record);
    expect(gateway.calls).toEqual([]);
  });
});

describe("Launcher.adopt", () => {
  it("adopts a proven listed instance instead of launching, and records it", async () => {
    const { ctx, gateway, ledger, launcher } = setup();
    const instance = addOwnedInstance(gateway, "uid-a");
    ctx.listing = (await gateway.listNodeInstances()).instances;
    const record = testRecord(ctx, testPod("web", "uid-a"));
    expect(await launcher.adopt(record)).toBe(true);
    expect(record.instanceId).toBe(instance.InstanceId);
    expect(record.seen).toBe(true);
    expect((await ledger.get("uid-a"))?.launch.instanceId).toBe(instance.InstanceId);
    expect(gateway.count("runInstances")).toBe(0);
  });

  it("does not adopt a listed instance that does not prove it is the Pod's", async () => {
    const { ctx, gateway, launcher } = setup();
    gateway.addInstance("uid-b", {
      ClientToken: "uid-b",
      IamInstanceProfile: { Arn: "arn:aws:iam::123456789012:instance-profile/intruder" },
    });
    ctx.listing = (await gateway.listNodeInstances()).instances;
    const record = testRecord(ctx, testPod("web", "uid-b"));
    expect(await launcher.adopt(record)).toBe(false);
    expect(record.instanceId).toBeUndefined();
  });

  it("looks a requested launch up by its Pod UID tag (a lost answer, a restart)", async () => {
    const { ctx, gateway, ledger, launcher } = setup();
    const instance = addOwnedInstance(gateway, "uid-c");
    const record = testRecord(ctx, testPod("web", "uid-c"), {
      launchRequested: true,
      unknownOutcome: true,
      requestedAt: T0 - 1_000,
    });
    expect(await launcher.adopt(record)).toBe(true);
    expect(gateway.calls.map((c) => c.action)).toEqual(["instancesOfPod"]);
    expect(record.instanceId).toBe(instance.InstanceId);
    expect((await ledger.get("uid-c"))?.launch.instanceId).toBe(instance.InstanceId);
  });

  it("makes no call for a Pod never launched, and launches nothing on a failed lookup", async () => {
    const { ctx, gateway, launcher, logs } = setup();
    expect(await launcher.adopt(testRecord(ctx, testPod("web", "uid-d")))).toBe(false);
    expect(gateway.calls).toEqual([]);
    gateway.fail("instancesOfPod", new ProviderError("Unavailable", "503"));
    const requested = testRecord(ctx, testPod("web", "uid-e"), { launchRequested: true });
    expect(await launcher.adopt(requested)).toBe(false);
    expect(logs.some((l) => l.message.includes("looking up the instance of pod default/web"))).toBe(
      true,
    );
  });
});

describe("Launcher.noInstanceCanExist", () => {
  it("keeps the intent while an earlier outcome is unknown or an instance is known", async () => {
    const { ctx, launcher } = setup();
    const unknown = testRecord(ctx, testPod("a", "uid-u"), {
      launchRequested: true,
      unknownOutcome: true,
      requestedAt: T0,
    });
    launcher.noInstanceCanExist(unknown);
    expect(unknown.launchRequested).toBe(true);
    expect(unknown.requestedAt).toBe(T0);
    const clean = testRecord(ctx, testPod("b", "uid-c2"), {
      launchRequested: true,
      requestedAt: T0,
    });
    launcher.noInstanceCanExist(clean);
    expect(clean.launchRequested).toBe(false);
    expect(clean.requestedAt).toBeUndefined();
  });
});
