/**
 * ConfigMaps and Secrets through Parameter Store, end to end (issue #19): a Deployment whose
 * container reads a Secret through env and a volume and a ConfigMap through `envFrom` gets the
 * values byte for byte on its instance, the Service variables and host name a kubelet would give, while no Secret value is in the user-data, the console, the
 * Pod, its Events or the exit report; a missing mandatory Secret keeps a Pod waiting with
 * `CreateContainerConfigError` until it appears; after deletion no parameter is left. A Pod's
 * projected service-account token (issue #34) is its ServiceAccount's, bound to it, in the file
 * where the kubelet puts it, with the cluster's CA and the namespace beside it; the real kubectl
 * in a Pod connects with it (InClusterConfig, `provider.kubernetesService` naming where the hosts
 * reach the API server) and gets what its RBAC gives, no more. Its ServiceAccount's role reaches it
 * as IRSA's.
 */
import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import {
  DescribeInstanceAttributeCommand,
  GetConsoleOutputCommand,
  type Instance,
} from "@aws-sdk/client-ec2";
import { DescribeParametersCommand, GetParameterCommand } from "@aws-sdk/client-ssm";
import {
  AppsV1Api,
  AuthenticationV1Api,
  CoreV1Api,
  DiscoveryV1Api,
  EventsV1Api,
  RbacAuthorizationV1Api,
  type V1Pod,
} from "@kubernetes/client-node";
import type { InstanceHosts } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  hostAddress,
  kubectlImage,
  motoSsm,
  nodeInstances,
  podEnded,
  readPod,
  startVnode,
  startWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
  vnodeConfig,
} from "./testing/e2e.js";

const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const apps = admin.makeApiClient(AppsV1Api);
const events = admin.makeApiClient(EventsV1Api);
const ec2 = moto.ec2();
const ssm = motoSsm(moto);
const NODE = "vnode-secrets";
const NS = "vnode-secrets";
// Shell- and parser-hostile, multi-line, non-ASCII: what a real password or key can hold.
const PASSWORD = `Zq9-pw 'x' "y" $(id) \`id\` \\ é\nline2`;
const KEY = `-----BEGIN KEY-----\nZq9KEYMATERIAL${"A".repeat(300)}\n-----END KEY-----\n`;
const sha = (s: string) => createHash("sha256").update(s).digest("hex");

const API = {
  host: hostAddress(),
  port: Number(new URL(admin.getCurrentCluster()?.server ?? "").port),
};

let hosts: InstanceHosts;
let vnode: VnodeProcess;
let vnodeOptions: Parameters<typeof startVnode>[0];
/**
 * `npm run test:full` waits for a 10-minute token's own renewal (at 80 % of its life, then the
 * host's next read); CI renews it sooner the way a restarted virtual node does (every running
 * Pod's tokens at once), through the same write and the same read on the host.
 */
const NATURAL_RENEWAL = process.env.NEBULA_E2E_TOKEN_NATURAL === "1";

beforeAll(async () => {
  const world = await startWorld({ admin, ec2, moto, cluster: NODE, namespace: NS });
  hosts = world.hosts;
  const config = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: hosts.ec2Endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "20" },
    pollIntervalSeconds: 2,
    batchWindowMs: 50,
  }) as { provider: Record<string, unknown> };
  config.provider.podDelivery = "parameters";
  // The API server as the hosts reach it: this machine's address, its certificate names it.
  config.provider.kubernetesService = API;
  vnodeOptions = {
    nodeName: NODE,
    // As its ServiceAccount: the ConfigMap and Secret reads are what deploy/vnode/rbac.yaml grants.
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config,
  };
  vnode = await startVnode(vnodeOptions);
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  ec2.destroy();
  ssm.destroy();
  expect(code).toBe(0);
});

/**
 * The `kube-api-access-*` volume the API server's ServiceAccount admission adds to every Pod (the
 * local world's API server runs without that plugin, so a test writes it as the plugin would).
 */
