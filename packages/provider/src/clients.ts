import { CloudWatchClient } from "@aws-sdk/client-cloudwatch";
import { CloudWatchLogsClient } from "@aws-sdk/client-cloudwatch-logs";
import { EC2Client } from "@aws-sdk/client-ec2";
import { SQSClient } from "@aws-sdk/client-sqs";
import { SSMClient } from "@aws-sdk/client-ssm";
import type { ProviderConfig } from "./config.js";

/** The AWS clients the provider uses; any of them may be given instead of built. */
export interface AwsClients {
  /** EC2: instances. */
  readonly ec2: EC2Client;
  /** SSM: Pod parameters (`podDelivery: "parameters"`); built lazily by the SDK, no call until used. */
  readonly ssm: SSMClient;
  /** CloudWatch Logs: the hosts' container logs (`config.logs`). */
  readonly logs: CloudWatchLogsClient | undefined;
  /** CloudWatch: the hosts' container usage (`config.metrics`). */
  readonly metrics: CloudWatchClient | undefined;
  /** SQS: the event channel's queue (`config.events`). */
  readonly sqs: SQSClient | undefined;
}

/**
 * Builds the clients from the configuration (Region, endpoint, adaptive retry with
 * `maxAttempts`), using any given instead. Logs, metrics and SQS clients exist only when the
 * configuration turns them on.
 */
export function createAwsClients(
  config: ProviderConfig,
  given: Partial<AwsClients> = {},
): AwsClients {
  const clientConfig = {
    region: config.region,
    retryMode: "adaptive",
    maxAttempts: config.maxAttempts,
    ...(config.endpoint === undefined ? {} : { endpoint: config.endpoint }),
  };
  return {
    ec2: given.ec2 ?? new EC2Client(clientConfig),
    ssm: given.ssm ?? new SSMClient(clientConfig),
    logs:
      config.logs === undefined
        ? undefined
        : (given.logs ?? new CloudWatchLogsClient(clientConfig)),
    metrics:
      config.metrics === undefined
        ? undefined
        : (given.metrics ?? new CloudWatchClient(clientConfig)),
    sqs: config.events === undefined ? undefined : (given.sqs ?? new SQSClient(clientConfig)),
  };
}
