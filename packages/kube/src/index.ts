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
