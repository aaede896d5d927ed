import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { onDemandHourlyPrice, onDemandPriceFilters } from "./on-demand-price.js";

/**
 * The `PriceList` of the Price List Query API's own `GetProducts` example, verbatim: botocore's
 * `botocore/data/pricing/2017-10-15/examples-1.json` ("To retrieve a list of products"), the same
 * answer the AWS CLI documents in `awscli/examples/pricing/get-products.rst` (aws/aws-cli). An
 * EBS volume: its one On-Demand dimension is priced per `GB-Mo`, not per hour.
 */
const AWS_EXAMPLE_PRICE_LIST = [
  '{"product":{"productFamily":"Storage","attributes":{"storageMedia":"SSD-backed","maxThroughputvolume":"320 MB/sec","volumeType":"Provisioned IOPS","maxIopsvolume":"20000","servicecode":"AmazonEC2","usagetype":"CAN1-EBS:VolumeUsage.piops","locationType":"AWS Region","location":"Canada (Central)","servicename":"Amazon Elastic Compute Cloud","maxVolumeSize":"16 TiB","operation":""},"sku":"WQGC34PB2AWS8R4U"},"serviceCode":"AmazonEC2","terms":{"OnDemand":{"WQGC34PB2AWS8R4U.JRTCKXETXF":{"priceDimensions":{"WQGC34PB2AWS8R4U.JRTCKXETXF.6YS6EN2CT7":{"unit":"GB-Mo","endRange":"Inf","description":"$0.138 per GB-month of Provisioned IOPS SSD (io1)  provisioned storage - Canada (Central)","appliesTo":[],"rateCode":"WQGC34PB2AWS8R4U.JRTCKXETXF.6YS6EN2CT7","beginRange":"0","pricePerUnit":{"USD":"0.1380000000"}}},"sku":"WQGC34PB2AWS8R4U","effectiveDate":"2017-08-01T00:00:00Z","offerTermCode":"JRTCKXETXF","termAttributes":{}}}},"version":"20170901182201","publicationDate":"2017-09-01T18:22:01Z"}',
];

/**
 * An instance product in the same answer's shape: the example above with its product changed to
 * an instance type (the `Compute Instance` attributes the filters of `onDemandPriceFilters` match,
 * as Karpenter's `pkg/providers/pricing/pricing.go` reads them) and its dimension to an instance
 * hour. Every key and its nesting are the example's; only values differ, and a Reserved term is
 * added beside the On-Demand one (a `GetProducts` answer carries both).
 */
function instanceEntry(
  instanceType: string,
  usd: string,
  unit = "Hrs",
  extra: Record<string, unknown> = {},
): string {
  const sku = "6C86BEPQVG73ZGGR";
  return JSON.stringify({
    product: {
      productFamily: "Compute Instance",
      attributes: {
        instanceType,
        operatingSystem: "Linux",
        tenancy: "Shared",
        preInstalledSw: "NA",
        capacitystatus: "Used",
        regionCode: "us-east-1",
        servicecode: "AmazonEC2",
        usagetype: `BoxUsage:${instanceType}`,
        locationType: "AWS Region",
        location: "US East (N. Virginia)",
        operation: "RunInstances",
      },
      sku,
    },
    serviceCode: "AmazonEC2",
    terms: {
      OnDemand: {
        [`${sku}.JRTCKXETXF`]: {
          priceDimensions: {
            [`${sku}.JRTCKXETXF.6YS6EN2CT7`]: {
              unit,
              endRange: "Inf",
              description: `$${Number(usd)} per On Demand Linux ${instanceType} Instance Hour`,
              appliesTo: [],
              rateCode: `${sku}.JRTCKXETXF.6YS6EN2CT7`,
              beginRange: "0",
              pricePerUnit: { USD: usd },
            },
          },
          sku,
          effectiveDate: "2026-11-01T00:00:00Z",
          offerTermCode: "JRTCKXETXF",
          termAttributes: {},
        },
      },
      Reserved: {
        [`${sku}.4NA7Y494T4`]: {
          priceDimensions: {
            [`${sku}.4NA7Y494T4.6YS6EN2CT7`]: {
              unit: "Hrs",
              description: `Linux/UNIX (Amazon VPC), ${instanceType} reserved instance applied`,
              appliesTo: [],
              rateCode: `${sku}.4NA7Y494T4.6YS6EN2CT7`,
              pricePerUnit: { USD: "0.0600000000" },
            },
          },
          sku,
          offerTermCode: "4NA7Y494T4",
          termAttributes: { LeaseContractLength: "1yr", PurchaseOption: "No Upfront" },
        },
      },
    },
    version: "20261101000000",
    publicationDate: "2026-11-01T00:00:00Z",
    ...extra,
  });
}

