/**
 * What a Pod is launched on, against moto (through a fault proxy for capacity errors): instance
 * types from EC2's catalogue and offerings, and capacity types (Spot, On-Demand).
 */
import {
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateVpcCommand,
  type EC2Client,
} from "@aws-sdk/client-ec2";
import { type Moto, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider } from "./provider.js";
import { type FaultProxy, startFaultProxy } from "./testing/fault-proxy.js";
import { testPod } from "./testing/fixtures.js";
import {
  fakeClock,
  type MotoNetwork,
  motoConfig,
  nodeInstances,
  prepareMoto,
  statusLog,
} from "./testing/moto-env.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";

let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;
let faults: FaultProxy;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
  faults = await startFaultProxy(moto.endpoint);
});

afterAll(async () => {
  await faults?.close();
  ec2?.destroy();
  await moto?.stop();
});

/** EC2 answers the next `times` launches that `match` with `InsufficientInstanceCapacity`. */
const noCapacity = (times: number, match: (params: URLSearchParams) => boolean) =>
  faults.inject({
    action: "RunInstances",
    kind: "error",
    code: "InsufficientInstanceCapacity",
    status: 500,
    times,
    match,
  });

const uid = (n: number) => `00000000-0000-4000-8000-${n.toString().padStart(12, "0")}`;

describe("instance types from EC2's catalogue (moto's DescribeInstanceTypes)", () => {
  it("the gateway reads every type EC2 lists, GPUs and architectures included", async () => {
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "catalogue-read"),
      livePodUids: () => [],
    });
    const { types, skipped } = await provider.gateway.describeInstanceTypes();
    expect(skipped).toEqual([]);
    provider.client.destroy();
    // moto lists well over a thousand; the catalogue keeps each once.
    expect(types.length).toBeGreaterThan(500);
    expect(new Set(types.map((t) => t.name)).size).toBe(types.length);
    const byName = new Map(types.map((t) => [t.name, t]));
    expect(byName.get("m7i.large")).toMatchObject({ vcpus: 2, memoryMiB: 8192, gpus: 0 });
    expect(byName.get("g5.xlarge")).toMatchObject({ vcpus: 4, gpus: 1 });
    expect(byName.get("m7g.large")?.architectures).toEqual(["arm64"]);
  });

  it("launches each Pod on the smallest allowed type that fits, falls to the next on a capacity error, and reads the catalogue once", async () => {
    faults.clear();
    // EC2 has no c7i.large (the smallest fit of the first Pod) anywhere.
    noCapacity(1000, (params) => params.get("InstanceType") === "c7i.large");
    const log = statusLog();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "catalogue"),
        endpoint: faults.endpoint,
        maxAttempts: 1,
        instanceTypes: {
          default: "t3.micro",
          catalogue: { allowed: ["c7i.*", "m7i.*", "g5.*"] },
        },
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      now: fakeClock().now,
    });
    provider.notifyPods(log.listener);
    const before = faults.received.get("DescribeInstanceTypes") ?? 0;
    const web = testPod("web", uid(1), { resources: { requests: { cpu: "1", memory: "2Gi" } } });
    const gpu = testPod("gpu", uid(2), { resources: { limits: { "nvidia.com/gpu": "1" } } });
    const huge = testPod("huge", uid(3), { resources: { requests: { cpu: "1000" } } });
    await Promise.all([provider.createPod(web), provider.createPod(gpu)]);
    await provider.createPod(huge);
    // The web Pod's first try failed for capacity: the next poll tries its next type at once.
    await provider.pollOnce();

    const launched = Object.fromEntries(
      (await nodeInstances(ec2, "catalogue")).map((i) => [
        i.Tags?.find((t) => t.Key === "nebula:pod")?.Value,
        i.InstanceType,
      ]),
    );
    expect(launched).toEqual({ "default/web": "m7i.large", "default/gpu": "g5.xlarge" });
    // One capacity error for c7i.large, then that pool cools down: no other try of it.
    const tried = faults.log
      .filter((r) => r.action === "RunInstances")
      .map((r) => r.params.get("InstanceType"));
    expect(tried.filter((t) => t === "c7i.large")).toHaveLength(1);
    expect((faults.received.get("DescribeInstanceTypes") ?? 0) - before).toBe(1);
    expect(log.last("huge")).toMatchObject({ phase: "Failed", reason: "InvalidPodSpec" });
    expect(log.last("huge")?.message).toContain("no allowed x86_64 instance type fits");
    await provider.stop();
  });

  it("never tries a subnet whose Availability Zone EC2 does not offer the type in (moto launches there anyway)", async () => {
    // Two subnets: us-east-1e, where moto's offerings have no m7i type, and us-east-1a.
    const vpc = (await ec2.send(new CreateVpcCommand({ CidrBlock: "10.8.0.0/16" }))).Vpc?.VpcId;
    const subnet = async (cidr: string, zone: string) =>
      (
        await ec2.send(
          new CreateSubnetCommand({ VpcId: vpc, CidrBlock: cidr, AvailabilityZone: zone }),
        )
      ).Subnet?.SubnetId as string;
    const inE = await subnet("10.8.1.0/24", "us-east-1e");
    const inA = await subnet("10.8.2.0/24", "us-east-1a");
    const group = await ec2.send(
      new CreateSecurityGroupCommand({ VpcId: vpc, GroupName: "offerings", Description: "t" }),
    );
    faults.clear();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "offerings"),
        endpoint: faults.endpoint,
        subnetIds: [inE, inA],
        securityGroupIds: [group.GroupId as string],
        instanceTypes: { default: "t3.micro", catalogue: { allowed: ["m7i.*"] } },
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      now: fakeClock().now,
    });
    const before = faults.log.length;
    // Ten Pods: by their UIDs' hash about half prefer the us-east-1e subnet.
    for (let i = 0; i < 10; i++) await provider.createPod(testPod(`o-${i}`, uid(100 + i)));
    const instances = await nodeInstances(ec2, "offerings");
    expect(instances).toHaveLength(10);
    expect(new Set(instances.map((i) => i.SubnetId))).toEqual(new Set([inA]));
    expect(new Set(instances.map((i) => i.InstanceType))).toEqual(new Set(["m7i.large"]));
    const launches = faults.log.slice(before).filter((r) => r.action === "RunInstances");
    expect(launches.map((r) => r.params.get("SubnetId"))).toEqual(Array(10).fill(inA));
    await provider.stop();
  });
});