function apiAccessVolume(name: string) {
  return {
    name,
    projected: {
      defaultMode: 0o644,
      sources: [
        { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
        { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
        {
          downwardAPI: {
            items: [
              {
                path: "namespace",
                fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" },
              },
            ],
          },
        },
      ],
    },
  };
}

async function instancesOf(uid: string): Promise<Instance[]> {
  return (await nodeInstances(ec2, NODE)).filter((i) =>
    i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid),
  );
}

/** The token under key `0` in a Pod's token parameter (`<prefix>t`: `key:token` entries). */
async function tokenParameter(uid: string): Promise<string> {
  const got = await ssm.send(
    new GetParameterCommand({ Name: `/nebula/${NODE}/pods/${uid}/t`, WithDecryption: true }),
  );
  const entry = (got.Parameter?.Value ?? "").split(" ").find((e) => e.startsWith("0:"));
  if (entry === undefined) throw new Error(`no token under key 0 in ${got.Parameter?.Name}`);
  return entry.slice(2);
}

async function parameterNames(): Promise<string[]> {
  const names: string[] = [];
  let token: string | undefined;
  do {
    const page = await ssm.send(
      new DescribeParametersCommand({
        ParameterFilters: [{ Key: "Path", Option: "Recursive", Values: [`/nebula/${NODE}/pods`] }],
        ...(token ? { NextToken: token } : {}),
      }),
    );
    names.push(...(page.Parameters ?? []).map((p) => p.Name ?? ""));
    token = page.NextToken;
  } while (token);
  return names;
}

/** Everything a reader of the instance or the API can see, as text. */
async function visible(instanceId: string, podName: string): Promise<string> {
  const userData = await ec2.send(
    new DescribeInstanceAttributeCommand({ InstanceId: instanceId, Attribute: "userData" }),
  );
  // Generic user-data (issue #14): a bootstrap that fits 8 KiB, whatever the Pod.
  expect(Buffer.from(userData.UserData?.Value ?? "", "base64").length).toBeLessThanOrEqual(8192);
  const console = await ec2.send(new GetConsoleOutputCommand({ InstanceId: instanceId }));
  const [instance] = await nodeInstances(ec2, NODE).then((all) =>
    all.filter((i) => i.InstanceId === instanceId),
  );
  const pod = await readPod(core, NS, podName);
  const podEvents = await events.listNamespacedEvent({ namespace: NS });
  const decode = (b64: string | undefined) => {
    const bytes = Buffer.from(b64 ?? "", "base64");
    // user-data is gzipped: the clear script is what a reader would gunzip.
    return bytes[0] === 0x1f ? gunzipSync(bytes).toString("utf8") : bytes.toString("utf8");
  };
  return [
    decode(userData.UserData?.Value),
    Buffer.from(console.Output ?? "", "base64").toString("utf8"),
    JSON.stringify(instance?.Tags ?? []),
    JSON.stringify(pod ?? {}),
    JSON.stringify(podEvents.items),
  ].join("\n");
}

describe("ConfigMaps and Secrets through Parameter Store (nebula-vnode, kube-apiserver, moto, the host simulator)", () => {
  it("a Deployment reads a Secret through env and a volume and a ConfigMap through envFrom, byte for byte; no secret shows anywhere; no parameter outlives it", async () => {
    await core.createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: { name: "db" },
        stringData: { password: PASSWORD, "tls.key": KEY },
      },
    });
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: "settings" }, data: { MODE: "blue", LEVEL: "3" } },
    });
    // A Service of the namespace and the cluster's kubernetes Service: their variables are in the
    // container's environment as the kubelet sets them (with the cluster IPs the API server gave).
    const cache = await core.createNamespacedService({
      namespace: NS,
      body: {
        metadata: { name: "cache-main" },
        spec: { ports: [{ name: "redis", port: 6379, protocol: "TCP" }], selector: { app: "x" } },
      },
    });
    const cacheIP = cache.spec?.clusterIP ?? "";
    expect(cacheIP).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
    // The container checks what it got against the hashes and says which one differs.
    const check = [
      `[ "$(printf %s "$DB_PASSWORD" | sha256sum | cut -d' ' -f1)" = ${sha(PASSWORD)} ] || { echo env-password-differs >/dev/termination-log; exit 1; }`,
      `[ "$(sha256sum </secret/key.pem | cut -d' ' -f1)" = ${sha(KEY)} ] || { echo file-key-differs >/dev/termination-log; exit 1; }`,
      `[ "$(stat -c %a /secret/key.pem)" = 400 ] || { echo mode-differs >/dev/termination-log; exit 1; }`,
      `[ "$CFG_MODE/$CFG_LEVEL/$URL" = blue/3/db://blue ] || { echo configmap-differs >/dev/termination-log; exit 1; }`,
      `[ "$CACHE_MAIN_SERVICE_HOST/$CACHE_MAIN_SERVICE_PORT_REDIS/$CACHE_MAIN_PORT/$CACHE" = "${cacheIP}/6379/tcp://${cacheIP}:6379/${cacheIP}:6379" ] || { echo "service-env-differs: $CACHE_MAIN_SERVICE_HOST $CACHE_MAIN_PORT $CACHE" >/dev/termination-log; exit 1; }`,
      // provider.kubernetesService: where the hosts reach the API server, not its cluster IP.
      `[ "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT" = "${API.host}:${API.port}" ] || { echo "kubernetes-env-differs: $KUBERNETES_SERVICE_HOST" >/dev/termination-log; exit 1; }`,
      // The Pod's name is its containers' host name, as on a kubelet node.
      `[ "$(hostname)/$HOSTNAME" = "$POD_NAME/$POD_NAME" ] || { echo "hostname-differs: $(hostname) $HOSTNAME" >/dev/termination-log; exit 1; }`,
      "touch /tmp/ok",
      "exec sleep 3600",
    ].join("\n");
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "reads-secrets" },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: "reads-secrets" } },
          template: {
            metadata: { labels: { app: "reads-secrets" } },
            spec: {
              terminationGracePeriodSeconds: 5,
              nodeSelector: { "kubernetes.io/hostname": NODE },
              tolerations: [{ key: "virtual-kubelet.io/provider", operator: "Exists" }],
              volumes: [
                {
                  name: "secret",
                  secret: {
                    secretName: "db",
                    items: [{ key: "tls.key", path: "key.pem", mode: 0o400 }],
                  },
                },
              ],
              containers: [
                {
                  name: "app",
                  image: "busybox",
                  command: ["sh", "-c", check],
                  env: [
                    {
                      name: "DB_PASSWORD",
                      valueFrom: { secretKeyRef: { name: "db", key: "password" } },
                    },
                    { name: "URL", value: "db://$(CFG_MODE)" },
                    { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
                    {
                      name: "CACHE",
                      value: "$(CACHE_MAIN_SERVICE_HOST):$(CACHE_MAIN_SERVICE_PORT)",
                    },
                  ],
                  envFrom: [{ prefix: "CFG_", configMapRef: { name: "settings" } }],
                  volumeMounts: [{ name: "secret", mountPath: "/secret" }],
                  readinessProbe: {
                    exec: { command: ["cat", "/tmp/ok"] },
                    periodSeconds: 1,
                    timeoutSeconds: 10,
                  },
                },
              ],
            },
          },
        },
      },
    });
    const pod = await until(
      "the Deployment's Pod Ready (its container found every value as written)",
      async () => {
        const list = await core.listNamespacedPod({
          namespace: NS,
          labelSelector: "app=reads-secrets",
        });
        const p = list.items[0];
        const terminated = p?.status?.containerStatuses?.[0]?.lastState?.terminated;
        if (terminated)
          throw new Error(`the container exited: ${terminated.message ?? terminated.reason}`);
        const ready = p?.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
        return ready ? p : undefined;
      },
      240_000,
      500,
    );
    const uid = pod.metadata?.uid ?? "";
    const [instance] = await instancesOf(uid);
    expect(instance?.InstanceId).toBeDefined();
    // The Pod's IP is its instance's private address, and a Service selecting it gets it as a
    // ready endpoint (kube-controller-manager's EndpointSlice controller), as for a kubelet's Pod.
    expect(pod.status?.podIP).toBe(instance?.PrivateIpAddress);
    await core.createNamespacedService({
      namespace: NS,
      body: {
        metadata: { name: "reads-secrets" },
        spec: { ports: [{ port: 80 }], selector: { app: "reads-secrets" } },
      },
    });
    const endpoint = await until(
      "the Service's EndpointSlice with the Pod's IP",
      async () => {
        const slices = await admin.makeApiClient(DiscoveryV1Api).listNamespacedEndpointSlice({
          namespace: NS,
          labelSelector: "kubernetes.io/service-name=reads-secrets",
        });
        return slices.items
          .flatMap((slice) => slice.endpoints ?? [])
          .find((e) => e.targetRef?.uid === uid);
      },
      60_000,
      500,
    );
    expect(endpoint.addresses).toEqual([pod.status?.podIP]);
    expect(endpoint.conditions?.ready).toBe(true);
    expect(endpoint.nodeName).toBe(NODE);
    expect(await parameterNames()).toEqual([`/nebula/${NODE}/pods/${uid}/0`]);
    const seen = await visible(instance?.InstanceId ?? "", pod.metadata?.name ?? "");
    expect(seen).toContain(`/nebula/${NODE}/pods/${uid}/0`); // the user-data names its parameter…
    // (ConfigMap values are not secret: the Pod's own check script names them.)
    for (const secret of ["Zq9-pw", "Zq9KEYMATERIAL"]) expect(seen).not.toContain(secret);

    await apps.deleteNamespacedDeployment({ name: "reads-secrets", namespace: NS });
    await until(
      "the Pod gone, its instance terminated, no parameter left",
      async () => {
        if ((await readPod(core, NS, pod.metadata?.name ?? "")) !== undefined) return undefined;
        const states = (await instancesOf(uid)).map((i) => i.State?.Name);
        if (states.some((s) => s !== "terminated")) return undefined;
        return (await parameterNames()).some((n) => n.includes(uid)) ? undefined : true;
      },
      240_000,
      1000,
    );
  });

  it("a Pod's kube-api-access volume is served: its ServiceAccount's token bound to it, the cluster's CA and its namespace, where the kubelet puts them; the token parameter goes with the Pod", async () => {
    await core.createNamespacedServiceAccount({
      namespace: NS,
      body: { metadata: { name: "reader" } },
    });
    const ca = await until(
      "the namespace's kube-root-ca.crt (published by kube-controller-manager)",
      async () =>
        (await core.listNamespacedConfigMap({ namespace: NS })).items.find(
          (c) => c.metadata?.name === "kube-root-ca.crt",
        )?.data?.["ca.crt"],
      60_000,
      500,
    );
    // The volume the API server's ServiceAccount admission adds to every Pod (the local world's
    // API server runs without that plugin, so the test writes it as the plugin would).
    const dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    const check = [
      `[ "$(cat ${dir}/namespace)" = ${NS} ] || { echo namespace-differs >/dev/termination-log; exit 1; }`,
      `[ "$(sha256sum <${dir}/ca.crt | cut -d' ' -f1)" = ${sha(ca)} ] || { echo ca-differs >/dev/termination-log; exit 1; }`,
      // The token itself is the termination message: the test reviews it below.
      `cat ${dir}/token >/dev/termination-log`,
    ].join("\n");
    const created = await core.createNamespacedPod({
      namespace: NS,
      body: barePod(
        "has-token",
        NODE,
        {
          command: ["sh", "-c", check],
          volumeMounts: [{ name: "kube-api-access-e2e01", mountPath: dir, readOnly: true }],
        },
        {
          serviceAccountName: "reader",
          volumes: [apiAccessVolume("kube-api-access-e2e01")],
        },
      ),
    });
    const uid = created.metadata?.uid ?? "";
    const ended = await podEnded(core, NS, "has-token");
    const terminated = ended.status?.containerStatuses?.[0]?.state?.terminated;
    expect(terminated?.exitCode, terminated?.message).toBe(0);
    const token = terminated?.message ?? "";
    const review = await admin.makeApiClient(AuthenticationV1Api).createTokenReview({
      body: { spec: { token } },
    });
    expect(review.status?.authenticated).toBe(true);
    expect(review.status?.user?.username).toBe(`system:serviceaccount:${NS}:reader`);
    expect(review.status?.user?.extra?.["authentication.kubernetes.io/pod-uid"]).toEqual([uid]);
    expect(await parameterNames()).toContain(`/nebula/${NODE}/pods/${uid}/t`);
    // The token appears nowhere a reader of the instance or the API could see it but the
    // termination message this Pod chose to write it to.
    const [instance] = await instancesOf(uid);
    const seen = await visible(instance?.InstanceId ?? "", "has-token");
    expect(seen.replaceAll(token, "")).not.toContain(token.split(".")[2] ?? "no-signature");

    await core.deleteNamespacedPod({ name: "has-token", namespace: NS });
    await until(
      "the Pod gone and its token parameter with it",
      async () =>
        (await readPod(core, NS, "has-token")) === undefined &&
        !(await parameterNames()).some((n) => n.includes(uid))
          ? true
          : undefined,
      180_000,
      1000,
    );
    // Bound to the Pod: the token dies with it, once the kube-apiserver's authentication cache
    // (10 s for a success) and its informer have seen the deletion.
    await until(
      "the Pod's token refused by the API server",
      async () => {
        const after = await admin.makeApiClient(AuthenticationV1Api).createTokenReview({
          body: { spec: { token } },
        });
        return after.status?.authenticated === true ? undefined : true;
      },
      60_000,
      1000,
    );
  });

  it(
    `a 10-minute token is renewed in the running container without a restart (${NATURAL_RENEWAL ? "at 80 % of its life" : "as a restarted virtual node renews it"})`,
    async () => {
      await core.createNamespacedServiceAccount({
        namespace: NS,
        body: { metadata: { name: "renewer" } },
      });
      const file = "/var/run/secrets/tokens/api";
      // The container waits for its token file to change (900 s at most), then reports the two
      // tokens' hashes (two whole tokens are more than the report's 1 KB of message text): the
      // test compares them with what the vnode wrote into the Pod's token parameter.
      const script = [
        `cp ${file} /tmp/first; n=0`,
        `while cmp -s ${file} /tmp/first; do`,
        '  n=$((n + 1)); [ "$n" -lt 900 ] || { echo "no new token in 900 s" >/dev/termination-log; exit 1; }',
        "  sleep 1",
        "done",
        `echo "$(sha256sum </tmp/first | cut -d' ' -f1) $(sha256sum <${file} | cut -d' ' -f1)" >/dev/termination-log`,
      ].join("\n");
      const created = await core.createNamespacedPod({
        namespace: NS,
        body: barePod(
          "renews",
          NODE,
          {
            command: ["sh", "-c", script],
            volumeMounts: [
              { name: "tokens", mountPath: "/var/run/secrets/tokens", readOnly: true },
            ],
          },
          {
            serviceAccountName: "renewer",
            volumes: [
              {
                name: "tokens",
                projected: {
                  sources: [{ serviceAccountToken: { expirationSeconds: 600, path: "api" } }],
                },
              },
            ],
          },
        ),
      });
      const uid = created.metadata?.uid ?? "";
      await until(
        "the Pod running (its container has read its first token)",
        async () => {
          const p = await readPod(core, NS, "renews");
          return p?.status?.containerStatuses?.[0]?.state?.running ? true : undefined;
        },
        240_000,
        500,
      );
      const first = await tokenParameter(uid);
      if (!NATURAL_RENEWAL) {
        const code = await vnode.stop();
        expect(code).toBe(0);
        vnode = await startVnode(vnodeOptions);
      }
      const ended = await podEnded(core, NS, "renews", NATURAL_RENEWAL ? 900_000 : 240_000);
      const renewed = await tokenParameter(uid);
      const status = ended.status?.containerStatuses?.[0];
      const message = status?.state?.terminated?.message ?? "";
      expect(status?.state?.terminated?.exitCode, message).toBe(0);
      expect(status?.restartCount).toBe(0);
      // What the container saw first and last is what the vnode issued at launch and renewed.
      expect(message.trim()).toBe(`${sha(first)} ${sha(renewed)}`);
      expect(renewed).not.toBe(first);
      const claims = (token: string) =>
        JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString()) as {
          iat: number;
          exp: number;
        };
      expect(claims(renewed).iat).toBeGreaterThan(claims(first).iat);
      expect(claims(renewed).exp - claims(renewed).iat).toBe(600);
      for (const token of [first, renewed]) {
        const review = await admin.makeApiClient(AuthenticationV1Api).createTokenReview({
          body: { spec: { token } },
        });
        expect(review.status?.user?.username).toBe(`system:serviceaccount:${NS}:renewer`);
        expect(review.status?.user?.extra?.["authentication.kubernetes.io/pod-uid"]).toEqual([uid]);
      }
    }, // The natural renewal: 480 s to the renewal, up to 60 s to the host's next read.
    NATURAL_RENEWAL ? 1_200_000 : 300_000,
  );

  it("an in-cluster client connects with the Pod's own token: kubectl in the Pod lists its namespace's Pods and is forbidden from another's", async () => {
    await core.createNamespacedServiceAccount({
      namespace: NS,
      body: { metadata: { name: "lister" } },
    });
    const rbac = admin.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace: NS,
      body: {
        metadata: { name: "pod-lister" },
        rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["list"] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: NS,
      body: {
        metadata: { name: "pod-lister" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-lister" },
        subjects: [{ kind: "ServiceAccount", name: "lister", namespace: NS }],
      },
    });
    // The real kubectl, as any client-go program: InClusterConfig from KUBERNETES_SERVICE_HOST/PORT,
    // the token and ca.crt (it verifies the API server's certificate against it).
    const image = await kubectlImage();
    const dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    const script = [
      "kubectl get pods -o name >/tmp/own 2>&1; own=$?",
      "kubectl get pods -n kube-system -o name >/tmp/other 2>&1; other=$?",
      '{ echo "own=$own"; cat /tmp/own; echo "other=$other"; cat /tmp/other; } >/dev/termination-log',
    ].join("\n");
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod(
        "in-cluster",
        NODE,
        {
          image,
          imagePullPolicy: "IfNotPresent",
          command: ["sh", "-c", script],
          env: [{ name: "HOME", value: "/tmp" }],
          volumeMounts: [{ name: "kube-api-access-e2e02", mountPath: dir, readOnly: true }],
        },
        { serviceAccountName: "lister", volumes: [apiAccessVolume("kube-api-access-e2e02")] },
      ),
    });
    const ended = await podEnded(core, NS, "in-cluster");
    const report = ended.status?.containerStatuses?.[0]?.state?.terminated?.message ?? "";
    expect(report).toMatch(/^own=0\n/);
    expect(report).toContain("pod/in-cluster\n");
    expect(report).toContain("other=1\n");
    expect(report).toContain(
      `User "system:serviceaccount:${NS}:lister" cannot list resource "pods" in API group "" in the namespace "kube-system"`,
    );
    await core.deleteNamespacedPod({ name: "in-cluster", namespace: NS });
    await until(
      "the Pod gone",
      async () => ((await readPod(core, NS, "in-cluster")) === undefined ? true : undefined),
      180_000,
      1000,
    );
  });

  it("a ServiceAccount's AWS role reaches its Pod as IRSA's: the sts.amazonaws.com token in the webhook's file, AWS_ROLE_ARN beside it, and STS takes it", async () => {
    const role = "arn:aws:iam::123456789012:role/nebula-e2e-reader";
    await core.createNamespacedServiceAccount({
      namespace: NS,
      body: {
        metadata: { name: "aws-reader", annotations: { "eks.amazonaws.com/role-arn": role } },
      },
    });
    const check = [
      `[ "$AWS_ROLE_ARN" = ${role} ] || { echo "role-differs: $AWS_ROLE_ARN" >/dev/termination-log; exit 1; }`,
      `[ "$AWS_WEB_IDENTITY_TOKEN_FILE" = /var/run/secrets/eks.amazonaws.com/serviceaccount/token ] || { echo token-file-differs >/dev/termination-log; exit 1; }`,
      `[ "$AWS_REGION/$AWS_STS_REGIONAL_ENDPOINTS" = ${moto.region}/regional ] || { echo region-differs >/dev/termination-log; exit 1; }`,
      'cat "$AWS_WEB_IDENTITY_TOKEN_FILE" >/dev/termination-log',
    ].join("\n");
    const created = await core.createNamespacedPod({
      namespace: NS,
      body: barePod(
        "has-role",
        NODE,
        { command: ["sh", "-c", check] },
        { serviceAccountName: "aws-reader" },
      ),
    });
    const uid = created.metadata?.uid ?? "";
    const ended = await podEnded(core, NS, "has-role");
    const terminated = ended.status?.containerStatuses?.[0]?.state?.terminated;
    expect(terminated?.exitCode, terminated?.message).toBe(0);
    const token = terminated?.message ?? "";
    // The token's audience is STS's, its subject the Pod's ServiceAccount, bound to the Pod.
    const review = await admin.makeApiClient(AuthenticationV1Api).createTokenReview({
      body: { spec: { token, audiences: ["sts.amazonaws.com"] } },
    });
    expect(review.status?.authenticated).toBe(true);
    expect(review.status?.audiences).toEqual(["sts.amazonaws.com"]);
    expect(review.status?.user?.username).toBe(`system:serviceaccount:${NS}:aws-reader`);
    expect(review.status?.user?.extra?.["authentication.kubernetes.io/pod-uid"]).toEqual([uid]);
    const claims = JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString());
    expect(claims.exp - claims.iat).toBe(86400);
    // What an SDK in the container does with it: AssumeRoleWithWebIdentity (unsigned), here
    // against moto's STS (which does not check the token: the review above does).
    const sts = await fetch(moto.endpoint, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        Action: "AssumeRoleWithWebIdentity",
        Version: "2011-06-15",
        RoleArn: role,
        RoleSessionName: "nebula-e2e",
        WebIdentityToken: token,
      }),
    });
    const answer = await sts.text();
    expect(sts.status, answer).toBe(200);
    expect(answer).toMatch(/<AccessKeyId>[A-Z0-9]+<\/AccessKeyId>/);
    expect(answer).toContain(
      `<Arn>arn:aws:sts::123456789012:assumed-role/nebula-e2e-reader/nebula-e2e</Arn>`,
    );
    await core.deleteNamespacedPod({ name: "has-role", namespace: NS });
    await until(
      "the Pod gone and its token parameter with it",
      async () =>
        (await readPod(core, NS, "has-role")) === undefined &&
        !(await parameterNames()).some((n) => n.includes(uid))
          ? true
          : undefined,
      180_000,
      1000,
    );
  });

  it("a missing mandatory Secret: no instance, CreateContainerConfigError with the kubelet's message and an Event; the Pod starts once the Secret exists", async () => {
    const created = await core.createNamespacedPod({
      namespace: NS,
      body: barePod("waits-for-secret", NODE, {
        command: ["sh", "-c", '[ "$TOKEN" = later ]'],
        env: [{ name: "TOKEN", valueFrom: { secretKeyRef: { name: "late", key: "token" } } }],
      }),
    });
    const uid = created.metadata?.uid ?? "";
    const waiting = await until(
      "the Pod waiting with CreateContainerConfigError",
      async () => {
        const p = await readPod(core, NS, "waits-for-secret");
        const w = p?.status?.containerStatuses?.[0]?.state?.waiting;
        return w?.reason === "CreateContainerConfigError" ? w : undefined;
      },
      60_000,
      500,
    );
    expect(waiting.message).toBe('secret "late" not found');
    const event = await until(
      "a MandatorySecretNotFound Event",
      async () => {
        const list = await events.listNamespacedEvent({ namespace: NS });
        return list.items.find(
          (e) => e.regarding?.uid === uid && e.reason === "MandatorySecretNotFound",
        );
      },
      60_000,
      500,
    );
    expect(event.type).toBe("Warning");
    expect(await instancesOf(uid)).toEqual([]);

    await core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: "late" }, stringData: { token: "later" } },
    });
    const done = await until(
      "the Pod Succeeded once the Secret exists",
      async () => {
        const p: V1Pod | undefined = await readPod(core, NS, "waits-for-secret");
        if (p?.status?.phase === "Failed") throw new Error(JSON.stringify(p.status));
        return p?.status?.phase === "Succeeded" ? p : undefined;
      },
      180_000,
      500,
    );
    expect(done.status?.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(0);
    await core.deleteNamespacedPod({ name: "waits-for-secret", namespace: NS });
    await until(
      "the Pod gone and no parameter left",
      async () =>
        (await readPod(core, NS, "waits-for-secret")) === undefined &&
        !(await parameterNames()).some((n) => n.includes(uid))
          ? true
          : undefined,
      180_000,
      1000,
    );
  });
});
