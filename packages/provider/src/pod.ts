import type { V1Pod } from "@kubernetes/client-node";
import { parseQuantity } from "@nebula/userdata";
import { z } from "zod";
import type { ProviderConfig } from "./config.js";
import {
  allowedInstanceTypes,
  CAPACITY_TYPE_ANNOTATION,
  INSTANCE_TYPE_ANNOTATION,
  INSTANCE_TYPE_NODE_SELECTOR,
} from "./config.js";
import { ProviderError } from "./errors.js";
import {
  allowedByPatterns,
  candidateTypes,
  findInstanceType,
  type InstanceTypeInfo,
} from "./instance-catalogue.js";

const resourceList = z.record(z.string(), z.union([z.string(), z.number()])).optional();
const container = z.looseObject({
  name: z.string().min(1),
  resources: z
    .looseObject({ requests: resourceList.nullable(), limits: resourceList.nullable() })
    .optional()
    .nullable(),
});

/** The parts of a Pod the provider reads, validated at the boundary. */
const PodShape = z.looseObject({
  metadata: z.looseObject({
    uid: z.string().min(1).max(64),
    name: z.string().min(1),
    namespace: z.string().min(1).default("default"),
    annotations: z.record(z.string(), z.string()).optional().nullable(),
    labels: z.record(z.string(), z.string()).optional().nullable(),
    finalizers: z.array(z.string()).optional().nullable(),
    ownerReferences: z
      .array(z.looseObject({ kind: z.string(), controller: z.boolean().optional().nullable() }))
      .optional()
      .nullable(),
    deletionTimestamp: z.unknown().optional().nullable(),
    deletionGracePeriodSeconds: z.number().int().min(0).optional().nullable(),
  }),
  spec: z.looseObject({
    nodeSelector: z.record(z.string(), z.string()).optional().nullable(),
    containers: z.array(container).min(1),
    initContainers: z.array(container).optional().nullable(),
    terminationGracePeriodSeconds: z.number().int().min(0).optional().nullable(),
  }),
  status: z.looseObject({ phase: z.string().optional().nullable() }).optional().nullable(),
});

/** What the provider needs to know about a Pod. */
export interface PodFacts {
  /** `metadata.uid`: the launch's `ClientToken` and the `nebula:pod-uid` tag. */
  readonly uid: string;
  /** `metadata.namespace` (default `default`). */
  readonly namespace: string;
  /** `metadata.name`. */
  readonly name: string;
  /** `namespace/name`. */
  readonly key: string;
  /**
   * The grace period of the Pod's stop: `metadata.deletionGracePeriodSeconds` when the Pod is being
   * deleted (what `kubectl delete --grace-period` sets; it wins), else
   * `spec.terminationGracePeriodSeconds`, else 30. Not capped here (see `maxGracePeriodSeconds`).
   */
  readonly gracePeriodSeconds: number;
  /** True when the Pod has a `deletionTimestamp` (its deletion was requested). */
  readonly deleting: boolean;
  /** `status.phase` as stored in the API (`Succeeded`/`Failed` are terminal: never relaunched). */
  readonly apiPhase: string | undefined;
  /** `metadata.finalizers`. */
  readonly finalizers: readonly string[];
  /** `metadata.labels`. */
  readonly labels: Readonly<Record<string, string>>;
  /** Kind of the controlling owner (`ReplicaSet`, `DaemonSet`, `Job`...), if any. */
  readonly ownerKind: string | undefined;
  /** The instance type named by node selector or annotation, if any. */
  readonly requestedInstanceType: string | undefined;
  /** Where the requested type came from. */
  readonly requestedBy: "nodeSelector" | "annotation" | undefined;
  /** Summed requests (limits where a request is missing); init containers count by their maximum. */
  readonly requests: ResourceRequests;
  /** The annotation `nebula.dev/requested-capacity-type`, as written, if any. */
  readonly requestedCapacityType: string | undefined;
}

