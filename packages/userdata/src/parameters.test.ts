import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import type { V1Pod } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type PodSources,
  podParameterNames,
  podParameterPrefix,
  podSourceRefs,
  podUidOfParameter,
  renderUserData,
} from "./index.js";
import { MAX_POD_PARAMETERS, POD_PARAMETER_VALUE_CHARS } from "./parameters.js";
import type { RenderedUserData } from "./render.js";

const b64 = (s: string | Buffer) => Buffer.from(s).toString("base64");
const PARAMS = { cluster: "prod", delivery: "parameters" } as const;

function podWith(app: Record<string, unknown>, spec: Record<string, unknown> = {}): V1Pod {
  return {
    metadata: { name: "web", namespace: "shop", uid: "uid-1" },
    spec: { containers: [{ name: "app", image: "busybox:1", ...app }], ...spec },
  } as V1Pod;
}

function rendered(pod: V1Pod, sources: PodSources): RenderedUserData {
  const result = renderUserData(pod, PARAMS, sources);
  if (!result.ok) throw result.error;
  return result.value;
}

function errorOf(pod: V1Pod, sources: PodSources) {
  const result = renderUserData(pod, PARAMS, sources);
  if (result.ok) throw new Error("expected an error");
  return result.error;
}

/** pod.sh as the supervisor gets it: the parameters joined, base64-decoded, gunzipped. */
function podSh(value: RenderedUserData): string {
  return gunzipSync(Buffer.from(value.parameters.map((p) => p.value).join(""), "base64")).toString(
    "utf8",
  );
}

