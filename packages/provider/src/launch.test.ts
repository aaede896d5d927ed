import { describe, expect, it } from "vitest";
import { parseProviderConfig } from "./config.js";
import { buildRunInstancesInput, MAX_USER_DATA_BYTES, pickSubnet } from "./launch.js";
import { podFacts } from "./pod.js";
import { testConfig, testPod } from "./testing/fixtures.js";

const config = parseProviderConfig(
  testConfig({
    tags: { team: "ml" },
    subnetIds: ["subnet-01", "subnet-02", "subnet-03"],
    instanceProfile: "arn:aws:iam::123456789012:instance-profile/nebula-host",
  }),
);
const pod = podFacts(testPod("web-0", "6f1c1d4e-1111-4a4a-9b9b-000000000001"));

describe("buildRunInstancesInput", () => {
  it("tags the volumes and the network interface like the instance, Pod labels included", () => {
    const labelled = parseProviderConfig(
      testConfig({ tags: { team: "ml" }, podLabelTags: { "app.kubernetes.io/name": "app" } }),
    );
    const withLabels = testPod("web-0", "6f1c1d4e-1111-4a4a-9b9b-000000000001");
    withLabels.metadata = { ...withLabels.metadata, labels: { "app.kubernetes.io/name": "web" } };
    const input = buildRunInstancesInput({
      pod: podFacts(withLabels),
      config: labelled,
      instanceType: "m7i.large",
      userData: "#!/bin/bash\n",
      subnetId: "subnet-0a1b2c3d",
      clientToken: "6f1c1d4e-1111-4a4a-9b9b-000000000001.1",
    });
    const specs = input.TagSpecifications ?? [];
    expect(specs.map((s) => s.ResourceType)).toEqual(["instance", "volume", "network-interface"]);
    for (const spec of specs) {
      const tags = Object.fromEntries((spec.Tags ?? []).map((t) => [t.Key, t.Value]));
      expect(tags).toMatchObject({ app: "web", team: "ml", "nebula:pod": "default/web-0" });
    }
    expect(input.ClientToken).toBe("6f1c1d4e-1111-4a4a-9b9b-000000000001.1");
  });

  it("sets every launch setting of docs/contracts.md#launch", () => {
    const input = buildRunInstancesInput({
      pod,
      config,
      instanceType: "m7i.large",
      userData: "#!/bin/bash\n",
    });
    expect(input).toMatchObject({
      ClientToken: pod.uid,
      ImageId: "ami-0a1b2c3d",
      InstanceType: "m7i.large",
      MinCount: 1,
      MaxCount: 1,
      InstanceInitiatedShutdownBehavior: "stop",
      IamInstanceProfile: { Arn: "arn:aws:iam::123456789012:instance-profile/nebula-host" },
      MetadataOptions: {
        HttpTokens: "required",
        HttpPutResponseHopLimit: 1,
        HttpEndpoint: "enabled",
      },
      UserData: Buffer.from("#!/bin/bash\n").toString("base64"),
    });
    const tags = Object.fromEntries(
      (input.TagSpecifications?.[0]?.Tags ?? []).map((t) => [t.Key, t.Value]),
    );
    expect(input.TagSpecifications?.[0]?.ResourceType).toBe("instance");
    expect(tags).toEqual({
      team: "ml",
      Name: "nebula-node/default/web-0",
      "nebula:cluster": "test",
      "nebula:node": "nebula-node",
      "nebula:pod-uid": pod.uid,
      "nebula:pod": "default/web-0",
    });
  });

  it("boots a Pod that requests GPUs from acceleratedImageId when one is set, every other Pod from imageId", () => {
    const accelerated = parseProviderConfig(
      testConfig({ imageId: "ami-0a1b2c3d", acceleratedImageId: "ami-0e0e0e0e" }),
    );
    const gpu = podFacts(
      testPod("train", "6f1c1d4e-1111-4a4a-9b9b-000000000002", {
        resources: { limits: { "nvidia.com/gpu": "1" } },
      }),
    );
    const image = (facts: typeof pod, c: typeof config) =>
      buildRunInstancesInput({
        pod: facts,
        config: c,
        instanceType: "g5.xlarge",
        userData: "#!/bin/bash\n",
      }).ImageId;
    expect(image(gpu, accelerated)).toBe("ami-0e0e0e0e");
    expect(image(pod, accelerated)).toBe("ami-0a1b2c3d");
    // Unset: the one image for every Pod.
    expect(image(gpu, parseProviderConfig(testConfig({ imageId: "ami-0a1b2c3d" })))).toBe(
      "ami-0a1b2c3d",
    );
    expect(() => parseProviderConfig(testConfig({ acceleratedImageId: "ubuntu-gpu" }))).toThrow(
      'acceleratedImageId: must be an AMI ID, "ami-…"',
    );
  });

  it("asks for a one-time Spot instance for a Spot placement, whose power-off terminates it", () => {
    const base = { pod, config, instanceType: "m7i.large", userData: "#!/bin/bash\n" } as const;
    const spot = buildRunInstancesInput({ ...base, capacityType: "spot" });
    expect(spot.InstanceMarketOptions).toEqual({
      MarketType: "spot",
      SpotOptions: { SpotInstanceType: "one-time", InstanceInterruptionBehavior: "terminate" },
    });
    expect(spot.InstanceInitiatedShutdownBehavior).toBe("terminate");
    const onDemand = buildRunInstancesInput({ ...base, capacityType: "on-demand" });
    expect(onDemand.InstanceMarketOptions).toBeUndefined();
    expect(onDemand.InstanceInitiatedShutdownBehavior).toBe("stop");
    expect(buildRunInstancesInput(base)).toEqual(onDemand);
  });

  it("is deterministic for one Pod (same token, same parameters)", () => {
    const a = buildRunInstancesInput({ pod, config, instanceType: "m7i.large", userData: "x" });
    const b = buildRunInstancesInput({ pod, config, instanceType: "m7i.large", userData: "x" });
    expect(a).toEqual(b);
    expect(config.subnetIds).toContain(pickSubnet(pod.uid, config.subnetIds));
  });

  it("refuses user-data over 16 KiB", () => {
    expect(() =>
      buildRunInstancesInput({
        pod,
        config,
        instanceType: "m7i.large",
        userData: new Uint8Array(MAX_USER_DATA_BYTES + 1),
      }),
    ).toThrow(/over EC2's limit/);
  });
});
