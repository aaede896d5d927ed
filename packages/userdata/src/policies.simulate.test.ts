// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${...} are IAM policy variables and the controller policy's placeholders, not templates
/**
 * Least privilege of the Pod parameters' IAM policies, by evaluation: moto enforces no IAM, so the
 * policy documents themselves are evaluated against requests with @cloud-copilot/iam-simulate (an
 * IAM policy evaluation engine, Strict mode). Each request carries the context keys AWS would
 * populate for it (the parameter's tags as `aws:ResourceTag/...`, the role session's
 * `ec2:SourceInstanceARN`, the request's tags); every result is checked to have used all of them
 * (no key silently dropped), and every denial to come from the statement element it is about
 * (action, resource or condition), with a counterfactual where the condition is the reason.
 */
import { readFileSync } from "node:fs";
import { runSimulation, type SingleResourceSimulationResult } from "@cloud-copilot/iam-simulate";
import { describe, expect, it } from "vitest";
import { PARAMETER_INSTANCE_TAG, podParameterNames } from "./parameters.js";

const ACCOUNT = "123456789012";
const REGION = "us-east-1";
const CLUSTER = "blue";
const UID = "0d6f3a52-7c1e-4b8a-9f3e-2a1b5c7d9e01";

interface Policy {
  Version: string;
  Statement: { Sid: string; Condition?: unknown }[];
}
const read = (url: URL) => readFileSync(url, "utf8");
const instancePolicy: Policy = JSON.parse(
  read(new URL("../policies/instance-pod-parameters.json", import.meta.url)),
);
// The controller's template rendered for one deployment (region, account, cluster), the other
// placeholders as scripts/lint-iam.sh renders them.
const controllerPolicy: Policy = JSON.parse(
  read(new URL("../../provider/policies/controller.json", import.meta.url))
    .replaceAll("${Region}", REGION)
    .replaceAll("${AccountId}", ACCOUNT)
    .replaceAll("${ClusterName}", CLUSTER)
    .replace(/\$\{([A-Z][A-Za-z0-9]*)\}/g, "example-$1"),
);

// The host's logs and metrics policy, for the log group `/nebula/blue`.
const GROUP = `/nebula/${CLUSTER}`;
const logsPolicy: Policy = JSON.parse(
  read(new URL("../policies/instance-logs-metrics.json", import.meta.url)).replaceAll(
    "${LogGroupName}",
    GROUP,
  ),
);

// The host's doorbell policy, for the queue `nebula-blue-events` of the deployment's region and account.
const QUEUE = `nebula-${CLUSTER}-events`;
const doorbellPolicy: Policy = JSON.parse(
  read(new URL("../policies/instance-doorbell.json", import.meta.url))
    .replaceAll("${Region}", REGION)
    .replaceAll("${AccountId}", ACCOUNT)
    .replaceAll("${EventQueueName}", QUEUE),
);

const instanceArn = (id: string) => `arn:aws:ec2:${REGION}:${ACCOUNT}:instance/${id}`;
const A = instanceArn("i-0aaaaaaaaaaaaaaaa");
const B = instanceArn("i-0bbbbbbbbbbbbbbbb");
/** The host role's session on an instance: EC2 puts the instance's ARN in its request context. */
const onInstance = (arn: string) => ({
  principal: `arn:aws:sts::${ACCOUNT}:assumed-role/nebula-host/${arn.split("/")[1]}`,
  context: { "ec2:SourceInstanceARN": arn },
});
const CONTROLLER = `arn:aws:sts::${ACCOUNT}:assumed-role/nebula-controller/nebula-controller`;

const parameterArn = (name: string) => `arn:aws:ssm:${REGION}:${ACCOUNT}:parameter${name}`;
// The names the controller writes for one Pod (`/nebula/<cluster>/pods/<uid>/<i>`).
const names = podParameterNames(CLUSTER, UID);
const podParameter = parameterArn(names[0] as string);
/** A Pod parameter's tags, as `aws:ResourceTag/...` context keys: those of creation, then the ARN. */
const tagsOf = (instance?: string): Record<string, string> => ({
  "aws:ResourceTag/nebula:cluster": CLUSTER,
  "aws:ResourceTag/nebula:pod-uid": UID,
  ...(instance === undefined ? {} : { [`aws:ResourceTag/${PARAMETER_INSTANCE_TAG}`]: instance }),
});
/** The context keys of a request that sets tags (PutParameter's Tags, AddTagsToResource). */
const requestTags = (tags: Record<string, string>): Record<string, string | string[]> => ({
  "aws:TagKeys": Object.keys(tags),
  ...Object.fromEntries(Object.entries(tags).map(([k, v]) => [`aws:RequestTag/${k}`, v])),
});

