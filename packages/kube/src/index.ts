export {
  AnnotationStoreOptions,
  type AnnotationStoreOptionsInput,
  combinePatches,
  DEFAULT_TEARDOWN_ANNOTATION,
  KubernetesAnnotationStore,
  type ObjectRef,
  parseObjectKey,
} from "./annotation-store.js";
// Controller toolkit: connect, informer cache, work queue, controller loop, manager, leader
// election, metrics/health/logs and the apps' command line.
export {
  type CustomObjectInformerOptions,
  customObjectInformer,
  Informer,
  type InformerCommonOptions,
  type InformerEvent,
  type InformerEventType,
  type InformerHandler,
  type InformerOptions,
  type ListFunction,
  normalizeObject,
  objectKey,
  type PodInformerOptions,
  podInformer,
  type RestartBackoff,
  type Selectors,
  type Store,
} from "./cache/informer.js";
export { withSignal } from "./cache/request-options.js";
export {
  type Connection,
  ConnectOptions,
  type ConnectOptionsInput,
  type ConnectSource,
  connect,
  SERVICE_ACCOUNT_DIR,
} from "./connect.js";
export {
  Controller,
  type ControllerOptions,
  type ControllerRunOptions,
  type KeyMapper,
  type ReconcileResult,
  type Reconciler,
} from "./controller/controller.js";
export {
  Manager,
  type ManagerExit,
  type ManagerLeaderElection,
  type ManagerOptions,
  type Runnable,
  type ShutdownPhase,
} from "./controller/manager.js";
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
  type Cli,
  type CliFlags,
  type CliParseResult,
  type CliSpec,
  COMMON_FLAGS,
  type CommonFlags,
  defineCli,
  type FlagDefinition,
  type FlagDefinitions,
  type FlagValues,
  type RunCliOptions,
  runCli,
} from "./flags.js";
export {
  LeaderElectionOptions,
  type LeaderElectionOptionsInput,
  LeaderElector,
  type LeaderElectorDeps,
  type LeadershipCallbacks,
  type StoppedLeadingReason,
  toMicroTime,
} from "./leader/leader-elector.js";
export {
  createLogger,
  LOG_LEVELS,
  type Logger,
  type LoggerOptions,
  type LogLevel,
  silentLogger,
} from "./observability/logger.js";
export {
  ControllerMetrics,
  createRegistry,
  type ReconcileResultLabel,
  type Registry,
  type RegistryOptions,
} from "./observability/metrics.js";
export {
  type BindAddress,
  type ProbeResult,
  type ProbeServer,
  type ProbeServerOptions,
  parseBindAddress,
  startProbeServer,
} from "./observability/server.js";
export {
  type BucketOptions,
  BucketRateLimiter,
  type DefaultRateLimiterOptions,
  defaultControllerRateLimiter,
  type ExponentialBackoffOptions,
  ExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  type Now,
  type RateLimiter,
} from "./queue/rate-limiter.js";
export {
  type QueueObserver,
  type Timers,
  WorkQueue,
  type WorkQueueOptions,
} from "./queue/work-queue.js";
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
export {
  ConfigMapLedgerOptions,
  type ConfigMapLedgerOptionsInput,
  ConfigMapPodLedger,
  LEDGER_LABEL,
  LEDGER_LAUNCH_KEY,
  LEDGER_POD_UID_LABEL,
  LEDGER_RECORD_KEY,
} from "./teardown/configmap-ledger.js";
