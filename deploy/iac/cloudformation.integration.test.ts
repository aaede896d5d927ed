/**
 * The CloudFormation example (iac/cloudformation/nebula-iam.yaml), deployed for real: `CreateStack`
 * into moto's CloudFormation through the AWS SDK, exactly as `aws cloudformation deploy` would
 * send it, then IAM, SQS and EventBridge read back what the stack made:
 *
 * - every trust and permission policy equals, as parsed JSON, the policy file the repository
 *   ships (deploy/vnode/iam/*.json, packages/provider/policies/controller.json,
 *   packages/userdata/policies/instance-*.json) with its placeholders filled, so the template
 *   cannot drift from those files: a statement changed, added or renamed in either fails here;
 * - the instance profile holds the host role; the event channel's queue, dead-letter queue and rule
 *   are the ones docs/operating.md describes, and an EC2 event put on the default bus arrives;
 * - `DeleteStack` leaves no role, instance profile, queue or rule behind;
 * - a stack without the cluster name is refused before anything is created.
 *
 * What moto 5.2.5's CloudFormation does not do, and how the template and this file live with it:
 * it skips `AWS::SQS::QueuePolicy` (the stack completes without it, so the queue policy is not
 * read back here); it checks no parameter constraint (`AllowedPattern`, `MinLength`,
 * `AllowedValues`) and no `Rules`, only that a parameter without a default has a value; it leaves
 * a `CommaDelimitedList` default unsplit (every list parameter is passed here); and it turns
 * `AWS::NoValue` inside a list into `null`, which its IAM then refuses as a malformed policy (the
 * template has no `AWS::NoValue` in a list).
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import {
  CloudFormationClient,
  CreateStackCommand,
  DeleteStackCommand,
  DescribeStackEventsCommand,
  DescribeStacksCommand,
  type Stack,
  ValidateTemplateCommand,
} from "@aws-sdk/client-cloudformation";
import {
  DescribeRuleCommand,
  EventBridgeClient,
  ListTargetsByRuleCommand,
} from "@aws-sdk/client-eventbridge";
import {
  GetInstanceProfileCommand,
  GetRoleCommand,
  GetRolePolicyCommand,
  IAMClient,
  ListAttachedRolePoliciesCommand,
  ListRolePoliciesCommand,
} from "@aws-sdk/client-iam";
import {
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ReceiveMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { EC2_EVENT_PATTERN, MOTO_CREDENTIALS, putEc2Events } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const TEMPLATE = readFileSync(new URL("./cloudformation/nebula-iam.yaml", import.meta.url), "utf8");
const REPO = new URL("../../", import.meta.url);

/** How long a stack may take to settle; moto creates and deletes at once, AWS takes minutes. */
const STACK_DEADLINE_MS = 60_000;

/** This run's own names: the shared moto already holds a `nebula-host` role and profile. */
const RUN = randomBytes(4).toString("hex");

const { moto } = useTestPeers();
const aws = { endpoint: moto.endpoint, region: moto.region, credentials: { ...MOTO_CREDENTIALS } };
const cloudformation = new CloudFormationClient(aws);
const iam = new IAMClient(aws);
const sqs = new SQSClient(aws);
const eventbridge = new EventBridgeClient(aws);

/** Every stack this file created, deleted in `afterAll` if a test did not get that far. */
const created: string[] = [];

afterAll(async () => {
  for (const stackId of created) {
    await cloudformation
      .send(new DeleteStackCommand({ StackName: stackId }))
      .catch(() => undefined);
  }
  for (const client of [cloudformation, iam, sqs, eventbridge]) client.destroy();
});

interface Statement {
  readonly Sid?: string;
  readonly [key: string]: unknown;
}

interface PolicyDocument {
  readonly Version: string;
  readonly Statement: readonly Statement[];
}

/** A policy file of the repository, by its path from the repository's root. */
function policyFile(path: string): PolicyDocument {
  return JSON.parse(readFileSync(new URL(path, REPO), "utf8")) as PolicyDocument;
}

/** The values of a policy file's `${Name}` placeholders; a list repeats the line per value. */
type Placeholders = Readonly<Record<string, string | readonly string[]>>;

/** A placeholder: capitalised, unlike IAM's own policy variables (`${aws:…}`, `${ec2:…}`). */
const PLACEHOLDER = /\$\{([A-Z][A-Za-z0-9]*)\}/g;

