import type { V1Pod } from "@kubernetes/client-node";
import type { ProviderConfigInput } from "../config.js";

/** A valid configuration for tests (not exported from the package). */
export function testConfig(overrides: Partial<ProviderConfigInput> = {}): ProviderConfigInput {
  return {
    clusterName: "test",
    nodeName: "nebula-node",
    region: "us-east-1",
    subnetIds: ["subnet-0a1b2c3d"],
    securityGroupIds: ["sg-0a1b2c3d"],
    imageId: "ami-0a1b2c3d",
    instanceProfile: "nebula-host",
    instanceTypes: { default: "m7i.large" },
    // The tests written for the user-data delivery keep it; the Parameter Store ones say so.
    podDelivery: "user-data",
    ...overrides,
  };
}

/** A minimal Pod for tests. */
export function testPod(
  name: string,
  uid: string,
  extra: {
    annotations?: Record<string, string>;
    nodeSelector?: Record<string, string>;
    resources?: Record<string, unknown>;
  } = {},
): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: "default",
      uid,
      // The caller (the virtual node's Pod controller) adds the reclaim finalizer before createPod.
      finalizers: ["nebula.dev/instance-reclaim"],
      ...(extra.annotations ? { annotations: extra.annotations } : {}),
    },
    spec: {
      nodeName: "nebula-node",
      restartPolicy: "Never",
      ...(extra.nodeSelector ? { nodeSelector: extra.nodeSelector } : {}),
      containers: [
        {
          name: "app",
          image: "busybox",
          command: ["sh", "-c", "exit 0"],
          ...(extra.resources ? { resources: extra.resources } : {}),
        },
      ],
    },
  };
}

/**
 * Six entries of `DescribeInstanceTypes` as moto returns them (the fields the catalogue reads):
 * g5.xlarge, m7g.large, m7i.large, m7i.metal-24xl, m7i.xlarge, t3.micro.
 */
export const EC2_INSTANCE_TYPES = [
  {
    InstanceType: "g5.xlarge",
    VCpuInfo: { DefaultVCpus: 4 },
    MemoryInfo: { SizeInMiB: 16384 },
    ProcessorInfo: { SupportedArchitectures: ["x86_64"] },
    BareMetal: false,
    SupportedUsageClasses: ["on-demand", "spot"],
    GpuInfo: { Gpus: [{ Name: "A10G", Manufacturer: "NVIDIA", Count: 1 }] },
  },
  {
    InstanceType: "m7g.large",
    VCpuInfo: { DefaultVCpus: 2 },
    MemoryInfo: { SizeInMiB: 8192 },
    ProcessorInfo: { SupportedArchitectures: ["arm64"] },
    BareMetal: false,
    SupportedUsageClasses: ["on-demand", "spot"],
  },
  {
    InstanceType: "m7i.large",
    VCpuInfo: { DefaultVCpus: 2 },
    MemoryInfo: { SizeInMiB: 8192 },
    ProcessorInfo: { SupportedArchitectures: ["x86_64"] },
    BareMetal: false,
    SupportedUsageClasses: ["on-demand", "spot"],
  },
  {
    InstanceType: "m7i.metal-24xl",
    VCpuInfo: { DefaultVCpus: 96 },
    MemoryInfo: { SizeInMiB: 393216 },
    ProcessorInfo: { SupportedArchitectures: ["x86_64"] },
    BareMetal: true,
    SupportedUsageClasses: ["on-demand", "spot"],
  },
  {
    InstanceType: "m7i.xlarge",
    VCpuInfo: { DefaultVCpus: 4 },
    MemoryInfo: { SizeInMiB: 16384 },
    ProcessorInfo: { SupportedArchitectures: ["x86_64"] },
    BareMetal: false,
    SupportedUsageClasses: ["on-demand", "spot"],
  },
  {
    InstanceType: "t3.micro",
    VCpuInfo: { DefaultVCpus: 2 },
    MemoryInfo: { SizeInMiB: 1024 },
    ProcessorInfo: { SupportedArchitectures: ["x86_64"] },
    BareMetal: false,
    SupportedUsageClasses: ["on-demand", "spot"],
  },
];
