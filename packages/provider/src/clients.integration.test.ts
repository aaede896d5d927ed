/**
 * The EC2 client's retries, against moto behind a fault proxy: EC2's definite answers that come
 * as server errors (a capacity error is an HTTP 500) are not retried; transient faults are. Its
 * request timeout, behind a proxy that holds `RunInstances` without ever answering: the launch
 * fails as a transient fault after `maxAttempts` timed-out attempts instead of hanging.
 *
 * The Price List client (`pricing`, On-Demand prices) has no test against a peer here: moto
 * serves no Price List (it answers an HTML 500 page to `GetProducts`), and no other local peer
 * does. Its parsing is tested on the AWS example answer (`on-demand-price.test.ts`), its caching
 * and bounds through the launcher (`launcher.test.ts`), its timeouts with the others
 * (`clients.test.ts`); it has not been run against the real Price List Query API.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { DescribeInstancesCommand, RunInstancesCommand } from "@aws-sdk/client-ec2";
import { type Moto, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAwsClients } from "./clients.js";
import { parseProviderConfig } from "./config.js";
import { toProviderError } from "./errors.js";
import { type FaultProxy, startFaultProxy } from "./testing/fault-proxy.js";
import { type MotoNetwork, motoConfig, prepareMoto } from "./testing/moto-env.js";

let moto: Moto;
let network: MotoNetwork;
let faults: FaultProxy;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  faults = await startFaultProxy(moto.endpoint);
});

afterAll(async () => {
  await faults?.close();
  await moto?.stop();
});

/**
 * A loopback proxy in front of `target` that forwards every request except `RunInstances`, which
 * it takes and never answers (a hung call). Counts the requests it held.
 */
async function startHangingProxy(
  target: string,
): Promise<{ endpoint: string; held: () => number; close: () => Promise<void> }> {
  let held = 0;
  const read = (req: IncomingMessage) =>
    new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => resolve(Buffer.concat(chunks)));
      req.on("error", reject);
    });
  const server: Server = createServer(async (req, res) => {
    const body = await read(req);
    if (new URLSearchParams(body.toString("utf8")).get("Action") === "RunInstances") {
      held++;
      return;
    }
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (typeof v === "string" && k !== "host" && k !== "connection") headers[k] = v;
    }
    const upstream = await fetch(new URL(req.url ?? "/", target), {
      method: req.method ?? "POST",
      headers,
      ...(body.length > 0 ? { body: new Uint8Array(body) } : {}),
    });
    const payload = Buffer.from(await upstream.arrayBuffer());
    res.writeHead(upstream.status, {
      "content-type": upstream.headers.get("content-type") ?? "text/xml",
      "content-length": String(payload.length),
    });
    res.end(payload);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    held: () => held,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

function launch() {
  return new RunInstancesCommand({
    ImageId: "ami-12345678",
    InstanceType: "m7i.large",
    MinCount: 1,
    MaxCount: 1,
    SubnetId: network.subnetId,
  });
}

describe("the provider's EC2 client", () => {
  it("sends a launch EC2 refuses for capacity or quota once, and retries a transient fault", async () => {
    const config = parseProviderConfig({
      ...motoConfig(moto, network, "client-retries"),
      endpoint: faults.endpoint,
      maxAttempts: 5,
    });
    const { ec2 } = createAwsClients(config);
    const sent = () => faults.received.get("RunInstances") ?? 0;
    for (const [code, status] of [
      ["InsufficientInstanceCapacity", 500],
      ["VcpuLimitExceeded", 400],
    ] as const) {
      faults.clear();
      faults.inject({ action: "RunInstances", kind: "error", code, status, times: 10 });
      const before = sent();
      const error = await ec2.send(launch()).then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(error?.name).toBe(code);
      expect(sent() - before, code).toBe(1);
    }
    // An internal error is no answer: retried, and the retry launches.
    faults.clear();
    faults.inject({
      action: "RunInstances",
      kind: "error",
      code: "InternalError",
      status: 500,
      times: 1,
    });
    const before = sent();
    const out = await ec2.send(launch());
    expect(out.Instances?.[0]?.InstanceId).toMatch(/^i-/);
    expect(sent() - before).toBe(2);
    ec2.destroy();
  });

  // A hang guard only (the assertions are on the error): 2 attempts of 500 ms, and back-off.
  it("gives up on a RunInstances that is never answered: TimeoutError after maxAttempts, a transient fault", {
    timeout: 30_000,
  }, async () => {
    const hanging = await startHangingProxy(moto.endpoint);
    try {
      const config = parseProviderConfig({
        ...motoConfig(moto, network, "client-timeouts"),
        endpoint: hanging.endpoint,
        maxAttempts: 2,
        requestTimeoutMs: 500,
      });
      const { ec2 } = createAwsClients(config);
      // Other calls go through the proxy to moto and are answered.
      const listed = await ec2.send(new DescribeInstancesCommand({}));
      expect(listed.$metadata.httpStatusCode).toBe(200);
      const error = await ec2.send(launch()).then(
        () => undefined,
        (e: unknown) => e as Error & { $metadata?: { attempts?: number } },
      );
      expect(error?.name).toBe("TimeoutError");
      expect(error?.$metadata?.attempts).toBe(2);
      expect(hanging.held()).toBe(2);
      // The launcher takes it for an unknown outcome and repeats the same request later.
      const wrapped = toProviderError(error, "RunInstances for pod default/hung");
      expect(wrapped.code).toBe("Unavailable");
      expect(wrapped.retryable).toBe(true);
      ec2.destroy();
    } finally {
      await hanging.close();
    }
  });
});
