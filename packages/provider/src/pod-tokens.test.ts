import type { V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Admitter } from "./admitter.js";
import { podFacts } from "./pod.js";
import { PodTokens, type RequestToken, renewalTime } from "./pod-tokens.js";
import { T0, testContext, testRecord } from "./testing/context.js";
import { testPod } from "./testing/fixtures.js";

const JWT = (n: number) => `eyJhbGciOiJSUzI1NiJ9.eyJuIjo${n}In0.c2ln`;

/** A Pod with the API server's `kube-api-access-*` volume and an IRSA-style second token. */
function podWithTokens(uid: string): V1Pod {
  const pod = testPod("reader", uid);
  if (pod.spec) {
    pod.spec.serviceAccountName = "reader";
    pod.spec.volumes = [
      {
        name: "kube-api-access-abcde",
        projected: {
          sources: [
            { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
            { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
          ],
        },
      },
      {
        name: "aws-iam-token",
        projected: {
          sources: [
            {
              serviceAccountToken: {
                audience: "sts.amazonaws.com",
                expirationSeconds: 86400,
                path: "token",
              },
            },
          ],
        },
      },
    ];
  }
  return pod;
}

/** A token requester that answers from a counter, and records what it was asked. */
function requester(lifeMs = 3607_000, now = () => T0) {
  const asked: { pod: string; audience: string | undefined; expirationSeconds: number }[] = [];
  let n = 0;
  let failWith: Error | undefined;
  const request: RequestToken = async (pod, req) => {
    asked.push({ pod: pod.metadata?.name ?? "", ...req });
    if (failWith) throw failWith;
    n++;
    return { token: JWT(n), expiresAt: now() + Math.min(lifeMs, req.expirationSeconds * 1000) };
  };
  return {
    request,
    asked,
    fail(error: Error | undefined) {
      failWith = error;
    },
  };
}

function setup(
  request: RequestToken | undefined,
  serviceAccount?: { annotations?: Record<string, string> } | undefined,
) {
  const t = testContext({ podDelivery: "parameters" });
  const readServiceAccount = serviceAccount && (async () => serviceAccount);
  const tokens: PodTokens = new PodTokens(
    t.ctx,
    request,
    "test",
    readServiceAccount &&
      (async (pod) => {
        const found = await admitter.hostPod(pod);
        if (!found.ok) throw new Error(found.message);
        return found.pod;
      }),
  );
  // The CA of kube-api-access-*, as the API server publishes it in every namespace.
  const readSources = async () => ({
    configMaps: { "kube-root-ca.crt": { data: { "ca.crt": "-----BEGIN CERTIFICATE-----" } } },
    secrets: {},
  });
  const admitter: Admitter = new Admitter(t.ctx, { readSources, readServiceAccount }, tokens);
  return { ...t, tokens, admitter };
}

describe("renewalTime", () => {
  it("renews at 80 % of the shortest lifetime, and within 24 hours", () => {
    expect(renewalTime(0, [3600_000])).toBe(2880_000);
    expect(renewalTime(0, [3600_000, 600_000])).toBe(480_000);
    expect(renewalTime(0, [365 * 86400_000])).toBe(86400_000);
    expect(renewalTime(1000, [500])).toBe(1000);
    expect(renewalTime(5, [])).toBe(5 + 86400_000);
  });

  it("is never before issue, never after the first expiry", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.array(fc.integer({ min: 0, max: 2 ** 40 }), { minLength: 1, maxLength: 4 }),
        (issuedAt, expiries) => {
          const at = renewalTime(issuedAt, expiries);
          expect(at).toBeGreaterThanOrEqual(issuedAt);
          expect(at).toBeLessThanOrEqual(Math.max(issuedAt, Math.min(...expiries)));
        },
      ),
    );
  });
});

