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
} from "@kubernetes/client-node";
import { PROVIDER_LABEL, VIRTUAL_KUBELET_TAINT_KEY, type VirtualNodeConfig } from "./config.js";
import type { NodeHealth } from "./lifecycle.js";

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
): V1Node {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: config.nodeName, labels: nodeLabels(config) },
    spec: {
      taints: [
        { key: VIRTUAL_KUBELET_TAINT_KEY, value: config.provider, effect: config.taintEffect },
      ],
    },
    status: nodeStatus(config, health, now, previousConditions),
  };
}

/** The Node's `status` (see {@link buildNode}). */
export function nodeStatus(
  config: VirtualNodeConfig,
  health: NodeHealth,
  now: Date,
  previousConditions?: readonly V1NodeCondition[],
): NonNullable<V1Node["status"]> {
  return {
    capacity: { ...config.capacity },
    allocatable: { ...(config.allocatable ?? config.capacity) },
    conditions: nodeConditions(health, now, previousConditions),
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

function sortedEntries(map: Record<string, string> | undefined): [string, string][] {
  return Object.entries(map ?? {}).sort(([a], [b]) => a.localeCompare(b));
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
