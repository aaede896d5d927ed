// @nebula/virtual-node: the Node and Pod controllers, the Pod teardown, the Kubernetes I/O they
// own, and the contracts a provider satisfies (PodLifecycle, InstanceReclaimer, ...; @nebula/provider
// names them with `import type` and its build inlines them from this entry's declarations). The
// kubelet API is in @nebula/virtual-node/kubelet; what a Pod's host needs from the API server (its
// sources, its tokens) in @nebula/virtual-node/host.
export {
  DEFAULT_POD_FINALIZER,
  INSTANCE_ANNOTATIONS,
  parseVirtualNodeConfig,
  type VirtualNodeConfig,
} from "./config.js";
export { VirtualNodeError } from "./errors.js";
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
export { virtualNodeMetrics } from "./metrics.js";
export { NodeController, staticHealth } from "./node-controller.js";
export { KubernetesPodApi, type PodRef } from "./pod-api.js";
export { ledgerLaunches, PodController } from "./pod-controller.js";
export { graceSeconds } from "./pod-plan.js";
export {
  PodTeardown,
  type PodTeardownOptions,
  type PodTeardownResult,
  PRE_TERMINATE_HOLD_PREFIX,
} from "./pod-teardown.js";
