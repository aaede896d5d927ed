/**
 * The virtual node's fence (issue #29 item 4) against the real kube-apiserver: the chart's RBAC
 * and ValidatingAdmissionPolicy (the plain manifests render the same ones: chart.integration.test
 * compares them), applied for a release of its own ("fence" in fence-system, Node fence-node), and
 * requests sent as that release's ServiceAccount (a client certificate with its user name: what
 * the API server sees of a ServiceAccount token).
 *
 * Three worlds, one after the other, each "cannot" tried in each:
 *
 * 1. before: the RBAC as it was (the same rules without resourceNames) and no policy. Every
 *    "cannot" succeeds, as a server-side dry run (it passes authorization and every admission
 *    check, and writes nothing);
 * 2. the policy alone, over that RBAC (what `kubectl apply -f deploy/vnode/rbac.yaml` alone grants):
 *    every "cannot" is refused by the policy itself; every "can" works;
 * 3. as installed (RBAC pinned to the names, and the policy): every "cannot" is refused, every
 *    "can" works.
 *
 * The "cans" are the virtual node's own requests, in the shapes it sends them
 * (packages/virtual-node: pod-api.ts, node-controller.ts, a drain's cordon; the status writer; the
 * leader elector).
 *
 * Then several virtual nodes of one install (vnode.nodes): each one's ServiceAccount is fenced to
 * its own Node, Leases and Pods; the other's are refused.
 */
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import {
  AdmissionregistrationV1Api,
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  type V1Lease,
  V1MicroTime,
  type V1Node,
  type V1Pod,
} from "@kubernetes/client-node";
import { helmPath, kubectlPath } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";

const run = promisify(execFile);
const CHART = new URL("./nebula", import.meta.url).pathname;
const TEST_VALUES = new URL("./nebula/ci/test-values.yaml", import.meta.url).pathname;
const RELEASE = "fence";
const NAMESPACE = "fence-system";
const NAME = "fence-nebula-vnode";
const NODE = "fence-node";
/** A "real" Node: another kubelet's. */
const REAL = "fence-real";
const TENANT = "fence-tenant";
/** A tenant's ServiceAccount, whose Pods' tokens the vnode requests. */
const TOKEN_ACCOUNT = "fence-reader";
const VNODE_USER = `system:serviceaccount:${NAMESPACE}:${NAME}`;
/** Any of the policies: `${NAME}-pods`, `${NAME}-node` or `${NAME}-tokens`. */
const POLICY_DENIAL = `ValidatingAdmissionPolicy '${NAME}-`;
const FINALIZER = "nebula.dev/instance-reclaim";

type World = "before" | "policy" | "fenced";

interface Rule {
  resourceNames?: string[];
  [key: string]: unknown;
}
type Manifest = KubernetesObject & { rules?: Rule[] };

let admin: KubeConfig;
let vnode: KubeConfig;
let fence: Manifest[];

const statusCode = (error: unknown): number | undefined => {
  const code = (error as { code?: unknown }).code;
  return typeof code === "number" ? code : undefined;
};