/** A Pod's resource needs, in the units the mapping uses. */
interface ResourceRequests {
  /** vCPUs. */
  readonly cpu: number;
  /** MiB. */
  readonly memoryMiB: number;
  /** GPUs of any vendor (`nvidia.com/gpu`, `amd.com/gpu`, ...). */
  readonly gpus: number;
}

/**
 * Reads and validates the parts of a Pod the provider uses. Throws a {@link ProviderError} with
 * code `InvalidPodSpec` on a Pod that lacks them or names two different instance types.
 */
export function podFacts(pod: V1Pod | unknown): PodFacts {
  const parsed = PodShape.safeParse(pod);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ProviderError(
      "InvalidPodSpec",
      `pod is missing what the provider needs: ${issue?.path.join(".") ?? "pod"}: ${issue?.message ?? "invalid"}`,
      { cause: parsed.error },
    );
  }
  const { metadata, spec } = parsed.data;
  const key = `${metadata.namespace}/${metadata.name}`;
  const bySelector = spec.nodeSelector?.[INSTANCE_TYPE_NODE_SELECTOR];
  const byAnnotation = metadata.annotations?.[INSTANCE_TYPE_ANNOTATION];
  if (bySelector !== undefined && byAnnotation !== undefined && bySelector !== byAnnotation) {
    throw new ProviderError(
      "InvalidPodSpec",
      `pod ${key} asks for two instance types: nodeSelector ${INSTANCE_TYPE_NODE_SELECTOR}=${bySelector} and annotation ${INSTANCE_TYPE_ANNOTATION}=${byAnnotation}`,
    );
  }
  const sum = (list: typeof spec.containers) =>
    list.reduce<ResourceRequests>(
      (acc, c) => {
        const r = containerRequests(c.resources ?? undefined);
        return {
          cpu: acc.cpu + r.cpu,
          memoryMiB: acc.memoryMiB + r.memoryMiB,
          gpus: acc.gpus + r.gpus,
        };
      },
      { cpu: 0, memoryMiB: 0, gpus: 0 },
    );
  const main = sum(spec.containers);
  const init = (spec.initContainers ?? []).map((c) => containerRequests(c.resources ?? undefined));
  const requests = init.reduce(
    (acc, r) => ({
      cpu: Math.max(acc.cpu, r.cpu),
      memoryMiB: Math.max(acc.memoryMiB, r.memoryMiB),
      gpus: Math.max(acc.gpus, r.gpus),
    }),
    main,
  );
  return {
    uid: metadata.uid,
    namespace: metadata.namespace,
    name: metadata.name,
    key,
    gracePeriodSeconds:
      (metadata.deletionTimestamp != null ? metadata.deletionGracePeriodSeconds : undefined) ??
      spec.terminationGracePeriodSeconds ??
      30,
    deleting: metadata.deletionTimestamp != null,
    apiPhase: parsed.data.status?.phase ?? undefined,
    finalizers: metadata.finalizers ?? [],
    labels: metadata.labels ?? {},
    ownerKind: (
      metadata.ownerReferences?.find((o) => o.controller === true) ?? metadata.ownerReferences?.[0]
    )?.kind,
    requestedInstanceType: bySelector ?? byAnnotation,
    requestedBy:
      bySelector !== undefined
        ? "nodeSelector"
        : byAnnotation !== undefined
          ? "annotation"
          : undefined,
    requests,
    requestedCapacityType: metadata.annotations?.[CAPACITY_TYPE_ANNOTATION],
  };
}

function containerRequests(
  resources:
    | {
        requests?: Record<string, string | number> | null | undefined;
        limits?: Record<string, string | number> | null | undefined;
      }
    | undefined,
): ResourceRequests {
  const pick = (name: string) => resources?.requests?.[name] ?? resources?.limits?.[name];
  let gpus = 0;
  const names = new Set([
    ...Object.keys(resources?.requests ?? {}),
    ...Object.keys(resources?.limits ?? {}),
  ]);
  for (const name of names) {
    if (/(^|\.)[a-z0-9.-]*\/gpu$/.test(name)) gpus += parseQuantity(pick(name)) ?? 0;
  }
  return {
    cpu: parseQuantity(pick("cpu")) ?? 0,
    memoryMiB: (parseQuantity(pick("memory")) ?? 0) / (1024 * 1024),
    gpus,
  };
}