describe("onDemandHourlyPrice", () => {
  it("reads the AWS example answer: an EBS volume priced per GB-month has no hourly price", () => {
    expect(onDemandHourlyPrice(AWS_EXAMPLE_PRICE_LIST, "m7i.large")).toBeUndefined();
    // Its price is there, per GB-month: only the unit keeps it out.
    const hourly = AWS_EXAMPLE_PRICE_LIST.map((e) =>
      e
        .replace('"unit":"GB-Mo"', '"unit":"Hrs"')
        .replace('"attributes":{', '"attributes":{"instanceType":"m7i.large",'),
    );
    expect(onDemandHourlyPrice(hourly, "m7i.large")).toBe("0.1380000000");
  });

  it("takes the On-Demand hourly USD price of the type, as the Price List writes it (not the Reserved one)", () => {
    expect(onDemandHourlyPrice([instanceEntry("m5.large", "0.0960000000")], "m5.large")).toBe(
      "0.0960000000",
    );
  });

  it("skips other types, other units, zero rates, unreadable texts and prices", () => {
    const list = [
      "not json",
      "{}",
      JSON.stringify({ product: { attributes: {} }, terms: { OnDemand: {} } }),
      instanceEntry("c7i.large", "0.0893000000"),
      instanceEntry("m5.large", "0.1380000000", "GB-Mo"),
      instanceEntry("m5.large", "0.0000000000"),
      instanceEntry("m5.large", "cheap"),
      instanceEntry("m5.large", "1e3"),
      42,
      null,
      instanceEntry("m5.large", "0.0960000000"),
    ];
    expect(onDemandHourlyPrice(list, "m5.large")).toBe("0.0960000000");
    expect(onDemandHourlyPrice(list, "c7i.large")).toBe("0.0893000000");
    expect(onDemandHourlyPrice(list, "r7i.large")).toBeUndefined();
  });

  it("answers none when the entries disagree, and one price when they agree by value", () => {
    expect(
      onDemandHourlyPrice(
        [instanceEntry("m5.large", "0.0960000000"), instanceEntry("m5.large", "0.1150000000")],
        "m5.large",
      ),
    ).toBeUndefined();
    expect(
      onDemandHourlyPrice(
        [instanceEntry("m5.large", "0.0960000000"), instanceEntry("m5.large", "0.096")],
        "m5.large",
      ),
    ).toMatch(/^0\.096/);
  });

  it("answers none for what is not a price list", () => {
    for (const input of [undefined, null, "[]", {}, 7, [], [[]]]) {
      expect(onDemandHourlyPrice(input, "m5.large")).toBeUndefined();
    }
  });

  it("is total: any input, any JSON text, any type gives a decimal or undefined (property)", () => {
    const text = fc.oneof(
      fc.json(),
      fc.string(),
      fc
        .tuple(fc.string(), fc.string(), fc.constantFrom("Hrs", "GB-Mo", "Quantity"))
        .map(([type, usd, unit]) => instanceEntry(type, usd, unit)),
      fc
        .tuple(fc.constantFrom("m5.large"), fc.anything())
        .map(([type, junk]) => instanceEntry(type, "0.0960000000", "Hrs", { terms: junk })),
    );
    fc.assert(
      fc.property(
        fc.oneof(fc.anything(), fc.array(fc.oneof(text, fc.anything()))),
        fc.oneof(fc.string(), fc.constant("m5.large")),
        (list, type) => {
          const out = onDemandHourlyPrice(list, type);
          expect(out === undefined || /^\d{1,6}(\.\d{1,10})?$/.test(out)).toBe(true);
        },
      ),
    );
  });
});

describe("onDemandPriceFilters", () => {
  it("asks for the Linux, shared-tenancy, On-Demand price of the type in the provider's Region", () => {
    const filters = onDemandPriceFilters("m7i.large", "eu-west-1");
    expect(Object.fromEntries(filters.map((f) => [f.Field, f.Value]))).toEqual({
      ServiceCode: "AmazonEC2",
      instanceType: "m7i.large",
      regionCode: "eu-west-1",
      operatingSystem: "Linux",
      tenancy: "Shared",
      preInstalledSw: "NA",
      capacitystatus: "Used",
      marketoption: "OnDemand",
    });
    expect(filters.every((f) => f.Type === "TERM_MATCH")).toBe(true);
  });
});