/**
 * `text` with its placeholders filled: one string per value of a list-valued placeholder, the way
 * deploy/vnode/iam/README.md says to repeat a resource line per subnet, security group and
 * instance type. A placeholder without a value throws, so a new one in a policy file fails this
 * test until the template and the test fill it.
 */
function fill(text: string, values: Placeholders): string[] {
  let lines = [text];
  for (const name of new Set(Array.from(text.matchAll(PLACEHOLDER), (m) => m[1] ?? ""))) {
    const value = values[name];
    if (value === undefined) throw new Error(`no value for \${${name}} in "${text}"`);
    const each = typeof value === "string" ? [value] : value;
    lines = lines.flatMap((line) => each.map((v) => line.replaceAll(`\${${name}}`, () => v)));
  }
  return lines;
}

/** A policy file's JSON with its placeholders filled (see {@link fill}), keys included. */
function render<T>(node: T, values: Placeholders): T {
  const one = (text: string): string => {
    const [only, ...more] = fill(text, values);
    if (only === undefined || more.length > 0) {
      throw new Error(`"${text}" is not inside a list, so it cannot take several values`);
    }
    return only;
  };
  if (typeof node === "string") return one(node) as T;
  if (Array.isArray(node)) {
    return node.flatMap((e: unknown) =>
      typeof e === "string" ? fill(e, values) : [render(e, values)],
    ) as T;
  }
  if (typeof node === "object" && node !== null) {
    return Object.fromEntries(
      Object.entries(node).map(([key, value]) => [one(key), render(value, values)]),
    ) as T;
  }
  return node;
}

/** `document` with only the statements `keep` accepts (the template's split of controller.json). */
function only(document: PolicyDocument, keep: (sid: string) => boolean): PolicyDocument {
  return { ...document, Statement: document.Statement.filter((s) => keep(s.Sid ?? "")) };
}

/** IAM answers policy documents URL-encoded (RFC 3986), as JSON text. */
function parsePolicy(text: string | undefined): unknown {
  if (text === undefined) throw new Error("IAM answered no policy document");
  return JSON.parse(decodeURIComponent(text));
}

/** A role's trust policy, its inline policies by name, and the ARNs of its managed policies. */
async function readRole(roleName: string) {
  const { Role } = await iam.send(new GetRoleCommand({ RoleName: roleName }));
  const { PolicyNames = [] } = await iam.send(new ListRolePoliciesCommand({ RoleName: roleName }));
  const inline: Record<string, unknown> = {};
  for (const policyName of PolicyNames) {
    const { PolicyDocument } = await iam.send(
      new GetRolePolicyCommand({ RoleName: roleName, PolicyName: policyName }),
    );
    inline[policyName] = parsePolicy(PolicyDocument);
  }
  const { AttachedPolicies = [] } = await iam.send(
    new ListAttachedRolePoliciesCommand({ RoleName: roleName }),
  );
  return {
    trust: parsePolicy(Role?.AssumeRolePolicyDocument),
    inline,
    managed: AttachedPolicies.map((p) => p.PolicyArn),
  };
}

/** Waits, up to {@link STACK_DEADLINE_MS}, until the stack is no longer `*_IN_PROGRESS`. */
async function settled(stackId: string): Promise<Stack> {
  const deadline = Date.now() + STACK_DEADLINE_MS;
  for (;;) {
    const { Stacks } = await cloudformation.send(new DescribeStacksCommand({ StackName: stackId }));
    const stack = Stacks?.[0];
    const status = stack?.StackStatus ?? "";
    if (stack !== undefined && !status.endsWith("_IN_PROGRESS")) return stack;
    if (Date.now() > deadline) {
      throw new Error(`stack ${stackId} is still ${status} after ${STACK_DEADLINE_MS} ms`);
    }
    await sleep(250);
  }
}

/** Why a stack did not reach the status wanted: the reasons its events give. */
async function reasons(stackId: string): Promise<string> {
  const { StackEvents = [] } = await cloudformation.send(
    new DescribeStackEventsCommand({ StackName: stackId }),
  );
  return StackEvents.map(
    (e) => `${e.LogicalResourceId} ${e.ResourceStatus} ${e.ResourceStatusReason ?? ""}`,
  ).join("\n");
}

