/**
 * Every instance's state in one small answer: `DescribeInstanceStatus` with
 * `IncludeAllInstances`, all pages. The test peers' watchers (the instance-host simulator, the EC2
 * events emitter) poll this instead of a whole `DescribeInstances` listing, which moto renders at
 * about 3 ms per instance: polled every 250 ms, a listing would starve the moto and the machine a
 * test measures.
 *
 * @packageDocumentation
 */
import { DescribeInstanceStatusCommand, type EC2Client } from "@aws-sdk/client-ec2";

/** Instance ID → state name, for every instance the endpoint knows (terminated ones too). */
export async function listInstanceStates(
  ec2: EC2Client,
  abortSignal?: AbortSignal,
): Promise<Map<string, string>> {
  const states = new Map<string, string>();
  let token: string | undefined;
  do {
    const page = await ec2.send(
      new DescribeInstanceStatusCommand({
        IncludeAllInstances: true,
        ...(token === undefined ? {} : { NextToken: token }),
      }),
      abortSignal === undefined ? {} : { abortSignal },
    );
    for (const status of page.InstanceStatuses ?? []) {
      if (status.InstanceId === undefined || status.InstanceState?.Name === undefined) continue;
      states.set(status.InstanceId, status.InstanceState.Name);
    }
    token = page.NextToken;
  } while (token !== undefined && token !== "");
  return states;
}
