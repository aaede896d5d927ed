import { describe, expect, it } from "vitest";
import { parseProviderConfig } from "./config.js";
import { ProviderError } from "./errors.js";
import { readInstanceTypes } from "./instance-catalogue.js";
import { instanceTypeCandidates, podFacts, resolveInstanceType } from "./pod.js";
import { EC2_INSTANCE_TYPES, testConfig, testPod } from "./testing/fixtures.js";

const mapped = parseProviderConfig(
  testConfig({
    instanceTypes: {
      default: "m7i.large",
      byResources: [
        { instanceType: "t3.small", cpu: 2, memoryMiB: 2048 },
        { instanceType: "m7i.xlarge", cpu: 4, memoryMiB: 16384 },
        { instanceType: "g5.xlarge", cpu: 4, memoryMiB: 16384, gpus: 1 },
      ],
    },
  }),
);
const plain = parseProviderConfig(testConfig());

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return error instanceof ProviderError ? error.code : "other";
  }
  return undefined;
}

describe("resolveInstanceType", () => {
  it("takes the node selector, then the annotation", () => {
    const bySelector = testPod("a", "u1", {
      nodeSelector: { "node.kubernetes.io/instance-type": "c7i.2xlarge" },
    });
    const open = parseProviderConfig(
      testConfig({
        instanceTypes: { default: "m7i.large", allowed: ["m7i.large", "c7i.2xlarge", "r7i.large"] },
      }),
    );
    expect(resolveInstanceType(podFacts(bySelector), open)).toBe("c7i.2xlarge");
    const byAnnotation = testPod("a", "u1", {
      annotations: { "nebula.dev/instance-type": "r7i.large" },
    });
    expect(resolveInstanceType(podFacts(byAnnotation), open)).toBe("r7i.large");
  });

  it("rejects two different requested types", () => {
    const both = testPod("a", "u1", {
      nodeSelector: { "node.kubernetes.io/instance-type": "c7i.large" },
      annotations: { "nebula.dev/instance-type": "r7i.large" },
    });
    expect(codeOf(() => podFacts(both))).toBe("InvalidPodSpec");
  });

  it("maps requests to the first rule that fits, GPUs included", () => {
    const small = testPod("a", "u1", { resources: { requests: { cpu: "500m", memory: "1Gi" } } });
    expect(resolveInstanceType(podFacts(small), mapped)).toBe("t3.small");
    const medium = testPod("a", "u1", { resources: { limits: { cpu: "3", memory: "8Gi" } } });
    expect(resolveInstanceType(podFacts(medium), mapped)).toBe("m7i.xlarge");
    const gpu = testPod("a", "u1", {
      resources: { requests: { cpu: "1" }, limits: { "nvidia.com/gpu": "1" } },
    });
    expect(resolveInstanceType(podFacts(gpu), mapped)).toBe("g5.xlarge");
    const huge = testPod("a", "u1", { resources: { requests: { cpu: "64" } } });
    expect(codeOf(() => resolveInstanceType(podFacts(huge), mapped))).toBe("InvalidPodSpec");
  });

  it("uses the default, except for GPU Pods", () => {
    expect(resolveInstanceType(podFacts(testPod("a", "u1")), plain)).toBe("m7i.large");
    const gpu = testPod("a", "u1", { resources: { limits: { "nvidia.com/gpu": 2 } } });
    expect(codeOf(() => resolveInstanceType(podFacts(gpu), plain))).toBe("InvalidPodSpec");
  });

  it("honours the allowed list", () => {
    const config = parseProviderConfig(
      testConfig({ instanceTypes: { default: "m7i.large", allowed: ["m7i.large"] } }),
    );
    const pod = testPod("a", "u1", { annotations: { "nebula.dev/instance-type": "p5.48xlarge" } });
    expect(codeOf(() => resolveInstanceType(podFacts(pod), config))).toBe("InstanceTypeNotAllowed");
  });

  it("has an allow-list even when none is configured: the configured types only, the field named", () => {
    const pod = testPod("a", "u1", {
      nodeSelector: { "node.kubernetes.io/instance-type": "p5.48xlarge" },
    });
    expect(() => resolveInstanceType(podFacts(pod), mapped)).toThrow(
      /spec\.nodeSelector\["node\.kubernetes\.io\/instance-type"\] asks for instance type p5\.48xlarge, which is not allowed.*g5\.xlarge, m7i\.large, m7i\.xlarge, t3\.small/,
    );
    const listed = testPod("a", "u1", {
      nodeSelector: { "node.kubernetes.io/instance-type": "m7i.xlarge" },
    });
    expect(resolveInstanceType(podFacts(listed), mapped)).toBe("m7i.xlarge");
  });

  it("rejects a Pod without a UID as InvalidPodSpec", () => {
    expect(codeOf(() => podFacts({ metadata: { name: "x" }, spec: { containers: [] } }))).toBe(
      "InvalidPodSpec",
    );
  });
});

