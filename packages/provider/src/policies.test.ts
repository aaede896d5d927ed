// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${...} are the policy documents' placeholders, not templates
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { z } from "zod";

const Statement = z.object({
  Sid: z.string(),
  Effect: z.enum(["Allow", "Deny"]),
  Action: z.union([z.string(), z.array(z.string())]),
  Resource: z.union([z.string(), z.array(z.string())]),
  Condition: z.record(z.string(), z.record(z.string(), z.unknown())).optional(),
});
const Policy = z.object({ Version: z.literal("2012-10-17"), Statement: z.array(Statement) });

function load(name: string) {
  return Policy.parse(
    JSON.parse(readFileSync(new URL(`../policies/${name}`, import.meta.url), "utf8")),
  );
}
const list = (v: string | string[]) => (Array.isArray(v) ? v : [v]);

describe("the controller's IAM policy", () => {
  const policy = load("controller.json");
  const allows = (action: string) =>
    policy.Statement.filter((s) => s.Effect === "Allow" && list(s.Action).includes(action));

  it("pins RunInstances: image, subnet, security group, instance type, IMDSv2, host profile", () => {
    const run = allows("ec2:RunInstances");
    const resources = run.flatMap((s) => list(s.Resource));
    expect(resources).toContain("arn:aws:ec2:${Region}::image/${ImageId}");
    expect(resources).toContain("arn:aws:ec2:${Region}:${AccountId}:subnet/${SubnetId}");
    expect(resources).toContain(
      "arn:aws:ec2:${Region}:${AccountId}:security-group/${SecurityGroupId}",
    );
    expect(resources.some((r) => r.includes("image/*") || r.includes("subnet/*"))).toBe(false);
    // A Spot launch also creates a one-time Spot request (capacity: spot).
    expect(resources).toContain("arn:aws:ec2:${Region}:${AccountId}:spot-instances-request/*");
    const instance = run.find((s) => list(s.Resource).some((r) => r.includes(":instance/")));
    // StringLike, so an allowed family of the catalogue ("m7i.*") can be given as one entry.
    expect(instance?.Condition?.StringLike).toEqual({ "ec2:InstanceType": ["${InstanceType}"] });
    expect(instance?.Condition?.StringEquals).toMatchObject({
      "ec2:MetadataHttpTokens": "required",
      "aws:RequestTag/nebula:cluster": "${ClusterName}",
      "ec2:InstanceProfile": "arn:aws:iam::${AccountId}:instance-profile/${HostInstanceProfile}",
    });
    // The IMDS hop limit is pinned too: a launch cannot let bridged containers reach IMDS.
    expect(instance?.Condition?.NumericLessThanEquals).toEqual({
      "ec2:MetadataHttpPutResponseHopLimit": "${MetadataHopLimit}",
    });
  });

  it("passes only the host role, and mutates only its own cluster's instances", () => {
    const pass = allows("iam:PassRole");
    expect(pass.flatMap((s) => list(s.Resource))).toEqual([
      "arn:aws:iam::${AccountId}:role/${HostRoleName}",
    ]);
    for (const action of [
      "ec2:StopInstances",
      "ec2:TerminateInstances",
      "ec2:DeleteTags",
      "ec2:StartInstances",
      "ec2:ModifyInstanceAttribute",
    ]) {
      for (const s of allows(action)) {
        expect(s.Condition?.StringEquals).toMatchObject({
          "aws:ResourceTag/nebula:cluster": "${ClusterName}",
        });
      }
    }
    const star = policy.Statement.filter((s) => list(s.Resource).includes("*"));
    // GetMetricData has no resource-level permissions (nor a namespace condition key), nor has
    // the Price List's GetProducts (the On-Demand price at launch).
    expect(star.flatMap((s) => list(s.Action))).toEqual([
      "ec2:DescribeInstances",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeSubnets",
      "ec2:DescribeSpotPriceHistory",
      "ssm:DescribeParameters",
      "pricing:GetProducts",
      "cloudwatch:GetMetricData",
    ]);
  });

  it("starts, sets the user-data of and tags with a Pod only its own warm-pool hosts", () => {
    for (const action of ["ec2:StartInstances", "ec2:ModifyInstanceAttribute"]) {
      const statements = allows(action);
      expect(statements.length).toBeGreaterThan(0);
      for (const s of statements) {
        expect(s.Condition?.Null).toEqual({ "aws:ResourceTag/nebula:pool": "false" });
        expect(s.Condition?.StringEquals).toMatchObject({
          "ec2:InstanceProfile":
            "arn:aws:iam::${AccountId}:instance-profile/${HostInstanceProfile}",
        });
      }
    }
    const assign = policy.Statement.find((s) => s.Sid === "TagWarmPoolHostsWithTheirPod");
    expect(assign?.Condition?.["ForAllValues:StringEquals"]).toEqual({
      "aws:TagKeys": ["nebula:pod-uid", "nebula:pod", "Name"],
    });
    expect(assign?.Condition?.Null).toEqual({ "aws:ResourceTag/nebula:pool": "false" });
  });

  it("writes, tags and deletes only its cluster's Pod parameters (and writes its supervisor's), with Nebula's tag keys only", () => {
    const pods = "arn:aws:ssm:${Region}:${AccountId}:parameter/nebula/${ClusterName}/pods/*";
    const supervisor =
      "arn:aws:ssm:${Region}:${AccountId}:parameter/nebula/${ClusterName}/supervisor/*";
    for (const action of ["ssm:PutParameter", "ssm:AddTagsToResource"]) {
      expect(allows(action).flatMap((s) => list(s.Resource))).toEqual([pods, supervisor]);
    }
    // Only a Pod's own parameters are ever deleted; the supervisor's outlive every Pod.
    expect(allows("ssm:DeleteParameters").flatMap((s) => list(s.Resource))).toEqual([pods]);
    for (const action of ["ssm:PutParameter", "ssm:AddTagsToResource"]) {
      for (const s of allows(action)) {
        expect(s.Condition).toEqual({
          "ForAllValues:StringEquals": {
            "aws:TagKeys": ["nebula:cluster", "nebula:pod-uid", "nebula:instance-arn"],
          },
          StringEqualsIfExists: { "aws:RequestTag/nebula:cluster": "${ClusterName}" },
          StringLikeIfExists: {
            "aws:RequestTag/nebula:instance-arn": "arn:aws:ec2:${Region}:${AccountId}:instance/*",
          },
        });
      }
    }
    // Nothing else of SSM (never a read of a value), and no KMS: the parameters' key grants the
    // controller Encrypt in its own key policy (pod-parameters-key-policy.json).
    const ssmOrKms = policy.Statement.flatMap((s) => list(s.Action)).filter((a) =>
      /^(ssm|kms):/.test(a),
    );
    expect(ssmOrKms.sort()).toEqual([
      "ssm:AddTagsToResource",
      "ssm:DeleteParameters",
      "ssm:DescribeParameters",
      "ssm:PutParameter",
    ]);
  });

  it("reads only its log group's container logs and the usage metrics, and writes neither", () => {
    // GetLogEvents authorizes the log stream: every stream of the configured group, nothing else.
    expect(allows("logs:GetLogEvents").flatMap((s) => list(s.Resource))).toEqual([
      "arn:aws:logs:${Region}:${AccountId}:log-group:${LogGroupName}:log-stream:*",
    ]);
    expect(allows("cloudwatch:GetMetricData").flatMap((s) => list(s.Resource))).toEqual(["*"]);
    // Logs and metrics: exactly these two reads (the hosts write; the operator creates the group).
    const logsOrMetrics = policy.Statement.flatMap((s) => list(s.Action)).filter((a) =>
      /^(logs|cloudwatch):/.test(a),
    );
    expect(logsOrMetrics.sort()).toEqual(["cloudwatch:GetMetricData", "logs:GetLogEvents"]);
  });

  it("receives and deletes the messages of its one event queue, and nothing else of SQS", () => {
    const sqs = policy.Statement.filter((s) => list(s.Action).some((a) => a.startsWith("sqs:")));
    expect(sqs).toEqual([
      {
        Sid: "ReceiveAndDeleteItsEventQueuesMessages",
        Effect: "Allow",
        // DeleteMessageBatch is authorized as DeleteMessage; no SendMessage (the hosts ring).
        Action: ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
        Resource: "arn:aws:sqs:${Region}:${AccountId}:${EventQueueName}",
      },
    ]);
  });
});

