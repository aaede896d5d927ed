export {
  DEFAULT_POD_FINALIZER,
  INSTANCE_ANNOTATIONS,
  PROVIDER_LABEL,
  parseVirtualNodeConfig,
  VIRTUAL_KUBELET_TAINT_KEY,
  type VirtualNodeConfig,
  type VirtualNodeConfigInput,
  VirtualNodeConfigSchema,
} from "./config.js";
export { VirtualNodeError, type VirtualNodeErrorCode } from "./errors.js";
export type {
  ContainerLogSource,
  ContainerRunRef,
  ContainerUsageSample,
  LogLine,
  LogReadOptions,
  PodUsage,
  UsageSource,
} from "./kubelet-api.js";
export {
  apiServerClientCa,
  createKubeletHandler,
  type KubeletHandler,
  type KubeletHandlerOptions,
} from "./kubelet-handler.js";
export type {
  FoundInstance,
  InstanceReclaimer,
  LeakCollected,
  LeakEventSource,
  NodeHealth,
  NodeHealthSource,
  PodEventNote,
  PodInstanceInfo,
  PodLifecycle,
  PodStatusChange,
  PodStatusListener,
  Runnable,
} from "./lifecycle.js";
export {
  buildLease,
  buildNode,
  NODE_CONDITION_TYPES,
  NODE_LEASE_NAMESPACE,
  nodeConditions,
  nodeLabels,
  nodeStatus,
  nodeStatusChanged,
  toSeconds,
} from "./node.js";
export {
  NodeController,
  type NodeControllerOptions,
  type NodeControllerStats,
  staticHealth,
} from "./node-controller.js";
export { KubernetesPodApi, type PodApi } from "./pod-api.js";
export {
  PodController,
  type PodControllerMetrics,
  type PodControllerOptions,
  type PodStatusSink,
  type PodStore,
  type StatusWriteOutcome,
} from "./pod-controller.js";
export type { EventSink } from "./pod-events.js";
export {
  DEFAULT_GRACE_SECONDS,
  graceSeconds,
  type PlanContext,
  type PodStep,
  planPod,
} from "./pod-plan.js";
export {
  canonicalStatus,
  composePodStatus,
  isTerminalPhase,
  type PodEventSpec,
  podStatusChanged,
  podStatusEvents,
} from "./pod-status.js";
export {
  type PodRef,
  PodTeardown,
  type PodTeardownOptions,
  type PodTeardownResult,
  PRE_TERMINATE_HOLD_PREFIX,
} from "./pod-teardown.js";
