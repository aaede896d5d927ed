import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  API_VERSION,
  INSTANCE_KIND,
  KINDS,
  parseInstance,
  parseWorkload,
  parseWorkloadDeployment,
  WORKLOAD_DEPLOYMENT_KIND,
  WORKLOAD_KIND,
} from "./index.js";

const deployment = (spec: Record<string, unknown>) => ({
  apiVersion: API_VERSION,
  kind: "WorkloadDeployment",
  metadata: { name: "web-eu", namespace: "team-a" },
  spec: {
    workloadRef: { name: "web" },
    placement: "eu",
    replicas: 3,
    selector: { matchLabels: { app: "web", "nebula.dev/placement": "eu" } },
    ...spec,
  },
});

describe("WorkloadDeployment", () => {
  it("accepts a well-formed object", () => {
    const parsed = parseWorkloadDeployment(deployment({}));
    expect(parsed.ok).toBe(true);
    expect(parsed.ok && parsed.value.spec.replicas).toBe(3);
  });

  it.each([
    ["negative replicas", { replicas: -1 }, "spec.replicas"],
    ["fractional replicas", { replicas: 1.5 }, "spec.replicas"],
    ["an unknown field", { replica: 3 }, "spec"],
    [
      "a label key with spaces",
      { selector: { matchLabels: { "my app": "web" } } },
      "spec.selector.matchLabels",
    ],
    [
      "a label value too long",
      { selector: { matchLabels: { app: "x".repeat(64) } } },
      "spec.selector.matchLabels.app",
    ],
    [
      "an unknown operator",
      { selector: { matchExpressions: [{ key: "app", operator: "Like", values: ["a"] }] } },
      "spec.selector.matchExpressions.0.operator",
    ],
    [
      "In without values",
      { selector: { matchExpressions: [{ key: "app", operator: "In" }] } },
      "spec.selector.matchExpressions.0",
    ],
    [
      "Exists with values",
      { selector: { matchExpressions: [{ key: "app", operator: "Exists", values: ["a"] }] } },
      "spec.selector.matchExpressions.0",
    ],
    ["an unknown selector field", { selector: { matchLabel: { app: "web" } } }, "spec.selector"],
    ["a bad workload name", { workloadRef: { name: "Web_1" } }, "spec.workloadRef.name"],
  ])("rejects %s", (_, spec, path) => {
    const parsed = parseWorkloadDeployment(deployment(spec));
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) {
      expect(parsed.error.code).toBe("InvalidWorkloadDeployment");
      expect(parsed.error.message).toContain(`${path}:`);
      expect(parsed.error.cause).toBeInstanceOf(z.ZodError);
    }
  });

  it("keeps unknown metadata and parses a status with conditions", () => {
    const parsed = parseWorkloadDeployment({
      ...deployment({}),
      metadata: { name: "web-eu", annotations: { a: "b" } },
      status: {
        observedGeneration: 2,
        readyReplicas: 0,
        conditions: [
          {
            type: "Available",
            status: "False",
            reason: "InstanceCrashing",
            message: "1 of 1 instances is repeatedly exiting and restarting.",
            lastTransitionTime: "2026-11-30T05:00:00Z",
            observedGeneration: 2,
          },
        ],
      },
    });
    expect(parsed.ok && parsed.value.metadata.annotations).toEqual({ a: "b" });
    expect(parsed.ok && parsed.value.status?.conditions?.[0]?.reason).toBe("InstanceCrashing");
  });
});

describe("Workload", () => {
  const workload = (spec: unknown) => ({
    apiVersion: API_VERSION,
    kind: "Workload",
    metadata: { name: "web" },
    spec,
  });

  it("accepts placements and an empty list", () => {
    expect(parseWorkload(workload({ placements: [{ name: "eu", replicas: 2 }] })).ok).toBe(true);
    expect(parseWorkload(workload({ placements: [] })).ok).toBe(true);
  });

  it.each([
    ["negative replicas", { placements: [{ name: "eu", replicas: -2 }] }],
    [
      "a duplicate placement",
      {
        placements: [
          { name: "eu", replicas: 1 },
          { name: "eu", replicas: 2 },
        ],
      },
    ],
    ["an unknown field", { placements: [], replicas: 2 }],
    ["an uppercase placement name", { placements: [{ name: "EU", replicas: 1 }] }],
    ["a missing spec", undefined],
  ])("rejects %s", (_, spec) => {
    const parsed = parseWorkload(workload(spec));
    expect(parsed.ok || parsed.error.code).toBe("InvalidWorkload");
  });

  it("rejects another kind or version", () => {
    expect(parseWorkload({ ...workload({ placements: [] }), kind: "Instance" }).ok).toBe(false);
    expect(
      parseWorkload({ ...workload({ placements: [] }), apiVersion: "compute.nebula.dev/v1" }).ok,
    ).toBe(false);
  });
});

describe("Instance", () => {
  it("accepts a provider's status and rejects an unknown state", () => {
    const ok = parseInstance({
      apiVersion: API_VERSION,
      kind: "Instance",
      metadata: { name: "web-eu-0", labels: { app: "web" } },
      spec: { providerID: "aws:///eu-west-1a/i-0123" },
      status: { state: "Running" },
    });
    expect(ok.ok).toBe(true);
    const bad = parseInstance({
      apiVersion: API_VERSION,
      kind: "Instance",
      metadata: {},
      status: { state: "Exploded" },
    });
    expect(bad.ok || bad.error.code).toBe("InvalidInstance");
  });

  it("is never thrown at", () => {
    for (const value of [null, 5, "x", [], {}, { kind: "Instance" }]) {
      expect(parseInstance(value).ok).toBe(false);
    }
  });
});

describe("the kinds as data", () => {
  it("names three namespaced kinds of one group and version", () => {
    expect(KINDS.map((k) => `${k.plural}.${k.group}/${k.version}`)).toEqual([
      "workloads.compute.nebula.dev/v1alpha1",
      "workloaddeployments.compute.nebula.dev/v1alpha1",
      "instances.compute.nebula.dev/v1alpha1",
    ]);
  });

  it("shows ready/desired, Available and its reason for workloads, state and reason for instances", () => {
    for (const kind of [WORKLOAD_KIND, WORKLOAD_DEPLOYMENT_KIND]) {
      expect(kind.printerColumns.filter((c) => !c.priority).map((c) => c.name)).toEqual([
        "Ready",
        "Desired",
        "Available",
        "Reason",
        "Age",
      ]);
    }
    expect(INSTANCE_KIND.printerColumns.filter((c) => !c.priority).map((c) => c.name)).toEqual([
      "State",
      "Ready",
      "Reason",
      "Age",
    ]);
  });

  it("converts every spec and status to JSON Schema with the Kubernetes extensions", () => {
    for (const kind of KINDS) {
      const spec = z.toJSONSchema(kind.spec, { io: "input" }) as Record<string, unknown>;
      const status = z.toJSONSchema(kind.status, { io: "input" }) as {
        properties: Record<string, unknown>;
      };
      expect(spec.type).toBe("object");
      expect(status.properties.conditions).toMatchObject({
        type: "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
      });
    }
    const wd = z.toJSONSchema(WORKLOAD_DEPLOYMENT_KIND.spec, { io: "input" }) as unknown as {
      properties: { selector: Record<string, unknown> };
    };
    expect(wd.properties.selector["x-kubernetes-validations"]).toHaveLength(1);
  });
});
