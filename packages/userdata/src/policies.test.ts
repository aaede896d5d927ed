import { readFileSync } from "node:fs";
import { REPORT_CHUNK_TAG_PREFIX, REPORT_MAX_CHUNKS, REPORT_TAG_KEY } from "@nebula/state-mapping";
import { describe, expect, it } from "vitest";
import { supervisorScript } from "./index.js";
import { DEFAULT_METRICS_NAMESPACE } from "./options.js";
import { PARAMETER_INSTANCE_TAG, POD_PARAMETER_ROOT } from "./parameters.js";

const read = (name: string) =>
  JSON.parse(readFileSync(new URL(`../policies/${name}`, import.meta.url), "utf8"));

describe("the instance role's IAM policies (policies/*.json)", () => {
  it("allow CreateTags only on the calling instance and only with the report's tag keys", () => {
    const policy = read("instance-report-tags.json");
    expect(policy.Statement).toHaveLength(1);
    const [statement] = policy.Statement;
    expect(statement).toMatchObject({
      Effect: "Allow",
      Action: "ec2:CreateTags",
      Resource: "arn:aws:ec2:*:*:instance/*",
    });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: an IAM policy variable, not a template
    expect(statement.Condition.StringEquals).toEqual({ "aws:ARN": "${ec2:SourceInstanceARN}" });
    expect(statement.Condition.Null).toEqual({ "aws:TagKeys": "false" });
    const keys = [
      REPORT_TAG_KEY,
      ...Array.from({ length: REPORT_MAX_CHUNKS }, (_, i) => `${REPORT_CHUNK_TAG_PREFIX}${i + 1}`),
      // The host agent's certificate fingerprint, written with every report (host-agent.sh).
      "nebula:agent",
    ];
    expect(supervisorScript({ delivery: "parameters" })).toContain(
      "\nAGENT_TAG_KEY=nebula:agent\n",
    );
    expect(statement.Condition["ForAllValues:StringEquals"]).toEqual({ "aws:TagKeys": keys });
  });

  it("allow GetParameters only on /nebula/ parameters tagged with the calling instance's ARN", () => {
    const policy = read("instance-pod-parameters.json");
    // biome-ignore lint/suspicious/noTemplateCurlyInString: an IAM policy variable, not a template
    const caller = "${ec2:SourceInstanceARN}";
    expect(policy.Statement).toEqual([
      {
        Sid: expect.any(String),
        Effect: "Allow",
        Action: "ssm:GetParameters",
        Resource: `arn:aws:ssm:*:*:parameter${POD_PARAMETER_ROOT}/*`,
        Condition: { StringEquals: { [`aws:ResourceTag/${PARAMETER_INSTANCE_TAG}`]: caller } },
      },
      {
        // The host supervisor's own parameters: the same text for every Pod, nothing secret.
        Sid: expect.any(String),
        Effect: "Allow",
        Action: "ssm:GetParameters",
        Resource: `arn:aws:ssm:*:*:parameter${POD_PARAMETER_ROOT}/*/supervisor/*`,
        // The pattern's `*` spans `/`: a Pod's parameter (tagged with its UID) is never read here.
        Condition: { Null: { "aws:ResourceTag/nebula:pod-uid": "true" } },
      },
    ]);
    // The parameters' key grants Decrypt to the host role in its own key policy
    // (@nebula/provider's policies/pod-parameters-key-policy.json): no kms statement, and no other
    // action, in any instance policy.
    const actions = [
      "instance-report-tags.json",
      "instance-pod-parameters.json",
      "instance-logs-metrics.json",
      "instance-doorbell.json",
    ].flatMap((name) =>
      read(name).Statement.flatMap((s: { Action: string | string[] }) => s.Action),
    );
    expect(
      actions.filter(
        (a: string) =>
          ![
            "ec2:CreateTags",
            "ssm:GetParameters",
            "logs:CreateLogStream",
            "logs:PutLogEvents",
            "cloudwatch:PutMetricData",
            "sqs:SendMessage",
          ].includes(a),
      ),
    ).toEqual([]);
  });

  it("allow writing only the configured log group's streams, and metrics only in the Nebula namespace", () => {
    const policy = read("instance-logs-metrics.json");
    expect(policy.Statement).toEqual([
      {
        // What Docker's awslogs driver calls; no read, no delete, no DescribeLogStreams, and the
        // group is the operator's to create (awslogs-create-group=false).
        Sid: expect.any(String),
        Effect: "Allow",
        Action: ["logs:CreateLogStream", "logs:PutLogEvents"],
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the operator's placeholder, not a template
        Resource: "arn:aws:logs:*:*:log-group:${LogGroupName}:log-stream:*",
      },
      {
        Sid: expect.any(String),
        Effect: "Allow",
        Action: "cloudwatch:PutMetricData",
        Resource: "*",
        Condition: { StringEquals: { "cloudwatch:namespace": DEFAULT_METRICS_NAMESPACE } },
      },
    ]);
  });

  it("allow only SendMessage, only to the cluster's doorbell queue (no receive, no delete, no other queue)", () => {
    expect(read("instance-doorbell.json").Statement).toEqual([
      {
        Sid: expect.any(String),
        Effect: "Allow",
        Action: "sqs:SendMessage",
        // biome-ignore lint/suspicious/noTemplateCurlyInString: the operator's placeholders, not a template
        Resource: "arn:aws:sqs:${Region}:${AccountId}:${EventQueueName}",
      },
    ]);
  });

  it("let EC2 assume the role", () => {
    expect(read("instance-trust.json").Statement).toEqual([
      expect.objectContaining({
        Effect: "Allow",
        Principal: { Service: "ec2.amazonaws.com" },
        Action: "sts:AssumeRole",
      }),
    ]);
  });
});
