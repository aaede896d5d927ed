/**
 * The `parameters` delivery against moto through the real AWS SDK (EC2 and SSM on one endpoint):
 * a Pod's parameters are written before `RunInstances`, tagged with the instance's ARN after it,
 * read back byte for byte, deleted by the Pod's teardown, collected when leaked; a Pod whose
 * Secret is missing is held with `CreateContainerConfigError` until it appears; a process killed
 * between writing the parameters and `RunInstances` leaves nothing behind.
 */
import {
  DescribeInstancesCommand,
  type EC2Client,
  RunInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import {
  DescribeParametersCommand,
  GetParametersCommand,
  ListTagsForResourceCommand,
  PutParameterCommand,
  SSMClient,
} from "@aws-sdk/client-ssm";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import { MemoryPodLedger } from "@nebula/teardown";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "@nebula/test-peers";
import {
  type PodParameter,
  type PodSources,
  podParameterNames,
  podParameterPrefix,
  UserDataError,
} from "@nebula/userdata";
import type { PodEventNote, PodStatusChange } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProviderConfigInput } from "./config.js";
import { parseProviderConfig } from "./config.js";
import { buildRunInstancesInput } from "./launch.js";
import { podFacts } from "./pod.js";
import { Ec2PodProvider } from "./provider.js";
import { testPod } from "./testing/fixtures.js";
import { Mortal } from "./testing/mortal.js";
import { type MotoNetwork, motoConfig, nodeInstances, prepareMoto } from "./testing/moto-env.js";
import { testTeardown } from "./testing/teardown.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";

let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;
let ssm: SSMClient;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
  ssm = new SSMClient({
    region: moto.region,
    endpoint: moto.endpoint,
    credentials: MOTO_CREDENTIALS,
  });
});

afterAll(async () => {
  ssm?.destroy();
  ec2?.destroy();
  await moto?.stop();
});

function uid(n: number): string {
  return `22222222-0000-4000-8000-${n.toString().padStart(12, "0")}`;
}

/** The parameters delivery on moto; each test its own cluster (the parameter path is the cluster's). */
function config(
  cluster: string,
  overrides: Partial<ProviderConfigInput> = {},
): ProviderConfigInput {
  return {
    ...motoConfig(moto, network, `${cluster}-node`),
    clusterName: cluster,
    podDelivery: "parameters",
    eventualConsistencySeconds: 1,
    ...overrides,
  };
}

/** Values no shell, XML or JSON layer may change: quotes, newlines, NUL-free control and non-ASCII. */
function parametersOf(cluster: string, podUid: string, values: readonly string[]): PodParameter[] {
  const prefix = podParameterPrefix(cluster, podUid);
  return values.map((value, i) => ({ name: `${prefix}${i}`, value }));
}

/** A renderer that writes the given parameters (as `@nebula/userdata` will). */
function renderWith(parameters: (pod: V1Pod, sources: PodSources | undefined) => PodParameter[]) {
  return (pod: V1Pod, sources: PodSources | undefined) => ({
    userData: Buffer.from(USER_DATA).toString("base64"),
    bytes: USER_DATA.length,
    parameters: parameters(pod, sources),
    notices: [],
  });
}

async function readParameters(names: readonly string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (let i = 0; i < names.length; i += 10) {
    const page = await ssm.send(
      new GetParametersCommand({ Names: names.slice(i, i + 10), WithDecryption: true }),
    );
    for (const p of page.Parameters ?? []) out.set(p.Name ?? "", p.Value ?? "");
  }
  return out;
}

/** Names of the parameters under a Pod's prefix now. */
async function podParameters(cluster: string, podUid: string): Promise<string[]> {
  const prefix = podParameterPrefix(cluster, podUid);
  const page = await ssm.send(
    new DescribeParametersCommand({
      ParameterFilters: [{ Key: "Path", Option: "OneLevel", Values: [prefix.slice(0, -1)] }],
      MaxResults: 50,
    }),
  );
  return (page.Parameters ?? []).map((p) => p.Name ?? "").sort();
}

