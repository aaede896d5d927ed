/**
 * Pure builders for the virtual Node: the Node object, its conditions from the provider's health,
 * its heartbeat Lease. No clock reads: the time is passed in.
 *
 * @packageDocumentation
 */
import {
  type V1Lease,
  V1MicroTime,
  type V1Node,
  type V1NodeCondition,
  type V1Taint,
} from "@kubernetes/client-node";
import { PROVIDER_LABEL, VIRTUAL_KUBELET_TAINT_KEY, type VirtualNodeConfig } from "./config.js";
import type { NodeHealth } from "./lifecycle.js";

/**
 * The annotation the vnode puts on its Node when it cordoned it for a drain: only a Node it
 * cordoned is uncordoned when the drain is turned off (a `kubectl cordon` of its own stays).
 */
export const DRAIN_CORDON_ANNOTATION = "nebula.dev/drain-cordoned";

/** The Node condition a draining vnode keeps: `True` once no Pod and no instance is left. */
export const DRAINED_CONDITION = "Drained";

/**
 * What a draining virtual node still has: the Pods bound to its Node and its instances that are
 * not terminated. `undefined` means not observed yet (the Pod cache not synced, no poll yet): no
 * drain is reported done from no observation.
 */
export interface DrainProgress {
  /** Pods bound to the Node (terminating ones included: their instances are not reclaimed yet). */
  readonly pods: number | undefined;
  /** This node's instances in any state but `terminated`. */
  readonly instances: number | undefined;
}

/** The namespace of Node heartbeat Leases. */
export const NODE_LEASE_NAMESPACE = "kube-node-lease";

/** The condition types a Node carries, in the kubelet's order. */
const NODE_CONDITION_TYPES = [
  "Ready",
  "MemoryPressure",
  "DiskPressure",
  "PIDPressure",
  "NetworkUnavailable",
] as const;

/** Truncates a time to whole seconds: what the API server stores for `metav1.Time`. */
function toSeconds(time: Date): Date {
  return new Date(Math.floor(time.getTime() / 1000) * 1000);
}

/** The Node's labels: the virtual-kubelet conventions, the provider label, then the configured ones. */
function nodeLabels(config: VirtualNodeConfig): Record<string, string> {
  return {
    type: "virtual-kubelet",
    "kubernetes.io/role": "agent",
    "kubernetes.io/hostname": config.nodeName,
    "kubernetes.io/os": config.operatingSystem,
    "kubernetes.io/arch": config.architecture,
    "node.kubernetes.io/exclude-from-external-load-balancers": "true",
    [PROVIDER_LABEL]: config.provider,
    ...config.labels,
  };
}

/**
 * The Node's conditions from the provider's health. `Ready` follows the health (reason and
 * message from the provider); the pressure conditions are `False` (a virtual node has no shared
 * memory, disk or PIDs) and `NetworkUnavailable` is `False`. A condition whose status is
 * unchanged keeps its `lastTransitionTime` from `previous`; `lastHeartbeatTime` is `now`.
 *
 * @example
 * ```ts
 * nodeConditions({ ready: true, reason: "EC2Reachable", message: "EC2 answers" }, new Date(), []);
 * ```
 */
export function nodeConditions(
  health: NodeHealth,
  now: Date,
  previous: readonly V1NodeCondition[] | undefined,
): V1NodeCondition[] {
  const at = toSeconds(now);
  const desired: Record<(typeof NODE_CONDITION_TYPES)[number], Omit<V1NodeCondition, "type">> = {
    Ready: {
      status: health.ready ? "True" : "False",
      reason: health.reason,
      message: health.message,
    },
    MemoryPressure: {
      status: "False",
      reason: "VirtualNode",
      message: "each Pod runs on an instance of its own",
    },
    DiskPressure: {
      status: "False",
      reason: "VirtualNode",
      message: "each Pod runs on an instance of its own",
    },
    PIDPressure: {
      status: "False",
      reason: "VirtualNode",
      message: "each Pod runs on an instance of its own",
    },
    NetworkUnavailable: {
      status: "False",
      reason: "VirtualNode",
      message: "each instance has its own network",
    },
  };
  return NODE_CONDITION_TYPES.map((type) => {
    const before = previous?.find((c) => c.type === type);
    const want = desired[type];
    const since =
      before !== undefined && before.status === want.status && before.lastTransitionTime
        ? toSeconds(new Date(before.lastTransitionTime))
        : at;
    return { type, ...want, lastHeartbeatTime: at, lastTransitionTime: since };
  });
}

/**
 * The Node object to register: labels, the `virtual-kubelet.io/provider=<provider>` taint,
 * capacity and allocatable from the configuration, conditions from `health`, `nodeInfo`,
 * `addresses` and `daemonEndpoints`.
 *
 * @example
 * ```ts
 * const node = buildNode(parseVirtualNodeConfig({ nodeName: "nebula" }), health, new Date());
 * await core.createNode({ body: node });
 * ```
 */