interface Request {
  principal: string;
  action: string;
  resource: string;
  context?: Record<string, string | string[]>;
}
interface Verdict {
  result: string;
  /** Sids of the statements that allowed the request. */
  allowedBy: string[];
  /** For each statement that did not apply: which of its elements matched the request. */
  unmatched: Record<string, { action: boolean; resource: boolean; condition: string }>;
}

async function evaluate(policy: Policy, request: Request): Promise<Verdict> {
  const response = await runSimulation(
    {
      request: {
        principal: request.principal,
        action: request.action,
        resource: { resource: request.resource, accountId: ACCOUNT },
        contextVariables: request.context ?? {},
      },
      identityPolicies: [{ name: "policy", policy }],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
    },
    { simulationMode: "Strict" },
  );
  // An action authorized on "*" (PutMetricData without a dataset, the List and Get calls of
  // CloudWatch) comes back as a wildcard evaluation: one result per matching resource type.
  let result: SingleResourceSimulationResult["result"];
  if (response.resultType === "wildcard") {
    const results = (response as { results: SingleResourceSimulationResult["result"][] }).results;
    if (results.length === 0)
      return { result: response.overallResult, allowedBy: [], unmatched: {} };
    if (results.length !== 1) throw new Error(`several results: ${JSON.stringify(response)}`);
    result = results[0] as SingleResourceSimulationResult["result"];
  } else if (response.resultType === "single") {
    result = (response as SingleResourceSimulationResult).result;
  } else {
    throw new Error(`not a single evaluation: ${JSON.stringify(response)}`);
  }
  // A context key the engine dropped (not valid for the action or resource type) would make a
  // denial meaningless: every key given must have been evaluated.
  expect(result.ignoredContextKeys).toEqual([]);
  const identity = result.analysis.identityAnalysis;
  if (identity === undefined) throw new Error("no identity analysis");
  for (const s of [...identity.allowStatements, ...identity.unmatchedStatements]) {
    expect(s.ignoredConditions ?? []).toEqual([]);
  }
  return {
    result: response.overallResult,
    allowedBy: identity.allowStatements.map((s) => s.explain.identifier),
    unmatched: Object.fromEntries(
      identity.unmatchedStatements.map((s) => [
        s.explain.identifier,
        { action: s.actionMatch, resource: s.resourceMatch, condition: s.conditionMatch },
      ]),
    ),
  };
}

/** The policy with one statement's Condition removed: what a denial by that condition is measured against. */
function withoutCondition(policy: Policy, sid: string): Policy {
  const copy: Policy = structuredClone(policy);
  const statement = copy.Statement.find((s) => s.Sid === sid);
  if (statement === undefined) throw new Error(`no statement ${sid}`);
  delete statement.Condition;
  return copy;
}