/** The outcome of one request as the vnode: ok, or the HTTP status and the API server's message. */
async function attempt(
  request: () => Promise<unknown>,
): Promise<{ ok: true } | { ok: false; code: number | undefined; message: string }> {
  try {
    await request();
    return { ok: true };
  } catch (error) {
    const body = (error as { body?: unknown }).body;
    let message = typeof body === "string" ? body : String(error);
    try {
      message = (JSON.parse(message) as { message?: string }).message ?? message;
    } catch {
      // not JSON
    }
    return { ok: false, code: statusCode(error), message };
  }
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Creates or replaces an object as the admin. */
async function apply(object: Manifest): Promise<void> {
  const api = KubernetesObjectApi.makeApiClient(admin);
  try {
    const current = await api.read(object as KubernetesObject & { metadata: { name: string } });
    await api.replace({
      ...object,
      metadata: { ...object.metadata, resourceVersion: current.metadata?.resourceVersion ?? "" },
    });
  } catch (error) {
    if (statusCode(error) !== 404) throw error;
    await api.create(object);
  }
}

async function remove(object: KubernetesObject): Promise<void> {
  await KubernetesObjectApi.makeApiClient(admin)
    .delete(object)
    .catch((error) => {
      if (statusCode(error) !== 404) throw error;
    });
}

const unpinned = (objects: Manifest[]): Manifest[] =>
  objects.map((o) =>
    o.rules ? { ...o, rules: o.rules.map(({ resourceNames: _names, ...rule }) => rule) } : o,
  );
const isAdmission = (o: Manifest) => o.kind?.startsWith("ValidatingAdmissionPolicy") ?? false;

/** Puts a world in place: its RBAC, and the policy or not. */
async function enter(world: World): Promise<void> {
  const rbac = fence.filter((o) => !isAdmission(o));
  for (const o of world === "fenced" ? rbac : unpinned(rbac)) await apply(o);
  for (const o of fence.filter(isAdmission)) {
    if (world === "before") await remove(o);
    else await apply(o);
  }
}

function pod(
  name: string,
  namespace: string,
  nodeName: string,
  serviceAccountName?: string,
): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace, labels: { app: "fence" }, annotations: { team: "a" } },
    spec: {
      nodeName,
      ...(serviceAccountName ? { serviceAccountName } : {}),
      containers: [{ name: "app", image: "busybox:1.36" }],
    },
  };
}

const podPatch = (
  core: CoreV1Api,
  namespace: string,
  name: string,
  body: object,
  strategy: PatchStrategy,
  dryRun?: "All",
) =>
  core.patchNamespacedPod(
    { name, namespace, body, ...(dryRun ? { dryRun } : {}) },
    setHeaderOptions("Content-Type", strategy),
  );