async function tagsOf(name: string): Promise<Record<string, string>> {
  const page = await ssm.send(
    new ListTagsForResourceCommand({ ResourceType: "Parameter", ResourceId: name }),
  );
  return Object.fromEntries((page.TagList ?? []).map((t) => [t.Key ?? "", t.Value ?? ""]));
}

function deleting(pod: V1Pod): V1Pod {
  return {
    ...pod,
    metadata: { ...pod.metadata, deletionTimestamp: new Date(), deletionGracePeriodSeconds: 0 },
  };
}

/** The one teardown driver (the virtual node's PodTeardown) until the deleted Pod's teardown completes. */
function reclaim(provider: Ec2PodProvider, pod: V1Pod, rounds = 80) {
  return testTeardown(provider).reclaim(deleting(pod), { rounds, ms: 100 });
}

/**
 * A renderer for {@link podWithSecret}, as `@nebula/userdata` renders it: held while the Secret
 * `db` (or its key) is missing, else one parameter with its value.
 */
function needsDb(cluster: string, podUid: string) {
  return (pod: V1Pod, sources: PodSources | undefined) => {
    const db = sources?.secrets.db?.data?.password;
    if (db === undefined) {
      return {
        ok: false as const,
        error: new UserDataError(
          "CreateContainerConfigError",
          "spec.containers[app].env[DB_PASSWORD]",
          'secret "db" not found',
          undefined,
          "MandatorySecretNotFound",
        ),
      };
    }
    return renderWith(() => parametersOf(cluster, podUid, [db]))(pod, sources);
  };
}