describe("instance-pod-parameters.json, evaluated", () => {
  const [{ Sid: READ }, { Sid: SUPERVISOR }] = instancePolicy.Statement as [
    { Sid: string },
    { Sid: string },
  ];
  /**
   * How the supervisor statement (any instance, its own prefix only, never a parameter tagged with a
   * Pod UID) misses a Pod parameter request: by resource, and by condition too.
   */
  const missesSupervisor = (action: boolean) => ({
    [SUPERVISOR]: { action, resource: false, condition: "NoMatch" },
  });
  const getParameters = (instance: string, resource: string, tags: Record<string, string>) => ({
    principal: onInstance(instance).principal,
    action: "ssm:GetParameters",
    resource,
    context: { ...onInstance(instance).context, ...tags },
  });

  it("lets instance A read every one of its Pod's parameters (tagged with A's ARN)", async () => {
    for (const name of names) {
      expect(
        await evaluate(instancePolicy, getParameters(A, parameterArn(name), tagsOf(A))),
      ).toMatchObject({ result: "Allowed", allowedBy: [READ] });
    }
  });

  it("denies instance B's credentials A's parameter, by the tag condition alone", async () => {
    const request = getParameters(B, podParameter, tagsOf(A));
    expect(await evaluate(instancePolicy, request)).toEqual({
      result: "ImplicitlyDenied",
      allowedBy: [],
      unmatched: {
        [READ]: { action: true, resource: true, condition: "NoMatch" },
        ...missesSupervisor(true),
      },
    });
    // Counterfactual: without the condition the same request is allowed.
    expect((await evaluate(withoutCondition(instancePolicy, READ), request)).result).toBe(
      "Allowed",
    );
  });

  it("denies a parameter not (yet) tagged with an instance ARN", async () => {
    const request = getParameters(A, podParameter, tagsOf(undefined));
    expect(await evaluate(instancePolicy, request)).toEqual({
      result: "ImplicitlyDenied",
      allowedBy: [],
      unmatched: {
        [READ]: { action: true, resource: true, condition: "NoMatch" },
        ...missesSupervisor(true),
      },
    });
    expect((await evaluate(withoutCondition(instancePolicy, READ), request)).result).toBe(
      "Allowed",
    );
  });

  it("denies credentials without ec2:SourceInstanceARN (not an instance's role session)", async () => {
    const request = { ...getParameters(A, podParameter, tagsOf(A)), context: tagsOf(A) };
    expect(await evaluate(instancePolicy, request)).toMatchObject({
      result: "ImplicitlyDenied",
      unmatched: {
        [READ]: { action: true, resource: true, condition: "NoMatch" },
        ...missesSupervisor(true),
      },
    });
  });

  it.each([
    "ssm:PutParameter",
    "ssm:GetParametersByPath",
    "ssm:GetParameter",
    "ssm:GetParameterHistory",
    "ssm:DeleteParameters",
    "ssm:AddTagsToResource",
  ])("denies %s, even on its own parameter", async (action) => {
    const own = getParameters(A, podParameter, tagsOf(A));
    // GetParametersByPath is authorized on the path (a parameter ARN without the last segment).
    const resource =
      action === "ssm:GetParametersByPath" ? podParameter.replace(/\/0$/, "") : podParameter;
    expect(await evaluate(instancePolicy, { ...own, action, resource })).toEqual({
      result: "ImplicitlyDenied",
      allowedBy: [],
      unmatched: {
        [READ]: { action: false, resource: true, condition: "Match" },
        ...missesSupervisor(false),
      },
    });
  });

  it.each(["/app/db-password", "/nebula-other/pods/x/0", "/Nebula/pods/x/0"])(
    "denies %s outside /nebula/, even tagged with A's ARN",
    async (name) => {
      const resource = parameterArn(name);
      expect(await evaluate(instancePolicy, getParameters(A, resource, tagsOf(A)))).toEqual({
        result: "ImplicitlyDenied",
        allowedBy: [],
        unmatched: {
          [READ]: { action: true, resource: false, condition: "Match" },
          ...missesSupervisor(true),
        },
      });
    },
  );
});

