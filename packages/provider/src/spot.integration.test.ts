import type { EC2Client } from "@aws-sdk/client-ec2";
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

const uid = (n: number) => `00000000-0000-4000-8000-${n.toString().padStart(12, "0")}`;
const isSpot = (params: URLSearchParams) =>
  params.get("InstanceMarketOptions.MarketType") === "spot";

describe("capacity types against moto", () => {
  it("spot-then-on-demand: Spot where EC2 has it, On-Demand after a Spot capacity error, one request each", async () => {
    faults.clear();
    // EC2 has no Spot m7i.large (moto would launch any): the first Pod's Spot request fails.
    faults.inject({
      action: "RunInstances",
      kind: "error",
      code: "InsufficientInstanceCapacity",
      status: 500,
      times: 1,
      match: isSpot,
    });
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