/** A Pod that takes `DB_PASSWORD` from the Secret `db` (what `podSourceRefs` finds). */
function podWithSecret(name: string, podUid: string): V1Pod {
  const pod = testPod(name, podUid);
  const container = pod.spec?.containers[0];
  if (container) {
    container.env = [
      { name: "DB_PASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } },
    ];
  }
  return pod;
}

function recorder() {
  const events: PodEventNote[] = [];
  const statuses: V1PodStatus[] = [];
  return {
    events,
    statuses,
    listener: (change: PodStatusChange) => {
      events.push(...(change.events ?? []));
      statuses.push(change.status);
    },
  };
}

describe("launch with parameters", () => {
  it("writes the parameters before RunInstances, tags them with the instance's ARN after, byte for byte; the teardown deletes every one", async () => {
    const cluster = "p-launch";
    const podUid = uid(1);
    const values = [
      "plain",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the value must reach SSM as it is.
      "quotes ' \" ` $(id) ${HOME} \\ and\nnew\r\nlines\ttabs",
      "non-ASCII: é ß 漢字 😀 \u2028",
      "x".repeat(4096),
    ];
    const expected = parametersOf(cluster, podUid, values);
    const provider = new Ec2PodProvider({
      config: config(cluster),
      renderUserData: renderWith(() => expected),
      livePodUids: () => [podUid],
      ledger: new MemoryPodLedger(),
    });
    // What exists when RunInstances is sent: read through the SDK from inside the call.
    const atLaunch: Array<Map<string, string>> = [];
    provider.client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "RunInstancesCommand") {
          atLaunch.push(await readParameters(expected.map((p) => p.name)));
        }
        return next(args);
      },
      { step: "initialize", name: "parametersAtLaunch" },
    );
    const pod = testPod("with-parameters", podUid);
    await provider.createPod(pod);

    expect(atLaunch).toHaveLength(1);
    expect(atLaunch[0]).toEqual(new Map(expected.map((p) => [p.name, p.value])));
    // Byte for byte, decrypted.
    const stored = await readParameters(expected.map((p) => p.name));
    for (const p of expected) {
      expect(Buffer.from(stored.get(p.name) ?? "", "utf8")).toEqual(Buffer.from(p.value, "utf8"));
    }
    const [instance] = await nodeInstances(ec2, `${cluster}-node`);
    const instanceId = instance?.InstanceId ?? "";
    expect(instanceId).toMatch(/^i-/);
    // SecureString, and the launch ordering as SSM and EC2 recorded it.
    const described = await ssm.send(
      new DescribeParametersCommand({
        ParameterFilters: [
          {
            Key: "Path",
            Option: "OneLevel",
            Values: [podParameterPrefix(cluster, podUid).slice(0, -1)],
          },
        ],
      }),
    );
    expect(described.Parameters).toHaveLength(values.length);
    for (const p of described.Parameters ?? []) {
      expect(p.Type).toBe("SecureString");
      expect(p.Tier).toBe("Standard");
      // Under the cluster's customer managed key by default, not the AWS managed aws/ssm.
      expect(p.KeyId).toBe(`alias/nebula/${cluster}/pod-parameters`);
      expect(p.LastModifiedDate?.getTime()).toBeLessThanOrEqual(
        (instance?.LaunchTime?.getTime() ?? 0) + 1000,
      );
    }
    // Tagged with the instance's ARN (the account from RunInstances' OwnerId), cluster and Pod.
    const owner = (await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] })))
      .Reservations?.[0]?.OwnerId;
    for (const p of expected) {
      expect(await tagsOf(p.name)).toEqual({
        "nebula:cluster": cluster,
        "nebula:pod-uid": podUid,
        "nebula:instance-arn": `arn:aws:ec2:${moto.region}:${owner}:instance/${instanceId}`,
      });
    }

    // The teardown releases them once the instance is terminated: nothing left under the prefix.
    const state = await reclaim(provider, pod);
    expect(state).toMatchObject({ complete: true, instanceId });
    expect(await podParameters(cluster, podUid)).toEqual([]);
    // Repeating the release is harmless (all 8 names, missing ones are no error).
    const auxiliaries = provider.auxiliariesOf(podUid);
    expect(auxiliaries).toHaveLength(1);
    for (const object of auxiliaries) await provider.releaseAuxiliary(object);
    await provider.stop();
  });

  it("a write that fails sends no RunInstances; the next poll writes and launches", async () => {
    const cluster = "p-retry";
    const podUid = uid(2);
    const expected = parametersOf(cluster, podUid, ["a", "b"]);
    let refuse = 2;
    const provider = new Ec2PodProvider({
      config: config(cluster),
      renderUserData: renderWith(() => expected),
      livePodUids: () => [podUid],
    });
    const sent: string[] = [];
    provider.ssm.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "PutParameterCommand" && refuse > 0) {
          refuse--;
          throw Object.assign(new Error("Rate exceeded"), {
            name: "ThrottlingException",
            $fault: "client",
          });
        }
        return next(args);
      },
      { step: "initialize", name: "refusePuts" },
    );
    provider.client.middlewareStack.add(
      (next, context) => async (args) => {
        sent.push(context.commandName ?? "?");
        return next(args);
      },
      { step: "initialize", name: "ec2Calls" },
    );
    const log = recorder();
    provider.notifyPods(log.listener);
    await provider.createPod(testPod("retry", podUid));
    expect(sent.filter((c) => c === "RunInstancesCommand")).toEqual([]);
    expect(provider.getPodStatus(podUid)).toMatchObject({ phase: "Pending", reason: "Throttled" });
    await provider.pollOnce();
    expect(sent.filter((c) => c === "RunInstancesCommand")).toHaveLength(1);
    expect(await readParameters(expected.map((p) => p.name))).toEqual(
      new Map(expected.map((p) => [p.name, p.value])),
    );
    expect(log.events.filter((e) => e.reason === "ParametersNotWritten")).toHaveLength(1);
    expect(await reclaim(provider, testPod("retry", podUid))).toMatchObject({ complete: true });
    expect(await podParameters(cluster, podUid)).toEqual([]);
    await provider.stop();
  });
});