describe("the host supervisor's parameters, evaluated", () => {
  const supervisor = parameterArn(`/nebula/${CLUSTER}/supervisor/0123456789abcdef/0`);
  const read = (instance: string, action = "ssm:GetParameters", resource = supervisor) => ({
    principal: onInstance(instance).principal,
    action,
    resource,
    context: { ...onInstance(instance).context, "aws:ResourceTag/nebula:cluster": CLUSTER },
  });

  it("lets every instance read them (the same text for every Pod, nothing secret), untagged", async () => {
    for (const instance of [A, B]) {
      expect((await evaluate(instancePolicy, read(instance))).result).toBe("Allowed");
    }
  });

  it("denies an instance any other action on them, and a Pod's parameters through that statement", async () => {
    for (const action of ["ssm:PutParameter", "ssm:DeleteParameters", "ssm:GetParametersByPath"]) {
      expect((await evaluate(instancePolicy, read(A, action))).result).toBe("ImplicitlyDenied");
    }
    // Another Pod's parameter is not "supervisor": only the tag-conditioned statement could allow it.
    const verdict = await evaluate(instancePolicy, read(B, "ssm:GetParameters", podParameter));
    expect(verdict.result).toBe("ImplicitlyDenied");
  });

  it("never lets another instance read a Pod's parameter whose name runs through a supervisor/ segment (the pattern's * spans /)", async () => {
    const lookalike = parameterArn(`/nebula/${CLUSTER}/pods/${UID}/supervisor/0`);
    const request = {
      principal: onInstance(B).principal,
      action: "ssm:GetParameters",
      resource: lookalike,
      context: { ...onInstance(B).context, ...tagsOf(A) },
    };
    expect((await evaluate(instancePolicy, request)).result).toBe("ImplicitlyDenied");
    // Its own instance still reads it, through the tag-conditioned statement.
    const own = {
      ...request,
      principal: onInstance(A).principal,
      context: { ...onInstance(A).context, ...tagsOf(A) },
    };
    expect((await evaluate(instancePolicy, own)).result).toBe("Allowed");
  });

  it("lets the controller create its cluster's, not another cluster's", async () => {
    const put = (resource: string) => ({
      principal: CONTROLLER,
      action: "ssm:PutParameter",
      resource,
      context: requestTags({ "nebula:cluster": CLUSTER }),
    });
    expect((await evaluate(controllerPolicy, put(supervisor))).result).toBe("Allowed");
    const other = parameterArn("/nebula/green/supervisor/0123456789abcdef/0");
    expect((await evaluate(controllerPolicy, put(other))).result).toBe("ImplicitlyDenied");
  });
});

describe("controller.json's SSM statements, evaluated (rendered for cluster blue)", () => {
  const WRITE = "WriteAndTagOnlyItsClustersPodAndSupervisorParameters";
  const DELETE = "DeleteOnlyItsClustersPodParameters";
  const creationTags = { "nebula:cluster": CLUSTER, "nebula:pod-uid": UID };
  const controller = (action: string, resource: string, context = {}) => ({
    principal: CONTROLLER,
    action,
    resource,
    context,
  });
  const otherCluster = parameterArn(`/nebula/green/pods/${UID}/0`);

  it("allows PutParameter on its cluster's Pod parameter, with the creation tags or overwriting", async () => {
    for (const context of [requestTags(creationTags), { "ssm:Overwrite": "true" }]) {
      expect(
        await evaluate(controllerPolicy, controller("ssm:PutParameter", podParameter, context)),
      ).toMatchObject({ result: "Allowed", allowedBy: [WRITE] });
    }
  });

  it("denies PutParameter on another cluster's Pod parameter, or outside pods/ and supervisor/", async () => {
    for (const resource of [otherCluster, parameterArn(`/nebula/${CLUSTER}/settings`)]) {
      const verdict = await evaluate(
        controllerPolicy,
        controller("ssm:PutParameter", resource, requestTags(creationTags)),
      );
      expect(verdict.result).toBe("ImplicitlyDenied");
      expect(verdict.unmatched[WRITE]).toMatchObject({ action: true, resource: false });
    }
  });

  it("allows AddTagsToResource of the instance ARN, and of the creation tags", async () => {
    for (const tags of [{ [PARAMETER_INSTANCE_TAG]: A }, creationTags]) {
      const context = { ...requestTags(tags), ...tagsOf(undefined) };
      expect(
        await evaluate(
          controllerPolicy,
          controller("ssm:AddTagsToResource", podParameter, context),
        ),
      ).toMatchObject({ result: "Allowed", allowedBy: [WRITE] });
    }
  });

  it.each([
    ["an unexpected tag key", { [PARAMETER_INSTANCE_TAG]: A, owner: "team-x" }],
    ["a reserved EC2 key", { "nebula:report": "{}" }],
    ["another cluster's name", { "nebula:cluster": "green" }],
    [
      "an instance ARN of another account",
      {
        [PARAMETER_INSTANCE_TAG]: "arn:aws:ec2:us-east-1:210987654321:instance/i-0aaaaaaaaaaaaaaaa",
      },
    ],
  ])("denies AddTagsToResource with %s, by the statement's condition", async (_, tags) => {
    const request = controller("ssm:AddTagsToResource", podParameter, {
      ...requestTags(tags),
      ...tagsOf(undefined),
    });
    expect(await evaluate(controllerPolicy, request)).toMatchObject({
      result: "ImplicitlyDenied",
      allowedBy: [],
      unmatched: { [WRITE]: { action: true, resource: true, condition: "NoMatch" } },
    });
    expect((await evaluate(withoutCondition(controllerPolicy, WRITE), request)).result).toBe(
      "Allowed",
    );
  });

  it("deletes only its cluster's Pod parameters, lists all, and reads none", async () => {
    expect(
      await evaluate(controllerPolicy, controller("ssm:DeleteParameters", podParameter)),
    ).toMatchObject({ result: "Allowed", allowedBy: [DELETE] });
    const deleteOther = await evaluate(
      controllerPolicy,
      controller("ssm:DeleteParameters", otherCluster),
    );
    expect(deleteOther.result).toBe("ImplicitlyDenied");
    expect(deleteOther.unmatched[DELETE]).toEqual({
      action: true,
      resource: false,
      condition: "Match",
    });
    expect(
      await evaluate(controllerPolicy, controller("ssm:DescribeParameters", "*")),
    ).toMatchObject({ result: "Allowed", allowedBy: ["Observe"] });
    for (const action of ["ssm:GetParameters", "ssm:GetParameter", "ssm:GetParameterHistory"]) {
      const read = await evaluate(controllerPolicy, controller(action, podParameter, tagsOf(A)));
      expect(read).toMatchObject({ result: "ImplicitlyDenied", allowedBy: [] });
    }
  });
});

