/**
 * `podTokenRequester` against a real kube-apiserver, as the vnode's ServiceAccount under the
 * shipped RBAC (deploy/vnode/rbac.yaml) and the shipped token policy (deploy/vnode/admission.yaml):
 * the token is the Pod's ServiceAccount's, bound to the Pod, with the audience and lifetime asked;
 * it authorizes what that ServiceAccount's RBAC allows and nothing else; it dies with the Pod.
 */
import { readFileSync } from "node:fs";
import {
  AuthenticationV1Api,
  CoreV1Api,
  KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  loadAllYaml,
  RbacAuthorizationV1Api,
  type V1Pod,
} from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { podServiceAccountReader, podTokenRequester, serviceProxyAccess } from "./pod-tokens.js";
import { applyManifest, SERVICE_ACCOUNT_GROUPS, VNODE_SERVICE_ACCOUNT } from "./testing/rbac.js";

const { controlPlane } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const NS = "pod-tokens-it";
const OTHER = "pod-tokens-other";

let pod: V1Pod;
const vnode = () => controlPlane.clientFor(VNODE_SERVICE_ACCOUNT, SERVICE_ACCOUNT_GROUPS);

/** A client of the same API server that authenticates with `token` alone. */
function withToken(token: string): KubeConfig {
  const cluster = admin.getCurrentCluster();
  if (!cluster) throw new Error("no cluster in the admin kubeconfig");
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: "pod", token }],
    contexts: [{ name: "pod", cluster: cluster.name, user: "pod" }],
    currentContext: "pod",
  });
  return kc;
}

async function review(token: string, audiences?: string[]) {
  const answer = await admin.makeApiClient(AuthenticationV1Api).createTokenReview({
    body: { spec: { token, ...(audiences ? { audiences } : {}) } },
  });
  // `authenticated` is left out when false.
  return { ...answer.status, authenticated: answer.status?.authenticated === true };
}

const claims = (token: string) =>
  JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString("utf8")) as Record<
    string,
    unknown
  >;

async function refusal(request: () => Promise<unknown>): Promise<string | undefined> {
  try {
    await request();
    return undefined;
  } catch (error) {
    return String((error as { body?: unknown }).body ?? error);
  }
}

beforeAll(async () => {
  await applyManifest(admin, "namespace.yaml");
  await applyManifest(admin, "rbac.yaml");
  await applyManifest(admin, "service-proxy.yaml");
  // Only the token policy of admission.yaml: the Pod and Node policies would fence the other
  // test files' requests (they use Pods of other nodes) on this shared API server.
  const policies = loadAllYaml(
    readFileSync(new URL("../../../deploy/vnode/admission.yaml", import.meta.url), "utf8"),
  ) as KubernetesObject[];
  const objects = KubernetesObjectApi.makeApiClient(admin);
  for (const object of policies.filter((o) => o.metadata?.name === "nebula-vnode-tokens")) {
    await objects.create(object).catch((error: { code?: number }) => {
      if (error.code !== 409) throw error;
    });
  }
  for (const name of [NS, OTHER]) await core.createNamespace({ body: { metadata: { name } } });
  await core.createNamespacedServiceAccount({
    namespace: NS,
    body: {
      metadata: {
        name: "reader",
        annotations: { "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/reader" },
      },
    },
  });
  const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
  await rbac.createNamespacedRole({
    namespace: NS,
    body: {
      metadata: { name: "pod-reader" },
      rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["list"] }],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: NS,
    body: {
      metadata: { name: "reader" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-reader" },
      subjects: [{ kind: "ServiceAccount", name: "reader", namespace: NS }],
    },
  });
  pod = await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "reader" },
      spec: {
        nodeName: "nebula",
        serviceAccountName: "reader",
        containers: [{ name: "app", image: "busybox" }],
      },
    },
  });
});

