import { describe, expect, it } from "vitest";
import { INSTANCE_REASONS } from "./index.js";
import { isInstanceReason } from "./reasons.js";

describe("INSTANCE_REASONS", () => {
  it("is exactly the shared contract, in rank order", () => {
    expect(INSTANCE_REASONS).toEqual([
      "InvalidSpec",
      "NoMatchingLocation",
      "InstanceCrashing",
      "OutOfMemory",
      "ImageUnavailable",
      "ConfigurationError",
      "QuotaExceeded",
      "InsufficientCapacity",
      "InstanceLost",
      "PlatformMisconfigured",
      "Unknown",
      "Provisioning",
      "Starting",
      "Completed",
      "Ready",
    ]);
  });

  it("narrows strings with isInstanceReason", () => {
    expect(isInstanceReason("OutOfMemory")).toBe(true);
    expect(isInstanceReason("outofmemory")).toBe(false);
    expect(isInstanceReason(42)).toBe(false);
  });
});
