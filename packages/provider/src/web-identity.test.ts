import type { V1Pod } from "@kubernetes/client-node";
import { podTokenRequests } from "@nebula/userdata";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { testPod } from "./testing/fixtures.js";
import { ROLE_ARN_ANNOTATION, withWebIdentity } from "./web-identity.js";

const ROLE = "arn:aws:iam::123456789012:role/reader";
const MOUNT = "/var/run/secrets/eks.amazonaws.com/serviceaccount";

function pod(): V1Pod {
  const p = testPod("app", "uid-w");
  if (p.spec) {
    p.spec.serviceAccountName = "reader";
    p.spec.initContainers = [{ name: "init", image: "busybox" }];
    p.spec.containers.push({
      name: "own-role",
      image: "busybox",
      env: [{ name: "AWS_ROLE_ARN", value: "arn:aws:iam::123456789012:role/mine" }],
    });
  }
  return p;
}

describe("withWebIdentity", () => {
  it("adds what EKS's webhook adds: the sts.amazonaws.com token and the SDKs' environment", () => {
    const original = pod();
    const before = structuredClone(original);
    const out = withWebIdentity(original, { [ROLE_ARN_ANNOTATION]: ROLE }, "eu-west-1");
    expect(out.roleArn).toBe(ROLE);
    expect(original).toEqual(before); // the Pod itself is not changed
    const [app, ownRole] = out.pod.spec?.containers ?? [];
    expect(app?.env).toEqual([
      { name: "AWS_ROLE_ARN", value: ROLE },
      { name: "AWS_WEB_IDENTITY_TOKEN_FILE", value: `${MOUNT}/token` },
      { name: "AWS_STS_REGIONAL_ENDPOINTS", value: "regional" },
      { name: "AWS_DEFAULT_REGION", value: "eu-west-1" },
      { name: "AWS_REGION", value: "eu-west-1" },
    ]);
    expect(app?.volumeMounts).toEqual([
      { name: "aws-iam-token", mountPath: MOUNT, readOnly: true },
    ]);
    expect(out.pod.spec?.initContainers?.[0]?.env?.[0]).toEqual({
      name: "AWS_ROLE_ARN",
      value: ROLE,
    });
    // A container that names its own role keeps it, as with the webhook.
    expect(ownRole).toEqual(original.spec?.containers[1]);
    // The token is one the provider requests like any projected one.
    expect(podTokenRequests(out.pod)).toEqual([
      { key: "0", subject: "pod", audience: "sts.amazonaws.com", expirationSeconds: 86400 },
    ]);
  });

  it("takes the audience and lifetime annotations, the lifetime within the webhook's bounds", () => {
    const annotations = (expiration: string) => ({
      [ROLE_ARN_ANNOTATION]: ROLE,
      "eks.amazonaws.com/audience": "my-audience",
      "eks.amazonaws.com/token-expiration": expiration,
    });
    for (const [asked, got] of [
      ["7200", 7200],
      ["60", 3600],
      ["999999", 86400],
      ["soon", 86400],
    ] as const) {
      const out = withWebIdentity(pod(), annotations(asked), "us-east-1");
      expect(podTokenRequests(out.pod)).toEqual([
        { key: "0", subject: "pod", audience: "my-audience", expirationSeconds: got },
      ]);
    }
  });

  it("leaves the Pod alone without a role, when EKS's webhook already ran, or for a role that is not a role ARN", () => {
    const p = pod();
    expect(withWebIdentity(p, undefined, "us-east-1")).toEqual({ pod: p, roleArn: undefined });
    expect(withWebIdentity(p, {}, "us-east-1").pod).toBe(p);
    const mutated = withWebIdentity(p, { [ROLE_ARN_ANNOTATION]: ROLE }, "us-east-1").pod;
    expect(withWebIdentity(mutated, { [ROLE_ARN_ANNOTATION]: ROLE }, "us-east-1").pod).toBe(
      mutated,
    );
    for (const bad of ["reader", "arn:aws:iam::123:role/x", "arn:aws:iam::123456789012:user/x"]) {
      const out = withWebIdentity(p, { [ROLE_ARN_ANNOTATION]: bad }, "us-east-1");
      expect(out.pod).toBe(p);
      expect(out.warning).toMatch(/not an IAM role ARN/);
    }
  });

  it("is total: any annotations give a Pod, never a throw", () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.string()), fc.string(), (annotations, role) => {
        const out = withWebIdentity(pod(), { ...annotations, [ROLE_ARN_ANNOTATION]: role }, "r");
        expect(out.pod.spec?.containers).toHaveLength(2);
      }),
    );
  });
});