describe("tokens at launch", () => {
  it("issues one token per audience and lifetime and carries them in the Pod's token parameter", async () => {
    const r = requester();
    const { admitter } = setup(r.request);
    const pod = podWithTokens("uid-t1");
    const record = await admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("launch");
    expect(r.asked).toEqual([
      { pod: "reader", audience: undefined, expirationSeconds: 3607 },
      { pod: "reader", audience: "sts.amazonaws.com", expirationSeconds: 86400 },
    ]);
    const parameter = record.parameters?.find((p) => p.name === "/nebula/test/pods/uid-t1/t");
    expect(parameter?.value).toBe(`0:${JWT(1)} 1:${JWT(2)}`);
    // Renewed at 80 % of the shorter life (the requester caps both at 3607 s).
    expect(record.tokens?.renewAt).toBe(T0 + Math.floor(3607_000 * 0.8));
    expect(record.tokens?.expiresAt).toBe(T0 + 3607_000);
  });

  it("holds the Pod (FailedMount) while its token cannot be issued, and launches it once it can", async () => {
    const r = requester();
    r.fail(new Error('serviceaccounts "reader" not found'));
    const { admitter, gateway } = setup(r.request);
    const pod = podWithTokens("uid-t2");
    const record = await admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("config");
    expect(record.status?.phase).toBe("Pending");
    expect(record.events).toEqual([
      {
        type: "Warning",
        reason: "FailedMount",
        message: expect.stringContaining('serviceaccounts "reader" not found'),
      },
    ]);
    expect(record.parameters ?? []).toEqual([]);
    r.fail(undefined);
    await admitter.readmit(record, undefined);
    expect(record.mode).toBe("launch");
    expect(record.parameters?.some((p) => p.name.endsWith("/t"))).toBe(true);
    expect(gateway.calls).toEqual([]);
  });

  it("holds a Pod that projects a token when the provider cannot request one", async () => {
    const { admitter } = setup(undefined);
    const pod = podWithTokens("uid-t3");
    const record = await admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("config");
    expect(record.events[0]?.message).toMatch(/without requestToken/);
  });

  it("asks nothing for a Pod that projects no token (automountServiceAccountToken: false)", async () => {
    const r = requester();
    const { admitter } = setup(r.request);
    const pod = testPod("plain", "uid-t4");
    const record = await admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("launch");
    expect(r.asked).toEqual([]);
    expect(record.tokens).toBeUndefined();
  });

  it("serves no token with the user-data delivery", async () => {
    const r = requester();
    const t = testContext({ podDelivery: "user-data" });
    const tokens = new PodTokens(t.ctx, r.request, "test");
    expect(tokens.requestsOf(podWithTokens("uid-t5"))).toEqual([]);
    expect(await tokens.issue(podWithTokens("uid-t5"))).toEqual({ ok: true, issued: undefined });
    expect(r.asked).toEqual([]);
  });
});

