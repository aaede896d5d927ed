// @nebula/kube: connecting to a cluster, the typed error, preconditioned deletes and the teardown
// stores. The controller toolkit is in subpath entries: @nebula/kube/cache, /cli, /controller,
// /crd, /events, /leader, /observability, /queue and /status.
export {
  AnnotationStoreOptions,
  type AnnotationStoreOptionsInput,
  DEFAULT_TEARDOWN_ANNOTATION,
  KubernetesAnnotationStore,
} from "./annotation-store.js";
export { type Connection, type ConnectOptionsInput, connect } from "./connect.js";
export { type DeleteOutcome, type DeleteTarget, deleteWithPreconditions } from "./delete.js";
export { KubeError, type KubeErrorCode } from "./errors.js";
export {
  type ConfigMapLedgerOptionsInput,
  ConfigMapPodLedger,
  LEDGER_LABEL,
} from "./teardown/configmap-ledger.js";
