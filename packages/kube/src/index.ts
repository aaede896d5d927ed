export {
  AnnotationStoreOptions,
  type AnnotationStoreOptionsInput,
  combinePatches,
  DEFAULT_TEARDOWN_ANNOTATION,
  KubernetesAnnotationStore,
  type ObjectRef,
  parseObjectKey,
} from "./annotation-store.js";
// Status writer, event recorder, CRDs from zod (kube-api).
export {
  buildCrd,
  CrdOptions,
  type CrdOptionsInput,
  type CrdPrinterColumn,
  CrdVersion,
  type CustomResourceDefinition,
  type InstallCrdOptions,
  installCrd,
  PrinterColumn,
  type PrinterColumnInput,
} from "./crd/crd.js";
export { type Re2Problem, re2Problem } from "./crd/re2.js";
export {
  type StructuralSchema,
  structuralSchemaOf,
  toStructuralSchema,
} from "./crd/structural-schema.js";
export {
  type DeleteOutcome,
  type DeleteTarget,
  deleteWithPreconditions,
} from "./delete.js";
export { KubeError, type KubeErrorCode, statusOf } from "./errors.js";
export {
  EventInput,
  type EventInputType,
  type EventLogger,
  type EventObjectReference,
  EventRecorder,
  EventRecorderOptions,
  type EventRecorderOptionsInput,
  type EventRecorderStats,
  type EventRecordOutcome,
  microTime,
} from "./events/event-recorder.js";
export { TokenBucket } from "./events/token-bucket.js";
export {
  apiVersionOf,
  type ObjectAddress,
  PODS,
  type ResourceType,
} from "./status/resource-client.js";
export {
  applyMergePatch,
  type JsonObject,
  mergeConditions,
  normalizeTimes,
  planStatus,
  type StatusCondition,
  type StatusPlan,
  type StatusPlanInput,
  serverTime,
  statusEquals,
  type TimePrecision,
} from "./status/status-values.js";
export {
  type StatusWriteOptions,
  type StatusWriteOutcome,
  type StatusWriteResult,
  StatusWriter,
  StatusWriterOptions,
  type StatusWriterOptionsInput,
} from "./status/status-writer.js";
