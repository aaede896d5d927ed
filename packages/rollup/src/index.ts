export { DEFAULT_REASON_CATALOG, ReasonCatalog, ReasonDefinition } from "./catalog.js";
export {
  Condition,
  ConditionStatus,
  type ConditionUpdate,
  findCondition,
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
export { RollupError } from "./errors.js";
export { progressConditions } from "./kstatus.js";
export { ReasonCount } from "./tally.js";
export {
  PlacementInput,
  parseWorkloadInput,
  rollupWorkload,
  WorkloadInput,
  type WorkloadStatus,
} from "./workload.js";
