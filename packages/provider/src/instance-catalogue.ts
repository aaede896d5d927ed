import { z } from "zod";

/**
 * What the provider knows of one EC2 instance type, read from `DescribeInstanceTypes` (never from
 * a hand-kept table).
 */
export interface InstanceTypeInfo {
  /** The type's name, e.g. `m7i.large`. */
  readonly name: string;
  /** Default vCPUs. */
  readonly vcpus: number;
  /** Memory, MiB. */
  readonly memoryMiB: number;
  /** EC2's architectures (`x86_64`, `arm64`, ...). */
  readonly architectures: readonly string[];
  /** GPUs (all of them, any maker); 0 without `GpuInfo`. */
  readonly gpus: number;
  /** A bare-metal type (`*.metal*`). */
  readonly bareMetal: boolean;
  /** Whether the type can run as On-Demand and as Spot (`SupportedUsageClasses`). */
  readonly usageClasses: readonly string[];
  /**
   * The configured subnets whose Availability Zone offers the type
   * (`DescribeInstanceTypeOfferings`, see {@link withOfferings}); unset: not known, every subnet.
   */
  readonly subnets?: readonly string[];
}

/**
 * The part of an EC2 `InstanceTypeInfo` the catalogue reads. Loose: EC2 adds fields often, and a
 * field the catalogue does not read never makes a type unreadable.
 */
const Ec2InstanceType = z.looseObject({
  InstanceType: z.string().regex(/^[a-z][a-z0-9-]*\.[a-z0-9-]+$/),
  VCpuInfo: z.looseObject({ DefaultVCpus: z.number().int().positive() }),
  MemoryInfo: z.looseObject({ SizeInMiB: z.number().int().positive() }),
  ProcessorInfo: z.looseObject({ SupportedArchitectures: z.array(z.string()).min(1) }),
  BareMetal: z.boolean().optional(),
  SupportedUsageClasses: z.array(z.string()).optional(),
  GpuInfo: z
    .looseObject({ Gpus: z.array(z.looseObject({ Count: z.number().int().min(0) })).optional() })
    .optional(),
});

/** What {@link readInstanceTypes} made of a `DescribeInstanceTypes` answer. */
export interface ReadInstanceTypes {
  /** The types it could read, by name (sorted). */
  readonly types: readonly InstanceTypeInfo[];
  /** Entries it could not read: the type (or the entry's position) and why. */
  readonly skipped: readonly string[];
}

/**
 * Reads the `InstanceTypes` entries of `DescribeInstanceTypes` answers. Total: an entry that is not
 * a readable instance type is skipped and named in `skipped`, never thrown; a name seen twice keeps
 * its first entry.
 */