describe("the service proxy's token (config.serviceProxy)", () => {
  const CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

  function proxySetup(request: RequestToken | undefined, proxyFails?: Error) {
    const t = testContext({
      podDelivery: "parameters",
      kubernetesService: { host: "api.example.internal" },
      serviceProxy: {},
    });
    const proxyAsked: number[] = [];
    let n = 100;
    const requestProxy = async ({ expirationSeconds }: { expirationSeconds: number }) => {
      proxyAsked.push(expirationSeconds);
      if (proxyFails) throw proxyFails;
      n++;
      return { token: JWT(n), expiresAt: t.clock.now + expirationSeconds * 1000 };
    };
    const tokens = new PodTokens(t.ctx, request, "test", undefined, requestProxy);
    const readSources = async () => ({
      configMaps: { "kube-root-ca.crt": { data: { "ca.crt": CA } } },
      secrets: {},
    });
    const admitter = new Admitter(t.ctx, { readSources, serviceProxy: { caCert: CA } }, tokens);
    return { ...t, tokens, admitter, proxyAsked };
  }

  it("is issued with the Pod's own tokens, last, under key p, one hour, and the Pod launches", async () => {
    const r = requester();
    const { admitter, proxyAsked } = proxySetup(r.request);
    const pod = podWithTokens("uid-p1");
    const record = await admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("launch");
    expect(r.asked.map((a) => a.audience)).toEqual([undefined, "sts.amazonaws.com"]);
    expect(proxyAsked).toEqual([3600]);
    const parameter = record.parameters?.find((p) => p.name === "/nebula/test/pods/uid-p1/t");
    expect(parameter?.value).toBe(`0:${JWT(1)} 1:${JWT(2)} p:${JWT(101)}`);
    // The shortest life sets the renewal: the proxy's hour.
    expect(record.tokens?.renewAt).toBe(T0 + 2880_000);
  });

  it("is the only token of a Pod that projects none; a Pod on the host's network gets none", async () => {
    const { admitter, proxyAsked, tokens } = proxySetup(undefined);
    const plain = testPod("plain", "uid-p2");
    const record = await admitter.load(plain, podFacts(plain));
    expect(record.mode).toBe("launch");
    expect(record.parameters?.find((p) => p.name.endsWith("/t"))?.value).toBe(`p:${JWT(101)}`);
    expect(proxyAsked).toEqual([3600]);
    const onHost = testPod("on-host", "uid-p3");
    if (onHost.spec) onHost.spec.hostNetwork = true;
    expect(tokens.requestsOf(onHost)).toEqual([]);
  });

  it("holds the Pod (FailedMount) while it cannot be issued, or when the provider has no way to ask", async () => {
    const failing = proxySetup(
      undefined,
      new Error('serviceaccounts "nebula-service-proxy" not found'),
    );
    const pod = testPod("plain", "uid-p4");
    const held = await failing.admitter.load(pod, podFacts(pod));
    expect(held.mode).toBe("config");
    expect(held.events[0]).toEqual({
      type: "Warning",
      reason: "FailedMount",
      message:
        'failed to fetch the service proxy\'s token (service account nebula-system/nebula-service-proxy): serviceaccounts "nebula-service-proxy" not found',
    });
    const t = testContext({
      podDelivery: "parameters",
      kubernetesService: { host: "api.example.internal" },
      serviceProxy: {},
    });
    const without = new PodTokens(t.ctx, undefined, "test");
    const issued = await without.issue(testPod("plain", "uid-p5"));
    expect(issued.ok ? "" : issued.message).toMatch(/without serviceProxy/);
  });

  it("is renewed with the Pod's tokens", async () => {
    const t = proxySetup(undefined);
    const record = testRecord(t.ctx, testPod("plain", "uid-p6"), {
      instanceId: "i-0123456789abcdef0",
    });
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(t.proxyAsked).toEqual([3600]);
    expect(t.gateway.parameters.get("/nebula/test/pods/uid-p6/t")?.value).toBe(`p:${JWT(101)}`);
  });
});

describe("the Pod's own AWS role (IRSA)", () => {
  const ROLE = "arn:aws:iam::123456789012:role/reader";

  it("a ServiceAccount with a role gives the Pod the sts.amazonaws.com token, rendered and issued", async () => {
    const r = requester();
    const { admitter } = setup(r.request, { annotations: { "eks.amazonaws.com/role-arn": ROLE } });
    const pod = testPod("plain", "uid-i1");
    const record = await admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("launch");
    expect(r.asked).toEqual([
      { pod: "plain", audience: "sts.amazonaws.com", expirationSeconds: 86400 },
    ]);
    expect(record.hostPod?.spec?.containers[0]?.env?.[0]).toEqual({
      name: "AWS_ROLE_ARN",
      value: ROLE,
    });
    // The Pod as the API has it is not changed.
    expect(record.pod.spec?.containers[0]?.env).toBeUndefined();
  });

  it("a role that is not a role ARN: a Warning, and the Pod launches without a role", async () => {
    const r = requester();
    const { admitter } = setup(r.request, { annotations: { "eks.amazonaws.com/role-arn": "x" } });
    const pod = testPod("plain", "uid-i2");
    const record = await admitter.load(pod, podFacts(pod));
    expect(record.mode).toBe("launch");
    expect(record.events.map((e) => e.reason)).toEqual(["InvalidRoleArn"]);
    expect(r.asked).toEqual([]);
  });

  it("after a restart the renewal finds the role again (the host Pod is found out once)", async () => {
    const r = requester();
    const t = setup(r.request, { annotations: { "eks.amazonaws.com/role-arn": ROLE } });
    const record = testRecord(t.ctx, testPod("plain", "uid-i3"), {
      instanceId: "i-0123456789abcdef0",
    });
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(r.asked.map((a) => a.audience)).toEqual(["sts.amazonaws.com"]);
    expect(record.tokens?.parameter.name).toBe("/nebula/test/pods/uid-i3/t");
  });

  it("after a restart, a Pod with no token and no role costs one read and no request", async () => {
    const r = requester();
    const t = setup(r.request, { annotations: {} });
    const record = testRecord(t.ctx, testPod("plain", "uid-i4"), {
      instanceId: "i-0123456789abcdef0",
    });
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(record.hostPod).toBeDefined();
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(r.asked).toEqual([]);
    expect(t.gateway.calls).toEqual([]);
  });
});