describe("instance-logs-metrics.json, evaluated (log group /nebula/blue)", () => {
  const [{ Sid: LOGS }, { Sid: METRICS }] = logsPolicy.Statement as [
    { Sid: string },
    { Sid: string },
  ];
  const group = (name = GROUP) => `arn:aws:logs:${REGION}:${ACCOUNT}:log-group:${name}`;
  const stream = (name: string, inGroup = GROUP) => `${group(inGroup)}:log-stream:${name}`;
  const own = stream(`shop/web-1/${UID}/app/0`);
  const onA = (action: string, resource: string, context: Record<string, string> = {}) => ({
    principal: onInstance(A).principal,
    action,
    resource,
    context: { ...onInstance(A).context, ...context },
  });

  it("lets an instance create its Pod's streams and write to them (what Docker's awslogs driver calls)", async () => {
    for (const action of ["logs:CreateLogStream", "logs:PutLogEvents"]) {
      for (const resource of [own, stream(`shop/web-1/${UID}/app/1`)]) {
        expect(await evaluate(logsPolicy, onA(action, resource))).toMatchObject({
          result: "Allowed",
          allowedBy: [LOGS],
        });
      }
    }
  });

  it("also lets it write another Pod's stream of the same group: IAM cannot tie a stream to an instance (docs/security.md)", async () => {
    const other = stream("shop/web-2/1b2c3d4e-0000-4000-8000-000000000000/app/0");
    expect((await evaluate(logsPolicy, onA("logs:PutLogEvents", other))).result).toBe("Allowed");
  });

  it.each([
    ["logs:GetLogEvents", own],
    ["logs:FilterLogEvents", group()],
    ["logs:DescribeLogStreams", group()],
    ["logs:DeleteLogStream", own],
    ["logs:CreateLogGroup", group()],
    ["logs:DeleteLogGroup", group()],
  ])("denies %s (reads, deletes, the group itself)", async (action, resource) => {
    expect(await evaluate(logsPolicy, onA(action, resource))).toEqual({
      result: "ImplicitlyDenied",
      allowedBy: [],
      unmatched: {
        [LOGS]: { action: false, resource: resource === own, condition: "Match" },
        [METRICS]: { action: false, resource: true, condition: "NoMatch" },
      },
    });
  });

  it.each(["/app/audit", "/nebula/blue2", "/nebula/green"])(
    "denies writing to the streams of another group (%s)",
    async (name) => {
      for (const action of ["logs:CreateLogStream", "logs:PutLogEvents"]) {
        expect(await evaluate(logsPolicy, onA(action, stream("x/y/z/c/0", name)))).toMatchObject({
          result: "ImplicitlyDenied",
          allowedBy: [],
          unmatched: { [LOGS]: { action: true, resource: false, condition: "Match" } },
        });
      }
    },
  );

  it("allows PutMetricData in the Nebula namespace only, by the condition", async () => {
    const put = (namespace: string) =>
      onA("cloudwatch:PutMetricData", "*", { "cloudwatch:namespace": namespace });
    expect(await evaluate(logsPolicy, put("Nebula"))).toMatchObject({
      result: "Allowed",
      allowedBy: [METRICS],
    });
    for (const namespace of ["AWS/EC2", "Nebula2", "nebula", "Other"]) {
      const request = put(namespace);
      // Denied (a wildcard evaluation reports no statement then), and by the condition alone.
      expect(await evaluate(logsPolicy, request)).toMatchObject({
        result: "ImplicitlyDenied",
        allowedBy: [],
      });
      expect((await evaluate(withoutCondition(logsPolicy, METRICS), request)).result).toBe(
        "Allowed",
      );
    }
  });

  it("denies reading metrics back", async () => {
    for (const action of ["cloudwatch:GetMetricData", "cloudwatch:ListMetrics"]) {
      expect((await evaluate(logsPolicy, onA(action, "*"))).result).toBe("ImplicitlyDenied");
    }
  });
});

