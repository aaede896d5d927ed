// @nebula/kube: connecting to a cluster, the typed error, preconditioned deletes and the teardown
// stores. The controller toolkit is in subpath entries: @nebula/kube/cache, /cli, /controller,
// /crd, /events, /leader, /observability, /queue and /status.
export {
  AnnotationStoreOptions,
  type AnnotationStoreOptionsInput,
  DEFAULT_TEARDOWN_ANNOTATION,
  KubernetesAnnotationStore,
} from "./annotation-store.js";
// Deprecated re-exports of the controller toolkit, kept until apps/vnode imports them from the
// subpath entries (see docs/public-api.md). Each is documented at its subpath.
export {
  /** @deprecated Import it from `@nebula/kube/cache`. */
  podInformer,
} from "./cache/informer.js";
export { type Connection, type ConnectOptionsInput, connect } from "./connect.js";
export {
  /** @deprecated Import it from `@nebula/kube/controller`. */
  Controller,
} from "./controller/controller.js";
export {
  /** @deprecated Import it from `@nebula/kube/controller`. */
  Manager,
  /** @deprecated Import it from `@nebula/kube/controller`. */
  type ManagerLeaderElection,
} from "./controller/manager.js";
export { type DeleteOutcome, type DeleteTarget, deleteWithPreconditions } from "./delete.js";
export { KubeError, type KubeErrorCode } from "./errors.js";
export {
  /** @deprecated Import it from `@nebula/kube/events`. */
  EventRecorder,
} from "./events/event-recorder.js";
export type {
  /** @deprecated Import it from `@nebula/kube/observability`. */
  Logger,
} from "./observability/logger.js";
export {
  /** @deprecated Import it from `@nebula/kube/status`. */
  PODS,
} from "./status/resource-client.js";
export {
  /** @deprecated Import it from `@nebula/kube/status`. */
  StatusWriter,
} from "./status/status-writer.js";
export {
  type ConfigMapLedgerOptionsInput,
  ConfigMapPodLedger,
  LEDGER_LABEL,
} from "./teardown/configmap-ledger.js";