describe("service-account tokens", () => {
  it("issued before RunInstances into the Pod's token parameter, tagged with the instance's ARN, renewed in place (the tag stays), deleted by the teardown", async () => {
    const cluster = "p-tokens";
    const podUid = uid(3);
    const pod = testPod("with-token", podUid);
    if (pod.spec) {
      pod.spec.serviceAccountName = "reader";
      pod.spec.volumes = [
        {
          name: "kube-api-access-x1y2z",
          projected: {
            sources: [
              { serviceAccountToken: { expirationSeconds: 600, path: "token" } },
              {
                configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] },
              },
              {
                downwardAPI: {
                  items: [{ path: "namespace", fieldRef: { fieldPath: "metadata.namespace" } }],
                },
              },
            ],
          },
        },
      ];
    }
    // The clock the provider renews by: moved forward past the renewal time below.
    let offset = 0;
    const now = () => Date.now() + offset;
    // Tokens as the API server issues them (the real TokenRequest is @nebula/virtual-node's
    // podTokenRequester, tested against kube-apiserver): a compact JWS, 600 s of life.
    let issued = 0;
    const asked: string[] = [];
    const expected = parametersOf(cluster, podUid, ["spec"]);
    const provider = new Ec2PodProvider({
      config: config(cluster),
      renderUserData: renderWith(() => expected),
      readSources: async () => ({
        configMaps: { "kube-root-ca.crt": { data: { "ca.crt": "CA" } } },
        secrets: {},
      }),
      requestToken: async (p, request) => {
        asked.push(`${p.spec?.serviceAccountName}:${request.expirationSeconds}`);
        issued++;
        return {
          token: `eyJhbGciOiJSUzI1NiJ9.eyJuIjoi${issued}In0.c2ln`,
          expiresAt: now() + 600_000,
        };
      },
      livePodUids: () => [podUid],
      now,
    });
    const tokenName = `${podParameterPrefix(cluster, podUid)}t`;
    const atLaunch: Array<Map<string, string>> = [];
    provider.client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "RunInstancesCommand") {
          atLaunch.push(await readParameters([tokenName]));
        }
        return next(args);
      },
      { step: "initialize", name: "tokenAtLaunch" },
    );
    await provider.createPod(pod);
    expect(asked).toEqual(["reader:600"]);
    expect(atLaunch).toEqual([new Map([[tokenName, "0:eyJhbGciOiJSUzI1NiJ9.eyJuIjoi1In0.c2ln"]])]);
    const [instance] = await nodeInstances(ec2, `${cluster}-node`);
    const instanceId = instance?.InstanceId ?? "";
    await provider.pollOnce();
    const arn = (await tagsOf(tokenName))["nebula:instance-arn"];
    expect(arn).toMatch(new RegExp(`:instance/${instanceId}$`));

    // Not due yet: nothing is asked.
    await provider.pollOnce();
    expect(issued).toBe(1);
    // At 80 % of its life the token is renewed: the parameter is overwritten in place and keeps
    // every tag (the instance's ARN too: the host role goes on reading it).
    offset = 480_000;
    await provider.pollOnce();
    const deadline = Date.now() + 10_000;
    while (
      (await readParameters([tokenName])).get(tokenName)?.includes("eyJuIjoi1In0") &&
      Date.now() < deadline
    ) {
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(issued).toBe(2);
    expect(await readParameters([tokenName])).toEqual(
      new Map([[tokenName, "0:eyJhbGciOiJSUzI1NiJ9.eyJuIjoi2In0.c2ln"]]),
    );
    expect(await tagsOf(tokenName)).toEqual({
      "nebula:cluster": cluster,
      "nebula:pod-uid": podUid,
      "nebula:instance-arn": arn,
    });

    // The teardown deletes it with the Pod's other parameters; no renewal after the Pod is gone.
    expect(await reclaim(provider, pod)).toMatchObject({ complete: true, instanceId });
    expect(await podParameters(cluster, podUid)).toEqual([]);
    offset = 2 * 480_000;
    await provider.pollOnce();
    await provider.stop();
    expect(issued).toBe(2);
    expect(await podParameters(cluster, podUid)).toEqual([]);
  });
});

