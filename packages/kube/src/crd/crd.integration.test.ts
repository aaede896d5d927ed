/**
 * CRDs generated from zod against a real kube-apiserver + etcd (from @nebula/test-peers): the
 * API server accepts and establishes them, applies defaults, prunes unknown fields, rejects bad
 * objects at admission, and agrees with zod on a generated corpus of objects.
 */
import { randomBytes } from "node:crypto";
import { CoreV1Api, CustomObjectsApi, type KubeConfig } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { statusOf } from "../errors.js";
import { buildCrd, installCrd } from "./crd.js";

const namespace = `crd-${randomBytes(4).toString("hex")}`;
const group = `crd${randomBytes(3).toString("hex")}.test.nebula.dev`;
const version = "v1alpha1";
let kc: KubeConfig;
let core: CoreV1Api;
let objects: CustomObjectsApi;

const condition = z.object({
  type: z.string().min(1),
  status: z.enum(["True", "False", "Unknown"]),
  reason: z.string().optional(),
  message: z.string().optional(),
  lastTransitionTime: z.iso.datetime(),
});

const WorkloadSpec = z.strictObject({
  image: z.string().min(1),
  replicas: z.number().int().min(0).default(1),
  restartPolicy: z.enum(["Always", "OnFailure", "Never"]).default("Always"),
  port: z.union([z.number().int(), z.string()]).optional(),
  name: z
    .string()
    .max(63)
    .regex(/^[a-z]([-a-z0-9]*[a-z0-9])?$/)
    .optional(),
  runtime: z
    .discriminatedUnion("kind", [
      z.strictObject({ kind: z.literal("container"), command: z.array(z.string()).optional() }),
      z.strictObject({ kind: z.literal("vm"), cpus: z.number().int().min(1), memory: z.string() }),
    ])
    .optional(),
  labels: z.record(z.string(), z.string()).optional(),
  extra: z.record(z.string(), z.unknown()).optional(),
  ratio: z.number().gt(0).lt(1).optional(),
  placement: z.looseObject({ zone: z.string().optional() }).optional(),
  window: z.object({ start: z.iso.datetime() }).nullable().optional(),
});

const WorkloadStatus = z.object({
  readyReplicas: z.number().int().min(0).optional(),
  phase: z.enum(["Pending", "Running", "Failed"]).optional(),
  conditions: z.array(condition).optional(),
});

const workloadCrd = buildCrd({
  group,
  kind: "Workload",
  plural: "workloads",
  shortNames: ["wl"],
  versions: [
    {
      name: version,
      spec: WorkloadSpec,
      status: WorkloadStatus,
      printerColumns: [
        { name: "Image", type: "string", jsonPath: ".spec.image" },
        { name: "Replicas", type: "integer", jsonPath: ".spec.replicas" },
        {
          name: "Ready",
          type: "string",
          jsonPath: '.status.conditions[?(@.type=="Ready")].status',
        },
        { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
      ],
    },
  ],
});

const quotaCrd = buildCrd({
  group,
  kind: "Quota",
  plural: "quotas",
  scope: "Cluster",
  versions: [
    { name: "v1alpha1", storage: false, spec: z.object({ max: z.number().int().min(0) }) },
    {
      name: "v1beta1",
      storage: true,
      spec: z.object({
        max: z.number().int().min(0),
        unit: z.enum(["instances", "vcpus"]).default("instances"),
      }),
    },
  ],
});

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  kc = controlPlane.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  objects = kc.makeApiClient(CustomObjectsApi);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  await installCrd(kc, workloadCrd, { fieldManager: "nebula-test", timeoutMs: 60_000 });
  await installCrd(kc, quotaCrd, { fieldManager: "nebula-test", timeoutMs: 60_000 });
});

afterAll(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
  for (const crd of [workloadCrd, quotaCrd]) {
    await objects
      .deleteClusterCustomObject({
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        name: crd.metadata.name,
      })
      .catch(() => undefined);
  }
});

let counter = 0;
async function create(
  spec: unknown,
  dryRun = false,
): Promise<
  | { ok: true; object: Record<string, unknown> }
  | { ok: false; status: number | undefined; message: string }