/**
 * Picks the instance type for a Pod, in this order:
 *
 * 1. the Pod's `nodeSelector` `node.kubernetes.io/instance-type`, or its annotation
 *    `nebula.dev/instance-type` (both set and different: `InvalidPodSpec`);
 * 2. with `instanceTypes.catalogue`: the first of {@link candidateTypes} from `catalogue` (none
 *    fits: `InvalidPodSpec`, naming the requests and the allowed types);
 * 3. the first `instanceTypes.byResources` rule whose capacity covers the Pod's requests
 *    (CPU, memory, GPUs);
 * 4. `instanceTypes.default` — unless the Pod requests GPUs, which the default is not assumed
 *    to have (then `InvalidPodSpec`), or rules exist and none fits (also `InvalidPodSpec`).
 *
 * A requested type outside the allow-list ({@link allowedInstanceTypes}: `instanceTypes.allowed`,
 * else every configured type; with a catalogue also its allowed types that EC2 lists) is
 * `InstanceTypeNotAllowed`, naming the field that asked for it.
 *
 * @param catalogue - EC2's instance types, read by the provider; used with `instanceTypes.catalogue`.
 */
export function resolveInstanceType(
  facts: PodFacts,
  config: ProviderConfig,
  catalogue: readonly InstanceTypeInfo[] = [],
): string {
  return instanceTypeCandidates(facts, config, catalogue)[0] as string;
}

/**
 * The instance types a Pod may launch on, most preferred first (never empty): the one it asked
 * for, else the catalogue's candidates (`instanceTypes.catalogue`), else the rule's or default
 * type and its allowed fallbacks. Throws as {@link resolveInstanceType} does.
 */
export function instanceTypeCandidates(
  facts: PodFacts,
  config: ProviderConfig,
  catalogue: readonly InstanceTypeInfo[] = [],
): string[] {
  const allowed = allowedInstanceTypes(config);
  const rules = config.instanceTypes.catalogue;
  if (facts.requestedInstanceType !== undefined) {
    const type = facts.requestedInstanceType;
    const field =
      facts.requestedBy === "nodeSelector"
        ? `spec.nodeSelector["${INSTANCE_TYPE_NODE_SELECTOR}"]`
        : `metadata.annotations["${INSTANCE_TYPE_ANNOTATION}"]`;
    if (!/^[a-z][a-z0-9-]*\.[a-z0-9-]+$/.test(type)) {
      throw new ProviderError(
        "InvalidPodSpec",
        `pod ${facts.key}: ${field} asks for instance type "${type}", which is not an EC2 instance type`,
      );
    }
    const listed = findInstanceType(catalogue, type);
    const byCatalogue =
      rules !== undefined && listed !== undefined && allowedByPatterns(rules.allowed, listed);
    if (!allowed.has(type) && !byCatalogue) {
      const names = [...allowed, ...(rules?.allowed ?? [])].sort().join(", ");
      throw new ProviderError(
        "InstanceTypeNotAllowed",
        `pod ${facts.key}: ${field} asks for instance type ${type}, which is not allowed on this node (allowed: ${names})`,
      );
    }
    if (listed?.subnets?.length === 0) {
      throw new ProviderError(
        "InvalidPodSpec",
        `pod ${facts.key}: ${field} asks for instance type ${type}, which EC2 offers in none of this node's subnets' Availability Zones (${config.subnetIds.join(", ")})`,
      );
    }
    return [type];
  }
  if (rules !== undefined) {
    const found = candidateTypes(facts.requests, catalogue, rules);
    if (found.length > 0) return found.map((t) => t.name);
    const { cpu, memoryMiB, gpus } = facts.requests;
    // Types that would fit, but EC2 offers none of them where this node launches: the platform's
    // configuration (its subnets, its allow-list) must change, not the Pod.
    const unoffered = candidateTypes(
      facts.requests,
      catalogue.filter((t) => t.subnets?.length === 0).map(({ subnets: _unoffered, ...t }) => t),
      { ...rules, maxCandidates: 3 },
    );
    if (unoffered.length > 0) {
      throw new ProviderError(
        "InvalidConfiguration",
        `pod ${facts.key}: the allowed instance types that fit its requests (${unoffered.map((t) => t.name).join(", ")}) are offered in none of this node's subnets' Availability Zones (${config.subnetIds.join(", ")}); add a subnet in a zone that offers them, or allow other types (instanceTypes.catalogue.allowed)`,
      );
    }
    throw new ProviderError(
      "InvalidPodSpec",
      `pod ${facts.key}: no allowed ${rules.architecture} instance type fits its requests (cpu ${cpu}, memory ${Math.ceil(memoryMiB)}Mi, gpus ${gpus}) with ${rules.reserved.cpu} vCPU and ${rules.reserved.memoryMiB}Mi kept for the host (allowed: ${rules.allowed.join(", ")}; EC2 lists ${catalogue.length} types)`,
    );
  }
  const chosen = chooseConfigured(facts, config);
  return [
    ...new Set([
      chosen,
      ...(config.instanceTypes.fallbacks[chosen] ?? []).filter((t) => allowed.has(t)),
    ]),
  ];
}

