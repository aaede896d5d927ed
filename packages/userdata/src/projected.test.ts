/**
 * `projected` and `downwardAPI` volumes (issue #34): what pod.sh tells the host, for both
 * deliveries, and the refusals. The host's side (the files, the tokens) is in
 * tokens.supervisor.test.ts and userdata.integration.test.ts.
 */
import { gunzipSync } from "node:zlib";
import type { V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  HOST_NETWORK_ANNOTATION,
  type PodSources,
  podTokenParameterName,
  podTokenRequests,
  type RenderOptionsInput,
  renderUserData,
  UserDataError,
} from "./index.js";
import { typicalPod } from "./testing/pods.js";

const SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
const CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const SOURCES: PodSources = {
  configMaps: {
    "kube-root-ca.crt": { data: { "ca.crt": CA } },
    settings: { data: { mode: "fast", level: "3" } },
  },
  secrets: { db: { data: { password: Buffer.from("pw").toString("base64") } } },
};

/** The API server's `kube-api-access-*` volume, as it injects it. */
const kubeApiAccess = {
  name: "kube-api-access-x7k2p",
  projected: {
    defaultMode: 420,
    sources: [
      { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
      { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
      {
        downwardAPI: {
          items: [
            { path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } },
          ],
        },
      },
    ],
  },
};

function pod(
  volumes: unknown[],
  mounts: unknown[] = [],
  spec: Record<string, unknown> = {},
): V1Pod {
  return {
    metadata: {
      name: "web-1",
      namespace: "shop",
      uid: "u-1",
      labels: { "app.kubernetes.io/name": "web", tier: "front" },
      annotations: { note: 'say "hi"\n\tthen\u00a0go\\ ✓', "b.example/x": "" },
    },
    spec: {
      serviceAccountName: "builder",
      nodeName: "nebula-vnode",
      containers: [{ name: "app", image: "busybox:1", volumeMounts: mounts }],
      volumes,
      ...spec,
    },
  } as V1Pod;
}

function render(p: V1Pod, options: RenderOptionsInput = {}, sources: PodSources = SOURCES) {
  const result = renderUserData(
    p,
    { cluster: "prod", delivery: "parameters", ...options },
    sources,
  );
  if (!result.ok) throw result.error;
  return result.value;
}
/** pod.sh as the host reads it from the parameters. */
const podSh = (p: V1Pod, options: RenderOptionsInput = {}, sources: PodSources = SOURCES) =>
  gunzipSync(
    Buffer.from(
      render(p, options, sources)
        .parameters.map((x) => x.value)
        .join(""),
      "base64",
    ),
  ).toString("utf8");

/** The files pod.sh names, path → [mode, content]. */
function files(sh: string): Record<string, [string, string]> {
  const list = (name: string) =>
    [...(new RegExp(`^${name}=\\((.*)\\)$`, "m").exec(sh)?.[1] ?? "").matchAll(/\$'([^']*)'/g)].map(
      (m) => m[1] ?? "",
    );
  const paths = list("FILE_PATH");
  const modes = list("FILE_MODE");
  const data = list("FILE_DATA");
  return Object.fromEntries(
    paths.map((p, i) => [
      p,
      [modes[i] ?? "", Buffer.from(data[i] ?? "", "base64").toString("utf8")] as [string, string],
    ]),
  );
}
function errorOf(p: V1Pod, options: RenderOptionsInput = {}, sources: PodSources = SOURCES) {
  const result = renderUserData(
    p,
    { cluster: "prod", delivery: "parameters", ...options },
    sources,
  );
  if (result.ok) throw new Error("expected an error");
  expect(result.error).toBeInstanceOf(UserDataError);
  return result.error;
}

