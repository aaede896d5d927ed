/**
 * `@nebula/provider`: the EC2 side of the virtual node. Construct an {@link Ec2PodProvider} and
 * hand it to `@nebula/virtual-node`'s controllers (it satisfies their `PodLifecycle`,
 * `InstanceReclaimer`, `NodeHealthSource` and `Runnable` structurally); read container logs and
 * usage through the CloudWatch readers; catch {@link ProviderError}.
 *
 * @packageDocumentation
 */
export type { RenderedPod } from "./admitter.js";
export type { BatchOutcome } from "./batch.js";
export {
  CloudWatchContainerLogs,
  type CloudWatchContainerLogsOptions,
} from "./cloudwatch-logs.js";
export {
  CloudWatchUsage,
  type CloudWatchUsageOptions,
  type ContainerUsage,
} from "./cloudwatch-usage.js";
export {
  type ProviderConfig,
  type ProviderConfigInput,
  ProviderConfigSchema,
  parseProviderConfig,
} from "./config.js";
export type { DoorbellBatch, DoorbellTimings } from "./doorbells.js";
export type { Ec2BudgetState } from "./ec2-budget.js";
export { ProviderError, type ProviderErrorCode } from "./errors.js";
export type { Gateway, GatewayCall } from "./gateway.js";
export type { CollectedParameterLeak, LeakCollection } from "./leak-collector.js";
export type { ContainerRunRef, LogLine } from "./log-events.js";
export type { Ec2PodProviderOptions } from "./options.js";
export type { ListedParameter } from "./parameters.js";
export type { ObservedInstance, PollPage } from "./poll.js";
export type { PollResult } from "./poller.js";
export { Ec2PodProvider } from "./provider.js";
export type { SpotSignal } from "./publisher.js";
export type { WarmPoolEvent } from "./warm-pool.js";