> {
  counter += 1;
  try {
    const object = (await objects.createNamespacedCustomObject({
      group,
      version,
      namespace,
      plural: "workloads",
      body: {
        apiVersion: `${group}/${version}`,
        kind: "Workload",
        metadata: { name: `w-${counter}` },
        spec,
      },
      ...(dryRun ? { dryRun: "All" } : {}),
    })) as Record<string, unknown>;
    return { ok: true, object };
  } catch (error) {
    const body = (error as { body?: unknown }).body;
    return {
      ok: false,
      status: statusOf(error),
      message: typeof body === "string" ? body : String(error),
    };
  }
}

describe("generated CRDs on a real API server", () => {
  it("are accepted and Established, and re-installing is a no-op", async () => {
    const read = (await objects.getClusterCustomObject({
      group: "apiextensions.k8s.io",
      version: "v1",
      plural: "customresourcedefinitions",
      name: workloadCrd.metadata.name,
    })) as {
      metadata: { generation: number };
      status: { conditions: Array<{ type: string; status: string }> };
    };
    expect(read.status.conditions).toContainEqual(
      expect.objectContaining({ type: "Established", status: "True" }),
    );
    const generation = read.metadata.generation;
    await installCrd(kc, workloadCrd, { fieldManager: "nebula-test" });
    const again = (await objects.getClusterCustomObject({
      group: "apiextensions.k8s.io",
      version: "v1",
      plural: "customresourcedefinitions",
      name: workloadCrd.metadata.name,
    })) as { metadata: { generation: number } };
    expect(again.metadata.generation).toBe(generation);
  });

  it("create a valid object with defaults applied and unknown fields pruned (but kept where the schema is loose)", async () => {
    const result = await create({
      image: "nginx",
      bogus: "pruned",
      placement: { zone: "a", rack: "kept" },
      extra: { anything: [1, { deep: true }] },
      runtime: { kind: "vm", cpus: 2, memory: "2Gi" },
      port: "http",
      window: null,
    });
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.object.spec).toEqual({
      image: "nginx",
      replicas: 1,
      restartPolicy: "Always",
      placement: { zone: "a", rack: "kept" },
      extra: { anything: [1, { deep: true }] },
      runtime: { kind: "vm", cpus: 2, memory: "2Gi" },
      port: "http",
      window: null,
    });
  });

  it("reject invalid objects at admission (422), each for its own reason", async () => {
    const cases: Array<[string, unknown, string]> = [
      ["wrong type", { image: "nginx", replicas: "three" }, "spec.replicas"],
      ["negative where min 0", { image: "nginx", replicas: -1 }, "spec.replicas"],
      ["unknown enum value", { image: "nginx", restartPolicy: "Sometimes" }, "spec.restartPolicy"],
      ["missing required field", { replicas: 2 }, "spec.image"],
      ["pattern", { image: "nginx", name: "Bad_Name" }, "spec.name"],
      ["exclusive bound", { image: "nginx", ratio: 1 }, "spec.ratio"],
      ["int-or-string", { image: "nginx", port: true }, "spec.port"],
      [
        "variant without its field",
        { image: "nginx", runtime: { kind: "vm", memory: "1Gi" } },
        "spec.runtime",
      ],
      [
        "variant's own bound",
        { image: "nginx", runtime: { kind: "vm", cpus: 0, memory: "1Gi" } },
        "spec.runtime",
      ],
      [
        "unknown discriminator",
        { image: "nginx", runtime: { kind: "lambda" } },
        "spec.runtime.kind",
      ],
      ["date-time format", { image: "nginx", window: { start: "yesterday" } }, "spec.window.start"],
      ["record value type", { image: "nginx", labels: { a: 1 } }, "spec.labels.a"],
    ];
    for (const [what, spec, field] of cases) {
      expect(WorkloadSpec.safeParse(spec).success, `zod also rejects: ${what}`).toBe(false);
      const result = await create(spec);
      expect(result.ok, what).toBe(false);
      if (result.ok) continue;
      expect(result.status, what).toBe(422);
      expect(result.message, what).toContain(field);
    }
  });

  it("the status subresource accepts a valid status and rejects an invalid one", async () => {
    const created = await create({ image: "nginx" });
    expect(created.ok).toBe(true);
    if (!created.ok) return;
    const name = (created.object.metadata as { name: string }).name;
    const replace = async (status: unknown) =>
      objects
        .replaceNamespacedCustomObjectStatus({
          group,
          version,
          namespace,
          plural: "workloads",
          name,
          body: { ...created.object, status },
        })
        .then(
          () => "ok",
          (error) => statusOf(error),
        );
    expect(await replace({ readyReplicas: 1, phase: "Running" })).toBe("ok");
    const fresh = (await objects.getNamespacedCustomObject({
      group,
      version,
      namespace,
      plural: "workloads",
      name,
    })) as Record<string, unknown>;
    created.object.metadata = fresh.metadata;
    expect(await replace({ phase: "Exploded" })).toBe(422);
  });

  it("serve several versions of a cluster-scoped kind, stored in the storage version", async () => {
    await objects.createClusterCustomObject({
      group,
      version: "v1alpha1",
      plural: "quotas",
      body: {
        apiVersion: `${group}/v1alpha1`,
        kind: "Quota",
        metadata: { name: `q-${namespace}` },
        spec: { max: 3 },
      },
    });
    const beta = (await objects.getClusterCustomObject({
      group,
      version: "v1beta1",
      plural: "quotas",
      name: `q-${namespace}`,
    })) as {
      spec: { max: number; unit: string };
    };
    expect(beta.spec).toEqual({ max: 3, unit: "instances" });
    await objects.deleteClusterCustomObject({
      group,
      version: "v1beta1",
      plural: "quotas",
      name: `q-${namespace}`,
    });
  });

  it("agree with zod on a generated corpus of valid and invalid objects (dry run)", async () => {
    // Each field is mostly valid, sometimes not: the corpus has both kinds of objects.
    const field = <T, U>(valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<U>) =>
      fc.oneof({ arbitrary: valid, weight: 6 }, { arbitrary: invalid, weight: 1 });
    const spec = fc.record(
      {
        image: field(fc.constantFrom("nginx", "busybox:1.36"), fc.constant("")),
        replicas: field(fc.integer({ min: 0, max: 5 }), fc.constantFrom(-1, -2, "2", 1.5)),
        restartPolicy: field(
          fc.constantFrom("Always", "Never", "OnFailure"),
          fc.constant("Sometimes"),
        ),
        port: field(fc.constantFrom(80, "http"), fc.constant(true)),
        name: field(
          fc.constantFrom("ok-name", "a"),
          fc.constantFrom("Bad_Name", "-x", "x".repeat(64)),
        ),
        ratio: field(fc.constantFrom(0.5, 0.001), fc.constantFrom(0, 1, -1)),
        runtime: field(
          fc.constantFrom(
            { kind: "container" },
            { kind: "container", command: ["sh", "-c", "true"] },
            { kind: "vm", cpus: 2, memory: "1Gi" },
          ),
          fc.constantFrom(
            { kind: "container", command: "sh" },
            { kind: "vm", memory: "1Gi" },
            { kind: "vm", cpus: 0, memory: "1Gi" },
            { kind: "other" },
          ),
        ),
        labels: field(fc.constant({ a: "b" }), fc.constant({ a: 1 })),
        window: field(
          fc.constantFrom(null, { start: "2026-11-30T12:00:00Z" }),
          fc.constant({ start: "noon" }),
        ),
      },
      { requiredKeys: ["image"] },
    );
    const disagreements: string[] = [];
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(spec, async (candidate) => {
        const byZod = WorkloadSpec.safeParse(candidate).success;
        const result = await create(candidate, true);
        if (result.ok) accepted += 1;
        if (byZod !== result.ok) {
          disagreements.push(
            `${JSON.stringify(candidate)} zod=${byZod} apiserver=${result.ok ? "ok" : result.message}`,
          );
        }
      }),
      { numRuns: 80, seed: 20261130 },
    );
    expect(disagreements).toEqual([]);
    // The corpus exercises both sides.
    expect(accepted).toBeGreaterThan(0);
    expect(accepted).toBeLessThan(80);
  });
});