describe("the kube-api-access-* volume", () => {
  const mount = { name: kubeApiAccess.name, mountPath: SA_DIR, readOnly: true };

  it("is served with the parameters delivery: the token from the token parameter, ca.crt and namespace as files", () => {
    const p = pod([kubeApiAccess], [mount]);
    const sh = podSh(p);
    const dir = "/run/nebula/volumes/kube-api-access-x7k2p";
    expect(files(sh)).toEqual({
      [`${dir}/ca.crt`]: ["0644", CA],
      [`${dir}/namespace`]: ["0644", "shop"],
    });
    expect(sh).toContain(
      [
        `TOKEN_PATH=($'${dir}/token')`,
        "TOKEN_KEY=($'0')",
        "TOKEN_MODE=($'0644')",
        `TOKEN_PARAMETER=$'${podTokenParameterName("prod", "u-1")}'`,
        // A tenth of the token's 3607 s.
        "TOKEN_POLL=360",
      ].join("\n"),
    );
    expect(podTokenParameterName("prod", "u-1")).toBe("/nebula/prod/pods/u-1/t");
    expect(sh).toContain(`$'--mount=type=bind,source=${dir},target=${SA_DIR},readonly'`);
    expect(sh).toContain(`HOST_DIRS=($'${dir}')`);
    // The token itself is never in pod.sh (its SHA-256 is pinned; the token changes).
    expect(sh).not.toMatch(/eyJ/);
  });

  it("is left out with the user-data delivery, mounts and all, as before", () => {
    const p = pod([kubeApiAccess], [mount]);
    const result = renderUserData(p, {});
    if (!result.ok) throw result.error;
    expect(result.value.script).not.toContain("kube-api-access");
    expect(result.value.script).not.toContain("serviceaccount");
    expect(result.value.script).not.toMatch(/^TOKEN_/m);
  });

  it("a Pod with automountServiceAccountToken: false (no such volume) gets no TOKEN_ lines", () => {
    const p = pod([], [], { automountServiceAccountToken: false });
    expect(podSh(p)).not.toMatch(/^TOKEN_/m);
    const inline = renderUserData(p, {});
    if (!inline.ok) throw inline.error;
    expect(inline.value.script).not.toMatch(/^TOKEN_/m);
    expect(podTokenRequests(p)).toEqual([]);
  });

  it("takes its CA from the kube-root-ca.crt ConfigMap: missing, the container waits as on a kubelet", () => {
    const error = errorOf(pod([kubeApiAccess], [mount]), {}, { configMaps: {}, secrets: {} });
    expect(error).toMatchObject({
      code: "CreateContainerConfigError",
      reason: "MandatoryConfigMapNotFound",
      path: "spec.volumes[kube-api-access-x7k2p].projected.sources[1]",
      message: 'configmap "kube-root-ca.crt" not found',
    });
  });
});

