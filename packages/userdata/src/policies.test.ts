import { readFileSync } from "node:fs";
import { REPORT_CHUNK_TAG_PREFIX, REPORT_MAX_CHUNKS, REPORT_TAG_KEY } from "@nebula/state-mapping";
import { describe, expect, it } from "vitest";

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
    ];
    expect(statement.Condition["ForAllValues:StringEquals"]).toEqual({ "aws:TagKeys": keys });
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