describe("instance-doorbell.json, evaluated (queue nebula-blue-events)", () => {
  const [{ Sid: SEND }] = doorbellPolicy.Statement as [{ Sid: string }];
  const queueArn = (name = QUEUE, region = REGION, account = ACCOUNT) =>
    `arn:aws:sqs:${region}:${account}:${name}`;
  const onA = (action: string, resource: string) => ({
    principal: onInstance(A).principal,
    action,
    resource,
    context: onInstance(A).context,
  });

  it("lets an instance send to the cluster's queue (the doorbell)", async () => {
    expect(await evaluate(doorbellPolicy, onA("sqs:SendMessage", queueArn()))).toEqual({
      result: "Allowed",
      allowedBy: [SEND],
      unmatched: {},
    });
  });

  it.each([
    ["another queue", queueArn("nebula-green-events")],
    ["a queue whose name starts with it", queueArn(`${QUEUE}-dlq`)],
    ["the same name in another region", queueArn(QUEUE, "eu-west-1")],
    ["the same name in another account", queueArn(QUEUE, REGION, "210987654321")],
  ])("denies sending to %s, by the resource", async (_, resource) => {
    expect(await evaluate(doorbellPolicy, onA("sqs:SendMessage", resource))).toEqual({
      result: "ImplicitlyDenied",
      allowedBy: [],
      unmatched: { [SEND]: { action: true, resource: false, condition: "Match" } },
    });
  });

  it.each([
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:PurgeQueue",
    "sqs:GetQueueAttributes",
    "sqs:SetQueueAttributes",
    "sqs:DeleteQueue",
  ])("denies %s on the cluster's queue, by the action", async (action) => {
    expect(await evaluate(doorbellPolicy, onA(action, queueArn()))).toEqual({
      result: "ImplicitlyDenied",
      allowedBy: [],
      unmatched: { [SEND]: { action: false, resource: true, condition: "Match" } },
    });
  });

  it("has no SendMessageBatch of its own to deny: IAM authorizes that call as sqs:SendMessage, so a host may batch to this queue only (README)", async () => {
    const response = await runSimulation(
      {
        request: {
          principal: onInstance(A).principal,
          action: "sqs:SendMessageBatch",
          resource: { resource: queueArn(), accountId: ACCOUNT },
          contextVariables: onInstance(A).context,
        },
        identityPolicies: [{ name: "policy", policy: doorbellPolicy }],
        serviceControlPolicies: [],
        resourceControlPolicies: [],
      },
      { simulationMode: "Strict" },
    );
    expect(response).toMatchObject({ resultType: "error", errors: { message: "invalid.action" } });
    // The batch call on another queue is the SendMessage on another queue: denied above.
  });
});
