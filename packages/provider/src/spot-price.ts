/**
 * The Spot price in EC2's price history, read with zod: pure, total.
 */
import { z } from "zod";

/** One entry of `DescribeSpotPriceHistory` as this module reads it (other fields ignored). */
const PriceEntry = z.looseObject({
  InstanceType: z.string().optional(),
  AvailabilityZone: z.string().optional(),
  ProductDescription: z.string().optional(),
  /** USD per hour, as EC2 writes it: `"0.031200"`. */
  SpotPrice: z.string().regex(/^\d{1,6}(\.\d{1,10})?$/),
  Timestamp: z.union([z.date(), z.string()]).optional(),
});

/**
 * The newest Linux price of `instanceType` in `availabilityZone` among EC2's price history
 * entries, as EC2 wrote it (USD per hour); `undefined` when none is there or readable. Entries of
 * other types, zones or products (Windows, SUSE, ...) and unreadable ones are skipped.
 */
export function latestSpotPrice(
  entries: readonly unknown[],
  instanceType: string,
  availabilityZone: string,
): string | undefined {
  let best: { price: string; at: number } | undefined;
  for (const raw of Array.isArray(entries) ? entries : []) {
    const parsed = PriceEntry.safeParse(raw);
    if (!parsed.success) continue;
    const e = parsed.data;
    if (e.InstanceType !== undefined && e.InstanceType !== instanceType) continue;
    if (e.AvailabilityZone !== availabilityZone) continue;
    if (e.ProductDescription !== undefined && !e.ProductDescription.startsWith("Linux/UNIX")) {
      continue;
    }
    const at = e.Timestamp === undefined ? 0 : new Date(e.Timestamp).getTime();
    const when = Number.isFinite(at) ? at : 0;
    if (best === undefined || when > best.at) best = { price: e.SpotPrice, at: when };
  }
  return best?.price;
}