export function buildNode(
  config: VirtualNodeConfig,
  health: NodeHealth,
  now: Date,
  previousConditions?: readonly V1NodeCondition[],
  drain?: DrainProgress,
): V1Node {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name: config.nodeName,
      labels: nodeLabels(config),
      ...(config.drain ? { annotations: { [DRAIN_CORDON_ANNOTATION]: "true" } } : {}),
    },
    spec: {
      taints: [
        { key: VIRTUAL_KUBELET_TAINT_KEY, value: config.provider, effect: config.taintEffect },
        ...config.taints.map((t) => ({
          key: t.key,
          ...(t.value === undefined ? {} : { value: t.value }),
          effect: t.effect,
        })),
      ],
      ...(config.drain ? { unschedulable: true } : {}),
    },
    status: nodeStatus(config, health, now, previousConditions, drain),
  };
}

/**
 * The Node's `status` (see {@link buildNode}). With `config.drain`, the conditions end with
 * {@link drainCondition} from `drain` (not observed yet when absent).
 */
export function nodeStatus(
  config: VirtualNodeConfig,
  health: NodeHealth,
  now: Date,
  previousConditions?: readonly V1NodeCondition[],
  drain?: DrainProgress,
): NonNullable<V1Node["status"]> {
  const conditions = nodeConditions(health, now, previousConditions);
  if (config.drain) {
    conditions.push(
      drainCondition(drain ?? { pods: undefined, instances: undefined }, now, previousConditions),
    );
  }
  return {
    capacity: { ...config.capacity },
    allocatable: { ...(config.allocatable ?? config.capacity) },
    conditions,
    // InternalIP only, as virtual-kubelet advertises: kube-apiserver's default
    // --kubelet-preferred-address-types tries Hostname first, and the Node's name resolves to
    // nothing, so `kubectl logs` would fail in a cluster with default flags.
    addresses: [{ type: "InternalIP", address: config.internalIP }],
    daemonEndpoints: { kubeletEndpoint: { Port: config.kubeletPort } },
    nodeInfo: {
      architecture: config.architecture,
      operatingSystem: config.operatingSystem,
      kubeletVersion: config.kubeletVersion,
      kubeProxyVersion: "",
      containerRuntimeVersion: `${config.provider}://ec2`,
      bootID: "",
      kernelVersion: "",
      machineID: "",
      osImage: "",
      systemUUID: "",
    },
  };
}

/** True when the drain is done: no Pod and no instance left, both observed. */
export function isDrained(progress: DrainProgress): boolean {
  return progress.pods === 0 && progress.instances === 0;
}

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/**
 * The `Drained` Node condition of a draining vnode: `True` (reason `Drained`) once
 * {@link isDrained}, else `False` (reason `Draining`) with what is left. `lastTransitionTime`
 * is kept from `previous` while the status is unchanged; `lastHeartbeatTime` is `now`.
 *
 * @example
 * ```ts
 * drainCondition({ pods: 2, instances: 2 }, new Date(), node.status?.conditions);
 * // { type: "Drained", status: "False", reason: "Draining", message: "2 Pods bound and 2 instances not terminated; ..." }
 * ```
 */
export function drainCondition(
  progress: DrainProgress,
  now: Date,
  previous: readonly V1NodeCondition[] | undefined,
): V1NodeCondition {
  const at = toSeconds(now);
  const done = isDrained(progress);
  const status = done ? "True" : "False";
  const left =
    progress.pods === undefined || progress.instances === undefined
      ? "the Pods and instances left are not known yet"
      : `${plural(progress.pods, "Pod", "Pods")} bound and ${plural(progress.instances, "instance", "instances")} not terminated`;
  const message = done
    ? "drain is on and no Pod or instance is left: this virtual node can be removed"
    : `drain is on: ${left}; no new Pod is scheduled here, the bound ones run until they end or are deleted`;
  const before = previous?.find((c) => c.type === DRAINED_CONDITION);
  const since =
    before !== undefined && before.status === status && before.lastTransitionTime
      ? toSeconds(new Date(before.lastTransitionTime))
      : at;
  return {
    type: DRAINED_CONDITION,
    status,
    reason: done ? "Drained" : "Draining",
    message,
    lastHeartbeatTime: at,
    lastTransitionTime: since,
  };
}

/** A merge patch of a Node's labels, annotations, taints and `unschedulable`. */
export interface NodeSpecPatch {
  /** Labels and annotations; an annotation set to `null` is removed. */
  readonly metadata?: {
    readonly labels?: Record<string, string>;
    readonly annotations?: Record<string, string | null>;
  };
  /** The whole taint list, and the cordon. */
  readonly spec?: { readonly taints?: V1Taint[]; readonly unschedulable?: boolean };
}

/**
 * What to merge-patch on the stored Node so that it carries `desired`'s labels and taints (taints
 * of others are kept, after ours; one of ours with another value is replaced) and the drain's
 * cordon: with `drain`, an uncordoned Node is cordoned and marked with
 * {@link DRAIN_CORDON_ANNOTATION}; without it, a Node so marked is uncordoned and unmarked (a
 * cordon without the mark is someone else's and stays). `undefined` when nothing is to change.
 *
 * @example
 * ```ts
 * const patch = nodeSpecPatch(buildNode(config, health, now), stored, config.drain);
 * if (patch) await core.patchNode({ name, body: patch }, mergePatch);
 * ```
 */