describe("podTokenRequester", () => {
  it("issues the Pod's ServiceAccount's token, bound to the Pod, for the lifetime asked", async () => {
    const before = Date.now();
    const { token, expiresAt } = await podTokenRequester(vnode())(pod, {
      audience: undefined,
      expirationSeconds: 600,
    });
    expect(expiresAt).toBeGreaterThanOrEqual(before + 590_000);
    expect(expiresAt).toBeLessThanOrEqual(Date.now() + 610_000);
    const status = await review(token);
    expect(status?.authenticated).toBe(true);
    expect(status?.user?.username).toBe(`system:serviceaccount:${NS}:reader`);
    expect(status?.user?.extra?.["authentication.kubernetes.io/pod-name"]).toEqual(["reader"]);
    expect(status?.user?.extra?.["authentication.kubernetes.io/pod-uid"]).toEqual([
      pod.metadata?.uid,
    ]);
    // What its ServiceAccount may do, and no more.
    const asPod = withToken(token).makeApiClient(CoreV1Api);
    const listed = await asPod.listNamespacedPod({ namespace: NS });
    expect(listed.items.map((p) => p.metadata?.name)).toEqual(["reader"]);
    expect(await refusal(() => asPod.listNamespacedPod({ namespace: OTHER }))).toMatch(/forbidden/);
    expect(await refusal(() => asPod.listNamespacedSecret({ namespace: NS }))).toMatch(/forbidden/);
  });

  it("issues a token for another audience (IRSA's sts.amazonaws.com), valid for it alone", async () => {
    const { token, expiresAt } = await podTokenRequester(vnode())(pod, {
      audience: "sts.amazonaws.com",
      expirationSeconds: 3600,
    });
    const payload = claims(token);
    expect(payload.aud).toEqual(["sts.amazonaws.com"]);
    expect(payload.sub).toBe(`system:serviceaccount:${NS}:reader`);
    expect((payload.exp as number) * 1000).toBe(expiresAt);
    expect((await review(token, ["sts.amazonaws.com"]))?.authenticated).toBe(true);
    // Not a token for the API server.
    expect((await review(token))?.authenticated).toBe(false);
  });

  it("says why when the ServiceAccount does not exist", async () => {
    const ghost = { ...pod, spec: { ...pod.spec, containers: [], serviceAccountName: "ghost" } };
    await expect(
      podTokenRequester(vnode())(ghost, { audience: undefined, expirationSeconds: 600 }),
    ).rejects.toThrow(
      'TokenRequest for serviceaccount pod-tokens-it/ghost (pod reader): serviceaccounts "ghost" not found',
    );
  });

  it("the shipped policy refuses the vnode a token not bound to a Pod", async () => {
    const asVnode = vnode().makeApiClient(CoreV1Api);
    const unbound = () =>
      asVnode.createNamespacedServiceAccountToken({
        name: "reader",
        namespace: NS,
        body: { spec: { audiences: [], expirationSeconds: 600 } },
      });
    // The policy takes effect once the API server's admission informer has it and its binding.
    const deadline = Date.now() + 30_000;
    let message = await refusal(unbound);
    while (!message?.includes("nebula-vnode-tokens") && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      message = await refusal(unbound);
    }
    expect(message).toMatch(/may request only service-account tokens bound to a Pod/);
  });

  it("the token dies with its Pod", async () => {
    const doomed = await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: "doomed" },
        spec: { serviceAccountName: "reader", containers: [{ name: "app", image: "busybox" }] },
      },
    });
    const { token } = await podTokenRequester(vnode())(doomed, {
      audience: undefined,
      expirationSeconds: 600,
    });
    expect((await review(token))?.authenticated).toBe(true);
    await core.deleteNamespacedPod({ name: "doomed", namespace: NS, gracePeriodSeconds: 0 });
    const deadline = Date.now() + 30_000;
    let authenticated = (await review(token))?.authenticated;
    while (authenticated && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      authenticated = (await review(token))?.authenticated;
    }
    expect(authenticated).toBe(false);
  });
});

describe("podServiceAccountReader", () => {
  it("reads the Pod's ServiceAccount's annotations (its AWS role), and nothing for one that does not exist", async () => {
    const read = podServiceAccountReader(vnode());
    expect(await read(pod)).toEqual({
      annotations: { "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/reader" },
    });
    const ghost = { ...pod, spec: { ...pod.spec, containers: [], serviceAccountName: "ghost" } };
    expect(await read(ghost)).toBeUndefined();
  });
});

