/**
 * Parameter Store I/O of the `parameters` delivery: the SSM `SecureString` parameters that carry a
 * Pod's rendered spec and its ConfigMap and Secret values (named by `@nebula/userdata`), written
 * before the Pod's instance is launched, tagged with that instance's ARN once it exists (the host
 * role may read only parameters tagged with its own ARN), deleted when the Pod's teardown releases
 * it, and listed for the leak collector. Thin: every call's error goes through
 * {@link toProviderError}; the SDK client's retry mode does the rest.
 */
import { createHash } from "node:crypto";
import {
  AddTagsToResourceCommand,
  DeleteParametersCommand,
  DescribeParametersCommand,
  type DescribeParametersCommandOutput,
  PutParameterCommand,
  type SSMClient,
} from "@aws-sdk/client-ssm";
import type { AuxiliaryObject } from "@nebula/teardown";
import {
  clusterSegment,
  PARAMETER_INSTANCE_TAG,
  POD_PARAMETER_ROOT,
  type PodParameter,
  podParameterNames,
  podParameterPrefix,
  podUidOfParameter,
} from "@nebula/userdata";
import { toProviderError } from "./errors.js";
import { CLUSTER_TAG, POD_UID_TAG } from "./tags.js";

/**
 * The KMS key a cluster's Pod parameters are encrypted with unless `parameterKeyId` says
 * otherwise: `alias/nebula/<cluster>/pod-parameters`, the customer managed key the operator
 * creates with `policies/pod-parameters-key-policy.json`. A cluster name with characters an alias
 * cannot hold (anything but `[A-Za-z0-9_-]`) is replaced by `c-` and 16 hex digits of its SHA-256.
 */
export function defaultParameterKeyId(cluster: string): string {
  const segment = /^[A-Za-z0-9_-]{1,128}$/.test(cluster)
    ? cluster
    : `c-${createHash("sha256").update(cluster).digest("hex").slice(0, 16)}`;
  return `alias/nebula/${segment}/pod-parameters`;
}

/** Names per `DeleteParameters` call (the API's limit). */
const DELETE_PARAMETERS_BATCH = 10;
/** `MaxResults` of each `DescribeParameters` page (the API's limit). */
const DESCRIBE_PARAMETERS_PAGE = 50;

/**
 * How a Pod's parameters appear among its teardown's auxiliary objects (`releasing` phase): this
 * API version and kind, named by the Pod UID (`Ec2PodProvider.auxiliariesOf`). The teardown's
 * `releasing` phase hands it back to `Ec2PodProvider.releaseAuxiliary`, which deletes all of the
 * Pod's parameter names.
 */
const POD_PARAMETERS_AUXILIARY = {
  apiVersion: "ssm.nebula.dev/v1",
  kind: "PodParameters",
} as const;

/** The auxiliary object that stands for a Pod's parameters in its teardown. Pure. */
export function podParametersAuxiliary(podUid: string): AuxiliaryObject {
  return { ...POD_PARAMETERS_AUXILIARY, name: podUid };
}

/** True for the auxiliary object of {@link podParametersAuxiliary}. Pure. */
export function isPodParametersAuxiliary(object: AuxiliaryObject): boolean {
  return (
    object.apiVersion === POD_PARAMETERS_AUXILIARY.apiVersion &&
    object.kind === POD_PARAMETERS_AUXILIARY.kind
  );
}

/** One Pod parameter as the listing saw it. */
export interface ListedParameter {
  /** Full name, `/nebula/<cluster>/pods/<pod-uid>/<i>`. */
  readonly name: string;
  /** The Pod UID in its name. */
  readonly podUid: string;
  /** `LastModifiedDate`, ms since the epoch, when SSM gave one. */
  readonly lastModified: number | undefined;
}

/** `/nebula/<cluster>/pods`: the path under which every Pod parameter of the cluster lives. */
export function clusterPodsPath(cluster: string): string {
  return `${POD_PARAMETER_ROOT}/${clusterSegment(cluster)}/pods`;
}

/** The AWS partition of a Region (`aws`, `aws-cn`, `aws-us-gov`). Pure. */
export function partitionOf(region: string): string {
  if (region.startsWith("cn-")) return "aws-cn";
  if (region.startsWith("us-gov-")) return "aws-us-gov";
  return "aws";
}

