export {
  CONDITION_REASON_PATTERN,
  DEFAULT_REASON_CATALOG,
  MAX_REASON_LENGTH,
  REASON_CLASSES,
  ReasonCatalog,
  type ReasonClass,
  ReasonDefinition,
  ReasonName,
  type ResolvedReason,
  reasonClassRank,
  UNKNOWN_REASON,
} from "./catalog.js";
export {
  Condition,
  ConditionStatus,
  type ConditionUpdate,
  findCondition,
  formatTime,
  setCondition,
  setConditions,
  statusChanged,
} from "./condition.js";
export {
  InstanceInput,
  parseWorkloadDeploymentInput,
  type RollupOptions,
  rollupWorkloadDeployment,
  SpecBlocker,
  WorkloadDeploymentInput,
  type WorkloadDeploymentStatus,
} from "./deployment.js";
export { RollupError, type RollupErrorCode, type RollupResult } from "./errors.js";
export {
  KSTATUS_CONDITION_TYPES,
  KSTATUS_REASONS,
  type KstatusOptions,
  kstatusConditions,
  type ProgressInput,
  progressConditions,
} from "./kstatus.js";
export { CONDITION_TYPES, ReasonCount, ROLLUP_REASONS } from "./tally.js";
export {
  PlacementInput,
  type PlacementStatus,
  parseWorkloadInput,
  rollupWorkload,
  WorkloadInput,
  type WorkloadStatus,
} from "./workload.js";
