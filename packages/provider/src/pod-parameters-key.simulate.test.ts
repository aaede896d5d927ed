// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${...} are the policies' placeholders, not templates
/**
 * Who can read a Pod parameter's value, by evaluation (issue #29, item 3). moto enforces no IAM
 * and no KMS key policy, so the shipped documents are evaluated with @cloud-copilot/iam-simulate
 * (an IAM evaluation engine, Strict mode, which models KMS's key-policy trust): the Pod
 * parameters' key policy (`policies/pod-parameters-key-policy.json`), the account guard
 * (`policies/reserve-nebula-tags.scp.json`) and, for the finding itself, the AWS-managed
 * `aws/ssm` key's policy as AWS documents it.
 *
 * Reading a `SecureString` takes two authorizations, both with the caller's credentials:
 * `ssm:GetParameter*` on the parameter, then the `kms:Decrypt` Parameter Store makes for it with
 * the encryption context `PARAMETER_ARN` = the parameter's ARN.
 */
import { readFileSync } from "node:fs";
import {
  allowedContextKeysForRequest,
  runSimulation,
  runUnsafeSimulation,
  type SimulationOrgPolicies,
} from "@cloud-copilot/iam-simulate";
import { describe, expect, it } from "vitest";

const ACCOUNT = "123456789012";
const REGION = "us-east-1";
const CLUSTER = "blue";
const UID = "0d6f3a52-7c1e-4b8a-9f3e-2a1b5c7d9e01";
const KEY = `arn:aws:kms:${REGION}:${ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab`;
const parameterArn = (cluster: string, name: string) =>
  `arn:aws:ssm:${REGION}:${ACCOUNT}:parameter/nebula/${cluster}/${name}`;
const POD_PARAMETER = parameterArn(CLUSTER, `pods/${UID}/0`);

interface Policy {
  Version: string;
  Statement: { Sid: string }[];
}
/** A shipped template rendered for one deployment, as `scripts/lint-iam.sh` renders the others. */
const load = (file: string): Policy =>
  JSON.parse(
    readFileSync(new URL(`../policies/${file}`, import.meta.url), "utf8")
      .replaceAll("${Region}", REGION)
      .replaceAll("${AccountId}", ACCOUNT)
      .replaceAll("${ClusterName}", CLUSTER)
      .replaceAll("${ControllerRoleName}", "nebula-controller")
      .replaceAll("${HostRoleName}", "nebula-host"),
  );
const keyPolicy = load("pod-parameters-key-policy.json");
const guard = load("reserve-nebula-tags.scp.json");

/**
 * The key policy of the AWS-managed `aws/ssm` key, as AWS documents it ("Default key policy for
 * AWS managed keys", the Systems Manager key): every principal of the account may use it through
 * Systems Manager.
 */
const awsManagedSsmKeyPolicy = {
  Version: "2012-10-17",
  Statement: [
    {
      Sid: "AllowAccessThroughSystemsManagerForAllPrincipalsInTheAccount",
      Effect: "Allow",
      Principal: { AWS: "*" },
      Action: [
        "kms:Encrypt",
        "kms:Decrypt",
        "kms:ReEncrypt*",
        "kms:GenerateDataKey*",
        "kms:CreateGrant",
        "kms:DescribeKey",
      ],
      Resource: "*",
      Condition: {
        StringEquals: {
          "kms:CallerAccount": ACCOUNT,
          "kms:ViaService": `ssm.${REGION}.amazonaws.com`,
        },
      },
    },
  ],
};

/** AWS's `AmazonSSMReadOnlyAccess` managed policy: what a developer or auditor role often holds. */
const ssmReadOnly = {
  Version: "2012-10-17",
  Statement: [
    {
      Effect: "Allow",
      Action: ["ssm:Describe*", "ssm:Get*", "ssm:List*"],
      Resource: "*",
    },
  ],
};
/** An account administrator's identity policy (`AdministratorAccess`). */
const administrator = {
  Version: "2012-10-17",
  Statement: [{ Effect: "Allow", Action: "*", Resource: "*" }],
};

const role = (name: string, session = name) =>
  `arn:aws:sts::${ACCOUNT}:assumed-role/${name}/${session}`;
const DEVELOPER = role("developer");
const ADMIN = role("admin");
const HOST = role("nebula-host", "i-0aaaaaaaaaaaaaaaa");
const CONTROLLER = role("nebula-controller");

/** The organization's policies: AWS's default `FullAWSAccess` at the root, the guard on the account. */
const organization = (withGuard: boolean): SimulationOrgPolicies[] => [
  {
    orgIdentifier: "r-root",
    policies: [
      {
        name: "FullAWSAccess",
        policy: {
          Version: "2012-10-17",
          Statement: [{ Effect: "Allow", Action: "*", Resource: "*" }],
        },
      },
    ],
  },
  {
    orgIdentifier: ACCOUNT,
    policies: [
      {
        name: "FullAWSAccess",
        policy: {
          Version: "2012-10-17",
          Statement: [{ Effect: "Allow", Action: "*", Resource: "*" }],
        },
      },
      ...(withGuard ? [{ name: "reserve-nebula-tags", policy: guard }] : []),
    ],
  },
];