const isSpot = (params: URLSearchParams) =>
  params.get("InstanceMarketOptions.MarketType") === "spot";

describe("capacity types against moto", () => {
  it("spot-then-on-demand: Spot where EC2 has it, On-Demand after a Spot capacity error, one request each", async () => {
    faults.clear();
    // EC2 has no Spot m7i.large (moto would launch any): the first Pod's Spot request fails.
    noCapacity(1, isSpot);
    const log = statusLog();
    const clock = fakeClock();
    const provider = new Ec2PodProvider({
      config: {
        ...motoConfig(moto, network, "spot"),
        endpoint: faults.endpoint,
        maxAttempts: 1,
        instanceTypes: { default: "m7i.large" },
        capacity: { default: "spot-then-on-demand", annotationNamespaces: ["batch"] },
      },
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      now: clock.now,
    });
    provider.notifyPods(log.listener);
    const before = faults.log.length;
    await provider.createPod(testPod("first", uid(1)));
    // Its Spot pool cools down: the next poll launches it On-Demand at once.
    await provider.pollOnce();
    await provider.createPod(testPod("second", uid(2)));
    // A Pod that may only buy Spot waits while that Spot pool cools down, then launches.
    const batch = testPod("job", uid(3), {
      annotations: { "nebula.dev/requested-capacity-type": "spot" },
    });
    batch.metadata = { ...batch.metadata, namespace: "batch" };
    await provider.createPod(batch);
    expect(log.last("job")).toMatchObject({ phase: "Pending" });
    clock.advance(61_000);
    await provider.pollOnce();
    const web = testPod("web", uid(4), {
      annotations: { "nebula.dev/requested-capacity-type": "spot" },
    });
    await provider.createPod(web);

    const lifecycle = Object.fromEntries(
      (await nodeInstances(ec2, "spot")).map((i) => [
        i.Tags?.find((t) => t.Key === "nebula:pod")?.Value,
        i.InstanceLifecycle ?? "on-demand",
      ]),
    );
    expect(lifecycle).toEqual({
      "default/first": "on-demand",
      // The Spot pool that failed (m7i.large in this subnet) is cooling down: straight to On-Demand.
      "default/second": "on-demand",
      "batch/job": "spot",
    });
    const requests = faults.log.slice(before).filter((r) => r.action === "RunInstances");
    expect(requests.map((r) => (isSpot(r.params) ? "spot" : "on-demand"))).toEqual([
      "spot",
      "on-demand",
      "on-demand",
      "spot",
    ]);
    // Spot asks for a one-time instance whose power-off terminates it.
    const spot = requests.find((r) => isSpot(r.params))?.params;
    expect(spot?.get("InstanceMarketOptions.SpotOptions.SpotInstanceType")).toBe("one-time");
    expect(spot?.get("InstanceInitiatedShutdownBehavior")).toBe("terminate");
    // The namespace that may not choose: refused, saying why, nothing launched.
    expect(log.last("web")).toMatchObject({ phase: "Failed", reason: "InvalidPodSpec" });
    expect(log.last("web")?.message).toContain("may not choose its capacity type");
    await provider.stop();
  });
});