describe("CreateContainerConfigError", () => {
  it("a Pod whose Secret is missing is held Pending (waiting reason, one Warning) and launched once the Secret appears", async () => {
    const cluster = "p-config";
    const podUid = uid(10);
    let secrets: PodSources["secrets"] = {};
    const reads: string[][] = [];
    const provider = new Ec2PodProvider({
      config: config(cluster),
      readSources: async (_pod, refs) => {
        reads.push([...refs.secrets]);
        return { configMaps: {}, secrets };
      },
      renderUserData: needsDb(cluster, podUid),
      livePodUids: () => [podUid],
    });
    const log = recorder();
    provider.notifyPods(log.listener);
    const pod = podWithSecret("needs-db", podUid);
    await provider.createPod(pod);
    for (let i = 0; i < 3; i++) await provider.pollOnce();

    const held = provider.getPodStatus(podUid);
    expect(held?.phase).toBe("Pending");
    expect(held?.containerStatuses?.[0]?.state?.waiting).toEqual({
      reason: "CreateContainerConfigError",
      message: 'secret "db" not found',
    });
    expect(held?.conditions?.find((c) => c.type === "Ready")?.status).toBe("False");
    expect(held?.conditions?.find((c) => c.type === "ContainersReady")?.status).toBe("False");
    expect(log.events).toEqual([
      { type: "Warning", reason: "MandatorySecretNotFound", message: 'secret "db" not found' },
    ]);
    // Read again on every poll, never launched, nothing written.
    expect(reads).toEqual([["db"], ["db"], ["db"], ["db"]]);
    expect(await nodeInstances(ec2, `${cluster}-node`)).toEqual([]);
    expect(await podParameters(cluster, podUid)).toEqual([]);

    // The Secret appears: the next poll renders and launches, with its value in the parameters.
    secrets = { db: { data: { password: "s3cr3t" } } };
    await provider.pollOnce();
    const instances = await nodeInstances(ec2, `${cluster}-node`);
    expect(instances).toHaveLength(1);
    expect([...(await readParameters(podParameterNames(cluster, podUid))).values()]).toEqual([
      "s3cr3t",
    ]);
    const launched = provider.getPodStatus(podUid);
    expect(launched?.containerStatuses?.[0]?.state?.waiting?.reason).not.toBe(
      "CreateContainerConfigError",
    );
    expect(launched?.conditions?.some((c) => c.reason === "CreateContainerConfigError")).toBe(
      false,
    );
    expect(log.events.map((e) => e.reason)).toEqual(["MandatorySecretNotFound", "Launched"]);
    expect(await reclaim(provider, pod)).toMatchObject({ complete: true });
    expect(await podParameters(cluster, podUid)).toEqual([]);
    await provider.stop();
  });

  it("a held Pod deleted before it ever launched completes, with no instance and no parameter", async () => {
    const cluster = "p-config-gone";
    const podUid = uid(11);
    const provider = new Ec2PodProvider({
      config: config(cluster),
      // No readSources: every reference is missing.
      renderUserData: needsDb(cluster, podUid),
      livePodUids: () => [podUid],
    });
    const pod = podWithSecret("never", podUid);
    await provider.createPod(pod);
    expect(provider.getPodStatus(podUid)?.containerStatuses?.[0]?.state?.waiting?.reason).toBe(
      "CreateContainerConfigError",
    );
    expect(await reclaim(provider, pod)).toMatchObject({ complete: true });
    expect(await nodeInstances(ec2, `${cluster}-node`)).toEqual([]);
    await provider.stop();
  });
});

