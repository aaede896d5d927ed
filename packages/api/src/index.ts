export {
  ApiError,
  type ApiErrorCode,
  type ApiResult,
  parseInstance,
  parseWorkload,
  parseWorkloadDeployment,
} from "./errors.js";
export { INSTANCE_STATES, Instance, InstanceSpec, InstanceStatus } from "./instance.js";
export {
  INSTANCE_COLUMNS,
  INSTANCE_KIND,
  KINDS,
  type KindDescription,
  type PrinterColumn,
  REPLICA_SET_COLUMNS,
  WORKLOAD_DEPLOYMENT_KIND,
  WORKLOAD_KIND,
} from "./kinds.js";
export {
  API_VERSION,
  Conditions,
  DNS_LABEL_PATTERN,
  DNS_SUBDOMAIN_PATTERN,
  GROUP,
  isEmptySelector,
  isLabelKey,
  isLabelValue,
  LABEL_KEY_PATTERN,
  LABEL_VALUE_PATTERN,
  LabelSelector,
  LabelSelectorRequirement,
  LocalObjectReference,
  MatchLabels,
  matchesSelector,
  ObjectMeta,
  ObjectName,
  SelectorOperator,
  selectorToString,
  VERSION,
} from "./meta.js";
export { Placement, PlacementStatus, Workload, WorkloadSpec, WorkloadStatus } from "./workload.js";
export {
  WorkloadDeployment,
  WorkloadDeploymentSpec,
  WorkloadDeploymentStatus,
} from "./workload-deployment.js";
