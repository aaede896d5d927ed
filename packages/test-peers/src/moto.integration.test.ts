import {
  CreateTagsCommand,
  DescribeInstancesCommand,
  RunInstancesCommand,
  StopInstancesCommand,
} from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { connectMoto, type Moto, NEBULA_INSTANCE_PROFILE, startMoto } from "./moto.js";

describe("moto through @aws-sdk/client-ec2", () => {
  let moto: Moto;
  beforeAll(async () => {
    moto = await startMoto();
  });
  afterAll(async () => {
    await moto?.stop();
  });
  beforeEach(async () => {
    await moto.reset();
  });

  it("launches with the Nebula instance profile, user-data and tags, and describes them back", async () => {
    const ec2 = moto.ec2();
    const userData = Buffer.from("#!/bin/bash\necho hello\n").toString("base64");
    const run = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-12345678",
        InstanceType: "t3.micro",
        MinCount: 1,
        MaxCount: 1,
        ClientToken: "pod-uid-1",
        UserData: userData,
        IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
        InstanceInitiatedShutdownBehavior: "stop",
        MetadataOptions: { HttpTokens: "required", HttpPutResponseHopLimit: 1 },
        TagSpecifications: [
          { ResourceType: "instance", Tags: [{ Key: "nebula:pod-uid", Value: "pod-uid-1" }] },
        ],
      }),
    );
    const launched = run.Instances?.[0];
    expect(launched?.State?.Name).toBe("pending");
    const id = launched?.InstanceId ?? "";
    expect(id).toMatch(/^i-[0-9a-f]+$/);
    expect(launched?.IamInstanceProfile?.Arn).toBe(moto.instanceProfiles[0]?.arn);

    await ec2.send(
      new CreateTagsCommand({ Resources: [id], Tags: [{ Key: "nebula:report", Value: "v1" }] }),
    );
    const described = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: "tag:nebula:pod-uid", Values: ["pod-uid-1"] }],
      }),
    );
    const instance = described.Reservations?.[0]?.Instances?.[0];
    expect(instance?.InstanceId).toBe(id);
    expect(instance?.State?.Name).toBe("running");
    expect(Object.fromEntries((instance?.Tags ?? []).map((t) => [t.Key, t.Value]))).toEqual({
      "nebula:pod-uid": "pod-uid-1",
      "nebula:report": "v1",
    });

    const stopped = await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    expect(stopped.StoppingInstances?.[0]?.CurrentState?.Name).toBe("stopping");
  });

  it("refuses an instance profile that does not exist, and reset() forgets instances", async () => {
    const ec2 = moto.ec2();
    await expect(
      ec2.send(
        new RunInstancesCommand({
          ImageId: "ami-12345678",
          MinCount: 1,
          MaxCount: 1,
          IamInstanceProfile: { Name: "no-such-profile" },
        }),
      ),
    ).rejects.toThrow(/not found/i);

    await ec2.send(new RunInstancesCommand({ ImageId: "ami-12345678", MinCount: 2, MaxCount: 2 }));
    const before = await ec2.send(new DescribeInstancesCommand({}));
    expect(before.Reservations?.flatMap((r) => r.Instances ?? [])).toHaveLength(2);
    await moto.reset();
    const after = await ec2.send(new DescribeInstancesCommand({}));
    expect(after.Reservations ?? []).toHaveLength(0);
    // The profile is back after the reset.
    const again = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-12345678",
        MinCount: 1,
        MaxCount: 1,
        IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
      }),
    );
    expect(again.Instances?.[0]?.IamInstanceProfile?.Arn).toContain(NEBULA_INSTANCE_PROFILE);
  });

  it("stop() leaves no process behind", async () => {
    const other = await startMoto({ instanceProfiles: [] });
    const url = other.endpoint;
    await other.stop();
    await expect(fetch(`${url}/moto-api/data.json`)).rejects.toThrow();
  });
});

describe("connectMoto", () => {
  it("reaches a moto started elsewhere from its plain info, and its reset recreates the profiles", async () => {
    const moto = await startMoto();
    try {
      const info = JSON.parse(JSON.stringify(moto.info()));
      const connection = connectMoto(info);
      const ec2 = connection.ec2();
      await ec2.send(
        new RunInstancesCommand({ ImageId: "ami-12345678", MinCount: 1, MaxCount: 1 }),
      );
      const seen = await moto.ec2().send(new DescribeInstancesCommand({}));
      expect(seen.Reservations?.flatMap((r) => r.Instances ?? [])).toHaveLength(1);
      await connection.reset();
      const run = await ec2.send(
        new RunInstancesCommand({
          ImageId: "ami-12345678",
          MinCount: 1,
          MaxCount: 1,
          IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
        }),
      );
      expect(run.Instances?.[0]?.IamInstanceProfile?.Arn).toBe(connection.instanceProfiles[0]?.arn);
      expect(connection.env.AWS_ENDPOINT_URL_EC2).toBe(moto.endpoint);
    } finally {
      await moto.stop();
    }
  });
});
