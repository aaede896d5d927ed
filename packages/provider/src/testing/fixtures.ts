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