describe("renewal", () => {
  function running(t: ReturnType<typeof setup>, uid: string) {
    return testRecord(t.ctx, podWithTokens(uid), { instanceId: "i-0123456789abcdef0" });
  }

  it("renews the running Pod's tokens at their renewal time and overwrites only the token parameter", async () => {
    const r = requester(3607_000, () => t.clock.now);
    const t = setup(r.request);
    const record = running(t, "uid-r1");
    const first = await t.tokens.issue(record.pod);
    if (!first.ok || first.issued === undefined) throw new Error("not issued");
    record.tokens = first.issued;
    record.parameters = [
      { name: "/nebula/test/pods/uid-r1/0", value: "spec" },
      first.issued.parameter,
    ];
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(t.gateway.calls).toEqual([]);
    t.clock.advance(Math.floor(3607_000 * 0.8));
    t.tokens.renewIfDue(record);
    t.tokens.renewIfDue(record); // queued once
    await t.tokens.idle();
    expect(t.gateway.calls.map((c) => c.action)).toEqual(["writePodParameters"]);
    expect(t.gateway.calls[0]?.arg).toBe("uid-r1");
    expect(t.gateway.parameters.get("/nebula/test/pods/uid-r1/t")?.value).toBe(
      `0:${JWT(3)} 1:${JWT(4)}`,
    );
    expect(t.gateway.parameters.has("/nebula/test/pods/uid-r1/0")).toBe(false);
    expect(record.parameters?.[1]?.value).toBe(`0:${JWT(3)} 1:${JWT(4)}`);
    expect(record.parameters?.[0]?.value).toBe("spec");
    expect(record.tokens?.issuedAt).toBe(t.clock.now);
  });

  it("renews at once after a restart (when the tokens were issued is unknown)", async () => {
    const r = requester();
    const t = setup(r.request);
    const records = ["a", "b", "c", "d", "e", "f"].map((uid) => running(t, uid));
    for (const record of records) t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(records.every((record) => record.tokens !== undefined)).toBe(true);
    expect(t.gateway.calls.filter((c) => c.action === "writePodParameters")).toHaveLength(6);
  });

  it("renews nothing for a Pod that is deleted, terminal, not launched, or held", async () => {
    const r = requester();
    const t = setup(r.request);
    const deleted = running(t, "d1");
    deleted.deleted = true;
    const ended = running(t, "d2");
    ended.status = { phase: "Succeeded" };
    const pending = testRecord(t.ctx, podWithTokens("d3"));
    const held = running(t, "d4");
    held.mode = "config";
    for (const record of [deleted, ended, pending, held]) t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(r.asked).toEqual([]);
    expect(t.gateway.calls).toEqual([]);
  });

  it("says once that renewal fails, keeps the current token, and retries after 30 s", async () => {
    const r = requester(3607_000, () => t.clock.now);
    const t = setup(r.request);
    const record = running(t, "uid-r4");
    r.fail(new Error("the API server is unreachable"));
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    t.tokens.renewIfDue(record); // within the 30 s: not asked again
    await t.tokens.idle();
    expect(r.asked).toHaveLength(1);
    t.clock.advance(30_000);
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(r.asked).toHaveLength(2);
    expect(record.events.map((e) => e.reason)).toEqual(["FailedToRenewToken"]);
    expect(record.tokens).toBeUndefined();
    r.fail(undefined);
    t.clock.advance(30_000);
    t.tokens.renewIfDue(record);
    await t.tokens.idle();
    expect(record.tokens?.parameter.name).toBe("/nebula/test/pods/uid-r4/t");
    expect(t.logs.at(-1)?.message).toMatch(/renewed again/);
  });
});