describe("serviceProxyAccess", () => {
  const NODE = "pod-tokens-proxy-node";

  beforeAll(async () => {
    await core.createNode({ body: { metadata: { name: NODE } } }).catch((error) => {
      if ((error as { code?: number }).code !== 409) throw error;
    });
  });
  // The end-to-end files share this API server: no Node of this file stays behind.
  afterAll(async () => {
    await core.deleteNode({ name: NODE });
  });

  it("issues the service proxy's token bound to the Node, which reads Services and EndpointSlices and no Secret, and the CA the vnode trusts", async () => {
    const access = serviceProxyAccess(vnode(), {
      serviceAccount: "nebula-system/nebula-service-proxy",
      nodeName: NODE,
    });
    expect(access.caCert).toContain("-----BEGIN CERTIFICATE-----");
    const before = Date.now();
    const { token, expiresAt } = await access.requestToken({ expirationSeconds: 3600 });
    expect(expiresAt).toBeGreaterThanOrEqual(before + 3590_000);
    const reviewed = await review(token);
    expect(reviewed?.user?.username).toBe(
      "system:serviceaccount:nebula-system:nebula-service-proxy",
    );
    expect(reviewed?.user?.extra?.["authentication.kubernetes.io/node-name"]).toEqual([NODE]);
    const proxy = withToken(token).makeApiClient(CoreV1Api);
    expect((await proxy.listServiceForAllNamespaces()).items.length).toBeGreaterThan(0);
    expect(await refusal(() => proxy.listNamespacedSecret({ namespace: NS }))).toMatch(
      /cannot list resource \\?"secrets\\?"/,
    );
    // The kubeconfig's CA verifies the API server the token is for.
    const cluster = admin.getCurrentCluster();
    expect(access.caCert).toBe(Buffer.from(cluster?.caData ?? "", "base64").toString("utf8"));
  });

  it("binds to the Node registered anew (its new UID) after the old one is gone", async () => {
    const access = serviceProxyAccess(vnode(), {
      serviceAccount: "nebula-system/nebula-service-proxy",
      nodeName: NODE,
    });
    await access.requestToken({ expirationSeconds: 3600 });
    await core.deleteNode({ name: NODE });
    const again = await core.createNode({ body: { metadata: { name: NODE } } });
    // The first request after the change fails on the old UID; the next one reads the Node again.
    const first = await access.requestToken({ expirationSeconds: 3600 }).then(
      (t) => t,
      (error: Error) => error,
    );
    const token =
      first instanceof Error ? await access.requestToken({ expirationSeconds: 3600 }) : first;
    const bound = claims(token.token)["kubernetes.io"] as { node?: { uid?: string } } | undefined;
    expect(bound?.node?.uid).toBe(again.metadata?.uid);
  });

  it("the shipped policy lets the vnode bind a token to a Node for the service proxy only", async () => {
    const asVnode = vnode().makeApiClient(CoreV1Api);
    const node = await core.readNode({ name: NODE });
    const nodeBound = () =>
      asVnode.createNamespacedServiceAccountToken({
        name: "reader",
        namespace: NS,
        body: {
          spec: {
            audiences: [],
            expirationSeconds: 600,
            boundObjectRef: {
              apiVersion: "v1",
              kind: "Node",
              name: NODE,
              uid: node.metadata?.uid ?? "",
            },
          },
        },
      });
    const deadline = Date.now() + 30_000;
    let message = await refusal(nodeBound);
    while (!message?.includes("nebula-vnode-tokens") && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      message = await refusal(nodeBound);
    }
    expect(message).toMatch(/or the service proxy's, bound to a Node/);
  });

  it("refuses a kubeconfig without a CA and a ServiceAccount that is not namespace/name", () => {
    const insecure = new KubeConfig();
    insecure.loadFromOptions({
      clusters: [{ name: "c", server: "https://127.0.0.1:1", skipTLSVerify: true }],
      users: [{ name: "u", token: "t" }],
      contexts: [{ name: "x", cluster: "c", user: "u" }],
      currentContext: "x",
    });
    expect(() => serviceProxyAccess(insecure, { serviceAccount: "a/b", nodeName: NODE })).toThrow(
      /names no CA certificate/,
    );
    expect(() => serviceProxyAccess(vnode(), { serviceAccount: "b", nodeName: NODE })).toThrow(
      /is not <namespace>\/<name>/,
    );
  });
});