/** Sources pod.sh in real bash and prints an array, one element per NUL. */
function bashArray(value: RenderedUserData, name: string): string[] {
  const dir = mkdtempSync(join(tmpdir(), "nebula-podsh-"));
  try {
    writeFileSync(join(dir, "pod.sh"), podSh(value));
    const out = execFileSync(
      "bash",
      ["-c", `. "$1"; printf '%s\\0' "\${${name}[@]}"`, "-", join(dir, "pod.sh")],
      { encoding: "utf8" },
    );
    return out.split("\0").slice(0, -1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const envOf = (value: RenderedUserData, i = 0) =>
  bashArray(value, `C${i}_FLAGS`)
    .filter((f) => f.startsWith("--env="))
    .map((f) => f.slice("--env=".length));

const none: PodSources = { configMaps: {}, secrets: {} };

describe("the Parameter Store delivery", () => {
  it("puts the Pod's spec into parameters and only their names and checksum into user-data", () => {
    const value = rendered(
      podWith({ env: [{ name: "GREETING", value: "hello-from-the-pod" }] }),
      none,
    );
    expect(value.parameters.map((p) => p.name)).toEqual([
      `${podParameterPrefix("prod", "uid-1")}0`,
    ]);
    expect(value.script).not.toContain("hello-from-the-pod");
    expect(value.script).toContain(
      `POD_SHA256=${createHash("sha256").update(podSh(value)).digest("hex")}`,
    );
    expect(envOf(value)).toEqual(["GREETING=hello-from-the-pod"]);
    // Generic: two different Pods differ in user-data only in the names and the checksum.
    const other = rendered(
      podWith({ image: "nginx:1", env: [{ name: "X", value: "y" }] }, { restartPolicy: "Never" }),
      none,
    );
    const generic = (s: string) =>
      s.replace(/POD_PARAMETERS=.*\n/, "").replace(/POD_SHA256=.*\n/, "");
    expect(generic(other.script)).toBe(generic(value.script));
  });

  it("resolves env from Secret and ConfigMap keys, envFrom with prefixes, with the kubelet's precedence and $(VAR) rules", () => {
    const sources: PodSources = {
      configMaps: {
        base: { data: { MODE: "blue", LEVEL: "1", REF: "$(MODE)" } },
        override: { data: { LEVEL: "2" } },
      },
      secrets: { db: { data: { password: b64("p@ss word\n$(MODE)") } } },
    };
    const value = rendered(
      podWith({
        envFrom: [{ configMapRef: { name: "base" } }, { configMapRef: { name: "override" } }],
        env: [
          { name: "PASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } },
          { name: "URL", value: "db://$(MODE)/$(LEVEL)" },
          { name: "MODE", value: "green" },
        ],
      }),
      sources,
    );
    expect(envOf(value)).toEqual([
      // envFrom first, in order: a later source overrides an earlier one; values are not expanded.
      "MODE=green",
      "LEVEL=2",
      "REF=$(MODE)",
      // Values from keys are taken as they are; literal values are expanded against what came before.
      "PASSWORD=p@ss word\n$(MODE)",
      "URL=db://blue/2",
    ]);
  });

  it("a missing mandatory ConfigMap, Secret or key is CreateContainerConfigError in the kubelet's words", () => {
    const cases: [Record<string, unknown>, string, string][] = [
      [
        { env: [{ name: "A", valueFrom: { secretKeyRef: { name: "db", key: "k" } } }] },
        'secret "db" not found',
        "MandatorySecretNotFound",
      ],
      [
        { env: [{ name: "A", valueFrom: { configMapKeyRef: { name: "cm", key: "k" } } }] },
        'configmap "cm" not found',
        "MandatoryConfigMapNotFound",
      ],
      [
        { env: [{ name: "A", valueFrom: { configMapKeyRef: { name: "there", key: "k" } } }] },
        "couldn't find key k in ConfigMap shop/there",
        "MandatoryConfigMapNotFound",
      ],
      [
        { envFrom: [{ secretRef: { name: "db" } }] },
        'secret "db" not found',
        "MandatorySecretNotFound",
      ],
    ];
    const sources: PodSources = { configMaps: { there: { data: { other: "x" } } }, secrets: {} };
    for (const [app, message, reason] of cases) {
      expect(errorOf(podWith(app), sources)).toMatchObject({
        code: "CreateContainerConfigError",
        message,
        reason,
      });
    }
    // A volume's missing object or item key too.
    expect(
      errorOf(podWith({}, { volumes: [{ name: "v", secret: { secretName: "tls" } }] }), sources),
    ).toMatchObject({ code: "CreateContainerConfigError", message: 'secret "tls" not found' });
    expect(
      errorOf(
        podWith(
          {},
          {
            volumes: [
              { name: "v", configMap: { name: "there", items: [{ key: "nope", path: "f" }] } },
            ],
          },
        ),
        sources,
      ),
    ).toMatchObject({ message: "configmap references non-existent config key: nope" });
  });

  it("skips a missing optional reference and says so; skips invalid envFrom names and says which", () => {
    const value = rendered(
      podWith(
        {
          env: [
            { name: "A", valueFrom: { secretKeyRef: { name: "gone", key: "k", optional: true } } },
            { name: "B", value: "b" },
          ],
          envFrom: [
            { configMapRef: { name: "absent", optional: true } },
            { configMapRef: { name: "odd" } },
          ],
        },
        {
          volumes: [{ name: "v", configMap: { name: "absent", optional: true } }],
          imagePullSecrets: [{ name: "registry" }],
        },
      ),
      { configMaps: { odd: { data: { "ok.name": "1", "bad=name": "2" } } }, secrets: {} },
    );
    expect(envOf(value)).toEqual(["ok.name=1", "B=b"]);
    expect(value.notices).toEqual([
      {
        reason: "FailedToRetrieveImagePullSecret",
        message:
          "Unable to retrieve some image pull secrets (registry); attempting to pull the image may not succeed.",
      },
      { reason: "OptionalConfigMapNotFound", message: 'configmap "absent" not found' },
      { reason: "OptionalConfigMapNotFound", message: 'configmap "absent" not found' },
      {
        reason: "InvalidEnvironmentVariableNames",
        message:
          "Keys [bad=name] from the EnvFrom configMap shop/odd were skipped since they are considered invalid environment variable names.",
      },
      { reason: "OptionalSecretNotFound", message: 'secret "gone" not found' },
    ]);
  });

  it("writes ConfigMap and Secret volumes as files (items, modes, binaryData) under memory-backed /run, mounted read-only", () => {
    const value = rendered(
      podWith(
        {
          volumeMounts: [
            { name: "cfg", mountPath: "/etc/app" },
            { name: "tls", mountPath: "/tls/key.pem", subPath: "key.pem" },
          ],
        },
        {
          volumes: [
            { name: "cfg", configMap: { name: "app" } },
            {
              name: "tls",
              secret: {
                secretName: "tls",
                defaultMode: 0o440,
                items: [{ key: "tls.key", path: "key.pem", mode: 0o400 }],
              },
            },
          ],
        },
      ),
      {
        configMaps: {
          app: { data: { "a.conf": "x=1\n" }, binaryData: { blob: b64(Buffer.from([0, 255])) } },
        },
        secrets: { tls: { data: { "tls.key": b64("KEY"), "tls.crt": b64("CRT") } } },
      },
    );
    expect(bashArray(value, "FILE_PATH")).toEqual([
      "/run/nebula/volumes/cfg/a.conf",
      "/run/nebula/volumes/cfg/blob",
      "/run/nebula/volumes/tls/key.pem",
    ]);
    expect(bashArray(value, "FILE_MODE")).toEqual(["0644", "0644", "0400"]);
    expect(
      bashArray(value, "FILE_DATA").map((d) => Buffer.from(d, "base64").toString("latin1")),
    ).toEqual(["x=1\n", "\u0000\u00ff", "KEY"]);
    const mounts = bashArray(value, "C0_FLAGS").filter((f) => f.startsWith("--mount="));
    expect(mounts).toEqual([
      "--mount=type=bind,source=/run/nebula/volumes/cfg,target=/etc/app,readonly",
      "--mount=type=bind,source=/run/nebula/volumes/tls/key.pem,target=/tls/key.pem,readonly",
    ]);
  });

  it("merges imagePullSecrets into one Docker config, first login per registry", () => {
    const login = (user: string) => ({ auth: b64(`${user}:pw`) });
    const value = rendered(podWith({}, { imagePullSecrets: [{ name: "a" }, { name: "b" }] }), {
      configMaps: {},
      secrets: {
        a: {
          data: { ".dockerconfigjson": b64(JSON.stringify({ auths: { "r.io": login("a") } })) },
        },
        b: {
          data: { ".dockercfg": b64(JSON.stringify({ "r.io": login("b"), "q.io": login("b") })) },
        },
      },
    });
    const [auth] = bashArray(value, "DOCKER_AUTH");
    expect(JSON.parse(Buffer.from(auth ?? "", "base64").toString())).toEqual({
      auths: { "r.io": login("a"), "q.io": login("b") },
    });
  });

  it("a Pod too large for the parameters is SourceTooLarge naming the largest reference", () => {
    // 40,000 characters of base64 that gzip cannot shrink below 30,000 bytes (a certificate bundle, say).
    const big = Buffer.from(randomBytes(30_000).toString("base64"));
    const error = errorOf(
      podWith({ env: [{ name: "K", valueFrom: { secretKeyRef: { name: "huge", key: "blob" } } }] }),
      {
        configMaps: {},
        secrets: {
          huge: { data: { blob: big.toString("base64") } },
        },
      },
    );
    expect(error.code).toBe("SourceTooLarge");
    expect(error.message).toMatch(
      new RegExp(
        `over the ${MAX_POD_PARAMETERS * POD_PARAMETER_VALUE_CHARS} .*Secret shop/huge key blob \\(40000 bytes\\)`,
      ),
    );
  });

  it("a namespace with too many Services for the parameters: SourceTooLarge says how to leave them out", () => {
    // Random cluster IPs and ports, so that gzip cannot fold the 2,000 Services' variables away.
    const services = Array.from({ length: 2_000 }, (_, i) => {
      const [a, b, c, d] = randomBytes(4);
      return {
        metadata: { name: `svc-${randomBytes(6).toString("hex")}-${i}`, namespace: "shop" },
        spec: { clusterIP: `10.${a}.${b}.${c}`, ports: [{ port: 1 + ((d ?? 0) << 8) + i }] },
      };
    });
    const error = errorOf(podWith({}), { configMaps: {}, secrets: {}, services });
    expect(error.code).toBe("SourceTooLarge");
    expect(error.message).toMatch(
      /largest parts before compression: the 1\d{4} Service variables in each container's env \(enableServiceLinks: false leaves out the namespace's Services\)/,
    );
    // Without the namespace's Services it fits.
    const unlinked = podWith({}, { enableServiceLinks: false });
    expect(renderUserData(unlinked, PARAMS, { configMaps: {}, secrets: {}, services }).ok).toBe(
      true,
    );
  });

  it("keeps refusing Secrets, and ConfigMaps it cannot resolve, in the user-data delivery", () => {
    const result = renderUserData(
      podWith({ envFrom: [{ secretRef: { name: "db" } }] }),
      { cluster: "prod" },
      { configMaps: {}, secrets: { db: { data: { a: b64("b") } } } },
    );
    expect(result.ok ? undefined : result.error.code).toBe("SecretInUserData");
  });

  it("never throws and never leaks a Secret value into the user-data, whatever the sources", () => {
    const key = fc.constantFrom("a", "b", "A_B", "bad=", "");
    const source = fc.dictionary(key, fc.string({ maxLength: 40 }), { maxKeys: 3 });
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.constantFrom("c1", "c2"),
          source.map((data) => ({ data })),
        ),
        fc.dictionary(
          fc.constantFrom("s1", "s2"),
          source.map((data) => ({
            data: Object.fromEntries(
              Object.entries(data).map(([k, v]) => [k, b64(`Zq9SECRET${v}`)]),
            ),
          })),
        ),
        fc.boolean(),
        (configMaps, secrets, optional) => {
          const pod = podWith(
            {
              env: [{ name: "E", valueFrom: { secretKeyRef: { name: "s1", key: "a", optional } } }],
              envFrom: [
                { configMapRef: { name: "c1", optional } },
                { secretRef: { name: "s2", optional } },
              ],
              volumeMounts: [{ name: "v", mountPath: "/v" }],
            },
            { volumes: [{ name: "v", secret: { secretName: "s1", optional } }] },
          );
          const result = renderUserData(pod, PARAMS, { configMaps, secrets });
          if (result.ok) {
            expect(result.value.script).not.toContain("Zq9SECRET");
            expect(result.value.parameters.length).toBeGreaterThan(0);
          } else {
            expect(["CreateContainerConfigError", "InvalidPod"]).toContain(result.error.code);
            expect(result.error.message).not.toContain("Zq9SECRET");
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("parameter names and references", () => {
  it("name a Pod's parameters under its cluster and UID, and read the UID back", () => {
    expect(podParameterNames("prod", "u-1")).toHaveLength(MAX_POD_PARAMETERS + 1);
    expect(podParameterNames("prod", "u-1")[0]).toBe("/nebula/prod/pods/u-1/0");
    // The tokens' parameter is one of the Pod's names, so its teardown deletes it too.
    expect(podParameterNames("prod", "u-1").at(-1)).toBe("/nebula/prod/pods/u-1/t");
    expect(podUidOfParameter("prod", "/nebula/prod/pods/u-1/t")).toBe("u-1");
    expect(podUidOfParameter("prod", "/nebula/prod/pods/u-1/3")).toBe("u-1");
    expect(podUidOfParameter("prod", "/nebula/other/pods/u-1/3")).toBeUndefined();
    // A cluster name Parameter Store does not allow becomes a stable hash.
    expect(podParameterPrefix("my cluster:1", "u")).toMatch(
      /^\/nebula\/c-[0-9a-f]{16}\/pods\/u\/$/,
    );
    expect(podUidOfParameter("my cluster:1", podParameterNames("my cluster:1", "u")[2] ?? "")).toBe(
      "u",
    );
  });

  it("lists every ConfigMap and Secret a Pod references, and tolerates any input", () => {
    expect(
      podSourceRefs({
        spec: {
          initContainers: [{ envFrom: [{ secretRef: { name: "init-s" } }] }],
          containers: [
            {
              env: [
                { valueFrom: { configMapKeyRef: { name: "c1" } } },
                { valueFrom: { secretKeyRef: { name: "s1" } } },
              ],
              envFrom: [{ configMapRef: { name: "c2" } }],
            },
          ],
          volumes: [
            { configMap: { name: "c3" } },
            { secret: { secretName: "s2" } },
            { projected: { sources: [{ configMap: { name: "c4" } }, { secret: { name: "s3" } }] } },
          ],
          imagePullSecrets: [{ name: "pull" }],
        },
      }),
    ).toEqual({
      configMaps: ["c1", "c2", "c3", "c4"],
      secrets: ["init-s", "pull", "s1", "s2", "s3"],
    });
    fc.assert(
      fc.property(fc.anything(), (x) => {
        const refs = podSourceRefs(x);
        expect(Array.isArray(refs.configMaps) && Array.isArray(refs.secrets)).toBe(true);
      }),
    );
  });
});
