import type { SSMClient } from "@aws-sdk/client-ssm";
import { MemoryPodLedger } from "@nebula/teardown";
import { podParameterPrefix, UserDataError } from "@nebula/userdata";
import type { PodStatusChange } from "@nebula/virtual-node";
import { describe, expect, it } from "vitest";
import { ProviderError } from "./errors.js";
import {
  accountOfArn,
  clusterPodsPath,
  defaultParameterKeyId,
  instanceArn,
  isPodParametersAuxiliary,
  partitionOf,
  podParametersAuxiliary,
  writePodParameters,
} from "./parameters.js";
import { Ec2PodProvider } from "./provider.js";
import { countCalls } from "./testing/calls.js";
import { testConfig, testPod } from "./testing/fixtures.js";

describe("instance ARNs", () => {
  it("uses the Region's partition and the account", () => {
    expect(instanceArn("eu-west-1", "123456789012", "i-0123456789abcdef0")).toBe(
      "arn:aws:ec2:eu-west-1:123456789012:instance/i-0123456789abcdef0",
    );
    expect(partitionOf("cn-north-1")).toBe("aws-cn");
    expect(partitionOf("us-gov-west-1")).toBe("aws-us-gov");
    expect(partitionOf("us-east-1")).toBe("aws");
  });

  it("reads the account from an ARN, and nothing from a name", () => {
    expect(accountOfArn("arn:aws:iam::123456789012:instance-profile/nebula-host")).toBe(
      "123456789012",
    );
    expect(accountOfArn("nebula-host")).toBeUndefined();
    expect(accountOfArn("arn:aws:iam::aws:policy/x")).toBeUndefined();
    expect(accountOfArn(undefined)).toBeUndefined();
  });
});

describe("the parameters' place", () => {
  it("lists under the cluster's pods path, the Pod prefix's parent", () => {
    expect(clusterPodsPath("prod")).toBe("/nebula/prod/pods");
    expect(podParameterPrefix("prod", "u-1").startsWith(`${clusterPodsPath("prod")}/`)).toBe(true);
  });

  it("stands in the teardown as an auxiliary object named by the Pod UID", () => {
    const object = podParametersAuxiliary("00000000-0000-4000-8000-000000000001");
    expect(object.name).toBe("00000000-0000-4000-8000-000000000001");
    expect(isPodParametersAuxiliary(object)).toBe(true);
    expect(isPodParametersAuxiliary({ apiVersion: "v1", kind: "Secret", name: "x" })).toBe(false);
  });
});

describe("CreateContainerConfigError, without a cloud call", () => {
  function podWithSecret(uid: string) {
    const pod = testPod("needs-db", uid);
    const container = pod.spec?.containers[0];
    if (container) {
      container.env = [
        { name: "DB", valueFrom: { secretKeyRef: { name: "db", key: "password" } } },
      ];
    }
    return pod;
  }

  it("holds the Pod Pending with the waiting reason and one Warning; a read that fails holds it too", async () => {
    let fail = false;
    const provider = new Ec2PodProvider({
      config: testConfig({ endpoint: "http://127.0.0.1:9", podDelivery: "parameters" }),
      readSources: async (_pod, refs) => {
        if (fail) throw new Error("apiserver unavailable");
        expect(refs).toEqual({ configMaps: [], secrets: ["db"] });
        return { configMaps: {}, secrets: {} };
      },
      renderUserData: () => ({
        ok: false,
        error: new UserDataError(
          "CreateContainerConfigError",
          "spec.containers[app].env[DB]",
          'secret "db" not found',
          undefined,
          "MandatorySecretNotFound",
        ),
      }),
      livePodUids: () => [],
      ledger: new MemoryPodLedger(),
    });
    const ec2 = countCalls(provider.client);
    const ssm = new Map<string, number>();
    provider.ssm.middlewareStack.add(
      (next, context) => async (args) => {
        ssm.set(context.commandName ?? "?", (ssm.get(context.commandName ?? "?") ?? 0) + 1);
        return next(args);
      },
      { step: "initialize", name: "ssmCalls" },
    );
    const changes: PodStatusChange[] = [];
    provider.notifyPods((change) => void changes.push(change));
    await provider.createPod(podWithSecret("uid-db"));
    const status = provider.getPodStatus("uid-db");
    expect(status?.phase).toBe("Pending");
    expect(status?.containerStatuses?.[0]?.state?.waiting).toEqual({
      reason: "CreateContainerConfigError",
      message: 'secret "db" not found',
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(changes.flatMap((c) => c.events)).toEqual([
      { type: "Warning", reason: "MandatorySecretNotFound", message: 'secret "db" not found' },
    ]);
    expect([...ec2.keys(), ...ssm.keys()]).toEqual([]);

    // A second Pod whose sources cannot be read: held the same way, with the reason.
    fail = true;
    await provider.createPod(podWithSecret("uid-down"));
    expect(provider.getPodStatus("uid-down")?.containerStatuses?.[0]?.state?.waiting).toEqual({
      reason: "CreateContainerConfigError",
      message:
        "the ConfigMaps, Secrets and Services of pod default/needs-db could not be read: apiserver unavailable",
    });
    expect([...ec2.keys(), ...ssm.keys()]).toEqual([]);
  });
});

describe("the default key", () => {
  it("is the cluster's alias, with a name an alias cannot hold replaced by its hash", () => {
    expect(defaultParameterKeyId("prod")).toBe("alias/nebula/prod/pod-parameters");
    const dotted = defaultParameterKeyId("prod.eu-west-1");
    expect(dotted).toMatch(/^alias\/nebula\/c-[0-9a-f]{16}\/pod-parameters$/);
    expect(dotted).not.toBe(defaultParameterKeyId("prod_eu-west-1"));
  });
});

describe("a Pod parameter write the key refuses", () => {
  /** An SSM client whose every call fails as SSM does, with `name` and message. */
  const failing = (name: string, message: string) =>
    ({
      send: async () => {
        throw Object.assign(new Error(message), { name });
      },
    }) as unknown as SSMClient;
  const write = (ssm: SSMClient) =>
    writePodParameters(ssm, {
      cluster: "prod",
      podUid: "u-1",
      parameters: [{ name: "/nebula/prod/pods/u-1/0", value: "x" }],
      keyId: defaultParameterKeyId("prod"),
    });

  it("says which key and what to do when the key does not exist", async () => {
    const error = await write(failing("InvalidKeyId", "Invalid KeyId")).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProviderError);
    expect(error).toMatchObject({ code: "InvalidConfiguration", awsCode: "InvalidKeyId" });
    expect((error as Error).message).toContain("alias/nebula/prod/pod-parameters");
    expect((error as Error).message).toContain("policies/pod-parameters-key-policy.json");
  });

  it("says so for a denial by KMS, and adds nothing to other failures", async () => {
    const denied = await write(
      failing("AccessDeniedException", "not authorized to perform: kms:Encrypt on resource"),
    ).catch((e: unknown) => e);
    expect((denied as Error).message).toContain("pod-parameters-key-policy.json");
    const throttled = await write(failing("ThrottlingException", "Rate exceeded")).catch(
      (e: unknown) => e,
    );
    expect(throttled).toMatchObject({ code: "Throttled" });
    expect((throttled as Error).message).not.toContain("KMS key");
  });
});