describe("a process killed between writing the parameters and RunInstances", () => {
  it("leaves nothing behind: the resumed process launches once, and the Pod's teardown deletes them", async () => {
    const cluster = "p-crash";
    const node = `${cluster}-node`;
    const ledger = new MemoryPodLedger();
    const expected = (podUid: string) => parametersOf(cluster, podUid, ["spec", "secret"]);
    const mortal = (podUid: string) => {
      const first = new Ec2PodProvider({
        config: config(cluster, { maxAttempts: 1 }),
        renderUserData: renderWith(() => expected(podUid)),
        livePodUids: () => [podUid],
        ledger,
      });
      // Killed as RunInstances is about to leave: the parameters are written, no instance exists.
      first.client.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName === "RunInstancesCommand") throw new Error("process killed");
          return next(args);
        },
        { step: "initialize", name: "kill" },
      );
      return first;
    };

    // 1. The Pod is still there: a fresh process resumes, launches once, then reclaims it.
    const resumedUid = uid(20);
    const first = mortal(resumedUid);
    await first.createPod(testPod("resumed", resumedUid));
    await first.stop();
    expect(await podParameters(cluster, resumedUid)).toHaveLength(2);
    expect(await nodeInstances(ec2, node)).toEqual([]);
    const second = new Ec2PodProvider({
      config: config(cluster),
      renderUserData: renderWith(() => expected(resumedUid)),
      livePodUids: () => [resumedUid],
      ledger,
    });
    await second.createPod(testPod("resumed", resumedUid));
    await second.pollOnce();
    const launched = await nodeInstances(ec2, node);
    expect(launched).toHaveLength(1);
    const instanceId = launched[0]?.InstanceId ?? "";
    for (const name of (await podParameters(cluster, resumedUid)).values()) {
      expect((await tagsOf(name))["nebula:instance-arn"]).toMatch(
        new RegExp(`:instance/${instanceId}$`),
      );
    }
    expect(await reclaim(second, testPod("resumed", resumedUid))).toMatchObject({
      complete: true,
    });
    expect(await podParameters(cluster, resumedUid)).toEqual([]);

    // 2. The Pod was deleted while the process was down: its teardown deletes them.
    const goneUid = uid(21);
    const killed = mortal(goneUid);
    await killed.createPod(testPod("gone", goneUid));
    await killed.stop();
    expect(await podParameters(cluster, goneUid)).toHaveLength(2);
    const state = await reclaim(second, testPod("gone", goneUid));
    expect(state).toMatchObject({ complete: true });
    expect(await podParameters(cluster, goneUid)).toEqual([]);
    const all = await nodeInstances(ec2, node);
    expect(all).toHaveLength(1);
    expect(all.every((i) => i.State?.Name === "terminated")).toBe(true);
    await second.stop();
  });
});

