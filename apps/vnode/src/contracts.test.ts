/**
 * The names @nebula/provider and @nebula/virtual-node must agree on, and which this app wires
 * together. Each package defines them for its own users (the provider does not depend on the
 * virtual node, which is provider-neutral); this test keeps the copies equal.
 */
import {
  instanceAnnotations,
  INSTANCE_ANNOTATIONS as PROVIDER_ANNOTATIONS,
  RECLAIM_FINALIZER,
} from "@nebula/provider";
import {
  DEFAULT_POD_FINALIZER,
  INSTANCE_ANNOTATIONS as NODE_ANNOTATIONS,
} from "@nebula/virtual-node";
import { describe, expect, it } from "vitest";

describe("provider and virtual node agree", () => {
  it("on the annotations that show what a Pod runs on", () => {
    expect(PROVIDER_ANNOTATIONS).toEqual(NODE_ANNOTATIONS);
    const written = instanceAnnotations({
      instanceId: "i-0123456789abcdef0",
      instanceType: "m7i.large",
      availabilityZone: "eu-west-1a",
      subnetId: "subnet-0123456789abcdef0",
      capacityType: "on-demand",
    });
    expect(Object.keys(written).sort()).toEqual(Object.values(NODE_ANNOTATIONS).sort());
  });

  it("on the default reclaim finalizer", () => {
    expect(RECLAIM_FINALIZER).toBe(DEFAULT_POD_FINALIZER);
  });
});