interface World {
  /** The key the parameters are encrypted with: the shipped key policy, or AWS's `aws/ssm`. */
  key: "nebula" | "aws/ssm";
  /** Whether the account guard (SCP) is attached. */
  guard: boolean;
}

/**
 * Whether IAM's service reference lists `key` for this request (`${...}` in a listed key stands
 * for any name). The engine's own check drops `kms:EncryptionContext:<name>` (it matches a
 * variable key only after a `/`, as in `aws:ResourceTag/<name>`), so the keys are checked here and
 * the verdict comes from `runUnsafeSimulation`, which evaluates the context as given.
 */
async function expectValidKeys(action: string, resource: string, keys: string[]): Promise<void> {
  const [service = "", name = ""] = action.split(":");
  const allowed = await allowedContextKeysForRequest(service, name, resource, false, undefined);
  const patterns = allowed.map(
    (k) =>
      new RegExp(`^${k.replace(/[.*+?^()|[\]\\]/g, "\\$&").replace(/\$\{[^}]+\}/g, ".+")}$`, "i"),
  );
  for (const key of keys)
    expect(
      patterns.some((p) => p.test(key)),
      key,
    ).toBe(true);
}

async function evaluate(
  world: World,
  principal: string,
  identity: object,
  action: string,
  resource: string,
  context: Record<string, string> = {},
): Promise<string> {
  // What AWS puts in every request of a role session (the engine does not derive it): the role's
  // ARN as `aws:PrincipalArn`, which the guard's exceptions name.
  const roleName = principal.split("/")[1];
  context = { "aws:PrincipalArn": `arn:aws:iam::${ACCOUNT}:role/${roleName}`, ...context };
  await expectValidKeys(action, resource, Object.keys(context));
  const keyPolicyOfWorld = world.key === "nebula" ? keyPolicy : awsManagedSsmKeyPolicy;
  const simulation = {
    request: {
      principal,
      action,
      resource: { resource, accountId: ACCOUNT },
      contextVariables: context,
    },
    identityPolicies: [{ name: "identity", policy: identity }],
    serviceControlPolicies: organization(world.guard),
    resourceControlPolicies: [],
  };
  const withKeyPolicy = (policy: unknown) =>
    action.startsWith("kms:") ? { ...simulation, resourcePolicy: policy } : simulation;
  // The checked run validates every document (a malformed policy is an error result) ...
  const checked = await runSimulation(withKeyPolicy(keyPolicyOfWorld), {
    simulationMode: "Strict",
  });
  expect(checked.resultType).toBe("single");
  // ... and the unchecked one gives the verdict with the whole context. Its resource policy goes
  // in as an already validated document (`@cloud-copilot/iam-policy`'s ValidatedPolicy shape),
  // which carries the name the engine's explanation reads.
  return runUnsafeSimulation(
    withKeyPolicy({
      __validated: true,
      policyDocument: keyPolicyOfWorld,
      metadata: { name: "key-policy" },
      errors: [],
    }),
    { simulationMode: "Strict" },
  );
}

/** The `kms:Decrypt` Parameter Store makes for a caller reading a SecureString parameter. */
const decrypt = (world: World, principal: string, identity: object, parameter: string) =>
  evaluate(world, principal, identity, "kms:Decrypt", KEY, {
    "kms:ViaService": `ssm.${REGION}.amazonaws.com`,
    "kms:CallerAccount": ACCOUNT,
    "kms:EncryptionContext:PARAMETER_ARN": parameter,
    "kms:EncryptionContextKeys": "PARAMETER_ARN",
  });
const getParameter = (world: World, principal: string, identity: object, parameter: string) =>
  evaluate(world, principal, identity, "ssm:GetParameter", parameter);

/** The host role's identity side: Decrypt is granted by the key policy, no IAM statement needed. */
const NO_IDENTITY_GRANT = { Version: "2012-10-17", Statement: [] };

describe("the finding: the AWS-managed aws/ssm key, no guard", () => {
  const before: World = { key: "aws/ssm", guard: false };
  it("lets a developer with AmazonSSMReadOnlyAccess read another tenant's Pod parameter", async () => {
    expect(await getParameter(before, DEVELOPER, ssmReadOnly, POD_PARAMETER)).toBe("Allowed");
    expect(await decrypt(before, DEVELOPER, ssmReadOnly, POD_PARAMETER)).toBe("Allowed");
  });
});

