import { describe, expect, it } from "vitest";
import { admitPod } from "./admission.js";
import { parseProviderConfig } from "./config.js";
import { podFacts } from "./pod.js";
import { testConfig, testPod } from "./testing/fixtures.js";

const config = parseProviderConfig(testConfig());

function daemonSetPod() {
  const pod = testPod("agent-x", "u1");
  pod.metadata = {
    ...pod.metadata,
    ownerReferences: [
      { apiVersion: "apps/v1", kind: "DaemonSet", name: "agent", uid: "d1", controller: true },
    ],
  };
  return pod;
}

describe("admitPod", () => {
  it("holds a DaemonSet Pod by default, with a reason; launches it when configured", () => {
    expect(admitPod(podFacts(daemonSetPod()), config)).toMatchObject({
      kind: "hold",
      reason: "DaemonSetPodNotLaunched",
      message: expect.stringContaining("metadata.ownerReferences"),
    });
    const launching = parseProviderConfig(testConfig({ daemonSetPods: "launch" }));
    expect(admitPod(podFacts(daemonSetPod()), launching)).toEqual({
      kind: "launch",
      instanceType: "m7i.large",
      instanceTypes: ["m7i.large"],
    });
  });

  it("refuses a type outside the allow-list with InstanceTypeNotAllowed", () => {
    const pod = testPod("a", "u1", {
      annotations: { "nebula.dev/instance-type": "x2iedn.32xlarge" },
    });
    expect(admitPod(podFacts(pod), config)).toMatchObject({
      kind: "refuse",
      reason: "InstanceTypeNotAllowed",
      message: expect.stringContaining('metadata.annotations["nebula.dev/instance-type"]'),
    });
  });
});