/** What the vnode must not do; each takes whether to dry-run. */
function cannots(ownPod: string): Array<[string, (dryRun?: "All") => Promise<unknown>]> {
  const core = vnode.makeApiClient(CoreV1Api);
  const coordination = vnode.makeApiClient(CoordinationV1Api);
  const json = PatchStrategy.JsonPatch;
  const merge = PatchStrategy.MergePatch;
  return [
    [
      "swap a kube-system Pod's image",
      (d) =>
        podPatch(
          core,
          "kube-system",
          "fence-system-pod",
          [{ op: "replace", path: "/spec/containers/0/image", value: "evil:latest" }],
          json,
          d,
        ),
    ],
    [
      "change a kube-system Pod's labels",
      (d) =>
        podPatch(
          core,
          "kube-system",
          "fence-system-pod",
          { metadata: { labels: { app: "x" } } },
          merge,
          d,
        ),
    ],
    [
      "delete a Pod bound to another Node",
      (d) =>
        core.deleteNamespacedPod({
          name: "other",
          namespace: TENANT,
          gracePeriodSeconds: 0,
          ...(d ? { dryRun: d } : {}),
        }),
    ],
    [
      "write the status of a Pod bound to another Node",
      (d) =>
        core.patchNamespacedPodStatus(
          {
            name: "other",
            namespace: TENANT,
            body: { status: { phase: "Failed" } },
            ...(d ? { dryRun: d } : {}),
          },
          setHeaderOptions("Content-Type", merge),
        ),
    ],
    [
      "change a bound Pod's spec (its image)",
      (d) =>
        podPatch(
          core,
          TENANT,
          ownPod,
          [{ op: "replace", path: "/spec/containers/0/image", value: "evil:latest" }],
          json,
          d,
        ),
    ],
    [
      "change a bound Pod's labels",
      (d) => podPatch(core, TENANT, ownPod, { metadata: { labels: { app: "x" } } }, merge, d),
    ],
    [
      "change a bound Pod's annotation that is not nebula.dev/",
      (d) => podPatch(core, TENANT, ownPod, { metadata: { annotations: { team: "b" } } }, merge, d),
    ],
    [
      "add a finalizer that is not nebula.dev/ to a bound Pod",
      (d) =>
        podPatch(
          core,
          TENANT,
          ownPod,
          [{ op: "add", path: "/metadata/finalizers", value: ["example.com/hold"] }],
          json,
          d,
        ),
    ],
    [
      "patch another (real) Node",
      (d) =>
        core.patchNode(
          {
            name: REAL,
            body: { metadata: { labels: { "nebula.dev/owned": "yes" } } },
            ...(d ? { dryRun: d } : {}),
          },
          setHeaderOptions("Content-Type", merge),
        ),
    ],
    [
      "point another (real) Node's address at itself",
      (d) =>
        core.patchNodeStatus(
          {
            name: REAL,
            body: {
              status: {
                addresses: [{ $patch: "replace" }, { type: "InternalIP", address: "10.9.9.9" }],
              },
            },
            ...(d ? { dryRun: d } : {}),
          },
          setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch),
        ),
    ],
    [
      "create a Node of another name",
      (d) =>
        core.createNode({
          body: { metadata: { name: "fence-impostor" } },
          ...(d ? { dryRun: d } : {}),
        }),
    ],
    [
      "renew another Node's heartbeat Lease",
      async (d) => {
        const lease = await admin
          .makeApiClient(CoordinationV1Api)
          .readNamespacedLease({ name: REAL, namespace: "kube-node-lease" });
        await coordination.replaceNamespacedLease({
          name: REAL,
          namespace: "kube-node-lease",
          body: { ...lease, spec: { ...lease.spec, renewTime: new V1MicroTime(Date.now()) } },
          ...(d ? { dryRun: d } : {}),
        });
      },
    ],
    [
      "create a Lease of another name in kube-node-lease",
      (d) =>
        coordination.createNamespacedLease({
          namespace: "kube-node-lease",
          body: { metadata: { name: "fence-impostor" }, spec: { holderIdentity: "x" } },
          ...(d ? { dryRun: d } : {}),
        }),
    ],
    [
      "request a service-account token bound to no Pod",
      (d) =>
        core.createNamespacedServiceAccountToken({
          name: TOKEN_ACCOUNT,
          namespace: TENANT,
          body: { spec: { audiences: [], expirationSeconds: 600 } },
          ...(d ? { dryRun: d } : {}),
        }),
    ],
  ];
}

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  admin = controlPlane.kubeConfig();
  vnode = controlPlane.clientFor(VNODE_USER, [
    "system:serviceaccounts",
    `system:serviceaccounts:${NAMESPACE}`,
    "system:authenticated",
  ]);
  const { stdout } = await run(
    helmPath(),
    [
      "template",
      RELEASE,
      CHART,
      "--namespace",
      NAMESPACE,
      "-f",
      TEST_VALUES,
      "--set",
      `vnode.nodeName=${NODE}`,
      "--set",
      "operator.enabled=false",
    ],
    { maxBuffer: 64 * 1024 * 1024 },
  );
  const kinds = new Set([
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
  ]);
  fence = parseAllDocuments(stdout)
    .map((d) => d.toJSON() as Manifest | null)
    .filter((o): o is Manifest => o !== null && kinds.has(o.kind ?? ""));
  expect(
    fence
      .filter(isAdmission)
      .map((o) => `${o.kind}/${o.metadata?.name}`)
      .sort(),
  ).toEqual([
    `ValidatingAdmissionPolicy/${NAME}-node`,
    `ValidatingAdmissionPolicy/${NAME}-pods`,
    `ValidatingAdmissionPolicy/${NAME}-tokens`,
    `ValidatingAdmissionPolicyBinding/${NAME}-node`,
    `ValidatingAdmissionPolicyBinding/${NAME}-pods`,
    `ValidatingAdmissionPolicyBinding/${NAME}-tokens`,
  ]);

  const core = admin.makeApiClient(CoreV1Api);
  for (const ns of [NAMESPACE, TENANT])
    await core.createNamespace({ body: { metadata: { name: ns } } }).catch((error) => {
      if (statusCode(error) !== 409) throw error;
    });
  const real: V1Node = {
    metadata: { name: REAL, labels: { "kubernetes.io/hostname": REAL } },
    status: { addresses: [{ type: "InternalIP", address: "10.0.0.7" }] },
  };
  await core.createNode({ body: real });
  await admin.makeApiClient(CoordinationV1Api).createNamespacedLease({
    namespace: "kube-node-lease",
    body: {
      metadata: { name: REAL },
      spec: {
        holderIdentity: REAL,
        leaseDurationSeconds: 40,
        renewTime: new V1MicroTime(Date.now()),
      },
    },
  });
  await core.createNamespacedPod({
    namespace: "kube-system",
    body: pod("fence-system-pod", "kube-system", REAL),
  });
  await core.createNamespacedPod({ namespace: TENANT, body: pod("other", TENANT, REAL) });
  await core
    .createNamespacedServiceAccount({
      namespace: TENANT,
      body: { metadata: { name: TOKEN_ACCOUNT } },
    })
    .catch((error) => {
      if (statusCode(error) !== 409) throw error;
    });
});

