import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import { MAX_USER_DATA_BYTES as USER_DATA_LIMIT } from "@nebula/userdata";
import type { ProviderConfig } from "./config.js";
import { ProviderError } from "./errors.js";
import type { CapacityType, PodFacts } from "./pod.js";
import { launchTags } from "./tags.js";

/** EC2's limit on user-data, in bytes, before base64 (the value `@nebula/userdata` defines). */
export const MAX_USER_DATA_BYTES: typeof USER_DATA_LIMIT = USER_DATA_LIMIT;

/** Everything a launch request is built from. */
export interface LaunchInput {
  /** The Pod, as {@link podFacts} read it. */
  readonly pod: PodFacts;
  /** The instance type ({@link resolveInstanceType}). */
  readonly instanceType: string;
  /**
   * The user-data: as `@nebula/userdata`'s `renderUserData` gives it (`{ userData: base64, bytes }`),
   * or a script / bytes not yet base64-encoded.
   */
  readonly userData: string | Uint8Array | { readonly userData: string; readonly bytes: number };
  /** The provider configuration. */
  readonly config: ProviderConfig;
  /** The subnet (default: {@link pickSubnet} of the Pod UID). */
  readonly subnetId?: string;
  /** The `ClientToken` (default: the Pod UID). */
  readonly clientToken?: string;
  /** How the instance is bought (default On-Demand). */
  readonly capacityType?: CapacityType;
}

/**
 * Builds the `RunInstances` request for a Pod (the launch contract: docs/contracts.md#launch). Pure.
 *
 * - `ClientToken` = the Pod UID: EC2 answers a repeated launch with the instance it already
 *   started, so a retry or a crash between launch and bookkeeping never starts a second one.
 * - Tags at creation (`TagSpecifications`) on the instance, its volumes and its network
 *   interface: identity tags, `Name`, the Pod labels named by `podLabelTags`, the configured tags.
 * - `InstanceInitiatedShutdownBehavior: "stop"`: the host powers off after its final report; the
 *   provider terminates once it has read it. A Spot placement (`capacityType`) asks for a one-time
 *   Spot instance, which cannot stop: its power-off terminates it.
 * - `ImageId`: `acceleratedImageId` for a Pod that requests GPUs (when set), else `imageId`.
 * - IMDSv2 required, hop limit from the configuration (1 by default), instance tags in metadata
 *   enabled (the host reads its identity there).
 * - The subnet is chosen from the configured list by a hash of the Pod UID (stable across retries,
 *   which the idempotency token requires: same token, same parameters).
 *
 * Throws {@link ProviderError} `InvalidPodSpec` when the user-data exceeds 16 KiB.
 */
export function buildRunInstancesInput(input: LaunchInput): RunInstancesCommandInput {
  const { pod, config, instanceType } = input;
  const raw = input.userData;
  const [base64, bytes] =
    typeof raw === "string"
      ? [Buffer.from(raw, "utf8").toString("base64"), Buffer.byteLength(raw, "utf8")]
      : raw instanceof Uint8Array
        ? [Buffer.from(raw).toString("base64"), raw.byteLength]
        : [raw.userData, raw.bytes];
  if (bytes > MAX_USER_DATA_BYTES) {
    throw new ProviderError(
      "InvalidPodSpec",
      `pod ${pod.key}: spec: the rendered user-data is ${bytes} bytes, over EC2's limit of ${MAX_USER_DATA_BYTES}`,
    );
  }
  const tags = launchTags(
    { cluster: config.clusterName, node: config.nodeName, podUid: pod.uid, pod: pod.key },
    { ...labelTags(pod.labels, config.podLabelTags), ...config.tags },
  );
  return {
    ClientToken: input.clientToken ?? pod.uid,
    // A Pod that asks for GPUs gets the accelerated image (the driver and toolkit) when one is set.
    ImageId: pod.requests.gpus > 0 ? (config.acceleratedImageId ?? config.imageId) : config.imageId,
    InstanceType: instanceType as RunInstancesCommandInput["InstanceType"],
    MinCount: 1,
    MaxCount: 1,
    SubnetId: input.subnetId ?? pickSubnet(pod.uid, config.subnetIds),
    UserData: base64,
    // A one-time Spot instance cannot stop: its power-off after the final report terminates it
    // (its tags, the report, stay readable for about an hour), and EC2 may reclaim it first.
    ...(input.capacityType === "spot"
      ? {
          InstanceMarketOptions: {
            MarketType: "spot" as const,
            SpotOptions: {
              SpotInstanceType: "one-time" as const,
              InstanceInterruptionBehavior: "terminate" as const,
            },
          },
          InstanceInitiatedShutdownBehavior: "terminate" as const,
        }
      : { InstanceInitiatedShutdownBehavior: "stop" as const }),
    ...hostLaunchSettings(config, tags),
  };
}

/**
 * What every Nebula host is launched with, a Pod's or a warm-pool host: the security groups, the
 * host profile, IMDSv2 with instance-metadata tags, and `tags` on the instance, its volumes and
 * its network interface (cost allocation).
 */
export function hostLaunchSettings(
  config: ProviderConfig,
  tags: Array<{ Key: string; Value: string }>,
): Pick<
  RunInstancesCommandInput,
  "SecurityGroupIds" | "IamInstanceProfile" | "MetadataOptions" | "TagSpecifications"
> {
  return {
    SecurityGroupIds: [...config.securityGroupIds],
    IamInstanceProfile: config.instanceProfile.startsWith("arn:")
      ? { Arn: config.instanceProfile }
      : { Name: config.instanceProfile },
    MetadataOptions: {
      HttpTokens: "required",
      HttpEndpoint: "enabled",
      HttpPutResponseHopLimit: config.metadataHopLimit,
      InstanceMetadataTags: "enabled",
    },
    TagSpecifications: (["instance", "volume", "network-interface"] as const).map(
      (ResourceType) => ({ ResourceType, Tags: tags }),
    ),
  };
}

/**
 * The tags a Pod's labels give through `podLabelTags` (label key → tag key); labels the Pod does
 * not carry give none. Values are cut to EC2's 256 characters. Pure.
 */
function labelTags(
  labels: Readonly<Record<string, string>>,
  mapping: Readonly<Record<string, string>>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [label, tag] of Object.entries(mapping)) {
    const value = labels[label];
    if (value !== undefined) out[tag] = value.slice(0, 256);
  }
  return out;
}

/** Picks a subnet by a hash of the Pod UID: stable for one Pod, spread across Pods. */
export function pickSubnet(podUid: string, subnets: readonly string[]): string {
  const digest = createHash("sha256").update(podUid).digest();
  const index = digest.readUInt32BE(0) % subnets.length;
  const subnet = subnets[index] ?? subnets[0];
  if (subnet === undefined) {
    throw new ProviderError("InvalidConfiguration", "no subnet is configured");
  }
  return subnet;
}
