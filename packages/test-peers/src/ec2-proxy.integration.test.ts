import {
  CreateSubnetCommand,
  CreateTagsCommand,
  CreateVpcCommand,
  DescribeInstancesCommand,
  EC2Client,
  type Instance,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { afterEach, describe, expect, it } from "vitest";
import { type Ec2ProxyHandle, type Ec2ProxyOptions, startEc2Proxy } from "./ec2-proxy.js";
import { MOTO_CREDENTIALS } from "./moto.js";
import { waitUntil } from "./process.js";
import { useTestPeers } from "./vitest.js";

// One moto for the whole run (the global setup): every test keeps to instances tagged with its
// own value, and never resets moto.
const { moto } = useTestPeers();
const TAG = "nebula:ec2-proxy-test";
let proxies: Ec2ProxyHandle[] = [];
let clients: EC2Client[] = [];
let tagSeq = 0;

afterEach(async () => {
  for (const client of clients) client.destroy();
  await Promise.all(proxies.map((p) => p.close()));
  proxies = [];
  clients = [];
});

async function proxyWith(options: Omit<Ec2ProxyOptions, "upstream">): Promise<{
  proxy: Ec2ProxyHandle;
  ec2: EC2Client;
}> {
  const proxy = await startEc2Proxy({ upstream: moto, ...options });
  proxies.push(proxy);
  const ec2 = proxy.ec2();
  clients.push(ec2);
  return { proxy, ec2 };
}

function motoAlone(): EC2Client {
  const ec2 = moto.ec2();
  clients.push(ec2);
  return ec2;
}

/** A unique tag value: the instances of one test, apart from every other test's. */
function uniqueTag(): string {
  tagSeq++;
  return `${process.pid}-${Date.now()}-${tagSeq}`;
}

function launch(tag: string, extra: Partial<RunInstancesCommandInput> = {}): RunInstancesCommand {
  return new RunInstancesCommand({
    ImageId: "ami-12345678",
    InstanceType: "t3.micro",
    MinCount: 1,
    MaxCount: 1,
    TagSpecifications: [{ ResourceType: "instance", Tags: [{ Key: TAG, Value: tag }] }],
    ...extra,
  });
}

/** Every instance with this test tag, as the given client lists them. */
async function listed(ec2: EC2Client, tag: string): Promise<Instance[]> {
  const out = await ec2.send(
    new DescribeInstancesCommand({ Filters: [{ Name: `tag:${TAG}`, Values: [tag] }] }),
  );
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}

async function errorName(call: Promise<unknown>): Promise<string> {
  return call.then(
    () => "no error",
    (error: unknown) => (error instanceof Error ? error.name : String(error)),
  );
}

describe("ClientToken idempotency", () => {
  it("moto alone starts a second instance for a repeated token", async () => {
    const tag = uniqueTag();
    const ec2 = motoAlone();
    const first = await ec2.send(launch(tag, { ClientToken: `tok-${tag}` }));
    const second = await ec2.send(launch(tag, { ClientToken: `tok-${tag}` }));
    expect(second.Instances?.[0]?.InstanceId).not.toBe(first.Instances?.[0]?.InstanceId);
    expect(await listed(ec2, tag)).toHaveLength(2);
  });

  it("the proxy answers the original reservation for the same token and parameters", async () => {
    const tag = uniqueTag();
    const { ec2, proxy } = await proxyWith({ clientToken: true });
    const first = await ec2.send(launch(tag, { ClientToken: `tok-${tag}` }));
    const second = await ec2.send(launch(tag, { ClientToken: `tok-${tag}` }));
    expect(second.ReservationId).toBe(first.ReservationId);
    expect(second.Instances?.map((i) => i.InstanceId)).toEqual(
      first.Instances?.map((i) => i.InstanceId),
    );
    expect(await listed(motoAlone(), tag)).toHaveLength(1);
    expect(proxy.counts()).toMatchObject({ launched: 1, replayed: 1 });
  });

  it("the proxy refuses the same token with other parameters: IdempotentParameterMismatch", async () => {
    const tag = uniqueTag();
    const { ec2 } = await proxyWith({ clientToken: true });
    await ec2.send(launch(tag, { ClientToken: `tok-${tag}` }));
    const other = ec2.send(launch(tag, { ClientToken: `tok-${tag}`, InstanceType: "t3.large" }));
    expect(await errorName(other)).toBe("IdempotentParameterMismatch");
    expect(await listed(motoAlone(), tag)).toHaveLength(1);
  });
});

describe("a RunInstances answer lost after the launch", () => {
  it("without idempotency the SDK's retry makes a second instance (moto's behaviour)", async () => {
    const tag = uniqueTag();
    const { ec2, proxy } = await proxyWith({ loseRunInstancesResponses: 1 });
    // The SDK fills ClientToken itself and retries the reset connection with the same token.
    const run = await ec2.send(launch(tag));
    expect(run.Instances).toHaveLength(1);
    expect(proxy.counts()).toMatchObject({ launched: 2, lost: 1 });
    expect(await listed(motoAlone(), tag)).toHaveLength(2);
  });

  it("with idempotency the retry gets the instance the lost call created", async () => {
    const tag = uniqueTag();
    const { ec2, proxy } = await proxyWith({ clientToken: true, loseRunInstancesResponses: 1 });
    const run = await ec2.send(launch(tag));
    const instances = await listed(motoAlone(), tag);
    expect(instances.map((i) => i.InstanceId)).toEqual([run.Instances?.[0]?.InstanceId]);
    expect(proxy.counts()).toMatchObject({ launched: 1, replayed: 1, lost: 1 });
    expect(proxy.behaviour().loseRunInstancesResponses).toBe(0);
  });
});

describe("a slow RunInstances", () => {
  it("creates the instance first and answers after the delay", async () => {
    const tag = uniqueTag();
    const { ec2 } = await proxyWith({ runInstancesDelayMs: 3_000 });
    let answered = false;
    const running = ec2.send(launch(tag)).then((out) => {
      answered = true;
      return out;
    });
    let seen: Instance[] = [];
    await waitUntil(
      async () => {
        seen = await listed(motoAlone(), tag);
        return seen.length === 1;
      },
      { what: "the instance in moto", timeoutMs: 10_000 },
    );
    expect(answered).toBe(false);
    const out = await running;
    expect(out.Instances?.[0]?.InstanceId).toBe(seen[0]?.InstanceId);
  });

  it("moto alone answers once the instance exists", async () => {
    const tag = uniqueTag();
    const ec2 = motoAlone();
    const out = await ec2.send(launch(tag));
    expect((await listed(ec2, tag)).map((i) => i.InstanceId)).toEqual([
      out.Instances?.[0]?.InstanceId,
    ]);
  });
});

describe("StopInstances that EC2 refuses", () => {
  it("moto alone stops a terminated instance and revives it as stopped", async () => {
    const tag = uniqueTag();
    const ec2 = motoAlone();
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("stopped");
  });

  it("the proxy refuses to stop a terminated instance: IncorrectInstanceState", async () => {
    const tag = uniqueTag();
    const { ec2, proxy } = await proxyWith({ refuseStops: true });
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    const stop = ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    expect(await errorName(stop)).toBe("IncorrectInstanceState");
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("terminated");
    expect(proxy.counts().refused).toEqual({ IncorrectInstanceState: 1 });
  });

  it("moto alone stops a one-time Spot instance", async () => {
    const tag = uniqueTag();
    const ec2 = motoAlone();
    const spot = { InstanceMarketOptions: { MarketType: "spot" as const } };
    const id = (await ec2.send(launch(tag, spot))).Instances?.[0]?.InstanceId ?? "";
    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("stopped");
  });

  it("the proxy refuses to stop a one-time Spot instance and stops a persistent one", async () => {
    const tag = uniqueTag();
    const { ec2 } = await proxyWith({ refuseStops: true });
    const oneTime = await ec2.send(
      launch(tag, {
        InstanceMarketOptions: {
          MarketType: "spot",
          SpotOptions: { InstanceInterruptionBehavior: "terminate" },
        },
      }),
    );
    const oneTimeId = oneTime.Instances?.[0]?.InstanceId ?? "";
    const refused = ec2.send(new StopInstancesCommand({ InstanceIds: [oneTimeId] }));
    expect(await errorName(refused)).toBe("UnsupportedOperation");

    const persistent = await ec2.send(
      launch(tag, {
        InstanceMarketOptions: {
          MarketType: "spot",
          SpotOptions: { SpotInstanceType: "persistent", InstanceInterruptionBehavior: "stop" },
        },
      }),
    );
    const persistentId = persistent.Instances?.[0]?.InstanceId ?? "";
    await ec2.send(new StopInstancesCommand({ InstanceIds: [persistentId] }));
    const states = new Map((await listed(ec2, tag)).map((i) => [i.InstanceId, i.State?.Name]));
    expect(states.get(oneTimeId)).toBe("running");
    expect(states.get(persistentId)).toBe("stopped");
  });
});

describe("eventual consistency of DescribeInstances", () => {
  it("moto alone lists a new instance at once and keeps terminated ones", async () => {
    const tag = uniqueTag();
    const ec2 = motoAlone();
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    const byId = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    expect(byId.Reservations?.[0]?.Instances?.[0]?.InstanceId).toBe(id);
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("terminated");
  });

  it("the proxy hides a new instance for the window: missing from lists, NotFound by ID", async () => {
    const tag = uniqueTag();
    const { ec2, proxy } = await proxyWith({ consistencyWindowMs: 600_000 });
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    expect(await listed(ec2, tag)).toEqual([]);
    const byId = ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    expect(await errorName(byId)).toBe("InvalidInstanceID.NotFound");
    // moto has it all along.
    expect((await listed(motoAlone(), tag)).map((i) => i.InstanceId)).toEqual([id]);

    proxy.configure({ consistencyWindowMs: 0 });
    expect((await listed(ec2, tag)).map((i) => i.InstanceId)).toEqual([id]);
  });

  it("the proxy refuses to terminate or tag an instance it does not show yet; moto terminates at once", async () => {
    const tag = uniqueTag();
    const { ec2, proxy } = await proxyWith({ consistencyWindowMs: 600_000 });
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    const terminate = ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    expect(await errorName(terminate)).toBe("InvalidInstanceID.NotFound");
    const tagged = ec2.send(
      new CreateTagsCommand({ Resources: [id], Tags: [{ Key: "late", Value: "1" }] }),
    );
    expect(await errorName(tagged)).toBe("InvalidInstanceID.NotFound");
    // The instance is still there: a NotFound here does not mean it is gone.
    expect((await listed(motoAlone(), tag))[0]?.State?.Name).toBe("running");
    expect(proxy.counts().refused).toEqual({ "InvalidInstanceID.NotFound": 2 });

    const other = uniqueTag();
    const ec2Alone = motoAlone();
    const otherId = (await ec2Alone.send(launch(other))).Instances?.[0]?.InstanceId ?? "";
    await ec2Alone.send(new TerminateInstancesCommand({ InstanceIds: [otherId] }));
    expect((await listed(ec2Alone, other))[0]?.State?.Name).toBe("terminated");
  });

  it("the proxy shows a new instance once a short window has passed", async () => {
    const tag = uniqueTag();
    const { ec2 } = await proxyWith({ consistencyWindowMs: 1_000 });
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    await waitUntil(async () => (await listed(ec2, tag)).length === 1, {
      what: "the instance to show up after the window",
      timeoutMs: 15_000,
      intervalMs: 200,
    });
    const byId = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    expect(byId.Reservations?.[0]?.Instances?.[0]?.InstanceId).toBe(id);
  });

  it("the proxy drops a terminated instance from lists after the configured time", async () => {
    const tag = uniqueTag();
    const { ec2, proxy } = await proxyWith({ terminatedVisibleMs: 600_000 });
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("terminated");

    proxy.configure({ terminatedVisibleMs: 0 });
    expect(await listed(ec2, tag)).toEqual([]);
    const byId = ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    expect(await errorName(byId)).toBe("InvalidInstanceID.NotFound");
    expect((await listed(motoAlone(), tag))[0]?.State?.Name).toBe("terminated");
  });
});

describe("faults", () => {
  it("fails the configured fraction of calls with throttling and 5xx, the same ones for the same seed", async () => {
    const tag = uniqueTag();
    const outcomes = async (seed: number): Promise<string[]> => {
      const { proxy } = await proxyWith({ faultRate: 0.3, faultSeed: seed });
      // No SDK retries: every fault reaches the caller, so the draw is visible call by call.
      const ec2 = new EC2Client({
        endpoint: proxy.endpoint,
        region: proxy.region,
        credentials: MOTO_CREDENTIALS,
        maxAttempts: 1,
      });
      clients.push(ec2);
      const out: string[] = [];
      for (let i = 0; i < 60; i++) out.push(await errorName(listed(ec2, tag)));
      const refused = proxy.counts().refused;
      expect((refused.RequestLimitExceeded ?? 0) + (refused.InternalError ?? 0)).toBe(
        out.filter((o) => o !== "no error").length,
      );
      return out;
    };
    const first = await outcomes(7);
    const failed = first.filter((o) => o !== "no error");
    // 30 % of 60 calls: well inside 6..30 for any seed worth the name.
    expect(failed.length).toBeGreaterThan(6);
    expect(failed.length).toBeLessThan(30);
    expect(new Set(failed)).toEqual(new Set(["RequestLimitExceeded", "InternalError"]));
    expect(await outcomes(7)).toEqual(first);
    // Off again: nothing fails.
    const { ec2 } = await proxyWith({ faultRate: 0 });
    for (let i = 0; i < 10; i++) expect(await errorName(listed(ec2, tag))).toBe("no error");
  });
});

describe("counts and delay", () => {
  it("counts every call by action, and a delay holds each call at least that long", async () => {
    const tag = uniqueTag();
    const { proxy, ec2 } = await proxyWith({});
    await listed(ec2, tag);
    await listed(ec2, tag);
    expect(proxy.counts().calls).toEqual({ DescribeInstances: 2 });
    proxy.configure({ delayMs: 300 });
    const started = performance.now();
    await listed(ec2, tag);
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
    proxy.configure({ delayMs: 0, faultRate: 1 });
    const failing = new EC2Client({
      endpoint: proxy.endpoint,
      region: proxy.region,
      credentials: MOTO_CREDENTIALS,
      maxAttempts: 1,
    });
    clients.push(failing);
    expect(await errorName(listed(failing, tag))).not.toBe("no error");
    // Faulted calls are counted too.
    expect(proxy.counts().calls).toEqual({ DescribeInstances: 4 });
  });
});

describe("capacity", () => {
  it("refuses every launch with InsufficientInstanceCapacity while on, and starts nothing", async () => {
    const tag = uniqueTag();
    const { proxy, ec2 } = await proxyWith({ insufficientCapacity: true });
    const failing = new EC2Client({
      endpoint: proxy.endpoint,
      region: proxy.region,
      credentials: MOTO_CREDENTIALS,
      maxAttempts: 1,
    });
    clients.push(failing);
    expect(await errorName(failing.send(launch(tag)))).toBe("InsufficientInstanceCapacity");
    expect(await listed(ec2, tag)).toEqual([]);
    proxy.configure({ insufficientCapacity: false });
    await ec2.send(launch(tag));
    expect(await listed(ec2, tag)).toHaveLength(1);
  });

  it("refuses only the offerings without capacity: type × zone (of the subnet) × Spot or On-Demand", async () => {
    const tag = uniqueTag();
    const plain = moto.ec2();
    clients.push(plain);
    const vpc = await plain.send(new CreateVpcCommand({ CidrBlock: "10.77.0.0/16" }));
    const subnet = async (cidr: string, zone: string) =>
      (
        await plain.send(
          new CreateSubnetCommand({
            VpcId: vpc.Vpc?.VpcId ?? "",
            CidrBlock: cidr,
            AvailabilityZone: zone,
          }),
        )
      ).Subnet?.SubnetId ?? "";
    const inA = await subnet("10.77.1.0/24", `${moto.region}a`);
    const inB = await subnet("10.77.2.0/24", `${moto.region}b`);
    const { proxy } = await proxyWith({
      noCapacity: [
        { instanceType: "c7i.large", availabilityZone: `${moto.region}a`, capacityType: "spot" },
      ],
    });
    const failing = new EC2Client({
      endpoint: proxy.endpoint,
      region: proxy.region,
      credentials: MOTO_CREDENTIALS,
      maxAttempts: 1,
    });
    clients.push(failing);
    const spot = { InstanceMarketOptions: { MarketType: "spot" as const } };
    const tries = [
      ["c7i.large", inA, true, "InsufficientInstanceCapacity"],
      ["c7i.large", inA, true, "InsufficientInstanceCapacity"],
      ["c7i.large", inA, false, "no error"],
      ["c7i.large", inB, true, "no error"],
      ["m7i.large", inA, true, "no error"],
    ] as const;
    for (const [type, subnetId, isSpot, expected] of tries) {
      const call = failing.send(
        launch(tag, { InstanceType: type, SubnetId: subnetId, ...(isSpot ? spot : {}) }),
      );
      expect(await errorName(call), `${type} ${subnetId} ${isSpot}`).toBe(expected);
    }
    expect(proxy.counts().noCapacity).toEqual({ [`c7i.large/${moto.region}a/spot`]: 2 });
    // Three launched: the refused ones started nothing.
    expect(await listed(plain, tag)).toHaveLength(3);
  });
});

describe("holding an action", () => {
  /** A stopped instance of this test's own tag. */
  async function stoppedInstance(ec2: EC2Client, tag: string): Promise<string> {
    const id = (await ec2.send(launch(tag))).Instances?.[0]?.InstanceId ?? "";
    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("stopped");
    return id;
  }

  it("holds every call of the action until released, while other actions go through", async () => {
    const tag = uniqueTag();
    const { proxy, ec2 } = await proxyWith({});
    const id = await stoppedInstance(ec2, tag);
    const hold = proxy.hold("StartInstances");
    let answered = false;
    const start = ec2.send(new StartInstancesCommand({ InstanceIds: [id] })).then((out) => {
      answered = true;
      return out;
    });
    await hold.whenHeld();
    expect(hold.waiting()).toBe(1);
    // Not sent: the instance stays stopped, and other calls are answered meanwhile.
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("stopped");
    expect(answered).toBe(false);
    hold.release();
    expect((await start).StartingInstances?.[0]?.InstanceId).toBe(id);
    expect(["pending", "running"]).toContain((await listed(ec2, tag))[0]?.State?.Name);
    expect(hold.waiting()).toBe(0);
    // Released: later calls are not held.
    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    expect(proxy.counts().held).toEqual({ StartInstances: 1 });
    expect(proxy.counts().dropped).toEqual({});
  });

  it("drops a held call whose caller went away: it never reaches EC2, even after the release", async () => {
    const tag = uniqueTag();
    const { proxy, ec2 } = await proxyWith({});
    const id = await stoppedInstance(ec2, tag);
    const hold = proxy.hold("StartInstances");
    const caller = new AbortController();
    const start = ec2.send(new StartInstancesCommand({ InstanceIds: [id] }), {
      abortSignal: caller.signal,
    });
    await hold.whenHeld();
    caller.abort();
    expect(await errorName(start)).not.toBe("no error");
    await waitUntil(async () => (proxy.counts().dropped.StartInstances ?? 0) === 1, {
      what: "the held call dropped",
      timeoutMs: 10_000,
    });
    expect(hold.waiting()).toBe(0);
    hold.release();
    expect((await listed(ec2, tag))[0]?.State?.Name).toBe("stopped");
    expect(proxy.counts().held).toEqual({ StartInstances: 1 });
  });

  it("close() drops what is still held", async () => {
    const tag = uniqueTag();
    const { proxy, ec2 } = await proxyWith({});
    const id = await stoppedInstance(ec2, tag);
    const hold = proxy.hold("StartInstances");
    const start = ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    await hold.whenHeld();
    await proxy.close();
    expect(await errorName(start)).not.toBe("no error");
    expect(proxy.counts().dropped).toEqual({ StartInstances: 1 });
    expect((await listed(motoAlone(), tag))[0]?.State?.Name).toBe("stopped");
  });
});
