export {
  AnnotationStoreOptions,
  type AnnotationStoreOptionsInput,
  combinePatches,
  DEFAULT_TEARDOWN_ANNOTATION,
  KubernetesAnnotationStore,
  type ObjectRef,
  parseObjectKey,
} from "./annotation-store.js";
export {
  type DeleteOutcome,
  type DeleteTarget,
  deleteWithPreconditions,
} from "./delete.js";
export { KubeError, type KubeErrorCode, statusOf } from "./errors.js";
export {
  ConfigMapLedgerOptions,
  type ConfigMapLedgerOptionsInput,
  ConfigMapPodLedger,
  LEDGER_LABEL,
  LEDGER_LAUNCH_KEY,
  LEDGER_POD_UID_LABEL,
  LEDGER_RECORD_KEY,
} from "./teardown/configmap-ledger.js";