describe("podFacts", () => {
  it("the deletion's grace period wins over the spec's", () => {
    const pod = testPod("a", "u1");
    if (pod.spec) pod.spec.terminationGracePeriodSeconds = 60;
    expect(podFacts(pod).gracePeriodSeconds).toBe(60);
    pod.metadata = {
      ...pod.metadata,
      deletionTimestamp: new Date("2026-11-30T06:00:00Z"),
      deletionGracePeriodSeconds: 5,
    };
    expect(podFacts(pod)).toMatchObject({ gracePeriodSeconds: 5, deleting: true });
    if (pod.spec) delete pod.spec.terminationGracePeriodSeconds;
    pod.metadata.deletionGracePeriodSeconds = 0;
    expect(podFacts(pod).gracePeriodSeconds).toBe(0);
  });

  it("reads the controlling owner, the API phase and the finalizers", () => {
    const pod = testPod("a", "u1");
    pod.metadata = {
      ...pod.metadata,
      finalizers: ["nebula.dev/instance-reclaim"],
      ownerReferences: [
        { apiVersion: "apps/v1", kind: "DaemonSet", name: "ds", uid: "d1", controller: true },
      ],
    };
    pod.status = { phase: "Succeeded" };
    expect(podFacts(pod)).toMatchObject({
      ownerKind: "DaemonSet",
      apiPhase: "Succeeded",
      finalizers: ["nebula.dev/instance-reclaim"],
      deleting: false,
    });
  });
});

describe("instanceTypeCandidates with instanceTypes.catalogue", () => {
  const catalogue = readInstanceTypes(EC2_INSTANCE_TYPES).types;
  const config = parseProviderConfig(
    testConfig({
      instanceTypes: {
        default: "m7i.large",
        // The rules and fallbacks are not used with a catalogue.
        byResources: [{ instanceType: "t3.small", cpu: 2 }],
        fallbacks: { "m7i.large": ["m5.large"] },
        catalogue: { allowed: ["m7i.*", "g5.*", "m7g.*"] },
      },
    }),
  );

  it("gives the smallest fitting allowed types of the image's architecture, smallest first", () => {
    const pod = testPod("a", "u1", { resources: { requests: { cpu: "1", memory: "2Gi" } } });
    expect(instanceTypeCandidates(podFacts(pod), config, catalogue)).toEqual([
      "m7i.large",
      "m7i.xlarge",
    ]);
    const big = testPod("a", "u1", { resources: { requests: { cpu: "2", memory: "4Gi" } } });
    expect(resolveInstanceType(podFacts(big), config, catalogue)).toBe("m7i.xlarge");
    const gpu = testPod("a", "u1", { resources: { limits: { "nvidia.com/gpu": "1" } } });
    expect(instanceTypeCandidates(podFacts(gpu), config, catalogue)).toEqual(["g5.xlarge"]);
  });

  it("refuses a Pod nothing fits, saying what it asked, what the host keeps and what is allowed", () => {
    const huge = testPod("a", "u1", { resources: { requests: { cpu: "64" } } });
    expect(() => instanceTypeCandidates(podFacts(huge), config, catalogue)).toThrow(
      "pod default/a: no allowed x86_64 instance type fits its requests (cpu 64, memory 0Mi, gpus 0) with 0.1 vCPU and 512Mi kept for the host (allowed: m7i.*, g5.*, m7g.*; EC2 lists 6 types)",
    );
    expect(codeOf(() => instanceTypeCandidates(podFacts(huge), config, []))).toBe("InvalidPodSpec");
  });

  it("says the node's configuration, not the Pod, is at fault when the types that fit are offered in none of its zones", () => {
    const pod = testPod("a", "u1", { resources: { requests: { cpu: "1", memory: "2Gi" } } });
    const offeredNowhere = catalogue.map((t) => ({ ...t, subnets: [] }));
    expect(() => instanceTypeCandidates(podFacts(pod), config, offeredNowhere)).toThrow(
      "pod default/a: the allowed instance types that fit its requests (m7i.large, m7i.xlarge) are offered in none of this node's subnets' Availability Zones (subnet-0a1b2c3d); add a subnet in a zone that offers them, or allow other types (instanceTypes.catalogue.allowed)",
    );
    expect(codeOf(() => instanceTypeCandidates(podFacts(pod), config, offeredNowhere))).toBe(
      "InvalidConfiguration",
    );
    // Nothing fits even where unoffered: still the Pod's spec.
    const huge = testPod("a", "u1", { resources: { requests: { cpu: "64" } } });
    expect(codeOf(() => instanceTypeCandidates(podFacts(huge), config, offeredNowhere))).toBe(
      "InvalidPodSpec",
    );
  });

  it("lets a Pod ask for a type the patterns allow and EC2 lists; not bare metal, not another family", () => {
    const ask = (type: string) =>
      testPod("a", "u1", { nodeSelector: { "node.kubernetes.io/instance-type": type } });
    expect(instanceTypeCandidates(podFacts(ask("m7i.xlarge")), config, catalogue)).toEqual([
      "m7i.xlarge",
    ]);
    for (const type of ["m7i.metal-24xl", "t3.micro", "m7i.48xlarge"]) {
      expect(codeOf(() => instanceTypeCandidates(podFacts(ask(type)), config, catalogue))).toBe(
        "InstanceTypeNotAllowed",
      );
    }
    // Listed but offered in none of the node's subnets: refused, saying so.
    const offeredNowhere = catalogue.map((t) => ({ ...t, subnets: [] }));
    expect(() =>
      instanceTypeCandidates(podFacts(ask("m7i.xlarge")), config, offeredNowhere),
    ).toThrow(
      "asks for instance type m7i.xlarge, which EC2 offers in none of this node's subnets' Availability Zones (subnet-0a1b2c3d)",
    );
    // The configured names stay allowed.
    expect(instanceTypeCandidates(podFacts(ask("m5.large")), config, catalogue)).toEqual([
      "m5.large",
    ]);
  });
});
