import { MemoryPodLedger } from "@nebula/teardown";
import { describe, expect, it } from "vitest";
import { parseProviderConfig } from "./config.js";
import {
  Ec2PodProvider,
  instanceAnnotations,
  type PodStatusChange,
  renderOptionsOf,
} from "./provider.js";
import { countCalls } from "./testing/calls.js";
import { testConfig, testPod } from "./testing/fixtures.js";

/** A provider whose EC2 is never reached by the cases below (refused or held Pods make no call). */
function offline(renderUserData?: () => string) {
  const ledger = new MemoryPodLedger();
  const provider = new Ec2PodProvider({
    config: testConfig({ endpoint: "http://127.0.0.1:9" }),
    ...(renderUserData ? { renderUserData } : {}),
    livePodUids: () => [],
    ledger,
  });
  const changes: PodStatusChange[] = [];
  provider.notifyPods((change) => void changes.push(change));
  return { provider, ledger, changes, calls: countCalls(provider.client) };
}

describe("Ec2PodProvider without EC2 calls", () => {
  it("refuses user-data over 16 KiB: Failed with UserDataTooLarge, nothing recorded or launched", async () => {
    const { provider, ledger, changes, calls } = offline(
      () => `#!/bin/bash\n${"x".repeat(20_000)}`,
    );
    await provider.createPod(testPod("big", "uid-big"));
    expect(provider.getPodStatus("uid-big")).toMatchObject({
      phase: "Failed",
      reason: "UserDataTooLarge",
    });
    expect(provider.getPodStatus("uid-big")?.message).toMatch(/16384/);
    expect(changes.flatMap((c) => c.events.map((e) => e.reason))).toEqual(["UserDataTooLarge"]);
    expect(await ledger.get("uid-big")).toBeUndefined();
    expect([...calls.keys()]).toEqual([]);
    expect(await provider.deletePod(testPod("big", "uid-big"))).toMatchObject({ complete: true });
    expect([...calls.keys()]).toEqual([]);
  });

  it("a Pod being deleted before it was ever launched completes at once, without a call", async () => {
    const { provider, calls } = offline(() => "#!/bin/bash\n");
    const pod = testPod("gone", "uid-gone");
    pod.metadata = {
      ...pod.metadata,
      deletionTimestamp: new Date(),
      deletionGracePeriodSeconds: 0,
    };
    expect(await provider.deletePod(pod)).toMatchObject({ complete: true, phase: "complete" });
    expect([...calls.keys()]).toEqual([]);
  });

  it("instanceAnnotations leaves out what is not known", () => {
    expect(
      instanceAnnotations({
        instanceId: "i-0123456789abcdef0",
        instanceType: "m7i.large",
        availabilityZone: undefined,
        subnetId: undefined,
        capacityType: "spot",
      }),
    ).toEqual({
      "nebula.dev/instance-id": "i-0123456789abcdef0",
      "nebula.dev/instance-type-launched": "m7i.large",
      "nebula.dev/capacity-type": "spot",
    });
  });
});

describe("renderOptionsOf", () => {
  it("passes the configured logs and metrics to the renderer, over the userData option", () => {
    const config = parseProviderConfig(
      testConfig({ logs: { group: "/nebula/blue" }, metrics: { sampleSeconds: 10 } }),
    );
    expect(
      renderOptionsOf(config, {
        cluster: "named",
        logs: { group: "/elsewhere" },
        delivery: "user-data",
      }),
    ).toEqual({
      cluster: "named",
      logs: { group: "/nebula/blue" },
      metrics: { namespace: "Nebula", sampleSeconds: 10, publishSeconds: 60 },
      delivery: config.podDelivery,
    });
  });

  it("leaves logs and metrics to the userData option when the configuration has none", () => {
    const config = parseProviderConfig(testConfig());
    expect(renderOptionsOf(config, undefined)).toEqual({
      cluster: config.clusterName,
      delivery: config.podDelivery,
    });
    expect(renderOptionsOf(config, { metrics: {} })).toMatchObject({ metrics: {} });
  });
});