/** A created stack: its ID, its outputs by key, and the account it lives in. */
interface Deployed {
  readonly stackId: string;
  readonly outputs: Readonly<Record<string, string>>;
  readonly account: string;
}

/** `CreateStack` with the template read from disk, as `aws cloudformation deploy` does. */
async function createStack(name: string, parameters: Record<string, string>): Promise<Deployed> {
  const { StackId } = await cloudformation.send(
    new CreateStackCommand({
      StackName: name,
      TemplateBody: TEMPLATE,
      Capabilities: ["CAPABILITY_NAMED_IAM"],
      Parameters: Object.entries(parameters).map(([ParameterKey, ParameterValue]) => ({
        ParameterKey,
        ParameterValue,
      })),
    }),
  );
  if (StackId === undefined) throw new Error(`CreateStack ${name} answered no stack ID`);
  created.push(StackId);
  const stack = await settled(StackId);
  if (stack.StackStatus !== "CREATE_COMPLETE") {
    throw new Error(`stack ${name} is ${stack.StackStatus}:\n${await reasons(StackId)}`);
  }
  const account = /^arn:aws[a-z-]*:cloudformation:[^:]+:(\d{12}):/.exec(StackId)?.[1];
  if (account === undefined) throw new Error(`no account in the stack ID ${StackId}`);
  return {
    stackId: StackId,
    outputs: Object.fromEntries(
      (stack.Outputs ?? []).map((o) => [o.OutputKey ?? "", o.OutputValue ?? ""]),
    ),
    account,
  };
}

/** `DeleteStack`, then waits until the stack is `DELETE_COMPLETE`. */
async function deleteStack(stackId: string): Promise<void> {
  await cloudformation.send(new DeleteStackCommand({ StackName: stackId }));
  const stack = await settled(stackId);
  if (stack.StackStatus !== "DELETE_COMPLETE") {
    throw new Error(`stack ${stackId} is ${stack.StackStatus}:\n${await reasons(stackId)}`);
  }
}

/** The event channel's names for a cluster and virtual node (docs/operating.md). */
const queueName = (cluster: string, node = "nebula") => `nebula-${cluster}-${node}-events`;
const ruleName = (cluster: string, node = "nebula") => `nebula-${cluster}-${node}-ec2`;

/** Rejects the way IAM, SQS or EventBridge answer for something that does not exist. */
async function expectGone(what: Promise<unknown>, name: string): Promise<void> {
  await expect(what).rejects.toMatchObject({ name });
}

/** controller.json's statements the template puts in policies of their own (see the template). */
const OPTIONAL_CONTROLLER_SIDS = {
  "nebula-vnode-logs": "ReadContainerLogsOfItsLogGroup",
  "nebula-vnode-events": "ReceiveAndDeleteItsEventQueuesMessages",
} as const;
const optionalSids: readonly string[] = Object.values(OPTIONAL_CONTROLLER_SIDS);

describe("the CloudFormation template", () => {
  it("passes moto's ValidateTemplate, which refuses any cfn-lint finding", async () => {
    // moto answers the Description only (no Parameters, no Capabilities); a finding of cfn-lint
    // at any level would be a ValidationError instead.
    const answer = await cloudformation.send(
      new ValidateTemplateCommand({ TemplateBody: TEMPLATE }),
    );
    expect(answer.Description).toMatch(/^Nebula \(one EC2 instance per Kubernetes Pod\): /);
  });
});

