import type { V1Pod } from "@kubernetes/client-node";
import { type PodSources, UserDataError } from "@nebula/userdata";
import { describe, expect, it } from "vitest";
import { Admitter, type AdmitterOptions, renderOptionsOf } from "./admitter.js";
import { parseProviderConfig } from "./config.js";
import { podFacts } from "./pod.js";
import { PodTokens } from "./pod-tokens.js";
import { LAUNCHED_CONDITION } from "./status.js";
import { addOwnedInstance, observed, T0, testContext } from "./testing/context.js";
import { testConfig, testPod } from "./testing/fixtures.js";

function setup(overrides: Parameters<typeof testContext>[0] = {}, options: AdmitterOptions = {}) {
  const t = testContext(overrides);
  const admitter = new Admitter(t.ctx, options, new PodTokens(t.ctx, undefined, "test"));
  const load = (pod: V1Pod) => admitter.load(pod, podFacts(pod));
  return { ...t, admitter, load };
}

function podWithSecret(uid: string): V1Pod {
  const pod = testPod("needs-db", uid);
  const container = pod.spec?.containers[0];
  if (container) {
    container.env = [{ name: "DB", valueFrom: { secretKeyRef: { name: "db", key: "password" } } }];
  }
  return pod;
}

const base = (uid: string) => ({ podUid: uid, namespace: "default", name: uid });

