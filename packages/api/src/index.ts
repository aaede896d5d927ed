export {
  ApiError,
  type ApiErrorCode,
  type ApiResult,
  parseInstance,
  parseWorkload,
  parseWorkloadDeployment,
} from "./errors.js";
export { INSTANCE_STATES, Instance } from "./instance.js";
export {
  INSTANCE_KIND,
  KINDS,
  type KindDescription,
  WORKLOAD_DEPLOYMENT_KIND,
  WORKLOAD_KIND,
} from "./kinds.js";
export {
  API_VERSION,
  GROUP,
  isEmptySelector,
  LabelSelector,
  matchesSelector,
  selectorToString,
  VERSION,
} from "./meta.js";
export { Workload } from "./workload.js";
export { WorkloadDeployment } from "./workload-deployment.js";
