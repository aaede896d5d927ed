/** The ConfigMaps and Secrets a Pod references, and what `readSources` returns (from `@nebula/userdata`). */
export type { PodSourceRefs, PodSources, SourceObject } from "@nebula/userdata";
export { type Admission, admitPod, DAEMONSET_NOT_LAUNCHED_REASON } from "./admission.js";
export { type BatchOutcome, chunk, InstanceBatcher, missingInstanceIds } from "./batch.js";
export {
  ACCOUNT_POOL,
  afterCapacityError,
  type BackoffSettings,
  choosePlacement,
  type LaunchBackoff,
  NO_BACKOFF,
  type Placement,
  type PlacementChoice,
  placementsFor,
  poolOf,
} from "./capacity.js";
export {
  CloudWatchContainerLogs,
  type CloudWatchContainerLogsOptions,
  type ContainerRunRef,
  DEFAULT_LOG_POLL_MS,
  GET_LOG_EVENTS_MAX_LIMIT,
  type LogFollowOptions,
  type LogLine,
  type LogReadOptions,
} from "./cloudwatch-logs.js";
export {
  CloudWatchUsage,
  type CloudWatchUsageOptions,
  type ContainerUsage,
  CPU_METRIC,
  cpuRate,
  MAX_METRIC_QUERIES,
  MEMORY_METRIC,
  type PodUsageQuery,
  type Series,
} from "./cloudwatch-usage.js";
export {
  allowedInstanceTypes,
  INSTANCE_TYPE_ANNOTATION,
  INSTANCE_TYPE_NODE_SELECTOR,
  type ProviderConfig,
  type ProviderConfigInput,
  ProviderConfigSchema,
  parseProviderConfig,
} from "./config.js";
export {
  classifyAwsError,
  isNotFound,
  ProviderError,
  type ProviderErrorCode,
  toProviderError,
} from "./errors.js";
export {
  buildRunInstancesInput,
  type LaunchInput,
  labelTags,
  MAX_USER_DATA_BYTES,
  pickSubnet,
} from "./launch.js";
export {
  type LeakInput,
  type LeakPlan,
  type ParameterLeakCandidate,
  type ParameterLeakInput,
  type ParameterLeakPlan,
  planLeakCollection,
  planParameterLeaks,
} from "./leaks.js";
export { clientTokenFor, disproveOwnership, type OwnershipRules } from "./ownership.js";
export {
  initialPacing,
  isOutage,
  nextPacing,
  type Pacing,
  type PacingBounds,
  type PollOutcome,
} from "./pacing.js";
export {
  accountOfArn,
  clusterPodsPath,
  DEFAULT_PARAMETER_KEY_ID,
  DELETE_PARAMETERS_BATCH,
  DESCRIBE_PARAMETERS_PAGE,
  deleteParameters,
  deletePodParameters,
  instanceArn,
  isPodParametersAuxiliary,
  type ListedParameter,
  listClusterPodParameters,
  listPodParameterNames,
  POD_PARAMETERS_AUXILIARY,
  partitionOf,
  podParametersAuxiliary,
  tagParametersWithInstance,
  writePodParameters,
} from "./parameters.js";
export {
  type PodFacts,
  podFacts,
  type ResourceRequests,
  resolveInstanceType,
} from "./pod.js";
export {
  describeNodeInstances,
  type ObservedInstance,
  observeInstance,
  POLLED_STATES,
  type PollPage,
  pollFilters,
} from "./poll.js";
export {
  type CollectedLeak,
  type CollectedParameterLeak,
  Ec2PodProvider,
  type Ec2PodProviderOptions,
  INSTANCE_ANNOTATIONS,
  type InstanceInfo,
  type InstanceReclaimer,
  instanceAnnotations,
  type LeakCollection,
  type NodeHealth,
  type NodeHealthSource,
  type PodLifecycle,
  type PodStatusChange,
  type PodStatusListener,
  type PollResult,
  type ProviderEvent,
  RECLAIM_FINALIZER,
  type ReclaimState,
  type RenderedPod,
  type Runnable,
} from "./provider.js";
export {
  CREATE_CONTAINER_CONFIG_ERROR,
  configErrorStatus,
  EC2_UNAVAILABLE_REASON,
  isTerminalStatus,
  LAUNCHED_CONDITION,
  type PodStatusInput,
  podStatus,
} from "./status.js";
export {
  CLUSTER_TAG,
  EC2_MAX_TAGS,
  type IdentityTags,
  launchTags,
  MAX_USER_TAGS,
  NODE_TAG,
  ORPHANED_TAG,
  POD_TAG,
  POD_UID_TAG,
  RESERVED_TAG_COUNT,
  tagMap,
} from "./tags.js";
