import type { ProviderConfig } from "./config.js";
import { ProviderError, toProviderError } from "./errors.js";
import type { Gateway } from "./gateway.js";
import {
  type InstanceTypeInfo,
  type ReadInstanceTypes,
  withOfferings,
} from "./instance-catalogue.js";

/**
 * One read of the catalogue: every instance type (`DescribeInstanceTypes`), each with the subnets
 * of `subnetIds` whose Availability Zone offers it (`DescribeSubnets`,
 * `DescribeInstanceTypeOfferings` filtered to those zones). Throws the gateway's errors.
 */
export async function readCatalogue(
  gateway: Pick<Gateway, "describeInstanceTypes" | "subnetZones" | "instanceTypeOfferings">,
  subnetIds: readonly string[],
): Promise<ReadInstanceTypes> {
  const [read, zones] = await Promise.all([
    gateway.describeInstanceTypes(),
    gateway.subnetZones(subnetIds),
  ]);
  // In the configured order: a type's subnets keep the order placements use.
  const ordered = new Map<string, string>();
  for (const subnet of subnetIds) {
    const zone = zones.get(subnet);
    if (zone !== undefined) ordered.set(subnet, zone);
  }
  const missing = subnetIds.filter((subnet) => !ordered.has(subnet));
  if (missing.length > 0) {
    throw new ProviderError(
      "InvalidConfiguration",
      `DescribeSubnets lists no Availability Zone for ${missing.join(", ")} (subnetIds)`,
    );
  }
  const offerings = await gateway.instanceTypeOfferings([...new Set(ordered.values())]);
  return { types: withOfferings(read.types, ordered, offerings), skipped: read.skipped };
}

/**
 * EC2's instance types as the provider last read them (`instanceTypes.catalogue`): read on first
 * use, read again in the background once older than the refresh interval (a failed refresh keeps
 * the last good catalogue and is logged). Concurrent callers share one read.
 */
export class InstanceTypeCatalogue {
  readonly #read: () => Promise<ReadInstanceTypes>;
  readonly #refreshMs: number;
  readonly #now: () => number;
  readonly #log: (level: "info" | "warn", message: string) => void;
  #types: readonly InstanceTypeInfo[] = [];
  #readAt = Number.NEGATIVE_INFINITY;
  #reading: Promise<readonly InstanceTypeInfo[]> | undefined;

  constructor(options: {
    /** One read of every type with its subnets ({@link readCatalogue}). */
    read: () => Promise<ReadInstanceTypes>;
    refreshMs: number;
    now: () => number;
    log: (level: "info" | "warn", message: string) => void;
  }) {
    this.#read = options.read;
    this.#refreshMs = options.refreshMs;
    this.#now = options.now;
    this.#log = options.log;
  }

  /** The last good catalogue; empty before the first read succeeds. */
  latest(): readonly InstanceTypeInfo[] {
    return this.#types;
  }

  /**
   * The catalogue: the last good one (a stale one starts a refresh in the background), else one
   * read now.
   *
   * @throws ProviderError when there is no catalogue yet and reading one fails (the EC2 error's
   * code, e.g. `Unauthorized` without `ec2:DescribeInstanceTypes`), or EC2 lists no readable type
   * (`Unavailable`).
   */
  async current(): Promise<readonly InstanceTypeInfo[]> {
    if (this.#types.length === 0) return this.#refresh();
    if (this.#now() - this.#readAt >= this.#refreshMs) {
      this.#refresh().catch((error: unknown) =>
        this.#log("warn", `${String(error)}; the catalogue read before is kept`),
      );
    }
    return this.#types;
  }

  #refresh(): Promise<readonly InstanceTypeInfo[]> {
    this.#reading ??= this.#readOnce().finally(() => {
      this.#reading = undefined;
    });
    return this.#reading;
  }

  async #readOnce(): Promise<readonly InstanceTypeInfo[]> {
    let read: ReadInstanceTypes;
    try {
      read = await this.#read();
    } catch (error) {
      const wrapped = toProviderError(error, "reading the instance type catalogue");
      throw new ProviderError(
        wrapped.code,
        `reading EC2's instance types failed (${wrapped.message}); a Pod waits for them to be read (the node's role needs ec2:DescribeInstanceTypes, ec2:DescribeInstanceTypeOfferings and ec2:DescribeSubnets)`,
        { cause: error },
      );
    }
    if (read.skipped.length > 0) {
      this.#log(
        "warn",
        `DescribeInstanceTypes: ${read.skipped.length} entries not readable, left out (first: ${read.skipped[0]})`,
      );
    }
    if (read.types.length === 0) {
      throw new ProviderError(
        "Unavailable",
        "DescribeInstanceTypes listed no readable instance type; a Pod waits for them to be read",
      );
    }
    this.#types = read.types;
    this.#readAt = this.#now();
    this.#log("info", `read ${read.types.length} instance types from EC2`);
    return this.#types;
  }
}

/**
 * The catalogue of a configuration (`instanceTypes.catalogue`) read through `gateway` with
 * {@link readCatalogue} for the configured subnets; `undefined` without one.
 */
export function catalogueFor(
  config: ProviderConfig,
  gateway: Gateway,
  now: () => number,
  log: (level: "info" | "warn", message: string) => void,
): InstanceTypeCatalogue | undefined {
  const rules = config.instanceTypes.catalogue;
  if (rules === undefined) return undefined;
  return new InstanceTypeCatalogue({
    read: () => readCatalogue(gateway, config.subnetIds),
    refreshMs: rules.refreshMinutes * 60_000,
    now,
    log,
  });
}