describe("the stack with IRSA, a log group, the event channel and every subnet and security group", () => {
  const cluster = `iac-${RUN}`;
  const names = {
    controller: `nebula-iac-${RUN}-controller`,
    host: `nebula-iac-${RUN}-host`,
    profile: `nebula-iac-${RUN}-profile`,
  };
  const oidc = "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE";
  const launch = {
    // The host image, then the accelerated one (GPU Pods): a resource line each.
    ImageId: ["ami-0123456789abcdef0", "ami-0123456789abcdef1"],
    SubnetId: ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2", "subnet-0aaaaaaaaaaaaaaa3"],
    SecurityGroupId: ["sg-0bbbbbbbbbbbbbbb1", "sg-0bbbbbbbbbbbbbbb2"],
    InstanceType: ["m7i.large", "c7i.xlarge"],
  };
  const logGroup = `/nebula/${cluster}/containers`;
  let stack: Deployed;
  /** The placeholders every policy file of this stack uses. */
  let values: Placeholders;

  beforeAll(async () => {
    stack = await createStack(`nebula-iam-${RUN}-irsa`, {
      ClusterName: cluster,
      OidcProvider: oidc,
      ControllerRoleName: names.controller,
      HostRoleName: names.host,
      HostInstanceProfileName: names.profile,
      ImageId: launch.ImageId[0] ?? "",
      AcceleratedImageId: launch.ImageId[1] ?? "",
      SubnetId1: launch.SubnetId[0] ?? "",
      SubnetId2: launch.SubnetId[1] ?? "",
      SubnetId3: launch.SubnetId[2] ?? "",
      SecurityGroupId1: launch.SecurityGroupId[0] ?? "",
      SecurityGroupId2: launch.SecurityGroupId[1] ?? "",
      InstanceTypes: launch.InstanceType.join(","),
      MetadataHopLimit: "2",
      LogGroupName: logGroup,
      EventChannel: "true",
    });
    values = {
      ...launch,
      AccountId: stack.account,
      Region: moto.region,
      OidcProvider: oidc,
      ClusterName: cluster,
      HostRoleName: names.host,
      HostInstanceProfile: names.profile,
      MetadataHopLimit: "2",
      LogGroupName: logGroup,
      EventQueueName: queueName(cluster),
    };
  });

  it("outputs the roles, the instance profile, the queue and the rule the Helm values need", () => {
    const arn = (kind: string, name: string) => `arn:aws:iam::${stack.account}:${kind}/${name}`;
    expect(stack.outputs).toEqual({
      ControllerRoleArn: arn("role", names.controller),
      HostRoleArn: arn("role", names.host),
      HostInstanceProfileName: names.profile,
      HostInstanceProfileArn: arn("instance-profile", names.profile),
      EventQueueUrl: `https://sqs.${moto.region}.amazonaws.com/${stack.account}/${queueName(cluster)}`,
      EventQueueArn: `arn:aws:sqs:${moto.region}:${stack.account}:${queueName(cluster)}`,
      Ec2EventRuleArn: `arn:aws:events:${moto.region}:${stack.account}:rule/${ruleName(cluster)}`,
    });
  });

  it("gives the controller role controller-trust.json for the chart's ServiceAccount as its trust policy", async () => {
    const role = await readRole(names.controller);
    expect(role.trust).toEqual(
      render(policyFile("deploy/vnode/iam/controller-trust.json"), values),
    );
  });

  it("gives the controller role exactly controller.json's statements, a resource line per subnet and security group", async () => {
    const controller = render(policyFile("packages/provider/policies/controller.json"), values);
    const role = await readRole(names.controller);
    expect(role.managed).toEqual([]);
    // The three filters split the file's statements between them: together they are all of it.
    expect(role.inline).toEqual({
      "nebula-vnode": only(controller, (sid) => !optionalSids.includes(sid)),
      "nebula-vnode-logs": only(
        controller,
        (sid) => sid === OPTIONAL_CONTROLLER_SIDS["nebula-vnode-logs"],
      ),
      "nebula-vnode-events": only(
        controller,
        (sid) => sid === OPTIONAL_CONTROLLER_SIDS["nebula-vnode-events"],
      ),
    });
  });

  it("gives the host role instance-trust.json and exactly the report, Pod parameter, logs and doorbell policies", async () => {
    const file = (name: string) => render(policyFile(`packages/userdata/policies/${name}`), values);
    const role = await readRole(names.host);
    expect(role.trust).toEqual(file("instance-trust.json"));
    expect(role.managed).toEqual([]);
    expect(role.inline).toEqual({
      "nebula-report": file("instance-report-tags.json"),
      "nebula-pod-parameters": file("instance-pod-parameters.json"),
      "nebula-logs-metrics": file("instance-logs-metrics.json"),
      "nebula-doorbell": file("instance-doorbell.json"),
    });
  });

  it("puts the host role, and only it, in the instance profile the controller policy names", async () => {
    const { InstanceProfile } = await iam.send(
      new GetInstanceProfileCommand({ InstanceProfileName: names.profile }),
    );
    expect(InstanceProfile?.Arn).toBe(stack.outputs.HostInstanceProfileArn);
    expect(InstanceProfile?.Roles?.map((r) => r.RoleName)).toEqual([names.host]);
  });

  it("makes the event queue, its dead-letter queue and the rule that docs/operating.md describes", async () => {
    const queueUrl = stack.outputs.EventQueueUrl;
    const { Attributes: queue = {} } = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ["All"] }),
    );
    const { QueueUrl: dlqUrl } = await sqs.send(
      new GetQueueUrlCommand({ QueueName: `${queueName(cluster)}-dlq` }),
    );
    const { Attributes: dlq = {} } = await sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: dlqUrl,
        AttributeNames: ["QueueArn", "MessageRetentionPeriod"],
      }),
    );
    expect(queue).toMatchObject({
      VisibilityTimeout: "30",
      MessageRetentionPeriod: "3600",
      SqsManagedSseEnabled: "true",
    });
    expect(JSON.parse(queue.RedrivePolicy ?? "{}")).toEqual({
      deadLetterTargetArn: dlq.QueueArn,
      maxReceiveCount: 5,
    });
    expect(dlq.MessageRetentionPeriod).toBe("345600");

    const rule = await eventbridge.send(new DescribeRuleCommand({ Name: ruleName(cluster) }));
    expect(rule).toMatchObject({ State: "ENABLED", EventBusName: "default" });
    // The same pattern as the test peers' rule, which the vnode's event channel tests run on.
    expect(JSON.parse(rule.EventPattern ?? "{}")).toEqual(EC2_EVENT_PATTERN);
    const { Targets } = await eventbridge.send(
      new ListTargetsByRuleCommand({ Rule: ruleName(cluster) }),
    );
    expect(Targets?.map((t) => ({ Id: t.Id, Arn: t.Arn }))).toEqual([
      { Id: "queue", Arn: stack.outputs.EventQueueArn },
    ]);
  });

  it("delivers an EC2 state-change event from the default bus to the stack's queue", async () => {
    const instanceId = `i-0${randomBytes(8).toString("hex")}`;
    await putEc2Events(moto, [{ kind: "state", instanceId, state: "stopped" }]);
    const deadline = Date.now() + 10_000;
    let found: unknown;
    while (found === undefined && Date.now() < deadline) {
      const { Messages = [] } = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: stack.outputs.EventQueueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
        }),
      );
      found = Messages.map(
        (m) => JSON.parse(m.Body ?? "{}") as { detail?: Record<string, string> },
      ).find((event) => event.detail?.["instance-id"] === instanceId);
    }
    expect(found).toMatchObject({
      source: "aws.ec2",
      "detail-type": "EC2 Instance State-change Notification",
      detail: { "instance-id": instanceId, state: "stopped" },
    });
  });

  it("leaves no role, instance profile, queue or rule behind once deleted", async () => {
    await deleteStack(stack.stackId);
    await expectGone(
      iam.send(new GetRoleCommand({ RoleName: names.controller })),
      "NoSuchEntityException",
    );
    await expectGone(
      iam.send(new GetRoleCommand({ RoleName: names.host })),
      "NoSuchEntityException",
    );
    await expectGone(
      iam.send(new GetInstanceProfileCommand({ InstanceProfileName: names.profile })),
      "NoSuchEntityException",
    );
    for (const name of [queueName(cluster), `${queueName(cluster)}-dlq`]) {
      await expectGone(sqs.send(new GetQueueUrlCommand({ QueueName: name })), "QueueDoesNotExist");
    }
    await expectGone(
      eventbridge.send(new DescribeRuleCommand({ Name: ruleName(cluster) })),
      "ResourceNotFoundException",
    );
  });
});