/** `arn:<partition>:ec2:<region>:<account>:instance/<id>`: what the host role's policy compares. Pure. */
export function instanceArn(region: string, accountId: string, instanceId: string): string {
  return `arn:${partitionOf(region)}:ec2:${region}:${accountId}:instance/${instanceId}`;
}

/** The account ID in an ARN (`arn:aws:iam::123456789012:instance-profile/x`), if it has one. Pure. */
export function accountOfArn(arn: string | undefined): string | undefined {
  if (arn === undefined) return undefined;
  const account = arn.split(":")[4];
  return account !== undefined && /^\d{12}$/.test(account) ? account : undefined;
}

async function send<T>(call: () => Promise<T>, action: string): Promise<T> {
  try {
    return await call();
  } catch (error) {
    throw toProviderError(error, action);
  }
}

/**
 * What to do when the key is the reason a write failed: it does not exist (`InvalidKeyId`) or
 * the controller may not use it (an access denial naming KMS). Empty otherwise.
 */
function keyHint(error: unknown, keyId: string): string {
  const name = (error as { name?: unknown } | undefined)?.name;
  const message = error instanceof Error ? error.message : "";
  const aboutKey =
    name === "InvalidKeyId" ||
    (typeof name === "string" && name.startsWith("AccessDenied") && /kms/i.test(message));
  return aboutKey
    ? ` with KMS key ${keyId}: create the key with @nebula/provider's policies/pod-parameters-key-policy.json as its key policy and that alias (docs/security.md, section 5), or set parameterKeyId to a key the controller may encrypt with`
    : "";
}

/**
 * Writes a Pod's parameters: `PutParameter` (`SecureString`, Standard tier, `Overwrite`, so a
 * retry or a re-render replaces them), then `AddTagsToResource` with `nebula:cluster` and
 * `nebula:pod-uid` (tags cannot be passed together with `Overwrite`). Idempotent. Throws a
 * classified {@link ProviderError}; some parameters may then be written (the teardown and the leak
 * collector delete them).
 */
export async function writePodParameters(
  ssm: SSMClient,
  input: {
    readonly cluster: string;
    readonly podUid: string;
    readonly parameters: readonly PodParameter[];
    readonly keyId: string;
  },
): Promise<void> {
  const tags = [
    { Key: CLUSTER_TAG, Value: input.cluster },
    { Key: POD_UID_TAG, Value: input.podUid },
  ];
  await Promise.all(
    input.parameters.map(async (parameter) => {
      try {
        await ssm.send(
          new PutParameterCommand({
            Name: parameter.name,
            Value: parameter.value,
            Type: "SecureString",
            KeyId: input.keyId,
            Tier: "Standard",
            Overwrite: true,
          }),
        );
      } catch (error) {
        throw toProviderError(
          error,
          `PutParameter ${parameter.name}${keyHint(error, input.keyId)}`,
        );
      }
      await send(
        () =>
          ssm.send(
            new AddTagsToResourceCommand({
              ResourceType: "Parameter",
              ResourceId: parameter.name,
              Tags: tags,
            }),
          ),
        `AddTagsToResource ${parameter.name}`,
      );
    }),
  );
}

/**
 * Writes the host supervisor's parameters (`@nebula/userdata`'s `sharedParameters`: not secret,
 * type `String`, tagged `nebula:cluster`), creating each one and taking "already exists" as done:
 * their names carry the supervisor's SHA-256, so an existing one holds the same text. Throws a
 * classified {@link ProviderError}.
 */
export async function writeSharedParameters(
  ssm: SSMClient,
  input: { readonly cluster: string; readonly parameters: readonly PodParameter[] },
): Promise<void> {
  await Promise.all(
    input.parameters.map(async (parameter) => {
      try {
        await ssm.send(
          new PutParameterCommand({
            Name: parameter.name,
            Value: parameter.value,
            Type: "String",
            Tier: "Standard",
            Tags: [{ Key: CLUSTER_TAG, Value: input.cluster }],
          }),
        );
      } catch (error) {
        if ((error as { name?: string }).name === "ParameterAlreadyExists") return;
        throw toProviderError(error, `PutParameter ${parameter.name}`);
      }
    }),
  );
}