describe("serviceAccountToken projections", () => {
  const irsa = {
    name: "aws-iam-token",
    projected: {
      defaultMode: 0o600,
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
  };

  it("one key per distinct audience and lifetime, as podTokenRequests asks them; the poll follows the shortest", () => {
    const again = {
      name: "again",
      projected: { sources: [{ serviceAccountToken: { path: "a/t", expirationSeconds: 3607 } }] },
    };
    const p = pod([kubeApiAccess, irsa, again]);
    expect(podTokenRequests(p).map((r) => [r.key, r.audience, r.expirationSeconds])).toEqual([
      ["0", undefined, 3607],
      ["1", "sts.amazonaws.com", 86400],
    ]);
    const sh = podSh(p);
    expect(sh).toContain(
      "TOKEN_PATH=($'/run/nebula/volumes/kube-api-access-x7k2p/token' $'/run/nebula/volumes/aws-iam-token/token' $'/run/nebula/volumes/again/a/t')\nTOKEN_KEY=($'0' $'1' $'0')\nTOKEN_MODE=($'0644' $'0600' $'0644')\n",
    );
    expect(sh).toContain("\nTOKEN_POLL=360\n");
    // A longer-lived token alone is read less often; the option overrides either.
    expect(podSh(pod([irsa]))).toContain("\nTOKEN_POLL=8640\n");
    expect(podSh(pod([irsa]), { tokenPollSeconds: 2 })).toContain("\nTOKEN_POLL=2\n");
  });

  it("with a service proxy: its token under key p in the service proxy's own file, and its API server, CA, Node and binary", () => {
    const serviceProxy = {
      apiServer: { host: "fd00::10" },
      caCert: CA,
      nodeName: "nebula",
      binary: "/usr/local/bin/kube-proxy",
    };
    const sh = podSh(pod([kubeApiAccess]), { serviceProxy });
    expect(sh).toContain(
      "TOKEN_PATH=($'/run/nebula/service-proxy/token' $'/run/nebula/volumes/kube-api-access-x7k2p/token')\nTOKEN_KEY=($'p' $'0')\nTOKEN_MODE=($'0600' $'0644')\n",
    );
    expect(sh).toContain("\nPROXY_SERVER=$'https://[fd00::10]:443'\n");
    expect(sh).toContain(`\nPROXY_CA=$'${Buffer.from(CA).toString("base64")}'\n`);
    expect(sh).toContain("\nPROXY_NODE=$'nebula'\nPROXY_BIN=$'/usr/local/bin/kube-proxy'\n");
    expect(sh).toContain("\nPROXY_TOKEN=$'/run/nebula/service-proxy/token'\n");
    // A Pod that projects no token still gets the proxy's; one on the host's network gets none.
    expect(podSh(pod([]), { serviceProxy })).toContain("TOKEN_KEY=($'p')\n");
    const onHost = pod([], [], { hostNetwork: true });
    onHost.metadata = { ...onHost.metadata, annotations: { [HOST_NETWORK_ANNOTATION]: "true" } };
    const onHostSh = podSh(onHost, { serviceProxy });
    expect(onHostSh).not.toContain("PROXY_");
    expect(onHostSh).not.toContain("TOKEN_KEY");
    // The proxy's token is never written into user-data.
    expect(() => render(pod([]), { serviceProxy, delivery: "user-data" })).toThrow(
      expect.objectContaining({ code: "InvalidOptions", path: "serviceProxy" }),
    );
  });

  it("are refused with the user-data delivery (SecretInUserData), whatever comes before them", () => {
    for (const sources of [
      irsa.projected.sources,
      [
        { downwardAPI: { items: [] } },
        { configMap: { name: "settings" } },
        ...irsa.projected.sources,
      ],
    ]) {
      const result = renderUserData(pod([{ name: "aws-iam-token", projected: { sources } }]), {});
      if (result.ok) throw new Error("rendered");
      expect(result.error).toMatchObject({
        code: "SecretInUserData",
        path: `spec.volumes[aws-iam-token].projected.sources[${sources.length - 1}]`,
      });
      expect(result.error.message).toContain('render with delivery: "parameters"');
    }
  });

  it("refuse a path outside the volume", () => {
    const bad = { name: "t", projected: { sources: [{ serviceAccountToken: { path: "../t" } }] } };
    expect(errorOf(pod([bad]))).toMatchObject({
      code: "InvalidPod",
      path: "spec.volumes[t].projected.sources[0].serviceAccountToken.path",
    });
  });
});

describe("projected configMap, secret and downwardAPI sources", () => {
  it("write each source's keys or items with the volume's defaultMode or the item's mode", () => {
    const p = pod(
      [
        {
          name: "all",
          projected: {
            defaultMode: 0o440,
            sources: [
              { configMap: { name: "settings" } },
              { secret: { name: "db", items: [{ key: "password", path: "db/pw", mode: 0o400 }] } },
              {
                downwardAPI: {
                  items: [
                    { path: "labels", fieldRef: { fieldPath: "metadata.labels" } },
                    { path: "name", fieldRef: { fieldPath: "metadata.name" }, mode: 0o444 },
                  ],
                },
              },
            ],
          },
        },
      ],
      [{ name: "all", mountPath: "/etc/all" }],
    );
    const dir = "/run/nebula/volumes/all";
    expect(files(podSh(p))).toEqual({
      [`${dir}/mode`]: ["0440", "fast"],
      [`${dir}/level`]: ["0440", "3"],
      [`${dir}/db/pw`]: ["0400", "pw"],
      [`${dir}/labels`]: ["0440", 'app.kubernetes.io/name="web"\ntier="front"'],
      [`${dir}/name`]: ["0444", "web-1"],
    });
    // Mounted read-only whatever the mount says, as the kubelet mounts them.
    expect(podSh(p)).toContain(`$'--mount=type=bind,source=${dir},target=/etc/all,readonly'`);
  });

  it("skip an optional missing source or key with a notice; a mandatory one makes the container wait", () => {
    const volume = (optional: boolean) => ({
      name: "v",
      projected: {
        sources: [
          { configMap: { name: "gone", optional } },
          { secret: { name: "db", optional, items: [{ key: "nope", path: "x" }] } },
          { configMap: { name: "settings", items: [{ key: "mode", path: "m" }] } },
        ],
      },
    });
    const ok = render(pod([volume(true)]));
    expect(ok.notices).toEqual([
      { reason: "OptionalConfigMapNotFound", message: 'configmap "gone" not found' },
    ]);
    expect(Object.keys(files(podSh(pod([volume(true)]))))).toEqual(["/run/nebula/volumes/v/m"]);
    expect(errorOf(pod([volume(false)]))).toMatchObject({
      code: "CreateContainerConfigError",
      path: "spec.volumes[v].projected.sources[0]",
    });
  });

  it("with the user-data delivery: a Secret source is SecretInUserData, a ConfigMap source UnsupportedVolume, downwardAPI is fine", () => {
    const one = (source: unknown) =>
      renderUserData(pod([{ name: "v", projected: { sources: [source] } }]), {});
    const secret = one({ secret: { name: "db" } });
    const configMap = one({ configMap: { name: "settings" } });
    expect(secret.ok ? "" : secret.error.code).toBe("SecretInUserData");
    expect(configMap.ok ? "" : configMap.error.code).toBe("UnsupportedVolume");
    const downward = one({
      downwardAPI: { items: [{ path: "uid", fieldRef: { fieldPath: "metadata.uid" } }] },
    });
    if (!downward.ok) throw downward.error;
    expect(files(downward.value.script)).toEqual({ "/run/nebula/volumes/v/uid": ["0644", "u-1"] });
  });

  it("allow a subPath into the volume (a file, which does not see later changes, as on a kubelet)", () => {
    const sh = podSh(
      pod([kubeApiAccess], [{ name: kubeApiAccess.name, mountPath: "/ca.crt", subPath: "ca.crt" }]),
    );
    expect(sh).toContain(
      "$'--mount=type=bind,source=/run/nebula/volumes/kube-api-access-x7k2p/ca.crt,target=/ca.crt,readonly'",
    );
  });
});

describe("downwardAPI volumes", () => {
  const volume = (items: unknown[], defaultMode?: number) => ({
    name: "info",
    downwardAPI: { items, ...(defaultMode === undefined ? {} : { defaultMode }) },
  });
  const field = (path: string, fieldPath: string, mode?: number) => ({
    path,
    fieldRef: { fieldPath },
    ...(mode === undefined ? {} : { mode }),
  });

  it("write every field the kubelet writes, as of render time, with the kubelet's formats", () => {
    const p = pod([
      volume(
        [
          field("name", "metadata.name"),
          field("namespace", "metadata.namespace"),
          field("uid", "metadata.uid"),
          field("labels", "metadata.labels"),
          field("annotations", "metadata.annotations", 0o600),
          field("tier", "metadata.labels['tier']"),
          field("note", "metadata.annotations['note']"),
          field("absent", "metadata.labels['absent']"),
          field("sa", "spec.serviceAccountName"),
          field("node", "spec.nodeName"),
        ],
        0o444,
      ),
    ]);
    const dir = "/run/nebula/volumes/info";
    expect(files(podSh(p))).toEqual({
      [`${dir}/name`]: ["0444", "web-1"],
      [`${dir}/namespace`]: ["0444", "shop"],
      [`${dir}/uid`]: ["0444", "u-1"],
      [`${dir}/labels`]: ["0444", 'app.kubernetes.io/name="web"\ntier="front"'],
      // Sorted by key; values as Go's %q: escapes named, U+00A0 as \u00a0, ✓ as it is.
      [`${dir}/annotations`]: [
        "0600",
        'b.example/x=""\nnote="say \\"hi\\"\\n\\tthen\\u00a0go\\\\ ✓"',
      ],
      [`${dir}/tier`]: ["0444", "front"],
      [`${dir}/note`]: ["0444", 'say "hi"\n\tthen\u00a0go\\ ✓'],
      [`${dir}/absent`]: ["0444", ""],
      [`${dir}/sa`]: ["0444", "builder"],
      [`${dir}/node`]: ["0444", "nebula-vnode"],
    });
  });

  it("render with the user-data delivery too (nothing secret), and default to mode 0644", () => {
    const result = renderUserData(pod([volume([field("labels", "metadata.labels")])]), {});
    if (!result.ok) throw result.error;
    expect(files(result.value.script)).toEqual({
      "/run/nebula/volumes/info/labels": ["0644", 'app.kubernetes.io/name="web"\ntier="front"'],
    });
  });

  it.each([
    [
      "resourceFieldRef",
      { path: "mem", resourceFieldRef: { resource: "limits.memory" } },
      "UnsupportedVolume",
      "spec.volumes[info].downwardAPI.items[0].resourceFieldRef",
      /uses resourceFieldRef limits.memory, which is not supported/,
    ],
    [
      "status.podIP",
      field("ip", "status.podIP"),
      "UnsupportedVolume",
      "spec.volumes[info].downwardAPI.items[0].fieldRef",
      /uses fieldRef status.podIP, which is not supported in a volume \(metadata.name/,
    ],
    [
      "an item with no field",
      { path: "x" },
      "InvalidPod",
      "spec.volumes[info].downwardAPI.items[0]",
      /has neither fieldRef nor resourceFieldRef/,
    ],
    [
      "an absolute path",
      field("/etc/x", "metadata.name"),
      "InvalidPod",
      "spec.volumes[info].downwardAPI.items[0].path",
      /must be relative/,
    ],
  ])("refuse %s, saying where", (_, item, code, path, message) => {
    const error = errorOf(pod([volume([item])]));
    expect(error).toMatchObject({ code, path });
    expect(error.message).toMatch(message);
  });
});

describe("projected sources the host does not serve", () => {
  it.each([
    [
      "clusterTrustBundle",
      { clusterTrustBundle: { name: "b", path: "b.pem" } },
      "UnsupportedVolume",
    ],
    [
      "podCertificate",
      { podCertificate: { signerName: "x/y", keyType: "ED25519" } },
      "UnsupportedVolume",
    ],
    ["an unknown kind", { futureThing: { path: "x" } }, "UnsupportedVolume"],
    [
      "two kinds in one source",
      { configMap: { name: "settings" }, secret: { name: "db" } },
      "InvalidPod",
    ],
    ["no kind", {}, "InvalidPod"],
  ])("refuse %s, naming the source", (kind, source, code) => {
    const error = errorOf(pod([{ name: "v", projected: { sources: [source] } }]));
    expect(error).toMatchObject({ code, path: "spec.volumes[v].projected.sources[0]" });
    if (code === "UnsupportedVolume") {
      expect(error.message).toContain(`has a ${Object.keys(source)[0]} source`);
      expect(kind).not.toBe("");
    }
  });
});

describe("the renderer stays total on projected and downwardAPI volumes", () => {
  const item = fc.record(
    {
      key: fc.oneof(fc.constantFrom("mode", "password", "ca.crt"), fc.string()),
      path: fc.oneof(fc.constantFrom("a", "b/c", "../x", "/abs", ""), fc.string()),
      mode: fc.oneof(fc.integer({ min: -1, max: 0o1000 }), fc.constant(undefined)),
      fieldRef: fc.record({
        fieldPath: fc.oneof(
          fc.constantFrom(
            "metadata.name",
            "metadata.labels",
            "metadata.annotations",
            "metadata.labels['tier']",
            "status.hostIP",
          ),
          fc.string(),
        ),
      }),
      resourceFieldRef: fc.record({ resource: fc.string() }),
    },
    { requiredKeys: [] },
  );
  const source = fc.oneof(
    fc.record({
      configMap: fc.record(
        {
          name: fc.constantFrom("settings", "kube-root-ca.crt", "gone"),
          items: fc.array(item, { maxLength: 3 }),
          optional: fc.boolean(),
        },
        { requiredKeys: [] },
      ),
    }),
    fc.record({
      secret: fc.record(
        { name: fc.constantFrom("db", "gone"), items: fc.array(item), optional: fc.boolean() },
        { requiredKeys: [] },
      ),
    }),
    fc.record({ downwardAPI: fc.record({ items: fc.array(item, { maxLength: 3 }) }) }),
    fc.record({
      serviceAccountToken: fc.record(
        {
          path: fc.oneof(fc.constant("token"), fc.string()),
          audience: fc.oneof(fc.constant("sts.amazonaws.com"), fc.string()),
          expirationSeconds: fc.oneof(fc.integer({ min: -10, max: 200_000 }), fc.double()),
        },
        { requiredKeys: [] },
      ),
    }),
    fc.dictionary(fc.string(), fc.anything(), { maxKeys: 2 }),
    fc.anything(),
  );
  const volume = fc.oneof(
    fc.record({
      name: fc.constantFrom("v", "kube-api-access-a", "Bad_Name"),
      projected: fc.record(
        {
          sources: fc.array(source, { maxLength: 4 }),
          defaultMode: fc.oneof(fc.integer({ min: -1, max: 0o1000 }), fc.anything()),
        },
        { requiredKeys: [] },
      ),
    }),
    fc.record({
      name: fc.constant("d"),
      downwardAPI: fc.record(
        { items: fc.array(item, { maxLength: 4 }), defaultMode: fc.integer() },
        { requiredKeys: [] },
      ),
    }),
  );

  it("gives user-data or a UserDataError for any such volume, with both deliveries, never a throw", () => {
    fc.assert(
      fc.property(
        fc.array(volume, { maxLength: 3 }),
        fc.constantFrom("user-data", "parameters"),
        (volumes, delivery) => {
          const p = typicalPod({ volumes: volumes as never });
          if (p.metadata) p.metadata.uid = "u-1";
          const result = renderUserData(p, { cluster: "prod", delivery }, SOURCES);
          if (!result.ok) expect(result.error).toBeInstanceOf(UserDataError);
          else if (delivery === "user-data") expect(result.value.script).not.toMatch(/^TOKEN_/m);
          expect(Array.isArray(podTokenRequests(p))).toBe(true);
        },
      ),
      { numRuns: 300 },
    );
  });
});
