import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { GetMetricDataCommand } from "@aws-sdk/client-cloudwatch";
import { GetLogEventsCommand } from "@aws-sdk/client-cloudwatch-logs";
import { DescribeInstancesCommand } from "@aws-sdk/client-ec2";
import { GetProductsCommand } from "@aws-sdk/client-pricing";
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
  return (
    client.config.requestHandler as { httpHandlerConfigs(): NodeHttpHandlerOptions }
  ).httpHandlerConfigs();
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
    const { ec2, ssm, logs, metrics, pricing } = clients;
    if (logs === undefined || metrics === undefined || pricing === undefined) {
      throw new Error("the configuration turns logs, metrics and pricing on");
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
      failure(pricing.send(new GetProductsCommand({ ServiceCode: "AmazonEC2" }))),
    ]);
    for (const error of errors) {
      expect(error.name).toBe("TimeoutError");
      expect(toProviderError(error, "a call").code).toBe("Unavailable");
    }
    for (const client of [ec2, ssm, logs, metrics, pricing]) {
      expect(handlerOptions(client)).toMatchObject({
        connectionTimeout: 1_000,
        requestTimeout: 200,
        throwOnRequestTimeout: true,
      });
    }
    // The Price List client asks its own Region, at most twice per read.
    expect(await pricing.config.region()).toBe("us-east-1");
    expect(await pricing.config.maxAttempts()).toBe(1);
    for (const client of [ec2, ssm, logs, metrics, pricing]) client.destroy();
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

  it("builds the Price List client in pricing.region only when On-Demand prices are read", async () => {
    const on = createAwsClients(
      parseProviderConfig(testConfig({ region: "eu-west-1", pricing: { region: "eu-central-1" } })),
    );
    expect(await on.pricing?.config.region()).toBe("eu-central-1");
    expect(await on.pricing?.config.maxAttempts()).toBe(2);
    expect(await on.ec2.config.region()).toBe("eu-west-1");
    const off = createAwsClients(parseProviderConfig(testConfig({ pricing: { onDemand: false } })));
    expect(off.pricing).toBeUndefined();
    for (const client of [on.ec2, on.ssm, on.pricing, off.ec2, off.ssm]) client?.destroy();
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