describe("Admitter.load", () => {
  it("admits and renders a new Pod, without a call or a ledger write", async () => {
    const { ctx, gateway, ledger, load } = setup();
    const record = await load(testPod("web", "uid-1"));
    expect(record).toMatchObject({
      mode: "launch",
      instanceType: "m7i.large",
      launchRequested: false,
      unknownOutcome: false,
      deleted: false,
      parameters: [],
    });
    expect(record.userData).toMatchObject({
      userData: expect.any(String),
      bytes: expect.any(Number),
    });
    expect(ctx.records.get("uid-1")).toBe(record);
    expect(record.events).toEqual([]);
    expect(gateway.calls).toEqual([]);
    expect(await ledger.get("uid-1")).toBeUndefined();
  });

  it("takes a recorded instance from the ledger and renders nothing (adopted, not launched again)", async () => {
    const { ledger, load } = setup();
    await ledger.recordLaunch(base("uid-2"), {
      requestedAt: T0 - 5000,
      clientToken: "uid-2",
      instanceId: "i-0123456789abcdef0",
      launchedAt: T0 - 4000,
    });
    const record = await load(testPod("web", "uid-2"));
    expect(record).toMatchObject({
      mode: "launch",
      instanceId: "i-0123456789abcdef0",
      launchRequested: true,
      unknownOutcome: false,
      requestedAt: T0 - 5000,
      clientToken: "uid-2",
      seen: false,
    });
    expect(record.launchedAt?.getTime()).toBe(T0 - 4000);
    expect(record.userData).toBeUndefined();
  });

  it("a requested launch without an instance is an unknown outcome, rendered to repeat the same request", async () => {
    const { ledger, load } = setup();
    await ledger.recordLaunch(base("uid-3"), { requestedAt: T0 - 5000, clientToken: "uid-3.1" });
    const record = await load(testPod("web", "uid-3"));
    expect(record).toMatchObject({
      launchRequested: true,
      unknownOutcome: true,
      clientToken: "uid-3.1",
      mode: "launch",
    });
    expect(record.userData).toBeDefined();
  });

  it("keeps a Pod terminal in the API as it is: never launched, its status already delivered", async () => {
    const { load } = setup();
    const pod = testPod("done", "uid-4");
    pod.status = { phase: "Succeeded", reason: "Completed" };
    const record = await load(pod);
    expect(record.mode).toBe("terminal");
    expect(record.status).toEqual({ phase: "Succeeded", reason: "Completed" });
    expect(record.delivered?.[0]).toEqual({ phase: "Succeeded", reason: "Completed" });
    expect(record.userData).toBeUndefined();
  });

  it("does not render a Pod being deleted", async () => {
    const { load } = setup();
    const pod = testPod("gone", "uid-5");
    pod.metadata = { ...pod.metadata, deletionTimestamp: new Date(T0) };
    const record = await load(pod);
    expect(record.deleted).toBe(true);
    expect(record.userData).toBeUndefined();
    expect(record.status).toBeUndefined();
  });

  it("holds a DaemonSet Pod Pending with a Normal Event", async () => {
    const { load } = setup();
    const pod = testPod("ds", "uid-6");
    pod.metadata = {
      ...pod.metadata,
      ownerReferences: [
        { apiVersion: "apps/v1", kind: "DaemonSet", name: "ds", uid: "ds-uid", controller: true },
      ],
    };
    const record = await load(pod);
    expect(record.mode).toBe("hold");
    expect(record.status).toMatchObject({ phase: "Pending", reason: "DaemonSetPodNotLaunched" });
    expect(record.status?.conditions?.[0]).toMatchObject({
      type: LAUNCHED_CONDITION,
      status: "False",
      reason: "DaemonSetPodNotLaunched",
    });
    expect(record.events.map((e) => [e.type, e.reason])).toEqual([
      ["Normal", "DaemonSetPodNotLaunched"],
    ]);
  });

  it("refuses user-data over 16 KiB: Failed, UserDataTooLarge, a Warning naming the limit", async () => {
    const { load } = setup({}, { renderUserData: () => `#!/bin/bash\n${"x".repeat(20_000)}` });
    const record = await load(testPod("big", "uid-7"));
    expect(record.mode).toBe("refused");
    expect(record.status).toMatchObject({ phase: "Failed", reason: "UserDataTooLarge" });
    expect(record.status?.message).toMatch(/16384/);
    expect(record.status?.containerStatuses?.[0]?.state?.waiting?.reason).toBe("UserDataTooLarge");
    expect(record.events.map((e) => [e.type, e.reason])).toEqual([["Warning", "UserDataTooLarge"]]);
    expect(record.userData).toBeUndefined();
  });

  it("refuses a Pod taking a Secret with user-data delivery, with the renderer's code as reason", async () => {
    const { load } = setup();
    const record = await load(podWithSecret("uid-8"));
    expect(record.mode).toBe("refused");
    expect(record.status?.phase).toBe("Failed");
    expect(record.status?.reason).toBe("SecretInUserData");
    expect(record.status?.message).toMatch(/spec\.containers/);
  });

  it("refuses an instance type outside the allow-list", async () => {
    const { load } = setup();
    const pod = testPod("gpu", "uid-9", {
      nodeSelector: { "node.kubernetes.io/instance-type": "p5.48xlarge" },
    });
    const record = await load(pod);
    expect(record.mode).toBe("refused");
    expect(record.status?.reason).toBe("InstanceTypeNotAllowed");
  });

  it("with parameters delivery keeps the rendered parameters and publishes each notice once", async () => {
    const { load } = setup(
      { podDelivery: "parameters" },
      {
        renderUserData: () => ({
          userData: Buffer.from("#!/bin/bash\n").toString("base64"),
          bytes: 12,
          parameters: [{ name: "/nebula/test/pods/uid-10/0", value: "e30=" }],
          sharedParameters: [{ name: "/nebula/test/supervisor/0", value: "c3Vw" }],
          notices: [
            { reason: "OptionalSecretNotFound", message: 'secret "opt" not found' },
            { reason: "OptionalSecretNotFound", message: 'secret "opt" not found' },
          ],
        }),
      },
    );
    const record = await load(testPod("p", "uid-10"));
    expect(record.mode).toBe("launch");
    expect(record.parameters).toEqual([{ name: "/nebula/test/pods/uid-10/0", value: "e30=" }]);
    expect(record.sharedParameters).toHaveLength(1);
    expect(record.parametersUntagged).toBe(true);
    expect(record.events).toEqual([
      { type: "Warning", reason: "OptionalSecretNotFound", message: 'secret "opt" not found' },
    ]);
  });

  it("after a restart, waits for the instance-ARN tag only on a launch within the parameter grace", async () => {
    const { ledger, load } = setup({ podDelivery: "parameters" });
    await ledger.recordLaunch(base("uid-new"), {
      instanceId: "i-0123456789abcdef0",
      launchedAt: T0 - 60_000,
    });
    await ledger.recordLaunch(base("uid-old"), {
      instanceId: "i-0123456789abcdef1",
      launchedAt: T0 - 3_600_000,
    });
    expect((await load(testPod("n", "uid-new"))).parametersUntagged).toBe(true);
    expect((await load(testPod("o", "uid-old"))).parametersUntagged).toBe(false);
  });
});

