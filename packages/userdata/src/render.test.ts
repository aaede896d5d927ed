import { spawnSync } from "node:child_process";
import { gunzipSync } from "node:zlib";
import type { V1Pod } from "@kubernetes/client-node";
import {
  LOG_FALLBACK_MAX_BYTES,
  LOG_FALLBACK_MAX_LINES,
  REPORT_CHUNK_SIZE,
  REPORT_TAG_KEY,
  TAG_BUDGET_STEPS,
} from "@nebula/state-mapping";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  MAX_USER_DATA_BYTES,
  RenderOptions,
  renderUserData,
  supervisorScript,
  UserDataError,
} from "./index.js";
import { DEFAULT_METRICS_NAMESPACE } from "./options.js";
import { expand as expandKubernetesReferences } from "./pod.js";
import { bashQuote, shQuote } from "./quote.js";
import { typicalPod } from "./testing/pods.js";

const asPod = (value: unknown) => value as V1Pod;
function errorOf(pod: unknown, options = {}) {
  const result = renderUserData(asPod(pod), options);
  if (result.ok) throw new Error("expected an error");
  return result.error;
}
const withApp = (app: Record<string, unknown>, spec: Record<string, unknown> = {}) =>
  asPod({
    metadata: { name: "p" },
    spec: { containers: [{ name: "app", image: "busybox:1", ...app }], ...spec },
  });

