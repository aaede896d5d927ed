/**
 * The On-Demand price of an EC2 instance type in the AWS Price List Query API's answer
 * (`GetProducts`), read with zod: pure, total.
 *
 * `GetProducts` answers `PriceList`, an array of JSON texts, one per product (SKU):
 * `product.attributes` names it (`instanceType`, `operatingSystem`, `tenancy`, ...) and
 * `terms.OnDemand.<offer>.priceDimensions.<rate>` prices it, `pricePerUnit.USD` per `unit`
 * (`Hrs` for an instance hour). See the service's own example (botocore
 * `data/pricing/2017-10-15/examples-1.json`, the AWS CLI's `examples/pricing/get-products.rst`)
 * and Karpenter, which reads the same fields
 * (`aws/karpenter-provider-aws`, `pkg/providers/pricing/pricing.go`, `onDemandPage`).
 */
import { z } from "zod";

/** A price as the Price List writes it: a decimal in USD, `"0.0960000000"`. */
const Usd = z.string().regex(/^\d{1,6}(\.\d{1,10})?$/);

/** One price dimension (other fields ignored). */
const PriceDimension = z.looseObject({
  unit: z.string(),
  pricePerUnit: z.looseObject({ USD: Usd }),
});

/** One product of `PriceList`, once its JSON text is parsed (other fields ignored). */
const PriceItem = z.looseObject({
  product: z.looseObject({
    attributes: z.looseObject({ instanceType: z.string() }),
  }),
  terms: z.looseObject({
    OnDemand: z.record(
      z.string(),
      z.looseObject({ priceDimensions: z.record(z.string(), z.unknown()) }),
    ),
  }),
});

/** The Price List's product attribute values the provider asks for (`TERM_MATCH` filters). */
export interface OnDemandPriceFilter {
  /** Always `TERM_MATCH`: the attribute has exactly this value. */
  readonly Type: "TERM_MATCH";
  /** The product attribute, e.g. `instanceType`. */
  readonly Field: string;
  /** Its value, e.g. `m7i.large`. */
  readonly Value: string;
}

/**
 * The `GetProducts` filters of the Linux, shared-tenancy, On-Demand price of `instanceType` in
 * `regionCode` (the provider's Region, not the Price List endpoint's): no pre-installed software
 * (`preInstalledSw` `NA`, not SQL Server), `capacitystatus` `Used` (not the price of an unused
 * capacity reservation), `marketoption` `OnDemand` (as Karpenter asks, not Capacity Blocks).
 */
export function onDemandPriceFilters(
  instanceType: string,
  regionCode: string,
): OnDemandPriceFilter[] {
  const term = (Field: string, Value: string): OnDemandPriceFilter => ({
    Type: "TERM_MATCH",
    Field,
    Value,
  });
  return [
    term("ServiceCode", "AmazonEC2"),
    term("instanceType", instanceType),
    term("regionCode", regionCode),
    term("operatingSystem", "Linux"),
    term("tenancy", "Shared"),
    term("preInstalledSw", "NA"),
    term("capacitystatus", "Used"),
    term("marketoption", "OnDemand"),
  ];
}

/** The hourly USD prices of one `PriceList` entry, when it is a product of `instanceType`. */
function hourlyPrices(entry: unknown, instanceType: string): string[] {
  if (typeof entry !== "string") return [];
  let json: unknown;
  try {
    json = JSON.parse(entry);
  } catch {
    return [];
  }
  const item = PriceItem.safeParse(json);
  if (!item.success || item.data.product.attributes.instanceType !== instanceType) return [];
  const prices: string[] = [];
  for (const term of Object.values(item.data.terms.OnDemand)) {
    for (const raw of Object.values(term.priceDimensions)) {
      const dimension = PriceDimension.safeParse(raw);
      if (!dimension.success || dimension.data.unit !== "Hrs") continue;
      const usd = dimension.data.pricePerUnit.USD;
      // A zero rate is no price (Karpenter skips it too).
      if (Number(usd) > 0) prices.push(usd);
    }
  }
  return prices;
}

/**
 * The On-Demand price per hour of `instanceType` in a `GetProducts` answer's `PriceList`, in USD
 * as the Price List writes it (`"0.0960000000"`); `undefined` when none is there, when the
 * entries disagree (the filters matched more than one price: which one applies is not known), or
 * on anything unexpected. Never throws: a text that is not JSON, an entry of another type or
 * without an hourly dimension, a price that is not a decimal are skipped.
 */
export function onDemandHourlyPrice(priceList: unknown, instanceType: string): string | undefined {
  if (!Array.isArray(priceList)) return undefined;
  // By value: "0.096" and "0.0960000000" are one price.
  const found = new Map<number, string>();
  for (const entry of priceList) {
    for (const price of hourlyPrices(entry, instanceType)) found.set(Number(price), price);
  }
  if (found.size !== 1) return undefined;
  return [...found.values()][0];
}