describe.each([
  ["before", "the RBAC as it was, no policy: every one succeeds (server-side dry run)"],
  ["policy", "the policy alone over that RBAC: the policy refuses every one"],
  ["fenced", "as installed (RBAC pinned to the names, and the policy): every one is refused"],
] as const)("%s: %s", (world, _what) => {
  const ownPod = `own-${world}`;

  beforeAll(async () => {
    await enter(world);
    await admin
      .makeApiClient(CoreV1Api)
      .createNamespacedPod({ namespace: TENANT, body: pod(ownPod, TENANT, NODE, TOKEN_ACCOUNT) });
    const core = vnode.makeApiClient(CoreV1Api);
    if (world === "before") {
      // RBAC takes effect once the authorizer's informer has the bindings.
      await until("the RBAC in force", async () =>
        (await attempt(() => core.readNode({ name: REAL }))).ok ? true : undefined,
      );
      return;
    }
    // Each policy takes effect once the API server's admission informer has it and its binding.
    const refusedByPolicy = async (request: () => Promise<unknown>) => {
      const probe = await attempt(request);
      return !probe.ok && probe.message.includes(POLICY_DENIAL) ? true : undefined;
    };
    await until(`${world}: the Node policy in force`, () =>
      refusedByPolicy(() =>
        core.createNode({ body: { metadata: { name: "fence-impostor" } }, dryRun: "All" }),
      ),
    );
    await until(`${world}: the Pod policy in force`, () =>
      refusedByPolicy(() =>
        podPatch(
          core,
          "kube-system",
          "fence-system-pod",
          { metadata: { labels: { app: "x" } } },
          PatchStrategy.MergePatch,
          "All",
        ),
      ),
    );
    if (world === "fenced")
      await until("the pinned RBAC in force", async () => {
        const probe = await attempt(() => core.readNode({ name: REAL }));
        return !probe.ok && probe.code === 403 ? true : undefined;
      });
  });

  it("the vnode cannot: every request below", async () => {
    const outcomes: Array<[string, string]> = [];
    for (const [what, request] of cannots(ownPod)) {
      const result = await attempt(() => request(world === "before" ? "All" : undefined));
      if (world === "before") {
        outcomes.push([what, result.ok ? "succeeded" : `failed: ${result.message}`]);
      } else if (result.ok) {
        outcomes.push([what, "succeeded"]);
      } else {
        const by =
          result.code !== 403
            ? `other (${result.code}): ${result.message}`
            : result.message.includes(POLICY_DENIAL)
              ? "policy"
              : /is forbidden: User ".*" cannot/.test(result.message)
                ? "rbac"
                : `other: ${result.message}`;
        // Over the broad RBAC, the policy alone must refuse it; as installed, either refuses it.
        outcomes.push([what, world === "policy" || by.startsWith("other") ? by : "refused"]);
      }
    }
    const expected = world === "before" ? "succeeded" : world === "policy" ? "policy" : "refused";
    expect(outcomes).toEqual(outcomes.map(([what]) => [what, expected]));
  });

  // Without RBAC or policy there is nothing to show the vnode can do: declared for the fenced worlds only.
  if (world !== "before") {
    it("the vnode can: its Node, its Leases, and the Pods bound to its Node (finalizer, nebula.dev/ annotation, status, delete)", async () => {
      const core = vnode.makeApiClient(CoreV1Api);
      const coordination = vnode.makeApiClient(CoordinationV1Api);
      const adminCore = admin.makeApiClient(CoreV1Api);
      // Its Node: registered afresh (create), labels and taint (patch), status (patch).
      await adminCore.deleteNode({ name: NODE }).catch(() => undefined);
      await until("the Node gone", async () =>
        (await attempt(() => adminCore.readNode({ name: NODE }))).ok ? undefined : true,
      );
      await core.createNode({
        body: {
          metadata: { name: NODE, labels: { type: "virtual-kubelet" } },
          spec: {
            taints: [{ key: "virtual-kubelet.io/provider", value: "nebula", effect: "NoSchedule" }],
          },
        },
      });
      await core.readNode({ name: NODE });
      await core.patchNode(
        {
          name: NODE,
          body: {
            metadata: { labels: { "nebula.dev/provider": "nebula" } },
            spec: {
              taints: [
                { key: "virtual-kubelet.io/provider", value: "nebula", effect: "NoSchedule" },
              ],
            },
          },
        },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
      // A drain (node.drain): the cordon and its mark, then uncordoned again, as node.ts patches.
      for (const [unschedulable, mark] of [
        [true, "true"],
        [false, null],
      ] as const)
        await core.patchNode(
          {
            name: NODE,
            body: {
              metadata: { annotations: { "nebula.dev/drain-cordoned": mark } },
              spec: { unschedulable },
            },
          },
          setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
        );
      await core.patchNodeStatus(
        {
          name: NODE,
          body: {
            status: {
              conditions: [
                {
                  type: "Ready",
                  status: "True",
                  reason: "KubeletReady",
                  message: "fence",
                  lastHeartbeatTime: new Date(),
                  lastTransitionTime: new Date(),
                },
              ],
              addresses: [{ $patch: "replace" }, { type: "InternalIP", address: "10.0.0.8" }],
            },
          },
        },
        setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch),
      );
      // Its Leases: the Node's heartbeat and the leader election's (create, get, update).
      for (const [namespace, name] of [
        ["kube-node-lease", NODE],
        [NAMESPACE, `nebula-vnode-${NODE}`],
      ] as const) {
        await admin
          .makeApiClient(CoordinationV1Api)
          .deleteNamespacedLease({ name, namespace })
          .catch(() => undefined);
        await coordination.createNamespacedLease({
          namespace,
          body: {
            metadata: { name },
            spec: { holderIdentity: "fence-0", leaseDurationSeconds: 40 },
          },
        });
        const lease: V1Lease = await coordination.readNamespacedLease({ name, namespace });
        await coordination.replaceNamespacedLease({
          name,
          namespace,
          body: { ...lease, spec: { ...lease.spec, renewTime: new V1MicroTime(Date.now()) } },
        });
      }
      // A Pod bound to its Node, as pod-api.ts writes it.
      const current = await core.readNamespacedPod({ name: ownPod, namespace: TENANT });
      const uid = current.metadata?.uid ?? "";
      // Its service-account token, bound to it, as pod-tokens.ts requests it.
      const issued = await core.createNamespacedServiceAccountToken({
        name: TOKEN_ACCOUNT,
        namespace: TENANT,
        body: {
          spec: {
            audiences: [],
            expirationSeconds: 600,
            boundObjectRef: { apiVersion: "v1", kind: "Pod", name: ownPod, uid },
          },
        },
      });
      expect(issued.status?.token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
      await podPatch(
        core,
        TENANT,
        ownPod,
        [
          { op: "test", path: "/metadata/uid", value: uid },
          {
            op: "test",
            path: "/metadata/resourceVersion",
            value: current.metadata?.resourceVersion,
          },
          { op: "add", path: "/metadata/finalizers", value: [FINALIZER] },
        ],
        PatchStrategy.JsonPatch,
      );
      await podPatch(
        core,
        TENANT,
        ownPod,
        { metadata: { uid, annotations: { "nebula.dev/instance-id": "i-0123456789abcdef0" } } },
        PatchStrategy.MergePatch,
      );
      const annotated = await core.readNamespacedPod({ name: ownPod, namespace: TENANT });
      // The status writer: a merge patch of status with a resourceVersion precondition.
      await core.patchNamespacedPodStatus(
        {
          name: ownPod,
          namespace: TENANT,
          body: {
            metadata: { resourceVersion: annotated.metadata?.resourceVersion },
            status: { phase: "Running", startTime: new Date() },
          },
        },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
      const running = await core.readNamespacedPod({ name: ownPod, namespace: TENANT });
      expect(running.status?.phase).toBe("Running");
      expect(running.metadata?.finalizers).toEqual([FINALIZER]);
      expect(running.metadata?.annotations).toEqual({
        team: "a",
        "nebula.dev/instance-id": "i-0123456789abcdef0",
      });
      // Teardown: the finalizer off, then the kubelet-style delete (grace 0, UID precondition).
      await podPatch(
        core,
        TENANT,
        ownPod,
        [
          { op: "test", path: "/metadata/uid", value: uid },
          { op: "test", path: "/metadata/finalizers/0", value: FINALIZER },
          { op: "remove", path: "/metadata/finalizers/0" },
        ],
        PatchStrategy.JsonPatch,
      );
      await core.deleteNamespacedPod({
        name: ownPod,
        namespace: TENANT,
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid } },
      });
      await until("the Pod gone", async () =>
        (await attempt(() => adminCore.readNamespacedPod({ name: ownPod, namespace: TENANT }))).ok
          ? undefined
          : true,
      );
    });
  }
});

