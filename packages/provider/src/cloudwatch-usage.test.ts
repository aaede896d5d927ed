import { CloudWatchClient } from "@aws-sdk/client-cloudwatch";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CloudWatchUsage, cpuRate, mergeSeries, parseMetricDataPage } from "./cloudwatch-usage.js";
import { ProviderError } from "./errors.js";

const t = (seconds: number) => new Date(Date.UTC(2026, 0, 1) + seconds * 1000);

describe("cpuRate", () => {
  it("is the counter's increase over the seconds between its two latest points", () => {
    expect(cpuRate({ timestamps: [t(120), t(60), t(0)], values: [42, 12, 3] })).toBe(0.5);
    // Order of the points does not matter.
    expect(cpuRate({ timestamps: [t(0), t(120), t(60)], values: [3, 42, 12] })).toBe(0.5);
    expect(cpuRate({ timestamps: [t(60), t(0)], values: [5, 5] })).toBe(0);
  });

  it("is undefined with one point, or when the counter went down (a restart)", () => {
    expect(cpuRate({ timestamps: [t(0)], values: [3] })).toBeUndefined();
    expect(cpuRate({ timestamps: [], values: [] })).toBeUndefined();
    expect(cpuRate({ timestamps: [t(120), t(60)], values: [1, 30] })).toBeUndefined();
  });

  it("is never negative nor infinite, and undefined only for fewer than two points or a drop", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 100_000 }), { minLength: 0, maxLength: 6 }),
        fc.array(fc.double({ min: 0, max: 1e9, noNaN: true }), { minLength: 6, maxLength: 6 }),
        (times, values) => {
          const series = { timestamps: times.map(t), values: values.slice(0, times.length) };
          const rate = cpuRate(series);
          const sorted = [...times.keys()].sort((a, b) => (times[b] ?? 0) - (times[a] ?? 0));
          const [newest, older] = sorted.map((i) => values[i] as number);
          if (times.length < 2 || (newest as number) < (older as number)) {
            expect(rate).toBeUndefined();
          } else {
            expect(rate).toBeGreaterThanOrEqual(0);
            expect(Number.isFinite(rate)).toBe(true);
          }
        },
      ),
    );
  });
});

describe("mergeSeries", () => {
  it("joins two pages newest first, one point per time", () => {
    expect(
      mergeSeries(
        { timestamps: [t(60), t(0)], values: [2, 1] },
        { timestamps: [t(180), t(120), t(60)], values: [4, 3, 2] },
      ),
    ).toEqual({ timestamps: [t(180), t(120), t(60), t(0)], values: [4, 3, 2, 1] });
  });
});

describe("parseMetricDataPage", () => {
  it("pairs timestamps and values by query Id, joining an Id that comes twice", () => {
    const page = parseMetricDataPage({
      MetricDataResults: [
        { Id: "c0", Timestamps: [t(60)], Values: [2], StatusCode: "PartialData" },
        { Id: "m0", Timestamps: [], Values: [] },
        { Id: "c0", Timestamps: [t(0)], Values: [1], StatusCode: "Complete" },
        { Id: "m1" },
      ],
      NextToken: "next",
    });
    expect(page.results.get("c0")).toEqual({ timestamps: [t(60), t(0)], values: [2, 1] });
    expect(page.results.get("m0")).toEqual({ timestamps: [], values: [] });
    expect(page.results.get("m1")).toEqual({ timestamps: [], values: [] });
    expect(page.nextToken).toBe("next");
  });

  it("refuses, with a typed error, timestamps and values of different lengths", () => {
    const parse = () =>
      parseMetricDataPage({
        MetricDataResults: [{ Id: "c0", Timestamps: [t(0), t(60)], Values: [1] }],
      });
    expect(parse).toThrow(ProviderError);
    expect(parse).toThrow(/2 timestamps and 1 values for query c0/);
    expect(() => parseMetricDataPage({ MetricDataResults: [{ Values: [1] }] })).toThrow(
      expect.objectContaining({ code: "Unknown" }),
    );
  });

  it("answers any input with a result or a ProviderError, never a TypeError", () => {
    fc.assert(
      fc.property(fc.anything(), (output) => {
        try {
          parseMetricDataPage({ MetricDataResults: [output] });
        } catch (error) {
          expect(error).toBeInstanceOf(ProviderError);
        }
      }),
    );
  });
});

describe("CloudWatchUsage options", () => {
  const client = new CloudWatchClient({ region: "us-east-1" });

  it("takes CloudWatch's periods only, and refuses a bad window or namespace", () => {
    expect(new CloudWatchUsage({ client })).toBeInstanceOf(CloudWatchUsage);
    expect(new CloudWatchUsage({ client, period: 120, window: 600 })).toBeInstanceOf(
      CloudWatchUsage,
    );
    for (const bad of [{ period: 45 }, { window: 0 }, { namespace: "" }]) {
      expect(() => new CloudWatchUsage({ client, ...bad })).toThrow(
        expect.objectContaining({ code: "InvalidConfiguration" }),
      );
    }
  });

  it("asks CloudWatch nothing for no containers", async () => {
    const usage = new CloudWatchUsage({ client });
    expect(await usage.podUsage([])).toEqual(new Map());
    expect(await usage.podUsage([{ uid: "u", containers: [] }])).toEqual(new Map());
    await expect(usage.podUsage([{ uid: "", containers: ["a"] }])).rejects.toMatchObject({
      code: "InvalidRequest",
    });
  });
});