describe("the stack with EKS Pod Identity, one subnet and security group, no log group and no event channel", () => {
  const cluster = `iac-${RUN}-pi`;
  const names = {
    controller: `nebula-iac-${RUN}-pi-controller`,
    host: `nebula-iac-${RUN}-pi-host`,
    profile: `nebula-iac-${RUN}-pi-profile`,
  };
  const launch = {
    ImageId: "ami-0123456789abcdef0",
    SubnetId: "subnet-0ccccccccccccccc1",
    SecurityGroupId: "sg-0ddddddddddddddd1",
    InstanceType: "m7i.large",
  };
  let stack: Deployed;
  let values: Placeholders;

  beforeAll(async () => {
    // Everything left at its default but the names this run needs and the launch values, which
    // have none. InstanceTypes is passed although its default is the same: moto leaves a
    // CommaDelimitedList default as one string where CloudFormation makes it a list.
    stack = await createStack(`nebula-iam-${RUN}-pod-identity`, {
      ClusterName: cluster,
      ControllerIdentity: "pod-identity",
      ControllerRoleName: names.controller,
      HostRoleName: names.host,
      HostInstanceProfileName: names.profile,
      ImageId: launch.ImageId,
      SubnetId1: launch.SubnetId,
      SecurityGroupId1: launch.SecurityGroupId,
      InstanceTypes: launch.InstanceType,
    });
    values = {
      ...launch,
      AccountId: stack.account,
      Region: moto.region,
      // EksClusterName is left empty: the template uses ClusterName.
      EksClusterName: cluster,
      ClusterName: cluster,
      HostRoleName: names.host,
      HostInstanceProfile: names.profile,
      MetadataHopLimit: "1",
    };
  });

  it("gives the controller role controller-trust-pod-identity.json for the EKS cluster as its trust policy", async () => {
    const role = await readRole(names.controller);
    expect(role.trust).toEqual(
      render(policyFile("deploy/vnode/iam/controller-trust-pod-identity.json"), values),
    );
  });

  it("gives the controller role controller.json without its log and queue statements", async () => {
    const controller = policyFile("packages/provider/policies/controller.json");
    const role = await readRole(names.controller);
    expect(role.inline).toEqual({
      "nebula-vnode": render(
        only(controller, (sid) => !optionalSids.includes(sid)),
        values,
      ),
    });
  });

  it("gives the host role only the report and Pod parameter policies, and makes no queue or rule", async () => {
    const file = (name: string) => render(policyFile(`packages/userdata/policies/${name}`), values);
    const role = await readRole(names.host);
    expect(role.trust).toEqual(file("instance-trust.json"));
    expect(role.inline).toEqual({
      "nebula-report": file("instance-report-tags.json"),
      "nebula-pod-parameters": file("instance-pod-parameters.json"),
    });
    expect(Object.keys(stack.outputs).sort()).toEqual([
      "ControllerRoleArn",
      "HostInstanceProfileArn",
      "HostInstanceProfileName",
      "HostRoleArn",
    ]);
    await expectGone(
      sqs.send(new GetQueueUrlCommand({ QueueName: queueName(cluster) })),
      "QueueDoesNotExist",
    );
    await expectGone(
      eventbridge.send(new DescribeRuleCommand({ Name: ruleName(cluster) })),
      "ResourceNotFoundException",
    );
  });

  it("leaves no role or instance profile behind once deleted", async () => {
    await deleteStack(stack.stackId);
    for (const roleName of [names.controller, names.host]) {
      await expectGone(
        iam.send(new GetRoleCommand({ RoleName: roleName })),
        "NoSuchEntityException",
      );
    }
    await expectGone(
      iam.send(new GetInstanceProfileCommand({ InstanceProfileName: names.profile })),
      "NoSuchEntityException",
    );
  });
});