describe("the shipped key policy (the default key), without the guard", () => {
  const keyOnly: World = { key: "nebula", guard: false };

  it("refuses Decrypt to a developer with AmazonSSMReadOnlyAccess, and to an administrator", async () => {
    // The developer still passes Parameter Store's own check (their policy allows ssm:Get*) ...
    expect(await getParameter(keyOnly, DEVELOPER, ssmReadOnly, POD_PARAMETER)).toBe("Allowed");
    // ... but the value stays ciphertext: the key policy grants Decrypt to the host role only and
    // does not delegate use of the key to the account's IAM policies.
    expect(await decrypt(keyOnly, DEVELOPER, ssmReadOnly, POD_PARAMETER)).toBe("ImplicitlyDenied");
    expect(await decrypt(keyOnly, ADMIN, administrator, POD_PARAMETER)).toBe("ImplicitlyDenied");
  });

  it("lets the host role decrypt this cluster's Pod parameters through Parameter Store only", async () => {
    expect(await decrypt(keyOnly, HOST, NO_IDENTITY_GRANT, POD_PARAMETER)).toBe("Allowed");
    // Another cluster's parameter, a supervisor parameter, or a direct call (not via SSM): refused.
    const otherCluster = parameterArn("green", `pods/${UID}/0`);
    expect(await decrypt(keyOnly, HOST, NO_IDENTITY_GRANT, otherCluster)).toBe("ImplicitlyDenied");
    const supervisor = parameterArn(CLUSTER, "supervisor/abc/0");
    expect(await decrypt(keyOnly, HOST, NO_IDENTITY_GRANT, supervisor)).toBe("ImplicitlyDenied");
    const direct = await evaluate(keyOnly, HOST, NO_IDENTITY_GRANT, "kms:Decrypt", KEY, {
      "kms:CallerAccount": ACCOUNT,
      "kms:EncryptionContext:PARAMETER_ARN": POD_PARAMETER,
      "kms:EncryptionContextKeys": "PARAMETER_ARN",
    });
    expect(direct).toBe("ImplicitlyDenied");
  });

  it("lets the controller encrypt (PutParameter) but never decrypt", async () => {
    const viaSsm = {
      "kms:ViaService": `ssm.${REGION}.amazonaws.com`,
      "kms:CallerAccount": ACCOUNT,
      "kms:EncryptionContext:PARAMETER_ARN": POD_PARAMETER,
      "kms:EncryptionContextKeys": "PARAMETER_ARN",
    };
    expect(await evaluate(keyOnly, CONTROLLER, NO_IDENTITY_GRANT, "kms:Encrypt", KEY, viaSsm)).toBe(
      "Allowed",
    );
    expect(await evaluate(keyOnly, CONTROLLER, NO_IDENTITY_GRANT, "kms:Decrypt", KEY, viaSsm)).toBe(
      "ImplicitlyDenied",
    );
  });

  it("lets no account principal grant itself use of the key (no CreateGrant), only administer it", async () => {
    expect(await evaluate(keyOnly, ADMIN, administrator, "kms:CreateGrant", KEY)).toBe(
      "ImplicitlyDenied",
    );
    expect(await evaluate(keyOnly, ADMIN, administrator, "kms:DescribeKey", KEY)).toBe("Allowed");
  });
});

describe("the account guard (SCP), even with the AWS-managed key", () => {
  const guarded: World = { key: "aws/ssm", guard: true };

  it("denies a developer with AmazonSSMReadOnlyAccess both the read and the decryption", async () => {
    expect(await getParameter(guarded, DEVELOPER, ssmReadOnly, POD_PARAMETER)).toBe(
      "ExplicitlyDenied",
    );
    expect(await decrypt(guarded, DEVELOPER, ssmReadOnly, POD_PARAMETER)).toBe("ExplicitlyDenied");
    // A read by path from above the Pods (`/nebula`, `/nebula/blue/pods`) is denied too; one from
    // `/` still fails at the Decrypt of each Pod parameter (above).
    for (const path of ["", `/${CLUSTER}/pods`]) {
      const resource = `arn:aws:ssm:${REGION}:${ACCOUNT}:parameter/nebula${path}`;
      expect(
        await evaluate(guarded, DEVELOPER, ssmReadOnly, "ssm:GetParametersByPath", resource),
      ).toBe("ExplicitlyDenied");
    }
  });

  it("denies an administrator too, and leaves the host role's own reads alone", async () => {
    expect(await decrypt(guarded, ADMIN, administrator, POD_PARAMETER)).toBe("ExplicitlyDenied");
    const hostIdentity = {
      Version: "2012-10-17",
      Statement: [{ Effect: "Allow", Action: "ssm:GetParameter", Resource: POD_PARAMETER }],
    };
    expect(await getParameter(guarded, HOST, hostIdentity, POD_PARAMETER)).toBe("Allowed");
    expect(await decrypt(guarded, HOST, NO_IDENTITY_GRANT, POD_PARAMETER)).toBe("Allowed");
  });

  it("leaves other parameters of the account readable (the guard names only the Pods')", async () => {
    const other = `arn:aws:ssm:${REGION}:${ACCOUNT}:parameter/team/database-url`;
    expect(await getParameter(guarded, DEVELOPER, ssmReadOnly, other)).toBe("Allowed");
    expect(await decrypt(guarded, DEVELOPER, ssmReadOnly, other)).toBe("Allowed");
  });
});
