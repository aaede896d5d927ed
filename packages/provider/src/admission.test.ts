import { describe, expect, it } from "vitest";
import { admitPod } from "./admission.js";
import { parseProviderConfig } from "./config.js";
import { readInstanceTypes } from "./instance-catalogue.js";
import { podFacts } from "./pod.js";
import { EC2_INSTANCE_TYPES, testConfig, testPod } from "./testing/fixtures.js";

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
      capacityTypes: ["on-demand"],
    });
  });

  it("holds, Pending, a Pod whose fitting types are offered in none of the node's zones: the node's configuration is at fault", () => {
    const withCatalogue = parseProviderConfig(
      testConfig({ instanceTypes: { default: "m7i.large", catalogue: { allowed: ["m7i.*"] } } }),
    );
    const offeredNowhere = readInstanceTypes(EC2_INSTANCE_TYPES).types.map((t) => ({
      ...t,
      subnets: [],
    }));
    const pod = testPod("a", "u1", { resources: { requests: { cpu: "1" } } });
    expect(admitPod(podFacts(pod), withCatalogue, offeredNowhere)).toMatchObject({
      kind: "hold",
      reason: "InsufficientCapacity",
      message: expect.stringContaining("are offered in none of this node's subnets"),
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

  it("buys as the node's default, or as a Pod's annotation where its namespace may choose; refuses the rest", () => {
    const spotFirst = parseProviderConfig(
      testConfig({ capacity: { default: "spot-then-on-demand", annotationNamespaces: ["batch"] } }),
    );
    const launched = (pod: ReturnType<typeof testPod>, c = spotFirst) => {
      const a = admitPod(podFacts(pod), c);
      return a.kind === "launch" ? a.capacityTypes : a;
    };
    expect(launched(testPod("a", "u1"))).toEqual(["spot", "on-demand"]);
    expect(launched(testPod("a", "u1"), config)).toEqual(["on-demand"]);
    const asking = (namespace: string, value: string) => {
      const pod = testPod("a", "u1", {
        annotations: { "nebula.dev/requested-capacity-type": value },
      });
      pod.metadata = { ...pod.metadata, namespace };
      return pod;
    };
    expect(launched(asking("batch", "on-demand"))).toEqual(["on-demand"]);
    expect(launched(asking("batch", "spot"))).toEqual(["spot"]);
    expect(launched(asking("web", "spot"))).toMatchObject({
      kind: "refuse",
      reason: "InvalidPodSpec",
      message:
        'pod web/a: metadata.annotations["nebula.dev/requested-capacity-type"] asks for "spot" capacity, but namespace web may not choose its capacity type on this node (capacity.annotationNamespaces); remove the annotation to get the node\'s default, spot-then-on-demand',
    });
    expect(launched(asking("batch", "reserved"))).toMatchObject({
      kind: "refuse",
      reason: "InvalidPodSpec",
      message: expect.stringContaining("it takes on-demand, spot or spot-then-on-demand"),
    });
    // The virtual node's own annotation of what a Pod got is never read as a request.
    const placed = testPod("a", "u1", { annotations: { "nebula.dev/capacity-type": "on-demand" } });
    placed.metadata = { ...placed.metadata, namespace: "web" };
    expect(launched(placed)).toEqual(["spot", "on-demand"]);
    const anyNamespace = parseProviderConfig(
      testConfig({ capacity: { annotationNamespaces: ["*"] } }),
    );
    expect(launched(asking("web", "spot"), anyNamespace)).toEqual(["spot"]);
  });
});