describe("Admitter sources", () => {
  it("reads them for a Pod that references nothing: the Services are in every Pod's environment", async () => {
    const asked: Array<{ configMaps: readonly string[]; secrets: readonly string[] }> = [];
    const { load } = setup(
      { podDelivery: "parameters" },
      {
        readSources: async (_pod, refs) => {
          asked.push(refs);
          return {
            configMaps: {},
            secrets: {},
            services: [
              {
                metadata: { name: "kubernetes", namespace: "default" },
                spec: { clusterIP: "10.96.0.1", ports: [{ port: 443 }] },
              },
            ],
          };
        },
      },
    );
    const record = await load(testPod("web", "uid-s1"));
    expect(asked).toEqual([{ configMaps: [], secrets: [] }]);
    expect(record.mode).toBe("launch");
  });
});

describe("Admitter CreateContainerConfigError", () => {
  const missingSecret = () => ({
    ok: false as const,
    error: new UserDataError(
      "CreateContainerConfigError",
      "spec.containers[app].env[DB]",
      'secret "db" not found',
      undefined,
      "MandatorySecretNotFound",
    ),
  });

  it("holds the Pod Pending with the kubelet's waiting reason and one Warning per message", async () => {
    let sources: PodSources = { configMaps: {}, secrets: {} };
    const { admitter, load, gateway } = setup(
      { podDelivery: "parameters" },
      { readSources: async () => sources },
    );
    const record = await load(podWithSecret("uid-c1"));
    expect(record.mode).toBe("config");
    expect(record.status?.phase).toBe("Pending");
    expect(record.status?.containerStatuses?.[0]?.state?.waiting).toEqual({
      reason: "CreateContainerConfigError",
      message: 'secret "db" not found',
    });
    expect(record.events).toEqual([
      { type: "Warning", reason: "MandatorySecretNotFound", message: 'secret "db" not found' },
    ]);
    // Still missing on the next poll: no second Event.
    await admitter.readmit(record, undefined);
    expect(record.mode).toBe("config");
    expect(record.events).toHaveLength(1);
    // The Secret appears: rendered, launched from now on, the hold's condition gone.
    sources = { configMaps: {}, secrets: { db: { data: { password: "cHc=" } } } };
    await admitter.readmit(record, undefined);
    expect(record.mode).toBe("launch");
    expect(record.configError).toBeUndefined();
    expect(record.parameters?.length).toBeGreaterThan(0);
    expect(record.status?.conditions?.some((c) => c.type === LAUNCHED_CONDITION)).toBe(false);
    expect(gateway.calls).toEqual([]);
  });

  it("a Warning per distinct message, from a renderUserData override", async () => {
    let message = 'secret "db" not found';
    const { admitter, load } = setup(
      { podDelivery: "parameters" },
      {
        readSources: async () => ({ configMaps: {}, secrets: {} }),
        renderUserData: () => {
          const r = missingSecret();
          return { ok: false, error: Object.assign(r.error, { message }) };
        },
      },
    );
    const record = await load(podWithSecret("uid-c2"));
    await admitter.readmit(record, undefined);
    message = 'secret "db" has no key "password"';
    await admitter.readmit(record, undefined);
    expect(record.events.map((e) => e.message)).toEqual([
      'secret "db" not found',
      'secret "db" has no key "password"',
    ]);
  });

  it("a failed read of the sources holds the Pod too (FailedToReadSources), and is retried", async () => {
    let fail = true;
    const { admitter, load } = setup(
      { podDelivery: "parameters" },
      {
        readSources: async () => {
          if (fail) throw new Error("apiserver unavailable");
          return { configMaps: {}, secrets: { db: { data: { password: "cHc=" } } } };
        },
      },
    );
    const record = await load(podWithSecret("uid-c3"));
    expect(record.mode).toBe("config");
    expect(record.events.map((e) => e.reason)).toEqual(["FailedToReadSources"]);
    expect(record.status?.containerStatuses?.[0]?.state?.waiting?.message).toBe(
      "the ConfigMaps, Secrets and Services of pod default/needs-db could not be read: apiserver unavailable",
    );
    fail = false;
    await admitter.readmit(record, undefined);
    expect(record.mode).toBe("launch");
  });

  it("adopts the instance a lost launch left instead of reading the sources", async () => {
    let reads = 0;
    const { ctx, gateway, admitter, load, ledger } = setup(
      { podDelivery: "parameters" },
      {
        readSources: async () => {
          reads++;
          return { configMaps: {}, secrets: {} };
        },
      },
    );
    await ledger.recordLaunch(base("uid-c4"), { requestedAt: T0 - 1000, clientToken: "uid-c4" });
    const record = await load(podWithSecret("uid-c4"));
    expect(record.mode).toBe("config");
    expect(reads).toBe(1);
    const instance = observed(addOwnedInstance(gateway, "uid-c4"));
    await admitter.readmit(record, instance);
    expect(reads).toBe(1);
    expect(record.mode).toBe("launch");
    expect(record.instanceId).toBe(instance.instanceId);
    expect(record.ledgerDirty).toBe(true);
    expect(ctx.records.get("uid-c4")).toBe(record);
  });

  it("does not adopt a listed instance that does not prove it is the Pod's", async () => {
    const { gateway, admitter, load, ledger } = setup(
      { podDelivery: "parameters" },
      { readSources: async () => ({ configMaps: {}, secrets: {} }) },
    );
    await ledger.recordLaunch(base("uid-c5"), { requestedAt: T0 - 1000, clientToken: "uid-c5" });
    const record = await load(podWithSecret("uid-c5"));
    const forged = observed(gateway.addInstance("uid-c5", { ClientToken: "someone-else" }));
    await admitter.readmit(record, forged);
    expect(record.mode).toBe("config");
    expect(record.instanceId).toBeUndefined();
  });
});