describe("a stack without the values it needs", () => {
  it("is refused with a ValidationError naming ClusterName, and nothing is created", async () => {
    const name = `nebula-iam-${RUN}-no-cluster`;
    const controllerRole = `nebula-iac-${RUN}-refused`;
    const refused = cloudformation.send(
      new CreateStackCommand({
        StackName: name,
        TemplateBody: TEMPLATE,
        Capabilities: ["CAPABILITY_NAMED_IAM"],
        Parameters: [
          { ParameterKey: "ControllerRoleName", ParameterValue: controllerRole },
          { ParameterKey: "OidcProvider", ParameterValue: "oidc.example.com/id/1" },
          { ParameterKey: "ImageId", ParameterValue: "ami-0123456789abcdef0" },
          { ParameterKey: "SubnetId1", ParameterValue: "subnet-0aaaaaaaaaaaaaaa1" },
          { ParameterKey: "SecurityGroupId1", ParameterValue: "sg-0bbbbbbbbbbbbbbb1" },
        ],
      }),
    );
    await expect(refused).rejects.toMatchObject({
      name: "ValidationError",
      message: expect.stringContaining("ClusterName"),
    });
    await expectGone(
      cloudformation.send(new DescribeStacksCommand({ StackName: name })),
      "ValidationError",
    );
    await expectGone(
      iam.send(new GetRoleCommand({ RoleName: controllerRole })),
      "NoSuchEntityException",
    );
  });
});