export function readInstanceTypes(entries: readonly unknown[]): ReadInstanceTypes {
  const byName = new Map<string, InstanceTypeInfo>();
  const skipped: string[] = [];
  entries.forEach((entry, index) => {
    const parsed = Ec2InstanceType.safeParse(entry);
    if (!parsed.success) {
      const name =
        typeof entry === "object" && entry !== null && "InstanceType" in entry
          ? String((entry as { InstanceType: unknown }).InstanceType)
          : `entry ${index}`;
      const issue = parsed.error.issues[0];
      skipped.push(`${name}: ${issue?.path.join(".") || "entry"}: ${issue?.message ?? "invalid"}`);
      return;
    }
    const t = parsed.data;
    if (byName.has(t.InstanceType)) return;
    byName.set(t.InstanceType, {
      name: t.InstanceType,
      vcpus: t.VCpuInfo.DefaultVCpus,
      memoryMiB: t.MemoryInfo.SizeInMiB,
      architectures: t.ProcessorInfo.SupportedArchitectures,
      gpus: (t.GpuInfo?.Gpus ?? []).reduce((n, g) => n + g.Count, 0),
      bareMetal: t.BareMetal === true,
      usageClasses: t.SupportedUsageClasses ?? [],
    });
  });
  const types = [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  return { types, skipped };
}

/**
 * The types with the configured subnets that offer each: a subnet offers a type when EC2 lists an
 * offering of the type in the subnet's Availability Zone. Subnets are kept in configured order; a
 * type offered in none gets an empty list. Pure.
 *
 * @param subnetZones - each configured subnet's Availability Zone (`DescribeSubnets`).
 * @param offerings - the Availability Zones EC2 offers each type in (`DescribeInstanceTypeOfferings`).
 */
export function withOfferings(
  types: readonly InstanceTypeInfo[],
  subnetZones: ReadonlyMap<string, string>,
  offerings: ReadonlyMap<string, ReadonlySet<string>>,
): InstanceTypeInfo[] {
  return types.map((t) => {
    const zones = offerings.get(t.name);
    const subnets = [...subnetZones]
      .filter(([, zone]) => zones?.has(zone) === true)
      .map(([subnet]) => subnet);
    return { ...t, subnets };
  });
}

/** What a Pod needs of its instance, in the catalogue's units. */
export interface CatalogueNeed {
  /** vCPUs. */
  readonly cpu: number;
  /** MiB. */
  readonly memoryMiB: number;
  /** GPUs. */
  readonly gpus: number;
}

/** How {@link candidateTypes} chooses. */
export interface CatalogueRules {
  /**
   * The types a Pod may run on: a name (`m7i.large`) or a family with `*` for its sizes
   * (`m7i.*`). A family pattern never brings in a bare-metal size; name one to allow it.
   */
  readonly allowed: readonly string[];
  /** The architecture of the host image (EC2's name: `x86_64`, `arm64`). */
  readonly architecture: string;
  /** What the host keeps for itself (the supervisor, the container runtime, the kernel). */
  readonly reserved: { readonly cpu: number; readonly memoryMiB: number };
  /** At most this many candidates, the first the smallest. */
  readonly maxCandidates: number;
}

/** True when `name` is allowed by the `allowed` list of {@link CatalogueRules} (a name or `family.*`). */
export function allowedByPatterns(
  allowed: readonly string[],
  type: Pick<InstanceTypeInfo, "name" | "bareMetal">,
): boolean {
  const family = type.name.slice(0, type.name.indexOf("."));
  return allowed.some(
    (pattern) => pattern === type.name || (pattern === `${family}.*` && !type.bareMetal),
  );
}

/**
 * The instance types a Pod needing `need` may run on, most preferred first: the allowed types of
 * the image's architecture, offered in a configured subnet (when offerings are known), whose
 * vCPUs, memory and GPUs, less what the host keeps, cover the need; then the smallest first
 * (fewest GPUs, vCPUs, then memory; by name on a tie), at most `maxCandidates`. No GPU type for a
 * Pod that asks for none. Pure and total: an empty list says nothing fits. A catalogue is read as
 * immutable: what does not depend on the Pod (allowed, architecture, offered, order) is worked out
 * once per catalogue array and rules.
 */
export function candidateTypes(
  need: CatalogueNeed,
  catalogue: readonly InstanceTypeInfo[],
  rules: CatalogueRules,
): InstanceTypeInfo[] {
  const max = Math.max(0, Math.floor(rules.maxCandidates));
  const out: InstanceTypeInfo[] = [];
  for (const t of eligible(catalogue, rules)) {
    if (out.length >= max) break;
    if (
      t.vcpus - rules.reserved.cpu >= need.cpu &&
      t.memoryMiB - rules.reserved.memoryMiB >= need.memoryMiB &&
      t.gpus >= need.gpus &&
      (need.gpus > 0 || t.gpus === 0)
    ) {
      out.push(t);
    }
  }
  return out;
}

const ELIGIBLE = new WeakMap<
  readonly InstanceTypeInfo[],
  { readonly key: string; readonly types: readonly InstanceTypeInfo[] }
>();

/** The catalogue's allowed, offered types of the rules' architecture, smallest first (cached). */
function eligible(
  catalogue: readonly InstanceTypeInfo[],
  rules: Pick<CatalogueRules, "allowed" | "architecture">,
): readonly InstanceTypeInfo[] {
  const key = JSON.stringify([rules.allowed, rules.architecture]);
  const hit = ELIGIBLE.get(catalogue);
  if (hit?.key === key) return hit.types;
  const types = catalogue
    .filter(
      (t) =>
        (t.subnets === undefined || t.subnets.length > 0) &&
        allowedByPatterns(rules.allowed, t) &&
        t.architectures.includes(rules.architecture),
    )
    .sort(
      (a, b) =>
        a.gpus - b.gpus ||
        a.vcpus - b.vcpus ||
        a.memoryMiB - b.memoryMiB ||
        (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
    );
  ELIGIBLE.set(catalogue, { key, types });
  return types;
}

const BY_NAME = new WeakMap<readonly InstanceTypeInfo[], ReadonlyMap<string, InstanceTypeInfo>>();

/** The catalogue's type named `name`, if it lists one (indexed once per catalogue array). */
export function findInstanceType(
  catalogue: readonly InstanceTypeInfo[],
  name: string,
): InstanceTypeInfo | undefined {
  let index = BY_NAME.get(catalogue);
  if (index === undefined) {
    index = new Map(catalogue.map((t) => [t.name, t]));
    BY_NAME.set(catalogue, index);
  }
  return index.get(name);
}
