import {
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateTagsCommand,
  CreateVpcCommand,
  DescribeInstancesCommand,
  type EC2Client,
  type Instance,
} from "@aws-sdk/client-ec2";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { type ExitReport, encodeReportTags } from "@nebula/state-mapping";
import { MOTO_CREDENTIALS, type Moto } from "@nebula/test-peers";
import type { PodStatusChange } from "@nebula/virtual-node";
import type { ProviderConfigInput } from "../config.js";

/** Network objects every test launches into. */
export interface MotoNetwork {
  readonly subnetId: string;
  readonly securityGroupId: string;
}

/**
 * Points the SDK's default credential chain at moto's dummy credentials (the provider builds its
 * own client from its configuration, as in production) and creates a VPC, a /16 subnet and a
 * security group.
 */
export async function prepareMoto(moto: Moto): Promise<MotoNetwork> {
  process.env.AWS_ACCESS_KEY_ID = MOTO_CREDENTIALS.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = MOTO_CREDENTIALS.secretAccessKey;
  const ec2 = moto.ec2();
  const vpc = await ec2.send(new CreateVpcCommand({ CidrBlock: "10.0.0.0/16" }));
  const vpcId = vpc.Vpc?.VpcId ?? "";
  const subnet = await ec2.send(
    // A fixed zone: moto picks one at random otherwise, and some (us-east-1e) offer few types.
    new CreateSubnetCommand({
      VpcId: vpcId,
      CidrBlock: "10.0.0.0/16",
      AvailabilityZone: `${moto.region}a`,
    }),
  );
  const sg = await ec2.send(
    new CreateSecurityGroupCommand({ VpcId: vpcId, GroupName: "nebula", Description: "nebula" }),
  );
  ec2.destroy();
  return { subnetId: subnet.Subnet?.SubnetId ?? "", securityGroupId: sg.GroupId ?? "" };
}

/** A provider configuration for one test: its own node name, so tests never see each other. */
export function motoConfig(
  moto: Moto,
  network: MotoNetwork,
  nodeName: string,
  overrides: Partial<ProviderConfigInput> = {},
): ProviderConfigInput {
  return {
    clusterName: "it",
    nodeName,
    region: moto.region,
    subnetIds: [network.subnetId],
    securityGroupIds: [network.securityGroupId],
    imageId: "ami-0a1b2c3d",
    instanceProfile: "nebula-host",
    instanceTypes: { default: "t3.micro" },
    endpoint: moto.endpoint,
    batchWindowMs: 50,
    // moto does not report an instance's ClientToken; ownership is proven by tags and profile.
    ownership: { clientToken: false },
    // The tests written for the user-data delivery keep it; the Parameter Store ones say so.
    podDelivery: "user-data",
    ...overrides,
  };
}

/** Every instance tagged for this node, whatever its state (one unfiltered-by-state listing). */
export async function nodeInstances(ec2: EC2Client, nodeName: string): Promise<Instance[]> {
  const out: Instance[] = [];
  let token: string | undefined;
  do {
    const page = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: "tag:nebula:node", Values: [nodeName] }],
        MaxResults: 1000,
        ...(token ? { NextToken: token } : {}),
      }),
    );
    for (const r of page.Reservations ?? []) out.push(...(r.Instances ?? []));
    token = page.NextToken || undefined;
  } while (token);
  return out;
}

/** Collects status changes by Pod name. */
export function statusLog(): {
  readonly listener: (change: PodStatusChange) => void;
  readonly last: (name: string) => V1PodStatus | undefined;
  readonly all: (name: string) => V1PodStatus[];
} {
  const byName = new Map<string, V1PodStatus[]>();
  return {
    listener: ({ pod, status }: { pod: V1Pod; status: V1PodStatus }) => {
      const name = pod.metadata?.name ?? "?";
      byName.set(name, [...(byName.get(name) ?? []), status]);
    },
    last: (name) => byName.get(name)?.at(-1),
    all: (name) => byName.get(name) ?? [],
  };
}

/** A settable clock for the provider. */
export function fakeClock(start = Date.now()): {
  now: () => number;
  advance: (ms: number) => void;
} {
  let t = start;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

/** Writes `report` on the instance's tags, as its host supervisor does (the exit-report keys). */
export async function writeReport(
  ec2: EC2Client,
  instanceId: string,
  report: ExitReport,
): Promise<void> {
  const tags = Object.entries(encodeReportTags(report)).map(([Key, Value]) => ({ Key, Value }));
  await ec2.send(new CreateTagsCommand({ Resources: [instanceId], Tags: tags }));
}
