/**
 * The EC2 client's retries, against moto behind a fault proxy: EC2's definite answers that come
 * as server errors (a capacity error is an HTTP 500) are not retried; transient faults are.
 */
import { RunInstancesCommand } from "@aws-sdk/client-ec2";
import { type Moto, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAwsClients } from "./clients.js";
import { parseProviderConfig } from "./config.js";
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
});