describe("the account guard (SCP)", () => {
  it("reserves the nebula: tag keys and the host role to Nebula's roles", () => {
    const scp = load("reserve-nebula-tags.scp.json");
    expect(scp.Statement.every((s) => s.Effect === "Deny")).toBe(true);
    const tags = scp.Statement.find((s) => list(s.Action).includes("ec2:CreateTags"));
    expect(tags?.Condition?.["ForAnyValue:StringLike"]).toEqual({ "aws:TagKeys": ["nebula:*"] });
  });

  it("reserves writing and tagging the Pod parameters to the controller (a host reads only what is tagged with its ARN)", () => {
    const scp = load("reserve-nebula-tags.scp.json");
    const guard = scp.Statement.find((s) => list(s.Action).includes("ssm:PutParameter"));
    expect(list(guard?.Action ?? []).sort()).toEqual([
      "ssm:AddTagsToResource",
      "ssm:DeleteParameter",
      "ssm:DeleteParameters",
      "ssm:LabelParameterVersion",
      "ssm:PutParameter",
      "ssm:RemoveTagsFromResource",
    ]);
    expect(guard?.Resource).toBe("arn:aws:ssm:*:*:parameter/nebula/*");
    expect(guard?.Condition).toEqual({
      ArnNotLike: { "aws:PrincipalArn": "arn:aws:iam::*:role/${ControllerRoleName}" },
    });
  });
});
