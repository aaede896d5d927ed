/**
 * The host simulator's tests' shared steps: launch one instance the simulator plays, and list the
 * processes a test expects gone.
 *
 * @packageDocumentation
 */
import { execFileSync } from "node:child_process";
import { type EC2Client, RunInstancesCommand } from "@aws-sdk/client-ec2";
import { NEBULA_INSTANCE_PROFILE } from "../moto.js";

/**
 * Launches one instance through the simulator's EC2 endpoint, tagged for `cluster` and `podUid`
 * (the simulator plays only instances with a `nebula:cluster` tag); answers its ID.
 */
export async function launch(
  ec2: EC2Client,
  userData: string,
  tags: { readonly cluster: string; readonly podUid: string },
): Promise<string> {
  const out = await ec2.send(
    new RunInstancesCommand({
      ImageId: "ami-12345678",
      InstanceType: "m5.large",
      MinCount: 1,
      MaxCount: 1,
      UserData: Buffer.from(userData).toString("base64"),
      IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
      TagSpecifications: [
        {
          ResourceType: "instance",
          Tags: [
            { Key: "nebula:cluster", Value: tags.cluster },
            { Key: "nebula:pod-uid", Value: tags.podUid },
          ],
        },
      ],
    }),
  );
  const id = out.Instances?.[0]?.InstanceId;
  if (id === undefined) throw new Error("RunInstances returned no instance");
  return id;
}

/** The processes whose command line matches `pattern` (`pgrep -af`), as `<pid> <command>` lines. */
export function processesMatching(pattern: string): string[] {
  try {
    return execFileSync("pgrep", ["-af", "--", pattern], { encoding: "utf8" }).trim().split("\n");
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}