it("the policies type-check clean (no expression warnings in their status)", async () => {
  // The status controller that type-checks policies runs in kube-controller-manager; the shared
  // control plane does not run it, so run it alone here, from the same build.
  const dir = mkdtempSync(join(tmpdir(), "nebula-fence-"));
  const kubeconfig = join(dir, "admin.kubeconfig");
  writeFileSync(kubeconfig, useTestPeers().controlPlane.kubeconfig);
  const kcm = spawn(
    join(dirname(kubectlPath()), "kube-controller-manager"),
    [
      `--kubeconfig=${kubeconfig}`,
      "--controllers=validatingadmissionpolicy-status-controller",
      "--leader-elect=false",
      "--secure-port=0",
    ],
    { stdio: "ignore" },
  );
  try {
    const api = admin.makeApiClient(AdmissionregistrationV1Api);
    for (const name of [`${NAME}-pods`, `${NAME}-node`]) {
      const policy = await until(
        `${name}'s type check`,
        async () => {
          const p = await api.readValidatingAdmissionPolicy({ name });
          return p.status?.observedGeneration === p.metadata?.generation ? p : undefined;
        },
        60_000,
      );
      expect(policy.status?.typeChecking?.expressionWarnings ?? [], name).toEqual([]);
    }
  } finally {
    kcm.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  }
});