describe("renderUserData", () => {
  it("renders a typical Pod to a gzipped bash script under 16 KiB, deterministically", () => {
    const a = renderUserData(typicalPod());
    const b = renderUserData(typicalPod());
    expect(a).toEqual(b);
    if (!a.ok) throw a.error;
    const bytes = Buffer.from(a.value.userData, "base64");
    expect(bytes.length).toBe(a.value.bytes);
    expect(a.value.bytes).toBeLessThanOrEqual(MAX_USER_DATA_BYTES);
    expect(a.value.gzipped).toBe(true);
    expect(gunzipSync(bytes).toString("utf8")).toBe(a.value.script);
    expect(a.value.script.startsWith("#!/bin/bash\n")).toBe(true);
  });

  it("the typical Pod with agents and the doorbell, user-data delivery: fits, without the Parameter Store code", () => {
    const result = renderUserData(typicalPod(), {
      agents: [{ name: "sandd", command: ["/opt/sandd", "--x='1'", "$(y)"] }],
      doorbell: { queueUrl: "https://sqs.eu-west-1.amazonaws.com/123456789012/nebula-prod-events" },
    });
    if (!result.ok) throw result.error;
    expect(result.value.bytes).toBeLessThanOrEqual(MAX_USER_DATA_BYTES);
    // 15,661 bytes when the token code came (16,352 before, with pod.sh's SSM code inside);
    // 15,787 before issue #30's last pass, 15,960 after it (the aws CLI asked only when needed,
    // the whole report reused as the tag body): 424 bytes below EC2's limit.
    expect(result.value.bytes).toBeLessThanOrEqual(16_000);
    const { script } = result.value;
    expect(script).toContain(supervisorScript({ delivery: "user-data" }));
    for (const code of ["AmazonSSM", "fetch_pod() {", "tokens_tick() {", "ssm_endpoint() {"])
      expect(script).not.toContain(code);
    expect(supervisorScript()).toContain("tokens_tick() {");
  });

  it("leaves small scripts in clear unless asked, and honours compression: always / never", () => {
    const never = renderUserData(typicalPod(), { compression: "never" });
    expect(never.ok ? never.value.gzipped : never.error.code).toBe("TooLarge");
    const always = renderUserData(typicalPod(), { compression: "always" });
    expect(always.ok && always.value.gzipped).toBe(true);
  });

  it("embeds the report constants of @nebula/state-mapping in the supervisor", () => {
    const script = supervisorScript();
    expect(script).not.toMatch(/@@[A-Z_]+@@/);
    expect(script).toContain(`REPORT_TAG_KEY='${REPORT_TAG_KEY}'`);
    expect(script).toContain(`REPORT_CHUNK_SIZE=${REPORT_CHUNK_SIZE}\n`);
  });

  it("embeds the shared message budget and the log-fallback limits of @nebula/state-mapping", () => {
    const script = supervisorScript();
    expect(script).toContain(`REPORT_BUDGET_STEPS='${TAG_BUDGET_STEPS.join(" ")}'\n`);
    expect(script).toContain(`LOG_TAIL_BYTES=${LOG_FALLBACK_MAX_BYTES}\n`);
    expect(script).toContain(`LOG_TAIL_LINES=${LOG_FALLBACK_MAX_LINES}\n`);
  });

  it("renders limits, user, capabilities, working dir and GPUs as docker flags", () => {
    const result = renderUserData(
      withApp(
        {
          workingDir: "/srv",
          securityContext: {
            runAsUser: 1000,
            runAsGroup: 2000,
            capabilities: { add: ["NET_ADMIN"], drop: ["ALL"] },
            allowPrivilegeEscalation: false,
          },
          resources: { limits: { memory: "1Gi", cpu: "250m", "nvidia.com/gpu": "2" } },
          volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
        },
        { volumes: [{ name: "scratch", emptyDir: {} }] },
      ),
    );
    if (!result.ok) throw result.error;
    const flags = /^C0_FLAGS=\((.*)\)$/m.exec(result.value.script)?.[1];
    expect(flags).toBe(
      "$'--workdir=/srv' $'--user=1000:2000' $'--security-opt=no-new-privileges' $'--cap-add=NET_ADMIN' $'--cap-drop=ALL' $'--memory=1073741824b' $'--cpus=0.25' $'--gpus=2' $'--mount=type=bind,source=/var/lib/nebula/volumes/scratch,target=/scratch'",
    );
    expect(result.value.script).toContain(
      "mkdir -p $'/usr/local/lib/nebula' $'/var/lib/nebula' $'/var/lib/nebula/volumes/scratch'",
    );
  });

  it("rejects memory and cpu limits docker would not read as the Pod's limit", () => {
    for (const [resource, quantity] of [
      ["memory", 1e308],
      ["memory", "1e308"],
      ["memory", "0"],
      ["memory", "0Mi"],
      ["memory", 0],
      ["cpu", "0"],
      ["cpu", "0.0001"],
      ["cpu", "1e300"],
    ] as const) {
      const error = errorOf(withApp({ resources: { limits: { [resource]: quantity } } }));
      expect(error.code).toBe("InvalidPod");
      expect(error.path).toBe(`spec.containers[app].resources.limits[${resource}]`);
      expect(error.message).toContain(`container app has a ${resource} limit of`);
    }
    const ok = renderUserData(withApp({ resources: { limits: { memory: "0.5", cpu: "1m" } } }));
    if (!ok.ok) throw ok.error;
    expect(ok.value.script).toContain("C0_FLAGS=($'--memory=1b' $'--cpus=0.001')");
  });

  it("lets a later env definition win, also over a boot-time one", () => {
    const result = renderUserData(
      withApp({
        env: [
          { name: "IP", valueFrom: { fieldRef: { fieldPath: "status.hostIP" } } },
          { name: "IP", value: "1.2.3.4" },
          { name: "A", value: "1" },
          { name: "A", value: "2" },
          { name: "my.weird-name", value: "ok" },
        ],
      }),
    );
    if (!result.ok) throw result.error;
    expect(result.value.script).toContain(
      "C0_FLAGS=($'--env=IP=1.2.3.4' $'--env=A=2' $'--env=my.weird-name=ok')",
    );
    expect(result.value.script).toContain("C0_HOSTIP=()");
    expect(errorOf(withApp({ env: [{ name: "A=B", value: "x" }] })).code).toBe("InvalidPod");
  });

  it("adds the Service variables the container does not set, after its own; $(VAR) sees them", () => {
    const services = [
      {
        metadata: { name: "kubernetes", namespace: "default" },
        spec: { clusterIP: "10.96.0.1", ports: [{ name: "https", port: 443 }] },
      },
      {
        metadata: { name: "db", namespace: "default" },
        spec: { clusterIP: "10.96.0.20", ports: [{ port: 5432 }] },
      },
    ];
    const pod = withApp({
      env: [
        { name: "DB_SERVICE_PORT", value: "6543" },
        { name: "URL", value: "postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)" },
        { name: "KUBERNETES_PORT", valueFrom: { fieldRef: { fieldPath: "status.hostIP" } } },
      ],
      args: ["--api=$(KUBERNETES_SERVICE_HOST)"],
    });
    const result = renderUserData(pod, {}, { configMaps: {}, secrets: {}, services });
    if (!result.ok) throw result.error;
    const flags = /C0_FLAGS=\(([^\n]*)\)/.exec(result.value.script)?.[1] ?? "";
    const env = [...flags.matchAll(/\$'--env=([^=]+)=([^']*)'/g)].map((m) => [m[1], m[2]]);
    // The container's own first (its DB_SERVICE_PORT wins), then the Services' in name order.
    expect(env.slice(0, 2)).toEqual([
      ["DB_SERVICE_PORT", "6543"],
      ["URL", "postgres://10.96.0.20:6543"],
    ]);
    const names = env.map(([name]) => name);
    expect(names.filter((n) => n === "DB_SERVICE_PORT")).toHaveLength(1);
    expect(names).toContain("DB_SERVICE_HOST");
    expect(names).toContain("KUBERNETES_SERVICE_PORT_HTTPS");
    // A boot-time variable of the same name is the container's: no Service value beside it.
    expect(names).not.toContain("KUBERNETES_PORT");
    expect(result.value.script).toContain("C0_HOSTIP=($'KUBERNETES_PORT')");
    expect(result.value.script).toContain("C0_ARGS=($'--api=10.96.0.1')");
    // enableServiceLinks: false keeps only the kubernetes Service's (db is in the Pod's namespace).
    const unlinked = renderUserData(
      { ...pod, spec: { ...pod.spec, enableServiceLinks: false } } as V1Pod,
      {},
      { configMaps: {}, secrets: {}, services },
    );
    if (!unlinked.ok) throw unlinked.error;
    expect(unlinked.value.script).not.toContain("--env=DB_SERVICE_HOST=");
    // Without the variable, a reference to it stays as written, as on a kubelet.
    expect(unlinked.value.script).toContain("--env=URL=postgres://$(DB_SERVICE_HOST):6543");
    expect(unlinked.value.script).toContain("--env=KUBERNETES_SERVICE_HOST=10.96.0.1");
  });

  it("kubernetesService: the containers' KUBERNETES_SERVICE_HOST/PORT name where the hosts reach the API server; a bad host is InvalidOptions", () => {
    const services = [
      {
        metadata: { name: "kubernetes", namespace: "default" },
        spec: { clusterIP: "10.96.0.1", ports: [{ name: "https", port: 443 }] },
      },
    ];
    const result = renderUserData(
      withApp({}),
      { kubernetesService: { host: "api.example.internal", port: 6443 } },
      { configMaps: {}, secrets: {}, services },
    );
    if (!result.ok) throw result.error;
    expect(result.value.script).toContain("--env=KUBERNETES_SERVICE_HOST=api.example.internal");
    expect(result.value.script).toContain("--env=KUBERNETES_SERVICE_PORT=6443");
    expect(result.value.script).not.toContain("10.96.0.1");
    expect(
      errorOf(withApp({}), { kubernetesService: { host: "bad host;rm", port: 443 } }),
    ).toMatchObject({ code: "InvalidOptions", path: "kubernetesService.host" });
  });

  it("names the Pod sandbox's host as the kubelet names a Pod's: override, hostname, name; cut to 63", () => {
    const sandboxFlags = (pod: V1Pod) => {
      const result = renderUserData(pod);
      if (!result.ok) throw result.error;
      return /SANDBOX_FLAGS=\(([^\n]*)\)/.exec(result.value.script)?.[1];
    };
    expect(sandboxFlags(withApp({}))).toBe("$'--hostname=p'");
    expect(sandboxFlags(withApp({}, { hostname: "db-0" }))).toBe("$'--hostname=db-0'");
    expect(sandboxFlags(withApp({}, { hostname: "db-0", hostnameOverride: "db.example" }))).toBe(
      "$'--hostname=db.example'",
    );
    // 62 characters, then "-x": cut to 63 ("...-") and the trailing "-" dropped.
    const long = `${"a".repeat(62)}-x`;
    const named = asPod({ metadata: { name: long }, spec: withApp({}).spec });
    expect(sandboxFlags(named)).toBe(`$'--hostname=${"a".repeat(62)}'`);
    // With the host's network there is no sandbox and so no host name of its own.
    const hostNet = withApp({}, { hostNetwork: true });
    (hostNet.metadata as { annotations?: Record<string, string> }).annotations = {
      "nebula.dev/allow-host-network": "true",
    };
    expect(sandboxFlags(hostNet)).toBe("");
    // A Pod rendered without a name (outside a cluster) keeps the runtime's host name.
    expect(sandboxFlags(asPod({ spec: withApp({}).spec }))).toBe("");
    expect(errorOf(withApp({}, { hostname: "Not_A_Name" }))).toMatchObject({
      code: "InvalidPod",
      path: "spec.hostname",
    });
  });

  it("gives a Pod with a subdomain its fully qualified name as the kubelet does; setHostnameAsFQDN makes it the host name", () => {
    const rendered = (pod: V1Pod, domain = "cluster.local") => {
      const result = renderUserData(
        { ...pod, metadata: { ...pod.metadata, namespace: "shop" } } as V1Pod,
        { dns: { clusterDomain: domain } },
      );
      if (!result.ok) throw result.error;
      return {
        flags: /SANDBOX_FLAGS=\(([^\n]*)\)/.exec(result.value.script)?.[1],
        fqdn: /^POD_FQDN=(.*)$/m.exec(result.value.script)?.[1],
      };
    };
    expect(rendered(withApp({}, { hostname: "db-0" }))).toEqual({
      flags: "$'--hostname=db-0'",
      fqdn: "$''",
    });
    expect(rendered(withApp({}, { hostname: "db-0", subdomain: "db" }))).toEqual({
      flags: "$'--hostname=db-0'",
      fqdn: "$'db-0.db.shop.svc.cluster.local'",
    });
    expect(
      rendered(
        withApp({}, { hostname: "db-0", subdomain: "db", setHostnameAsFQDN: true }),
        "k8s.example",
      ),
    ).toEqual({
      flags: "$'--hostname=db-0.db.shop.svc.k8s.example'",
      fqdn: "$'db-0.db.shop.svc.k8s.example'",
    });
    // Without a subdomain, setHostnameAsFQDN changes nothing (the kubelet's rule).
    expect(rendered(withApp({}, { hostname: "db-0", setHostnameAsFQDN: true })).flags).toBe(
      "$'--hostname=db-0'",
    );
    // Linux's 64-character host name: the kubelet fails the Pod, Nebula refuses it with its words.
    expect(
      errorOf(withApp({}, { hostname: "a".repeat(40), subdomain: "db", setHostnameAsFQDN: true })),
    ).toMatchObject({
      code: "InvalidPod",
      path: "spec.setHostnameAsFQDN",
      message: expect.stringContaining("64 characters is the max"),
    });
    expect(errorOf(withApp({}, { subdomain: "Not_A_Label" }))).toMatchObject({
      code: "InvalidPod",
      path: "spec.subdomain",
    });
  });

  it("sets TimeoutStopSec to the grace period plus 30 s", () => {
    const result = renderUserData(withApp({}, { terminationGracePeriodSeconds: 120 }));
    expect(result.ok && result.value.script).toContain("'TimeoutStopSec=150'");
  });

  it("caps the host's grace at maxGracePeriodSeconds: a year-long grace stops within the cap", () => {
    const year = withApp({}, { terminationGracePeriodSeconds: 31_536_001 });
    const capped = renderUserData(year);
    expect(capped.ok && capped.value.script).toContain("'TimeoutStopSec=3630'");
    expect(capped.ok && capped.value.script).toContain("GRACE_SECONDS=3600");
    const tighter = renderUserData(year, { maxGracePeriodSeconds: 60 });
    expect(tighter.ok && tighter.value.script).toContain("'TimeoutStopSec=90'");
  });

  it("ignores the API server's kube-api-access projected volume and its mount", () => {
    const result = renderUserData(
      withApp(
        {
          volumeMounts: [
            {
              name: "kube-api-access-x7k2p",
              mountPath: "/var/run/secrets/kubernetes.io/serviceaccount",
              readOnly: true,
            },
          ],
        },
        {
          volumes: [
            {
              name: "kube-api-access-x7k2p",
              projected: { sources: [{ serviceAccountToken: { path: "token" } }] },
            },
          ],
        },
      ),
    );
    expect(result.ok && result.value.script).not.toContain("serviceaccount");
  });
});

