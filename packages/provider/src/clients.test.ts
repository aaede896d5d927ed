import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { GetMetricDataCommand } from "@aws-sdk/client-cloudwatch";
import { GetLogEventsCommand } from "@aws-sdk/client-cloudwatch-logs";
import { DescribeInstancesCommand } from "@aws-sdk/client-ec2";
import { ReceiveMessageCommand } from "@aws-sdk/client-sqs";
import { DescribeParametersCommand } from "@aws-sdk/client-ssm";
import type { NodeHttpHandlerOptions } from "@smithy/types";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createAwsClients, requestHandlerOptions } from "./clients.js";
import { parseProviderConfig } from "./config.js";
import { toProviderError } from "./errors.js";
import { testConfig } from "./testing/fixtures.js";

/** A loopback HTTP server that takes every request and never answers it. */
let silent: Server;
let endpoint: string;

beforeAll(async () => {
  // Requests are signed before they are sent: any credentials, never a real account's.
  vi.stubEnv("AWS_ACCESS_KEY_ID", "testing");
  vi.stubEnv("AWS_SECRET_ACCESS_KEY", "testing");
  silent = createServer(() => {
    // Never answers.
  });
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  endpoint = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
});

afterAll(async () => {
  vi.unstubAllEnvs();
  silent.closeAllConnections();
  await new Promise((resolve) => silent.close(resolve));
});

/** The HTTP options a client's request handler resolved (known once it has handled a request). */
function handlerOptions(client: { config: { requestHandler: unknown } }): NodeHttpHandlerOptions {
  return (client.config.requestHandler as { httpHandlerConfigs(): NodeHttpHandlerOptions })
    .httpHandlerConfigs();
}

/** What a call rejected with (the test fails if it resolves). */
async function failure(call: Promise<unknown>): Promise<Error> {
  return call.then(
    () => {
      throw new Error("expected the call to fail");
    },
    (error: unknown) => error as Error,
  );
}

describe("requestHandlerOptions", () => {
  it("gives every client the configured connection and request timeouts, a late request failing", () => {
    expect(requestHandlerOptions(parseProviderConfig(testConfig()))).toEqual({
      connectionTimeout: 5_000,
      requestTimeout: 30_000,
      throwOnRequestTimeout: true,
    });
    expect(
      requestHandlerOptions(
        parseProviderConfig(testConfig({ requestTimeoutMs: 1_234, connectionTimeoutMs: 567 })),
      ),
    ).toEqual({ connectionTimeout: 567, requestTimeout: 1_234, throwOnRequestTimeout: true });
  });
});

describe("createAwsClients", () => {
  it("every client it builds gives up on an endpoint that never answers: TimeoutError, Unavailable", async () => {
    const config = parseProviderConfig(
      testConfig({
        endpoint,
        maxAttempts: 1,
        requestTimeoutMs: 200,
        connectionTimeoutMs: 1_000,
        logs: { group: "/nebula/test" },
        metrics: {},
      }),
    );
    const clients = createAwsClients(config);
    const { ec2, ssm, logs, metrics } = clients;
    if (logs === undefined || metrics === undefined) {
      throw new Error("the configuration turns logs and metrics on");
    }
    const now = new Date();
    const errors = await Promise.all([
      failure(ec2.send(new DescribeInstancesCommand({}))),
      failure(ssm.send(new DescribeParametersCommand({}))),
      failure(
        logs.send(new GetLogEventsCommand({ logGroupName: "/nebula/test", logStreamName: "s" })),
      ),
      failure(
        metrics.send(
          new GetMetricDataCommand({ MetricDataQueries: [], StartTime: now, EndTime: now }),
        ),
      ),
    ]);
    for (const error of errors) {
      expect(error.name).toBe("TimeoutError");
      expect(toProviderError(error, "a call").code).toBe("Unavailable");
    }
    for (const client of [ec2, ssm, logs, metrics]) {
      expect(handlerOptions(client)).toMatchObject({
        connectionTimeout: 1_000,
        requestTimeout: 200,
        throwOnRequestTimeout: true,
      });
    }
    for (const client of [ec2, ssm, logs, metrics]) client.destroy();
  });

  it("the event queue's client too, with room for its long poll", async () => {
    const config = parseProviderConfig(
      testConfig({
        endpoint,
        maxAttempts: 1,
        requestTimeoutMs: 2_000,
        events: {
          queueUrl: "https://sqs.us-east-1.amazonaws.com/123456789012/nebula",
          waitSeconds: 0,
        },
      }),
    );
    const { sqs } = createAwsClients(config);
    if (sqs === undefined) throw new Error("the configuration turns events on");
    const error = await failure(sqs.send(new ReceiveMessageCommand({ QueueUrl: endpoint })));
    expect(error.name).toBe("TimeoutError");
    expect(handlerOptions(sqs)).toMatchObject({ requestTimeout: 2_000 });
    sqs.destroy();
  });

  it("refuses a request timeout shorter than the event queue's long poll", () => {
    expect(() =>
      parseProviderConfig(
        testConfig({
          requestTimeoutMs: 20_000,
          events: { queueUrl: "https://sqs.us-east-1.amazonaws.com/123456789012/nebula" },
        }),
      ),
    ).toThrow(/requestTimeoutMs must be at least events.waitSeconds \+ 2 s/);
  });
});
