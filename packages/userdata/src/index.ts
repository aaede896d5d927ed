export { UserDataError } from "./errors.js";
export {
  DnsOptions,
  HOST_NETWORK_ANNOTATION,
  LogsOptions,
  MAX_USER_DATA_BYTES,
  MetricsOptions,
  RESTART_LIMIT_ANNOTATION,
  RenderOptions,
  type RenderOptionsInput,
} from "./options.js";
export {
  clusterSegment,
  PARAMETER_INSTANCE_TAG,
  POD_PARAMETER_ROOT,
  type PodParameter,
  type PodSourceRefs,
  type PodSources,
  podParameterNames,
  podParameterPrefix,
  podSourceRefs,
  podUidOfParameter,
  type RenderNotice,
  type SourceObject,
} from "./parameters.js";
export { parseQuantity } from "./quantity.js";
export { type RenderResult, renderUserData, supervisorScript } from "./render.js";
export { type ServiceEnvSource, serviceEnvironment } from "./service-env.js";
export {
  podTokenParameterName,
  podTokenParameterValue,
  podTokenRequests,
} from "./tokens.js";