/** The first `byResources` rule's type that covers the Pod's requests, else the default type. */
function chooseConfigured(facts: PodFacts, config: ProviderConfig): string {
  const { byResources } = config.instanceTypes;
  const { cpu, memoryMiB, gpus } = facts.requests;
  if (byResources.length > 0) {
    const rule = byResources.find(
      (r) =>
        (r.cpu === undefined || r.cpu >= cpu) &&
        (r.memoryMiB === undefined || r.memoryMiB >= memoryMiB) &&
        (r.gpus ?? 0) >= gpus,
    );
    if (rule) return rule.instanceType;
    throw new ProviderError(
      "InvalidPodSpec",
      `pod ${facts.key}: no configured instance type fits its requests (cpu ${cpu}, memory ${Math.ceil(memoryMiB)}Mi, gpus ${gpus})`,
    );
  }
  if (gpus > 0) {
    throw new ProviderError(
      "InvalidPodSpec",
      `pod ${facts.key} requests ${gpus} GPU(s) but names no instance type and no byResources rule is configured`,
    );
  }
  return config.instanceTypes.default;
}

/** How one instance is bought. */
export type CapacityType = "spot" | "on-demand";

/**
 * The capacity types a Pod launches with, in order: its annotation `nebula.dev/requested-capacity-type`
 * where `capacity.annotationNamespaces` lets its namespace choose, else `capacity.default`;
 * `spot-then-on-demand` is `["spot", "on-demand"]`. Throws `InvalidPodSpec` for an annotation of
 * another value, or one in a namespace that may not choose, naming the field.
 */
export function capacityTypesFor(facts: PodFacts, config: ProviderConfig): CapacityType[] {
  const asked = facts.requestedCapacityType;
  const field = `metadata.annotations["${CAPACITY_TYPE_ANNOTATION}"]`;
  let choice: string = config.capacity.default;
  if (asked !== undefined) {
    const may = config.capacity.annotationNamespaces;
    if (!may.includes("*") && !may.includes(facts.namespace)) {
      throw new ProviderError(
        "InvalidPodSpec",
        `pod ${facts.key}: ${field} asks for ${JSON.stringify(asked)} capacity, but namespace ${facts.namespace} may not choose its capacity type on this node (capacity.annotationNamespaces); remove the annotation to get the node's default, ${config.capacity.default}`,
      );
    }
    choice = asked;
  }
  switch (choice) {
    case "on-demand":
      return ["on-demand"];
    case "spot":
      return ["spot"];
    case "spot-then-on-demand":
      return ["spot", "on-demand"];
    default:
      throw new ProviderError(
        "InvalidPodSpec",
        `pod ${facts.key}: ${field} is ${JSON.stringify(choice)}; it takes on-demand, spot or spot-then-on-demand`,
      );
  }
}