export function nodeSpecPatch(
  desired: V1Node,
  stored: V1Node,
  drain: boolean,
): NodeSpecPatch | undefined {
  const labels = desired.metadata?.labels ?? {};
  const want = desired.spec?.taints ?? [];
  const have = stored.spec?.taints ?? [];
  const labelsStale = Object.entries(labels).some(([k, v]) => stored.metadata?.labels?.[k] !== v);
  const taintsStale = want.some(
    (w) =>
      !have.some(
        (h) => h.key === w.key && h.effect === w.effect && (h.value ?? "") === (w.value ?? ""),
      ),
  );
  const marked = stored.metadata?.annotations?.[DRAIN_CORDON_ANNOTATION] !== undefined;
  const cordon = drain && stored.spec?.unschedulable !== true;
  const uncordon = !drain && marked;
  if (!labelsStale && !taintsStale && !cordon && !uncordon) return undefined;
  const others = have.filter((t) => !want.some((w) => w.key === t.key && w.effect === t.effect));
  const annotations = cordon
    ? { [DRAIN_CORDON_ANNOTATION]: "true" }
    : uncordon
      ? { [DRAIN_CORDON_ANNOTATION]: null }
      : undefined;
  return {
    metadata: { labels, ...(annotations === undefined ? {} : { annotations }) },
    ...(taintsStale || cordon || uncordon
      ? {
          spec: {
            ...(taintsStale ? { taints: [...want, ...others] } : {}),
            ...(cordon ? { unschedulable: true } : uncordon ? { unschedulable: false } : {}),
          },
        }
      : {}),
  };
}

/**
 * True when two Node statuses differ in anything but heartbeat times: a status whose only change
 * is `lastHeartbeatTime` need not be written until the periodic update is due.
 */
export function nodeStatusChanged(
  stored: V1Node["status"] | undefined,
  desired: V1Node["status"] | undefined,
): boolean {
  return canonicalNodeStatus(stored) !== canonicalNodeStatus(desired);
}

function canonicalNodeStatus(status: V1Node["status"] | undefined): string {
  if (status === undefined) return "";
  const conditions = [...(status.conditions ?? [])]
    .map((c) => ({
      type: c.type,
      status: c.status,
      reason: c.reason ?? "",
      message: c.message ?? "",
    }))
    .sort((a, b) => a.type.localeCompare(b.type));
  const addresses = [...(status.addresses ?? [])].map((a) => `${a.type}=${a.address}`).sort();
  return JSON.stringify({
    capacity: sortedEntries(status.capacity),
    allocatable: sortedEntries(status.allocatable),
    conditions,
    addresses,
    port: status.daemonEndpoints?.kubeletEndpoint?.Port ?? 0,
    os: status.nodeInfo?.operatingSystem ?? "",
    arch: status.nodeInfo?.architecture ?? "",
    kubelet: status.nodeInfo?.kubeletVersion ?? "",
  });
}

/** Resource quantities by value, not spelling: the API server stores `"1000"` as `"1k"`. */
function sortedEntries(map: Record<string, string> | undefined): [string, string][] {
  return Object.entries(map ?? {})
    .map(([name, quantity]): [string, string] => [name, quantityValue(quantity)])
    .sort(([a], [b]) => a.localeCompare(b));
}

const QUANTITY =
  /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[munkMGTPE]))?$/;
const SCALE: Readonly<Record<string, number>> = {
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

/** A quantity's value as text (`"1k"` and `"1000"` alike); anything else as it is. */
function quantityValue(quantity: string): string {
  const match = QUANTITY.exec(quantity);
  if (!match) return quantity;
  const [, mantissa, exponent, suffix] = match;
  const value =
    Number(mantissa) *
    (exponent === undefined ? (SCALE[suffix ?? ""] ?? 1) : 10 ** Number(exponent));
  return Number.isFinite(value) ? String(value) : quantity;
}

/**
 * The Node's heartbeat Lease in `kube-node-lease`: holder the Node's name, duration from the
 * configuration (40 s), `renewTime` `now` as a MicroTime (a plain `Date` is rejected by the API
 * server), owned by the Node (so it goes when the Node goes).
 *
 * @example
 * ```ts
 * await coordination.createNamespacedLease({ namespace: NODE_LEASE_NAMESPACE, body: buildLease(config, node.metadata.uid, new Date()) });
 * ```
 */
export function buildLease(config: VirtualNodeConfig, nodeUid: string, now: Date): V1Lease {
  return {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: {
      name: config.nodeName,
      namespace: NODE_LEASE_NAMESPACE,
      ownerReferences: [{ apiVersion: "v1", kind: "Node", name: config.nodeName, uid: nodeUid }],
    },
    spec: {
      holderIdentity: config.nodeName,
      leaseDurationSeconds: config.leaseDurationSeconds,
      renewTime: new V1MicroTime(now.getTime()),
    },
  };
}