/**
 * Tags parameters with `nebula:instance-arn` (`PARAMETER_INSTANCE_TAG`): from then on the instance
 * (and only it) may read them. Idempotent; throws a classified {@link ProviderError} (`NotFound`
 * for a parameter that does not exist).
 */
export async function tagParametersWithInstance(
  ssm: SSMClient,
  names: readonly string[],
  arn: string,
): Promise<void> {
  await Promise.all(
    names.map((name) =>
      send(
        () =>
          ssm.send(
            new AddTagsToResourceCommand({
              ResourceType: "Parameter",
              ResourceId: name,
              Tags: [{ Key: PARAMETER_INSTANCE_TAG, Value: arn }],
            }),
          ),
        `AddTagsToResource ${name} (instance ARN)`,
      ),
    ),
  );
}

/**
 * Deletes parameters by name, {@link DELETE_PARAMETERS_BATCH} per `DeleteParameters` call. Names
 * that do not exist are not an error (SSM lists them as invalid). Returns the names deleted.
 */
export async function deleteParameters(
  ssm: SSMClient,
  names: readonly string[],
): Promise<string[]> {
  const deleted: string[] = [];
  for (let i = 0; i < names.length; i += DELETE_PARAMETERS_BATCH) {
    const batch = names.slice(i, i + DELETE_PARAMETERS_BATCH);
    const output = await send(
      () => ssm.send(new DeleteParametersCommand({ Names: batch })),
      `DeleteParameters (${batch.length} names)`,
    );
    deleted.push(...(output.DeletedParameters ?? []));
  }
  return deleted;
}

/**
 * Deletes every parameter a Pod can have (all `MAX_POD_PARAMETERS` names: one call), so it is
 * complete whatever was written and harmless when repeated. Returns the names deleted.
 */
export function deletePodParameters(
  ssm: SSMClient,
  cluster: string,
  podUid: string,
): Promise<string[]> {
  return deleteParameters(ssm, podParameterNames(cluster, podUid));
}

async function describeAll(
  ssm: SSMClient,
  path: string,
  option: "Recursive" | "OneLevel",
): Promise<{ name: string; lastModified: number | undefined }[]> {
  const out: { name: string; lastModified: number | undefined }[] = [];
  const seen = new Set<string>();
  let token: string | undefined;
  let page = 0;
  do {
    page++;
    const output: DescribeParametersCommandOutput = await send(
      () =>
        ssm.send(
          new DescribeParametersCommand({
            ParameterFilters: [{ Key: "Path", Option: option, Values: [path] }],
            MaxResults: DESCRIBE_PARAMETERS_PAGE,
            ...(token === undefined ? {} : { NextToken: token }),
          }),
        ),
      `DescribeParameters ${path} (page ${page})`,
    );
    for (const p of output.Parameters ?? []) {
      if (typeof p.Name !== "string") continue;
      const time = p.LastModifiedDate ? new Date(p.LastModifiedDate).getTime() : Number.NaN;
      out.push({ name: p.Name, lastModified: Number.isFinite(time) ? time : undefined });
    }
    token = output.NextToken || undefined;
    // A token seen twice would loop forever.
    if (token !== undefined) {
      if (seen.has(token)) break;
      seen.add(token);
    }
  } while (token !== undefined);
  return out;
}

/**
 * Every Pod parameter of the cluster (`DescribeParameters`, `Path` = `/nebula/<cluster>/pods`,
 * recursive, paginated): what the leak collector looks at. Names that are not Pod parameters of
 * this cluster are left out.
 */
export async function listClusterPodParameters(
  ssm: SSMClient,
  cluster: string,
): Promise<ListedParameter[]> {
  const out: ListedParameter[] = [];
  for (const p of await describeAll(ssm, clusterPodsPath(cluster), "Recursive")) {
    const podUid = podUidOfParameter(cluster, p.name);
    if (podUid !== undefined) out.push({ name: p.name, podUid, lastModified: p.lastModified });
  }
  return out;
}

/** The names of the parameters one Pod has now (one level under its prefix). */
export async function listPodParameterNames(
  ssm: SSMClient,
  cluster: string,
  podUid: string,
): Promise<string[]> {
  const prefix = podParameterPrefix(cluster, podUid);
  const listed = await describeAll(ssm, prefix.replace(/\/$/, ""), "OneLevel");
  return listed.map((p) => p.name).filter((name) => name.startsWith(prefix));
}
