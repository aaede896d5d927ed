/**
 * The virtual node's configuration, parsed with zod at the boundary.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { VirtualNodeError } from "./errors.js";

const rfc1123 = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const quantity = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i?|[munk]|)$/;
const labelKey =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** The label every Nebula virtual Node carries, with the provider's name as value. */
export const PROVIDER_LABEL = "nebula.dev/provider";

/** The taint key virtual kubelets use; its value is the provider's name. */
export const VIRTUAL_KUBELET_TAINT_KEY = "virtual-kubelet.io/provider";

/** The finalizer the Pod controller holds on each Pod from before its launch until its instance is terminated. */
export const DEFAULT_POD_FINALIZER = "nebula.dev/instance-reclaim";

/** The annotations that show what a Pod runs on. */
export const INSTANCE_ANNOTATIONS = {
  instanceId: "nebula.dev/instance-id",
  instanceType: "nebula.dev/instance-type-launched",
  availabilityZone: "nebula.dev/availability-zone",
  capacityType: "nebula.dev/capacity-type",
  /** A Spot instance's price at launch, USD per hour. */
  spotPrice: "nebula.dev/spot-price-usd-per-hour",
  /** The instance's price at launch, either capacity type (Spot or On-Demand), USD per hour. */
  price: "nebula.dev/price-usd-per-hour",
} as const;

/** The virtual node's configuration (before defaults). */
export const VirtualNodeConfigSchema = z.strictObject({
  /** The Node's name (RFC 1123). */
  nodeName: z.string().max(253).regex(rfc1123, "must be a lowercase RFC 1123 name"),
  /** The provider's name: the value of the taint and of the `nebula.dev/provider` label. */
  provider: z.string().max(63).regex(labelValue).min(1).default("nebula"),
  /** Capacity the Node advertises (Kubernetes quantities). */
  capacity: z
    .record(z.string().regex(labelKey), z.string().regex(quantity, "must be a quantity"))
    .default({ cpu: "1000", memory: "4Ti", pods: "1000" }),
  /** Allocatable; defaults to the capacity. */
  allocatable: z
    .record(z.string().regex(labelKey), z.string().regex(quantity, "must be a quantity"))
    .optional(),
  /** Extra Node labels. */
  labels: z.record(z.string().regex(labelKey), z.string().max(63).regex(labelValue)).default({}),
  /** The taint's effect (`NoSchedule` by default). */
  taintEffect: z.enum(["NoSchedule", "PreferNoSchedule", "NoExecute"]).default("NoSchedule"),
  /**
   * Extra Node taints, after the `virtual-kubelet.io/provider` one: a pool of virtual nodes only
   * the Pods that tolerate them reach. One taint removed from here stays on the Node until
   * `kubectl taint node <node> <key>-` (the vnode cannot tell it from a taint someone else added).
   */
  taints: z
    .array(
      z.strictObject({
        key: z.string().regex(labelKey),
        value: z.string().max(63).regex(labelValue).optional(),
        effect: z.enum(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
      }),
    )
    .default([]),
  /**
   * Drain: the Node is cordoned (`spec.unschedulable`, so no new Pod is scheduled to it), its
   * Pods keep running and are torn down as usual when they end or are deleted (never deleted by
   * the vnode), and its `Drained` condition turns `True` once no Pod and no instance is left. Off
   * again: the vnode uncordons the Node if it was the one that cordoned it.
   */
  drain: z.boolean().default(false),
  /** The Node's `InternalIP` (the address of the virtual node's Pod). */
  internalIP: z.string().min(1).default("127.0.0.1"),
  /** The port of the kubelet API the Node advertises in `daemonEndpoints`. */
  kubeletPort: z.number().int().min(1).max(65_535).default(10_250),
  /** `nodeInfo.operatingSystem` and the `kubernetes.io/os` label. */
  operatingSystem: z.string().min(1).default("linux"),
  /** `nodeInfo.architecture` and the `kubernetes.io/arch` label. */
  architecture: z.string().min(1).default("amd64"),
  /** `nodeInfo.kubeletVersion`: what this virtual kubelet reports. */
  kubeletVersion: z.string().min(1).default("v1.35.4-nebula"),
  /** Lease duration in seconds (the kubelet's 40). */
  leaseDurationSeconds: z.number().int().min(1).max(3600).default(40),
  /** How often the Lease is renewed, in seconds (a quarter of the duration: 10). */
  leaseRenewIntervalSeconds: z.number().int().min(1).max(3600).default(10),
  /** The longest the Node status goes without an update, in seconds (60). */
  statusUpdateIntervalSeconds: z.number().int().min(1).max(3600).default(60),
  /** The finalizer held on each Pod until its instance is terminated. */
  podFinalizer: z.string().regex(labelKey).default(DEFAULT_POD_FINALIZER),
  /** How often every Pod is reconciled even when nothing changed, in seconds (60). */
  podResyncSeconds: z.number().int().min(1).max(3600).default(60),
  /** Concurrent Pod reconciles (each Pod still has at most one at a time). */
  podWorkers: z.number().int().min(1).max(64).default(8),
});

/** The parsed configuration. */
export type VirtualNodeConfig = z.infer<typeof VirtualNodeConfigSchema>;

/**
 * Parses the configuration; every problem is listed in one `InvalidConfiguration` error.
 *
 * @throws VirtualNodeError with code `InvalidConfiguration`.
 * @example
 * ```ts
 * const config = parseVirtualNodeConfig({ nodeName: "nebula", capacity: { cpu: "100", memory: "1Ti", pods: "100" } });
 * ```
 */
export function parseVirtualNodeConfig(input: unknown): VirtualNodeConfig {
  const parsed = VirtualNodeConfigSchema.safeParse(input);
  if (!parsed.success) {
    const problems = parsed.error.issues
      .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
      .join("; ");
    throw new VirtualNodeError("InvalidConfiguration", `invalid configuration: ${problems}`, {
      cause: parsed.error,
    });
  }
  return parsed.data;
}
