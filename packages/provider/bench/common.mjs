// What the provider's benches share: the figure line for `npm run bench`, a bounded parallel map,
// a median, and moto's network and instances as the provider would find them. Not a test helper: each bench measures with these and prints, never asserts.
import { appendFileSync } from "node:fs";
import {
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateVpcCommand,
  RunInstancesCommand,
} from "@aws-sdk/client-ec2";

/**
 * Appends one figure to NEBULA_BENCH_OUT (set by the root `npm run bench`) as a JSON line
 * {package, figure, value, unit, baseline, baselineLabel, ratio, goal}; nothing when it is unset.
 * `ratio` is value / baseline unless the bench measured it itself (the median of its rounds).
 */
export function record(
  figure,
  value,
  unit,
  baseline = null,
  baselineLabel = null,
  goal = null,
  measuredRatio = undefined,
) {
  const out = process.env.NEBULA_BENCH_OUT;
  if (!out) return;
  const ratio = measuredRatio ?? (baseline ? Math.round((value / baseline) * 100) / 100 : null);
  const row = {
    package: "@nebula/provider",
    figure,
    value,
    unit,
    baseline,
    baselineLabel,
    ratio,
    goal,
  };
  appendFileSync(out, `${JSON.stringify(row)}\n`);
}

/** Runs `task` over `items` with at most `limit` calls in flight. */
export async function inParallel(items, limit, task) {
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) await task(items[next++]);
    }),
  );
}

/** The median of a list of numbers. */
export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** A VPC, a subnet and a security group in moto, for the instances a bench launches. */
export async function prepareNetwork(ec2) {
  const vpc = await ec2.send(new CreateVpcCommand({ CidrBlock: "10.0.0.0/16" }));
  const subnet = await ec2.send(
    new CreateSubnetCommand({ VpcId: vpc.Vpc.VpcId, CidrBlock: "10.0.0.0/16" }),
  );
  const sg = await ec2.send(
    new CreateSecurityGroupCommand({
      VpcId: vpc.Vpc.VpcId,
      GroupName: "bench",
      Description: "bench",
    }),
  );
  return { subnetId: subnet.Subnet.SubnetId, securityGroupId: sg.GroupId };
}

/**
 * Launches one instance of cluster `bench` as the provider does: one RunInstances per instance
 * (one reservation per Pod: moto's MaxResults counts reservations, EC2's counts instances; this
 * makes both the same), the host profile (the provider adopts only instances that prove Nebula
 * launched them) and the node, Pod UID and Pod tags.
 */
export function launchTagged(ec2, subnetId, { node, podUid, pod }) {
  return ec2.send(
    new RunInstancesCommand({
      ImageId: "ami-0a1b2c3d",
      InstanceType: "t3.micro",
      MinCount: 1,
      MaxCount: 1,
      SubnetId: subnetId,
      IamInstanceProfile: { Name: "nebula-host" },
      TagSpecifications: [
        {
          ResourceType: "instance",
          Tags: [
            { Key: "nebula:cluster", Value: "bench" },
            { Key: "nebula:node", Value: node },
            { Key: "nebula:pod-uid", Value: podUid },
            { Key: "nebula:pod", Value: pod },
          ],
        },
      ],
    }),
  );
}