describe("several virtual nodes of one install (vnode.nodes): each is fenced from the others", () => {
  const release = "fences";
  const [A, B] = ["fence-a", "fence-b"] as const;
  const userOf = (node: string) =>
    `system:serviceaccount:${NAMESPACE}:${release}-nebula-vnode-${node}`;
  let asA: KubeConfig;

  beforeAll(async () => {
    const { stdout } = await run(
      helmPath(),
      [
        "template",
        release,
        CHART,
        "--namespace",
        NAMESPACE,
        "-f",
        TEST_VALUES,
        "--set",
        `vnode.nodes[0].name=${A},vnode.nodes[1].name=${B}`,
        "--set",
        "operator.enabled=false",
      ],
      { maxBuffer: 64 * 1024 * 1024 },
    );
    const objects = parseAllDocuments(stdout)
      .map((d) => d.toJSON() as Manifest | null)
      .filter(
        (o): o is Manifest => o !== null && o.kind !== "ConfigMap" && o.kind !== "Deployment",
      );
    for (const o of objects) await apply(o);
    asA = useTestPeers().controlPlane.clientFor(userOf(A), [
      "system:serviceaccounts",
      `system:serviceaccounts:${NAMESPACE}`,
      "system:authenticated",
    ]);
    const core = admin.makeApiClient(CoreV1Api);
    const coordination = admin.makeApiClient(CoordinationV1Api);
    for (const node of [A, B]) {
      await core.createNode({
        body: { metadata: { name: node, labels: { type: "virtual-kubelet" } } },
      });
      for (const [namespace, name] of [
        ["kube-node-lease", node],
        [NAMESPACE, `nebula-vnode-${node}`],
      ] as const)
        await coordination.createNamespacedLease({
          namespace,
          body: { metadata: { name }, spec: { holderIdentity: node, leaseDurationSeconds: 40 } },
        });
      await core.createNamespacedPod({ namespace: TENANT, body: pod(`on-${node}`, TENANT, node) });
    }
    // In force once the other Node's cordon is refused by name (RBAC) and A's own is allowed.
    const cordon = (name: string) =>
      asA
        .makeApiClient(CoreV1Api)
        .patchNode(
          { name, body: { spec: { unschedulable: true } }, dryRun: "All" },
          setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
        );
    // And the Pod policy once the API server's admission informer has it and its binding.
    const podStatus = (name: string) =>
      asA
        .makeApiClient(CoreV1Api)
        .patchNamespacedPodStatus(
          { name, namespace: TENANT, body: { status: { phase: "Running" } }, dryRun: "All" },
          setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
        );
    await until("the second install's fence in force", async () => {
      const own = await attempt(() => cordon(A));
      const other = await attempt(() => cordon(B));
      const ownPod = await attempt(() => podStatus(`on-${A}`));
      const otherPod = await attempt(() => podStatus(`on-${B}`));
      return own.ok && !other.ok && other.code === 403 && ownPod.ok && !otherPod.ok
        ? true
        : undefined;
    });
  });

  it(`${A}'s vnode cannot touch ${B}'s Node, Leases or Pods, and can cordon its own Node and write its own Pods`, async () => {
    const core = asA.makeApiClient(CoreV1Api);
    const coordination = asA.makeApiClient(CoordinationV1Api);
    const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
    const renew = async (namespace: string, name: string) => {
      const lease = await admin
        .makeApiClient(CoordinationV1Api)
        .readNamespacedLease({ name, namespace });
      await coordination.replaceNamespacedLease({
        name,
        namespace,
        body: { ...lease, spec: { ...lease.spec, renewTime: new V1MicroTime(Date.now()) } },
      });
    };
    const cannot: Array<[string, () => Promise<unknown>]> = [
      [
        "cordon the other Node",
        () => core.patchNode({ name: B, body: { spec: { unschedulable: true } } }, merge),
      ],
      [
        "write the other Node's status",
        () => core.patchNodeStatus({ name: B, body: { status: { phase: "Running" } } }, merge),
      ],
      ["renew the other Node's Lease", () => renew("kube-node-lease", B)],
      ["take the other node's leader Lease", () => renew(NAMESPACE, `nebula-vnode-${B}`)],
      [
        "write the status of a Pod bound to the other Node",
        () =>
          core.patchNamespacedPodStatus(
            { name: `on-${B}`, namespace: TENANT, body: { status: { phase: "Failed" } } },
            merge,
          ),
      ],
      [
        "delete a Pod bound to the other Node",
        () => core.deleteNamespacedPod({ name: `on-${B}`, namespace: TENANT }),
      ],
    ];
    const outcomes: Array<[string, string]> = [];
    for (const [what, request] of cannot) {
      const result = await attempt(request);
      outcomes.push([what, result.ok ? "succeeded" : String(result.code)]);
    }
    expect(outcomes).toEqual(cannot.map(([what]) => [what, "403"]));
    // Its own: the cordon, a Lease renewal, a Pod's status.
    await core.patchNode({ name: A, body: { spec: { unschedulable: true } } }, merge);
    await renew("kube-node-lease", A);
    await renew(NAMESPACE, `nebula-vnode-${A}`);
    await core.patchNamespacedPodStatus(
      { name: `on-${A}`, namespace: TENANT, body: { status: { phase: "Running" } } },
      merge,
    );
    expect((await admin.makeApiClient(CoreV1Api).readNode({ name: A })).spec?.unschedulable).toBe(
      true,
    );
  });
});
