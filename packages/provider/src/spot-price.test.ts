import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { latestSpotPrice } from "./spot-price.js";

const entry = (over: Record<string, unknown>) => ({
  InstanceType: "m7i.large",
  AvailabilityZone: "us-east-1a",
  ProductDescription: "Linux/UNIX",
  SpotPrice: "0.031200",
  Timestamp: new Date("2026-12-01T10:00:00Z"),
  ...over,
});

describe("latestSpotPrice", () => {
  it("takes the newest Linux price of the type in the zone, as EC2 wrote it", () => {
    const entries = [
      entry({ SpotPrice: "0.030000", Timestamp: new Date("2026-12-01T09:00:00Z") }),
      entry({ SpotPrice: "0.031200" }),
      entry({ SpotPrice: "0.500000", ProductDescription: "Windows" }),
      entry({ SpotPrice: "0.040000", AvailabilityZone: "us-east-1b" }),
      entry({ SpotPrice: "0.050000", InstanceType: "c7i.large" }),
      entry({
        SpotPrice: "0.029000",
        ProductDescription: "Linux/UNIX (Amazon VPC)",
        Timestamp: "2026-12-01T08:00:00Z",
      }),
    ];
    expect(latestSpotPrice(entries, "m7i.large", "us-east-1a")).toBe("0.031200");
    expect(latestSpotPrice(entries, "m7i.large", "us-east-1b")).toBe("0.040000");
    expect(latestSpotPrice(entries, "m7i.large", "us-east-1c")).toBeUndefined();
  });

  it("skips what it cannot read: a price that is not a decimal, a missing zone", () => {
    expect(
      latestSpotPrice(
        [
          entry({ SpotPrice: "cheap" }),
          entry({ SpotPrice: "1e3" }),
          entry({ AvailabilityZone: undefined }),
        ],
        "m7i.large",
        "us-east-1a",
      ),
    ).toBeUndefined();
  });

  it("answers every input without throwing (property)", () => {
    fc.assert(
      fc.property(fc.anything(), fc.string(), fc.string(), (entries, type, zone) => {
        const out = latestSpotPrice(entries as unknown[], type, zone);
        expect(out === undefined || /^\d/.test(out)).toBe(true);
      }),
    );
  });
});