describe("renderUserData refuses, with a typed error that says where", () => {
  it("a Pod without containers, or with an empty image", () => {
    expect(errorOf({ spec: { containers: [] } })).toMatchObject({
      code: "InvalidPod",
      path: "spec.containers",
    });
    expect(errorOf(withApp({ image: "" }))).toMatchObject({
      code: "InvalidPod",
      path: "spec.containers[app].image",
      message: "container app has no image",
    });
    expect(errorOf({ spec: {} })).toMatchObject({ code: "InvalidPod", path: "spec.containers" });
    expect(errorOf(null).code).toBe("InvalidPod");
  });

  it("an env value from a Secret, naming the container and the variable", () => {
    const error = errorOf(
      withApp({
        env: [{ name: "TOKEN", valueFrom: { secretKeyRef: { name: "api", key: "token" } } }],
      }),
    );
    expect(error).toMatchObject({
      code: "SecretInUserData",
      path: "spec.containers[app].env[TOKEN]",
    });
    expect(error.message).toBe(
      'container app env TOKEN comes from Secret api; Secret values are never written into user-data (render with delivery: "parameters")',
    );
    expect(errorOf(withApp({ envFrom: [{ secretRef: { name: "api" } }] })).code).toBe(
      "SecretInUserData",
    );
    expect(errorOf(withApp({}, { imagePullSecrets: [{ name: "regcred" }] })).code).toBe(
      "SecretInUserData",
    );
  });

  it("ConfigMap refs and unsupported downward-API fields", () => {
    expect(
      errorOf(
        withApp({ env: [{ name: "C", valueFrom: { configMapKeyRef: { name: "cm", key: "k" } } }] }),
      ),
    ).toMatchObject({
      code: "UnsupportedEnvSource",
      path: "spec.containers[app].env[C]",
    });
    expect(
      errorOf(
        withApp({
          env: [{ name: "M", valueFrom: { resourceFieldRef: { resource: "limits.memory" } } }],
        }),
      ).code,
    ).toBe("UnsupportedEnvSource");
    expect(
      errorOf(
        withApp({ env: [{ name: "S", valueFrom: { fieldRef: { fieldPath: "status.phase" } } }] }),
      ).code,
    ).toBe("UnsupportedEnvSource");
  });

  it("an image that starts with a dash (it could be read as a docker option)", () => {
    for (const image of ["-v", "--privileged", "-"]) {
      const result = renderUserData(asPod({ spec: { containers: [{ name: "app", image }] } }));
      expect(result.ok ? "rendered" : [result.error.code, result.error.path]).toEqual([
        "InvalidPod",
        "spec.containers[app].image",
      ]);
    }
  });

  it("a projected Secret in the user-data delivery, as a Secret volume (kube-api-access-* left out)", () => {
    const result = renderUserData(
      asPod({
        spec: {
          containers: [{ name: "app", image: "busybox" }],
          volumes: [
            { name: "kube-api-access-x7k2p", projected: { sources: [] } },
            { name: "certs", projected: { sources: [{ secret: { name: "tls" } }] } },
          ],
        },
      }),
    );
    expect(result.ok ? "rendered" : [result.error.code, result.error.path]).toEqual([
      "SecretInUserData",
      "spec.volumes[certs].projected.sources[0]",
    ]);
    expect(result.ok ? "" : result.error).toBeInstanceOf(UserDataError);
  });

  it("unsupported volumes and subPath mounts", () => {
    expect(
      errorOf(withApp({}, { volumes: [{ name: "conf", configMap: { name: "c" } }] })),
    ).toMatchObject({
      code: "UnsupportedVolume",
      path: "spec.volumes[conf]",
      message:
        'volume "conf" is a ConfigMap; render with delivery: "parameters" to deliver it through Parameter Store (user-data is readable by anyone who may describe the instance)',
    });
    expect(
      errorOf(withApp({}, { volumes: [{ name: "nfs", nfs: { server: "x", path: "/" } }] })),
    ).toMatchObject({
      code: "UnsupportedVolume",
      message:
        'volume "nfs" is of kind nfs; the host supports emptyDir, hostPath, configMap, secret, projected and downwardAPI only',
    });
    expect(
      errorOf(
        withApp(
          { volumeMounts: [{ name: "d", mountPath: "/d", subPath: "x" }] },
          { volumes: [{ name: "d", emptyDir: {} }] },
        ),
      ).code,
    ).toBe("UnsupportedVolume");
    expect(errorOf(withApp({ volumeMounts: [{ name: "nope", mountPath: "/d" }] })).code).toBe(
      "InvalidPod",
    );
  });

  it("restartPolicy outside native sidecars, bad annotations, NUL bytes, duplicate names, bad options", () => {
    expect(
      errorOf(
        withApp({}, { initContainers: [{ name: "side", image: "x:1", restartPolicy: "Never" }] }),
      ),
    ).toMatchObject({ code: "InvalidPod", path: "spec.initContainers[side].restartPolicy" });
    expect(errorOf(withApp({ restartPolicy: "Always" })).path).toBe(
      "spec.containers[app].restartPolicy",
    );
    expect(
      errorOf({
        metadata: { annotations: { "nebula.dev/restart-limit": "lots" } },
        spec: { containers: [{ name: "a", image: "x:1" }] },
      }),
    ).toMatchObject({
      code: "InvalidPod",
      path: "metadata.annotations[nebula.dev/restart-limit]",
    });
    expect(errorOf(withApp({ args: ["a\0b"] }))).toMatchObject({
      code: "InvalidPod",
      path: "spec.containers[app].args[0]",
    });
    expect(
      errorOf(withApp({}, { initContainers: [{ name: "app", image: "x:1" }] })).message,
    ).toContain("used twice");
    expect(errorOf(withApp({}), { backoff: { initialSeconds: 0 } })).toMatchObject({
      code: "InvalidOptions",
      path: "backoff.initialSeconds",
    });
  });

  it("probes and hooks: gRPC is a typed error naming the field, named ports resolve, bad probes are refused", () => {
    expect(errorOf(withApp({ livenessProbe: { grpc: { port: 9000 } } }))).toMatchObject({
      code: "UnsupportedField",
      path: "spec.containers[app].livenessProbe.grpc",
    });
    expect(
      errorOf(withApp({ readinessProbe: { httpGet: { port: "web" } }, ports: [] })),
    ).toMatchObject({
      code: "InvalidPod",
      path: "spec.containers[app].readinessProbe.httpGet.port",
    });
    expect(
      errorOf(withApp({ livenessProbe: { exec: { command: ["true"] }, successThreshold: 2 } }))
        .path,
    ).toBe("spec.containers[app].livenessProbe.successThreshold");
    expect(errorOf(withApp({ startupProbe: { periodSeconds: 1 } })).path).toBe(
      "spec.containers[app].startupProbe",
    );
    expect(errorOf(withApp({ lifecycle: { preStop: { exec: { command: [] } } } })).path).toBe(
      "spec.containers[app].lifecycle.preStop.exec.command",
    );
    const ok = renderUserData(
      withApp({
        ports: [{ name: "web", containerPort: 8080 }],
        readinessProbe: {
          httpGet: {
            port: "web",
            path: "healthz",
            httpHeaders: [{ name: "X-Probe", value: "a b" }],
          },
          periodSeconds: 2,
        },
        livenessProbe: { tcpSocket: { port: 8080 }, terminationGracePeriodSeconds: 7 },
        lifecycle: { preStop: { sleep: { seconds: 3 } } },
      }),
    );
    if (!ok.ok) throw ok.error;
    expect(ok.value.script).toContain(
      "C0_PROBE_R=($'http' $'0' $'2' $'1' $'1' $'3' $'-1' $'http' $'' $'8080' $'/healthz' $'X-Probe' $'a b')",
    );
    expect(ok.value.script).toContain(
      "C0_PROBE_L=($'tcp' $'0' $'10' $'1' $'1' $'3' $'7' $'' $'8080')",
    );
    expect(ok.value.script).toContain("C0_PRE=($'sleep' $'3')");
  });

  it("user-data that does not fit even gzipped, naming the size and what made it large", () => {
    const random =
      fc.sample(fc.string({ minLength: 30000, maxLength: 30000, unit: "grapheme" }), {
        numRuns: 1,
        seed: 7,
      })[0] ?? "";
    const error = errorOf(withApp({ env: [{ name: "BLOB", value: random }] }));
    expect(error.code).toBe("TooLarge");
    expect(error.message).toMatch(
      /^user-data is \d+ bytes gzipped \(\d+ in clear\), over EC2's limit of 16384; the largest parts before compression: env of container app \(\d+ bytes\)/,
    );
  });

  it("never throws, whatever it is handed", () => {
    fc.assert(
      fc.property(fc.anything(), fc.anything(), (pod, options) => {
        const result = renderUserData(pod as V1Pod, options as never);
        expect(typeof result.ok).toBe("boolean");
      }),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(
        fc.record({
          name: fc.string(),
          image: fc.string(),
          command: fc.array(fc.string()),
          env: fc.array(fc.record({ name: fc.string(), value: fc.string() })),
        }),
        (container) => {
          const result = renderUserData(asPod({ spec: { containers: [container] } }));
          expect(typeof result.ok).toBe("boolean");
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("Kubernetes $(VAR) expansion", () => {
  const env = new Map([
    ["NAME", "web"],
    ["EMPTY", ""],
  ]);
  it("follows the kubelet's rules", () => {
    expect(expandKubernetesReferences("--name=$(NAME)", env)).toBe("--name=web");
    expect(expandKubernetesReferences("$$(NAME) $$ $x $(UNKNOWN) $(EMPTY)| $(unclosed", env)).toBe(
      "$(NAME) $ $x $(UNKNOWN) | $(unclosed",
    );
    expect(expandKubernetesReferences("trailing $", env)).toBe("trailing $");
  });

  it("renders env values and args expanded, in order", () => {
    const result = renderUserData(
      withApp({
        command: ["/bin/app", "$(GREETING)"],
        env: [
          { name: "WHO", value: "world" },
          { name: "GREETING", value: "hello $(WHO)" },
        ],
      }),
    );
    if (!result.ok) throw result.error;
    expect(result.value.script).toContain("C0_CMD=($'/bin/app' $'hello world')");
  });
});

describe("quoting", () => {
  const roundTrip = (shell: string, quote: (s: string) => string, strings: string[]) => {
    const script = strings.map((s) => `printf '%s\\0' ${quote(s)}`).join("\n");
    const out = spawnSync(shell, ["-c", script], {
      encoding: "buffer",
      env: { LC_ALL: "C", PATH: process.env.PATH },
    });
    return out.stdout.toString("utf8").split("\0").slice(0, -1);
  };
  const noNul = fc.string({ unit: "binary", maxLength: 40 }).filter((s) => !s.includes("\0"));

  it("bashQuote: bash gives back exactly the same bytes, on one line", () => {
    fc.assert(
      fc.property(fc.array(noNul, { minLength: 1, maxLength: 20 }), (strings) => {
        for (const s of strings) expect(bashQuote(s)).not.toContain("\n");
        expect(roundTrip("bash", bashQuote, strings)).toEqual(strings);
      }),
      { numRuns: 40 },
    );
  });

  it("shQuote: POSIX sh (dash) gives back exactly the same bytes", () => {
    fc.assert(
      fc.property(fc.array(noNul, { minLength: 1, maxLength: 20 }), (strings) => {
        expect(roundTrip("sh", shQuote, strings)).toEqual(strings);
      }),
      { numRuns: 40 },
    );
  });
});

describe("logs and metrics options", () => {
  const pod = asPod({
    metadata: { name: "p", namespace: "n", uid: "u-1" },
    spec: { containers: [{ name: "a", image: "busybox" }] },
  });

  it("are off when absent, and take their defaults when given", () => {
    const off = RenderOptions.parse({});
    expect(off.logs).toBeUndefined();
    expect(off.metrics).toBeUndefined();
    expect(RenderOptions.parse({ metrics: {} }).metrics).toEqual({
      namespace: DEFAULT_METRICS_NAMESPACE,
      sampleSeconds: 15,
      publishSeconds: 60,
    });
    expect(DEFAULT_METRICS_NAMESPACE).toBe("Nebula");
    expect(RenderOptions.parse({ logs: { group: "/nebula/prod#1_a-b.c" } }).logs).toEqual({
      group: "/nebula/prod#1_a-b.c",
    });
  });

  it("leave a render without them as it was (the Pod data and the unit)", () => {
    for (const delivery of ["user-data", "parameters"] as const) {
      const a = renderUserData(pod, { delivery });
      const b = renderUserData(pod, { delivery, logs: undefined, metrics: undefined });
      expect(a).toEqual(b);
      if (!a.ok) throw a.error;
      expect(a.value.script.replace(supervisorScript({ delivery: "user-data" }), "")).not.toMatch(
        /AWS_ENDPOINT_URL_LOGS|LOG_GROUP|METRICS_/,
      );
    }
  });

  it("reach the host with both deliveries", () => {
    const options = { logs: { group: "g" }, metrics: { publishSeconds: 30 } };
    const inline = renderUserData(pod, options);
    if (!inline.ok) throw inline.error;
    expect(inline.value.script).toContain("\nLOG_GROUP=$'g'\n");
    const viaParameters = renderUserData(pod, { ...options, delivery: "parameters" });
    if (!viaParameters.ok) throw viaParameters.error;
    const podSh = gunzipSync(
      Buffer.from(viaParameters.value.parameters.map((p) => p.value).join(""), "base64"),
    ).toString("utf8");
    expect(podSh).toContain(
      "\nLOG_GROUP=$'g'\nMETRICS_NAMESPACE=$'Nebula'\nMETRICS_SAMPLE=15\nMETRICS_PUBLISH=30\n",
    );
    // The bootstrap passes the endpoint overrides of logs and CloudWatch to the unit.
    expect(viaParameters.value.script).toContain(
      "AWS_ENDPOINT_URL_LOGS AWS_ENDPOINT_URL_CLOUDWATCH",
    );
  });

  it.each([
    [{ logs: { group: "" } }, "logs.group", "must be a CloudWatch log group name"],
    [{ logs: { group: "a b" } }, "logs.group", "must be a CloudWatch log group name"],
    [{ logs: { group: "g".repeat(513) } }, "logs.group", "1 to 512 characters"],
    [{ logs: {} }, "logs.group", "expected string"],
    [{ metrics: { sampleSeconds: 4 } }, "metrics.sampleSeconds", ">=5"],
    [{ metrics: { sampleSeconds: 7.5 } }, "metrics.sampleSeconds", "expected int"],
    [{ metrics: { publishSeconds: 301 } }, "metrics.publishSeconds", "<=300"],
    [
      { metrics: { sampleSeconds: 30, publishSeconds: 20 } },
      "metrics.publishSeconds",
      "publishSeconds must be at least sampleSeconds",
    ],
    [{ metrics: { namespace: "AWS/EC2" } }, "metrics.namespace", "reserved for AWS services"],
    [{ metrics: { namespace: "a b" } }, "metrics.namespace", "must be a CloudWatch namespace"],
  ])("refuse %j at %s, saying why", (options, path, words) => {
    const error = errorOf(pod, options);
    expect(error).toBeInstanceOf(UserDataError);
    expect(error.code).toBe("InvalidOptions");
    expect(error.path).toBe(path);
    expect(error.cause).toBeDefined();
    expect(error.message).toContain(`invalid options at ${path}: `);
    expect(error.message).toContain(words);
  });

  it("need the Pod's name and UID (the streams and metrics are named after them)", () => {
    const noUid = asPod({ metadata: { name: "p" }, spec: pod.spec });
    for (const options of [{ logs: { group: "g" } }, { metrics: {} }]) {
      expect(errorOf(noUid, options)).toMatchObject({ code: "InvalidPod", path: "metadata.uid" });
    }
    const noName = asPod({ metadata: { uid: "u" }, spec: pod.spec });
    expect(errorOf(noName, { metrics: {} })).toMatchObject({
      code: "InvalidPod",
      path: "metadata.name",
    });
    // Without them on, a Pod without a UID still renders (as before).
    expect(renderUserData(noUid).ok).toBe(true);
  });
});

describe("the doorbell option (issue #30)", () => {
  const pod = asPod({
    metadata: { name: "p", namespace: "n", uid: "u-1" },
    spec: { containers: [{ name: "a", image: "busybox" }] },
  });
  const QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/nebula-prod-events";
  const podShOf = (parameters: readonly { value: string }[]) =>
    gunzipSync(Buffer.from(parameters.map((p) => p.value).join(""), "base64")).toString("utf8");

  it("is off when absent: the render is what it was, with no queue and no SQS endpoint", () => {
    expect(RenderOptions.parse({}).doorbell).toBeUndefined();
    for (const delivery of ["user-data", "parameters"] as const) {
      const a = renderUserData(pod, { delivery });
      const b = renderUserData(pod, { delivery, doorbell: undefined });
      expect(a).toEqual(b);
      if (!a.ok) throw a.error;
      expect(a.value.script.replace(supervisorScript({ delivery: "user-data" }), "")).not.toMatch(
        /DOORBELL|_SQS/,
      );
      if (delivery === "parameters") expect(podShOf(a.value.parameters)).not.toContain("DOORBELL");
    }
  });

  it("on: adds only the queue to the Pod data and AWS_ENDPOINT_URL_SQS to the unit's overrides", () => {
    const off = renderUserData(pod, {});
    const on = renderUserData(pod, { doorbell: { queueUrl: QUEUE } });
    if (!off.ok || !on.ok) throw new Error("render failed");
    const line = `\nDOORBELL_QUEUE_URL=$'${QUEUE}'\n`;
    expect(on.value.script.split(line)).toHaveLength(2);
    expect(on.value.script).toContain(
      "for name in AWS_EC2_METADATA_SERVICE_ENDPOINT AWS_ENDPOINT_URL_EC2 AWS_ENDPOINT_URL_SSM AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL AWS_CA_BUNDLE; do",
    );
    expect(on.value.script.replace(line, "\n").replace(" AWS_ENDPOINT_URL_SQS", "")).toBe(
      off.value.script,
    );
  });

  it("on, with the parameters delivery: the queue travels in the Pod's parameters; the supervisor is the same for every Pod", () => {
    const off = renderUserData(pod, { delivery: "parameters" });
    const on = renderUserData(pod, { delivery: "parameters", doorbell: { queueUrl: QUEUE } });
    if (!off.ok || !on.ok) throw new Error("render failed");
    const line = `\nDOORBELL_QUEUE_URL=$'${QUEUE}'\n`;
    expect(podShOf(on.value.parameters).split(line)).toHaveLength(2);
    expect(podShOf(on.value.parameters).replace(line, "\n")).toBe(podShOf(off.value.parameters));
    expect(on.value.sharedParameters).toEqual(off.value.sharedParameters);
    expect(on.value.script).toContain("AWS_ENDPOINT_URL_SQS");
    expect(on.value.script).not.toContain(QUEUE);
  });

  it.each([
    [{ doorbell: {} }, "expected string"],
    [{ doorbell: { queueUrl: "" } }, "must be an http or https URL"],
    [{ doorbell: { queueUrl: "sqs.eu-west-1.amazonaws.com/1/q" } }, "must be an http or https URL"],
    [
      { doorbell: { queueUrl: "ftp://sqs.eu-west-1.amazonaws.com/1/q" } },
      "must be an http or https URL",
    ],
    [{ doorbell: { queueUrl: `${QUEUE}"x` } }, "without whitespace"],
    [{ doorbell: { queueUrl: `${QUEUE}\\x` } }, "without whitespace"],
    [{ doorbell: { queueUrl: `${QUEUE} x` } }, "without whitespace"],
    [{ doorbell: { queueUrl: "https://" } }, "must be an http or https URL"],
    [{ doorbell: { queueUrl: `https://sqs.example/${"q".repeat(1005)}` } }, "<=1024"],
  ])("refuses %j at doorbell.queueUrl, saying why", (options, words) => {
    const error = errorOf(pod, options);
    expect(error.code).toBe("InvalidOptions");
    expect(error.path).toBe("doorbell.queueUrl");
    expect(error.message).toContain(words);
  });

  it("takes an http endpoint (tests, private endpoints) and a URL of 1024 characters", () => {
    for (const queueUrl of [
      "http://127.0.0.1:5000/123456789012/q",
      `https://sqs.example/${"q".repeat(1004)}`,
    ]) {
      expect(queueUrl.length).toBeLessThanOrEqual(1024);
      const r = renderUserData(pod, { doorbell: { queueUrl } });
      if (!r.ok) throw r.error;
      expect(r.value.script).toContain(`\nDOORBELL_QUEUE_URL=$'${queueUrl}'\n`);
    }
  });
});