describe("Admitter.refresh", () => {
  it("takes the newer Pod and its deletion", async () => {
    const { admitter, load } = setup();
    const record = await load(testPod("web", "uid-r"));
    const newer = testPod("web", "uid-r");
    newer.metadata = { ...newer.metadata, deletionTimestamp: new Date(T0), labels: { a: "b" } };
    admitter.refresh(record, newer);
    expect(record.deleted).toBe(true);
    expect(record.facts.labels).toEqual({ a: "b" });
    expect(record.pod).not.toBe(newer);
  });
});

const AGENT_FILES = {
  clientCertFile: "/etc/nebula/agent/tls.crt",
  clientKeyFile: "/etc/nebula/agent/tls.key",
};

describe("renderOptionsOf", () => {
  it("passes the configured logs and metrics to the renderer, over the userData option", () => {
    const config = parseProviderConfig(
      testConfig({ logs: { group: "/nebula/blue" }, metrics: { sampleSeconds: 10 } }),
    );
    expect(
      renderOptionsOf(config, {
        cluster: "named",
        logs: { group: "/elsewhere" },
        delivery: "user-data",
      }),
    ).toEqual({
      cluster: "named",
      logs: { group: "/nebula/blue" },
      metrics: { namespace: "Nebula", sampleSeconds: 10, publishSeconds: 60 },
      delivery: config.podDelivery,
      maxGracePeriodSeconds: 3600,
      dns: { clusterDNS: [], clusterDomain: "cluster.local" },
    });
  });

  it("leaves logs and metrics to the userData option when the configuration has none", () => {
    const config = parseProviderConfig(testConfig());
    expect(renderOptionsOf(config, undefined)).toEqual({
      cluster: config.clusterName,
      delivery: config.podDelivery,
      maxGracePeriodSeconds: config.maxGracePeriodSeconds,
      dns: { clusterDNS: [], clusterDomain: "cluster.local" },
    });
    expect(renderOptionsOf(config, { metrics: {} })).toMatchObject({ metrics: {} });
  });

  it("gives the hosts the configured API server address for KUBERNETES_SERVICE_HOST (port 443 by default); a bad one is a configuration error", () => {
    const config = parseProviderConfig(
      testConfig({ kubernetesService: { host: "abc.gr7.eu-west-1.eks.amazonaws.com" } }),
    );
    expect(renderOptionsOf(config, undefined)).toMatchObject({
      kubernetesService: { host: "abc.gr7.eu-west-1.eks.amazonaws.com", port: 443 },
    });
    expect(renderOptionsOf(parseProviderConfig(testConfig()), undefined)).not.toHaveProperty(
      "kubernetesService",
    );
    expect(() =>
      parseProviderConfig(testConfig({ kubernetesService: { host: "x y", port: 443 } })),
    ).toThrow(/kubernetesService\.host/);
  });

  it("runs the service proxy on the hosts against kubernetesService with the access's CA, only when configured and given", () => {
    const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const config = parseProviderConfig(
      testConfig({
        kubernetesService: { host: "10.1.2.3", port: 6443 },
        serviceProxy: { binary: "/opt/bin/kube-proxy" },
        podDelivery: "parameters",
      }),
    );
    expect(config.serviceProxy?.serviceAccount).toBe("nebula-system/nebula-service-proxy");
    expect(renderOptionsOf(config, undefined, { caCert: ca }).serviceProxy).toEqual({
      apiServer: { host: "10.1.2.3", port: 6443 },
      caCert: ca,
      nodeName: config.nodeName,
      binary: "/opt/bin/kube-proxy",
    });
    // Without the access (no CA, no token), no proxy: the Pods are held by their token first.
    expect(renderOptionsOf(config, undefined)).not.toHaveProperty("serviceProxy");
    const off = parseProviderConfig(testConfig({ kubernetesService: { host: "10.1.2.3" } }));
    expect(renderOptionsOf(off, undefined, { caCert: ca })).not.toHaveProperty("serviceProxy");
    // It needs the API server's address and the parameters delivery.
    expect(() =>
      parseProviderConfig(testConfig({ serviceProxy: {}, podDelivery: "parameters" })),
    ).toThrow(/serviceProxy: serviceProxy needs kubernetesService/);
    expect(() =>
      parseProviderConfig(
        testConfig({
          serviceProxy: {},
          kubernetesService: { host: "10.1.2.3" },
          podDelivery: "user-data",
        }),
      ),
    ).toThrow(/serviceProxy needs podDelivery: "parameters"/);
    expect(() =>
      parseProviderConfig(
        testConfig({
          serviceProxy: { serviceAccount: "no-namespace" },
          kubernetesService: { host: "10.1.2.3" },
          podDelivery: "parameters",
        }),
      ),
    ).toThrow(/serviceProxy\.serviceAccount/);
  });

  it("runs the host agent for the given client fingerprints, only when configured and given, with the parameters delivery", () => {
    const fp = "0a".repeat(32);
    const config = parseProviderConfig(
      testConfig({ hostAgent: AGENT_FILES, podDelivery: "parameters" }),
    );
    expect(config.hostAgent).toEqual({ ...AGENT_FILES, port: 10_250, binary: "nebula-agent" });
    expect(
      renderOptionsOf(config, undefined, undefined, { clientFingerprints: [fp] }).hostAgent,
    ).toEqual({ port: 10_250, binary: "nebula-agent", clientFingerprints: [fp] });
    // Without the virtual node's certificate, no agent (nothing could reach it).
    expect(renderOptionsOf(config, undefined)).not.toHaveProperty("hostAgent");
    const off = parseProviderConfig(testConfig({ podDelivery: "parameters" }));
    expect(
      renderOptionsOf(off, undefined, undefined, { clientFingerprints: [fp] }),
    ).not.toHaveProperty("hostAgent");
    expect(() =>
      parseProviderConfig(testConfig({ hostAgent: AGENT_FILES, podDelivery: "user-data" })),
    ).toThrow(/hostAgent needs podDelivery: "parameters"/);
    expect(() =>
      parseProviderConfig(
        testConfig({ hostAgent: { ...AGENT_FILES, port: 0 }, podDelivery: "parameters" }),
      ),
    ).toThrow(/hostAgent\.port/);
  });

  it("gives the hosts the configured cluster DNS, unless the userData option names its own", () => {
    const config = parseProviderConfig(
      testConfig({ dns: { clusterDNS: ["10.96.0.10"], clusterDomain: "corp.local" } }),
    );
    expect(renderOptionsOf(config, undefined).dns).toEqual({
      clusterDNS: ["10.96.0.10"],
      clusterDomain: "corp.local",
    });
    expect(renderOptionsOf(config, { dns: { clusterDNS: ["10.0.0.10"] } }).dns).toEqual({
      clusterDNS: ["10.0.0.10"],
    });
    expect(() => parseProviderConfig(testConfig({ dns: { clusterDNS: ["kube-dns"] } }))).toThrow(
      /dns/,
    );
  });

  it("has the hosts ring the event channel's queue when it is on, and only then", () => {
    const queueUrl = "https://sqs.us-east-1.amazonaws.com/123456789012/nebula-events";
    const on = parseProviderConfig(testConfig({ events: { queueUrl } }));
    expect(renderOptionsOf(on, undefined).doorbell).toEqual({ queueUrl });
    const off = parseProviderConfig(testConfig());
    expect(renderOptionsOf(off, undefined)).not.toHaveProperty("doorbell");
  });

  it("always delivers as configured, whatever the userData option says", () => {
    const config = parseProviderConfig(testConfig({ podDelivery: "parameters" }));
    expect(renderOptionsOf(config, { delivery: "user-data" }).delivery).toBe("parameters");
  });
});