describe("leak collection of parameters", () => {
  it("deletes the parameters of a Pod that does not exist once older than the grace; spares live Pods, unfinished teardowns, young ones and other nodes' running Pods", async () => {
    const cluster = "p-leaks";
    const put = async (podUid: string, values: readonly string[]) => {
      for (const p of parametersOf(cluster, podUid, values)) {
        await ssm.send(
          new PutParameterCommand({
            Name: p.name,
            Value: p.value,
            Type: "SecureString",
            Overwrite: true,
          }),
        );
      }
    };
    const orphan = uid(30);
    const livePod = uid(31);
    const unfinished = uid(32);
    const otherNode = uid(33);
    const young = uid(34);
    await put(orphan, ["a", "b", "c"]);
    await put(livePod, ["a"]);
    await put(unfinished, ["a"]);
    await put(otherNode, ["a"]);
    // Another virtual node of the cluster runs `otherNode`'s instance.
    const other = parseProviderConfig({ ...config(cluster), nodeName: "another-node" });
    const run = await ec2.send(
      new RunInstancesCommand(
        buildRunInstancesInput({
          pod: podFacts(testPod("elsewhere", otherNode)),
          config: other,
          instanceType: "t3.micro",
          userData: USER_DATA,
        }),
      ),
    );
    const ledger = new MemoryPodLedger();
    await ledger.recordLaunch(
      { podUid: unfinished, namespace: "default", name: "unfinished" },
      { requestedAt: Date.now() },
    );
    // The grace is configurable: 2 s here (LastModifiedDate is SSM's clock, not a fake one).
    const provider = new Ec2PodProvider({
      config: config(cluster, {
        leakCollection: { graceSeconds: 300, intervalSeconds: 60, parameterGraceSeconds: 2 },
      }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [livePod],
      ledger,
    });
    const collected: Array<{ podUid: string; names: readonly string[] }> = [];
    provider.onParameterLeakCollected(({ podUid, names }) => collected.push({ podUid, names }));

    // Within the grace: nothing is collected (a launch may be writing them).
    expect((await provider.collectLeaks()).parameters).toEqual({ delete: [], podUids: [] });
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    await put(young, ["a"]);
    const plan = await provider.collectLeaks();
    const orphanNames = parametersOf(cluster, orphan, ["a", "b", "c"]).map((p) => p.name);
    expect(plan.parameters).toEqual({ delete: orphanNames, podUids: [orphan] });
    expect(collected).toEqual([{ podUid: orphan, names: orphanNames }]);
    expect(await podParameters(cluster, orphan)).toEqual([]);
    // (The unfinished record's own teardown, which the sweep resumes, releases its parameters.)
    for (const spared of [livePod, otherNode, young]) {
      expect(await podParameters(cluster, spared)).toHaveLength(1);
    }
    await ec2.send(
      new TerminateInstancesCommand({ InstanceIds: [run.Instances?.[0]?.InstanceId ?? ""] }),
    );
    await provider.stop();
  });
});

describe("crash at every side effect, parameters delivery", () => {
  it("killed before or after each EC2 and SSM mutation and ledger write, a fresh process launches at most one instance, reclaims it and leaves no parameter", async () => {
    const failures: string[] = [];
    let runs = 0;
    const cluster = "p-crashloop";
    for (let k = 0; k < 80; k++) {
      let past = false;
      for (const when of ["before", "after"] as const) {
        const node = `${cluster}-${k}-${when}`;
        const podUid = uid(1000 + k * 2 + (when === "after" ? 1 : 0));
        const render = renderWith(() => parametersOf(cluster, podUid, ["spec", "values"]));
        const inner = new MemoryPodLedger();
        const mortal = new Mortal(k, when);
        const pod = testPod("victim", podUid);
        const first = new Ec2PodProvider({
          config: config(cluster, { nodeName: node, maxAttempts: 1 }),
          renderUserData: render,
          livePodUids: () => [podUid],
          ledger: mortal.ledger(inner),
        });
        mortal.clients(first);
        // The first process: its provider and its teardown driver.
        const teardown = testTeardown(first);
        try {
          await first.createPod(pod);
          await first.pollOnce();
          for (let i = 0; i < 30 && !mortal.dead; i++) {
            const result = await teardown.step(deleting(pod));
            if (result.status === "complete") break;
            await new Promise((resolve) => setTimeout(resolve, 50));
            await first.pollOnce();
          }
        } catch {
          // died
        }
        await first.stop().catch(() => undefined);
        if (!mortal.dead) {
          past = true; // k is past the last side effect
          break;
        }
        runs++;
        const second = new Ec2PodProvider({
          config: config(cluster, { nodeName: node }),
          renderUserData: render,
          livePodUids: () => [podUid],
          ledger: inner,
        });
        await second.createPod(deleting(pod));
        // A fresh PodTeardown too; the Pod object is where the first left it (one API server).
        const state = await testTeardown(second, { removed: teardown.removed }).reclaim(
          deleting(pod),
          { rounds: 120, ms: 100 },
        );
        await second.stop();
        const instances = await nodeInstances(ec2, node);
        const alive = instances.filter((i) => i.State?.Name !== "terminated");
        const left = await podParameters(cluster, podUid);
        if (!state.complete) {
          failures.push(`${node}: reclaim not complete (${JSON.stringify(state.result)})`);
        }
        if (instances.length > 1) failures.push(`${node}: ${instances.length} instances launched`);
        if (alive.length > 0) failures.push(`${node}: ${alive.length} instance(s) left running`);
        if (left.length > 0) failures.push(`${node}: ${left.length} parameter(s) left`);
      }
      if (past) break;
    }
    expect(runs).toBeGreaterThanOrEqual(16);
    expect(failures).toEqual([]);
  }, 600_000);
});
