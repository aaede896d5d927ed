import { CloudWatchClient } from "@aws-sdk/client-cloudwatch";
import { CloudWatchLogsClient } from "@aws-sdk/client-cloudwatch-logs";
import { EC2Client } from "@aws-sdk/client-ec2";
import { PricingClient } from "@aws-sdk/client-pricing";
import { SQSClient } from "@aws-sdk/client-sqs";
import { SSMClient } from "@aws-sdk/client-ssm";
import { AdaptiveRetryStrategy } from "@smithy/core/retry";
import type {
  NodeHttpHandlerOptions,
  RetryErrorInfo,
  RetryStrategyV2,
  RetryToken,
  StandardRetryToken,
} from "@smithy/types";
import type { ProviderConfig } from "./config.js";
import { toProviderError } from "./errors.js";

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
  /**
   * The AWS Price List Query API: On-Demand prices (`config.pricing.onDemand`), in
   * `config.pricing.region`. Optional, so that a set of clients built before it existed still
   * satisfies this interface.
   */
  readonly pricing?: PricingClient | undefined;
}

/**
 * Attempts of one Price List read: the price is for show, read at most once per type per cache
 * period, so one retry of a transient fault, not `maxAttempts` against an endpoint that answers
 * none (moto serves no Price List: with 5 attempts each read would cost seconds of back-off).
 */
const PRICING_MAX_ATTEMPTS = 2;

/**
 * The HTTP options of every client built here: connection and request timeouts from the
 * configuration. `throwOnRequestTimeout` makes a request that outlives `requestTimeout` fail with
 * the SDK's `TimeoutError` (by default the SDK only logs a warning and waits on).
 */
export function requestHandlerOptions(config: ProviderConfig): NodeHttpHandlerOptions {
  return {
    connectionTimeout: config.connectionTimeoutMs,
    requestTimeout: config.requestTimeoutMs,
    throwOnRequestTimeout: true,
  };
}

/**
 * The SDK's adaptive retry, except for EC2's definite answers that come as server errors: a
 * capacity error (`InsufficientInstanceCapacity` is an HTTP 500, which the SDK takes for a
 * transient fault) or a quota says no instance was started and none will be on a retry a few
 * hundred milliseconds later. Retried, each would cost `maxAttempts` calls against a dead offering;
 * the launcher instead cools that offering down and moves on to the next.
 */
function definiteAnswerRetryStrategy(maxAttempts: number): RetryStrategyV2 {
  const inner = new AdaptiveRetryStrategy(maxAttempts);
  return {
    acquireInitialRetryToken: (scope: string) => inner.acquireInitialRetryToken(scope),
    refreshRetryTokenForRetry(token: RetryToken, info: RetryErrorInfo): Promise<RetryToken> {
      const code = toProviderError(info.error, "").code;
      if (code === "InsufficientCapacity" || code === "QuotaExceeded") {
        return Promise.reject(info.error);
      }
      return inner.refreshRetryTokenForRetry(token as StandardRetryToken, info);
    },
    recordSuccess: (token: RetryToken) => inner.recordSuccess(token as StandardRetryToken),
  };
}

/**
 * Builds the clients from the configuration (Region, endpoint, adaptive retry with
 * `maxAttempts`, no retry of EC2's capacity and quota answers, connection and request timeouts
 * of each attempt), using any given instead. Logs, metrics and SQS clients exist only when the
 * configuration turns them on; the Price List client when `pricing.onDemand` does (in
 * `pricing.region`, at most {@link PRICING_MAX_ATTEMPTS} attempts per read).
 */
export function createAwsClients(
  config: ProviderConfig,
  given: Partial<AwsClients> = {},
): AwsClients {
  const clientConfig = {
    region: config.region,
    retryMode: "adaptive",
    maxAttempts: config.maxAttempts,
    requestHandler: requestHandlerOptions(config),
    ...(config.endpoint === undefined ? {} : { endpoint: config.endpoint }),
  };
  return {
    ec2:
      given.ec2 ??
      new EC2Client({
        ...clientConfig,
        retryStrategy: definiteAnswerRetryStrategy(config.maxAttempts),
      }),
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
    pricing: config.pricing.onDemand
      ? (given.pricing ??
        new PricingClient({
          ...clientConfig,
          region: config.pricing.region,
          maxAttempts: Math.min(config.maxAttempts, PRICING_MAX_ATTEMPTS),
        }))
      : undefined,
  };
}
