/**
 * Closing the simulator while a guest is about to start: nothing of the guest may start after
 * the close began. (A CI run of the demo once found a guest's supervisor alive after Ctrl-C: a
 * boot that finished while the guests were being destroyed started its units after the kill.)
 */
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { EC2Client, RunInstancesCommand } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, expect, it } from "vitest";
import { MOTO_CREDENTIALS, type Moto, NEBULA_INSTANCE_PROFILE, startMoto } from "../moto.js";
import { startInstanceHosts } from "./simulator.js";

let moto: Moto;

beforeAll(async () => {
  moto = await startMoto();
});

afterAll(async () => {
  await moto?.stop();
});

/** The PIDs of processes whose command line contains `marker`. */
function processesWith(marker: string): string[] {
  try {
    return execFileSync("pgrep", ["-f", marker], { encoding: "utf8" }).trim().split("\n");
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

it("a boot that completes while the simulator closes starts nothing: no guest process outlives close()", async () => {
  let openGate: () => void = () => {};
  const gate = new Promise<void>((resolve) => {
    openGate = resolve;
  });
  const hosts = await startInstanceHosts({
    ec2Endpoint: moto.endpoint,
    region: moto.region,
    bootDelayMs: 100,
    beforeBoot: () => gate,
  });
  const ec2 = new EC2Client({
    endpoint: hosts.ec2Endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  const marker = `nebula-close-race-${randomUUID()}`;
  try {
    const out = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-12345678",
        InstanceType: "m5.large",
        MinCount: 1,
        MaxCount: 1,
        UserData: Buffer.from(`#!/bin/bash\nexec -a ${marker} sleep 600\n`).toString("base64"),
        IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
        TagSpecifications: [
          {
            ResourceType: "instance",
            Tags: [
              { Key: "nebula:cluster", Value: "close-test" },
              { Key: "nebula:pod-uid", Value: "pod-close-race" },
            ],
          },
        ],
      }),
    );
    const id = out.Instances?.[0]?.InstanceId ?? "";
    // Booting; once the boot delay has passed, the guest waits at the gate.
    await hosts.waitForPhase(id, "booting");
    await new Promise((r) => setTimeout(r, 500));
    expect(hosts.guest(id)?.phase).toBe("booting");
    const closing = hosts.close();
    openGate(); // the boot completes while the guest is being destroyed
    await closing;
  } finally {
    openGate();
    ec2.destroy();
    await hosts.close();
  }
  // Give a late spawn the time to show itself.
  await new Promise((r) => setTimeout(r, 1_000));
  expect(processesWith(marker)).toEqual([]);
});
