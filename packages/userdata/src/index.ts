export { UserDataError, type UserDataErrorCode } from "./errors.js";
export {
  AgentOptions,
  type AgentOptionsInput,
  DEFAULT_METRICS_NAMESPACE,
  DEFAULT_RESTART_LIMIT,
  DEFAULT_SANDBOX_IMAGE,
  HOST_NETWORK_ANNOTATION,
  LogsOptions,
  type LogsOptionsInput,
  MAX_USER_DATA_BYTES,
  MetricsOptions,
  type MetricsOptionsInput,
  RESTART_LIMIT_ANNOTATION,
  RenderOptions,
  type RenderOptionsInput,
  type ResolvedRenderOptions,
} from "./options.js";
export {
  clusterSegment,
  MAX_POD_PARAMETERS,
  PARAMETER_INSTANCE_TAG,
  POD_PARAMETER_ROOT,
  POD_PARAMETER_VALUE_CHARS,
  type PodParameter,
  type PodSourceRefs,
  type PodSources,
  podParameterNames,
  podParameterPrefix,
  podSourceRefs,
  podUidOfParameter,
  type RenderNotice,
  type SourceObject,
  supervisorParameterPrefix,
} from "./parameters.js";
export { expand as expandKubernetesReferences } from "./pod.js";
export { parseQuantity } from "./quantity.js";
export { bashQuote, shQuote } from "./quote.js";
export {
  containerLogStream,
  type RenderedUserData,
  type RenderResult,
  renderUserData,
  SUPERVISOR_PATH,
  SUPERVISOR_UNIT,
  supervisorScript,
  USAGE_METRICS,
} from "./render.js";
