import { INSTANCE_REASONS } from "@nebula/state-mapping";
import { describe, expect, it } from "vitest";
import {
  DEFAULT_REASON_CATALOG,
  REASON_CLASSES,
  ReasonCatalog,
  reasonClassRank,
  UNKNOWN_REASON,
} from "./catalog.js";

describe("DEFAULT_REASON_CATALOG", () => {
  it("has an entry for every reason @nebula/state-mapping produces", () => {
    const missing = INSTANCE_REASONS.filter((r) => DEFAULT_REASON_CATALOG.get(r) === undefined);
    expect(missing).toEqual([]);
  });

  it("classes the reasons in rank order (docs/contracts.md#failure-reasons-and-ranking)", () => {
    const classOf = (r: string) => DEFAULT_REASON_CATALOG.get(r)?.class;
    expect(["InvalidSpec", "NoMatchingLocation"].map(classOf)).toEqual([
      "SpecRejected",
      "SpecRejected",
    ]);
    expect(
      ["InstanceCrashing", "OutOfMemory", "ImageUnavailable", "ConfigurationError"].map(classOf),
    ).toEqual(["CustomerMustFix", "CustomerMustFix", "CustomerMustFix", "CustomerMustFix"]);
    expect(["QuotaExceeded", "InsufficientCapacity", "InstanceLost"].map(classOf)).toEqual([
      "PlatformBlocked",
      "PlatformBlocked",
      "PlatformBlocked",
    ]);
    expect(["Provisioning", "Starting"].map(classOf)).toEqual([
      "PlatformWorking",
      "PlatformWorking",
    ]);
    expect(["Completed", "Ready"].map(classOf)).toEqual(["NotAFailure", "NotAFailure"]);
  });

  it("puts Unknown (an unreadable instance state) in the Unclassified class, above platform working", () => {
    expect(INSTANCE_REASONS).toContain(UNKNOWN_REASON);
    expect(DEFAULT_REASON_CATALOG.get(UNKNOWN_REASON)).toEqual({
      class: "Unclassified",
      singular: "is in an unknown state",
      plural: "are in an unknown state",
      transient: false,
    });
    expect(reasonClassRank("Unclassified")).toBeLessThan(reasonClassRank("PlatformWorking"));
    expect(reasonClassRank("Unclassified")).toBeGreaterThan(reasonClassRank("PlatformBlocked"));
  });

  it("words each failure reason as users read it", () => {
    expect(DEFAULT_REASON_CATALOG.get("InstanceCrashing")).toMatchObject({
      singular: "is repeatedly exiting and restarting",
      plural: "are repeatedly exiting and restarting",
      transient: false,
    });
    expect(DEFAULT_REASON_CATALOG.get("ImageUnavailable")?.singular).toBe(
      "could not pull its image",
    );
  });

  it("marks only reasons where waiting helps as transient", () => {
    const transient = DEFAULT_REASON_CATALOG.names().filter(
      (r) => DEFAULT_REASON_CATALOG.get(r)?.transient,
    );
    expect(transient).toEqual([
      "InstanceLost",
      "InsufficientCapacity",
      "Provisioning",
      "Ready",
      "Starting",
    ]);
  });
});

describe("reasonClassRank", () => {
  it("ranks spec rejected > customer must fix > platform blocked > platform working", () => {
    const ranks = REASON_CLASSES.map(reasonClassRank);
    expect(ranks).toEqual([0, 1, 2, 3, 4, 5]);
    expect(reasonClassRank("CustomerMustFix")).toBeLessThan(reasonClassRank("PlatformBlocked"));
  });
});

describe("ReasonCatalog.resolve", () => {
  it("returns the catalog entry of a known reason", () => {
    expect(DEFAULT_REASON_CATALOG.resolve("OutOfMemory")).toMatchObject({
      reason: "OutOfMemory",
      known: true,
      definition: { class: "CustomerMustFix" },
    });
  });

  it("classes a valid but unknown reason as Unclassified and names it in the phrase", () => {
    expect(DEFAULT_REASON_CATALOG.resolve("ReportUnreadable")).toEqual({
      reason: "ReportUnreadable",
      known: false,
      definition: {
        class: "Unclassified",
        singular: "is not ready (ReportUnreadable)",
        plural: "are not ready (ReportUnreadable)",
        transient: false,
      },
    });
  });

  it("turns a missing or malformed reason into Unknown", () => {
    for (const bad of [undefined, "", "not camel case", "9Lives", 42, "x".repeat(2000)]) {
      expect(DEFAULT_REASON_CATALOG.resolve(bad).reason).toBe(UNKNOWN_REASON);
    }
  });
});

describe("ReasonCatalog.extend", () => {
  const licence = {
    class: "CustomerMustFix",
    singular: "cannot start because its licence expired",
    plural: "cannot start because their licence expired",
    transient: false,
  } as const;

  it("adds a platform team's reason with its class, leaving the original unchanged", () => {
    const result = DEFAULT_REASON_CATALOG.extend({ LicenceExpired: licence });
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.value).toBeInstanceOf(ReasonCatalog);
    expect(result.value.get("LicenceExpired")).toEqual(licence);
    expect(result.value.get("InstanceCrashing")).toEqual(
      DEFAULT_REASON_CATALOG.get("InstanceCrashing"),
    );
    expect(DEFAULT_REASON_CATALOG.get("LicenceExpired")).toBeUndefined();
  });

  it("refuses a name that is not a condition reason, with a typed error", () => {
    const result = DEFAULT_REASON_CATALOG.extend({ "licence expired": licence });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.code).toBe("InvalidReasonDefinition");
    expect(result.error.cause).toBeDefined();
  });

  it("refuses an unknown class or a missing phrase", () => {
    expect(DEFAULT_REASON_CATALOG.extend({ X: { ...licence, class: "Severe" } }).ok).toBe(false);
    expect(DEFAULT_REASON_CATALOG.extend({ X: { ...licence, plural: "" } }).ok).toBe(false);
    expect(DEFAULT_REASON_CATALOG.extend("nonsense").ok).toBe(false);
  });
});
