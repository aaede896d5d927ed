import { describe, expect, it } from "vitest";
import { z } from "zod";
import { KubeError } from "../errors.js";
import { buildCrd } from "./crd.js";

const spec = z.object({ image: z.string(), replicas: z.number().int().min(0).default(1) });

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    return error instanceof KubeError ? error.code : "not a KubeError";
  }
}

describe("buildCrd", () => {
  it("builds names, scope, versions, the status subresource and printer columns", () => {
    const crd = buildCrd({
      group: "compute.nebula.dev",
      kind: "Workload",
      plural: "workloads",
      shortNames: ["wl"],
      categories: ["nebula"],
      versions: [
        {
          name: "v1alpha1",
          spec,
          status: z.object({ readyReplicas: z.number().int().optional() }),
          printerColumns: [
            { name: "Ready", type: "integer", jsonPath: ".status.readyReplicas" },
            { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          ],
        },
      ],
    });
    expect(crd).toEqual({
      apiVersion: "apiextensions.k8s.io/v1",
      kind: "CustomResourceDefinition",
      metadata: { name: "workloads.compute.nebula.dev" },
      spec: {
        group: "compute.nebula.dev",
        names: {
          kind: "Workload",
          listKind: "WorkloadList",
          plural: "workloads",
          singular: "workload",
          shortNames: ["wl"],
          categories: ["nebula"],
        },
        scope: "Namespaced",
        versions: [
          {
            name: "v1alpha1",
            served: true,
            storage: true,
            schema: {
              openAPIV3Schema: {
                type: "object",
                properties: {
                  apiVersion: { type: "string" },
                  kind: { type: "string" },
                  metadata: { type: "object" },
                  spec: {
                    type: "object",
                    properties: {
                      image: { type: "string" },
                      replicas: { type: "integer", minimum: 0, default: 1, format: "int64" },
                    },
                    required: ["image"],
                  },
                  status: {
                    type: "object",
                    properties: { readyReplicas: { type: "integer", format: "int64" } },
                  },
                },
                required: ["spec"],
              },
            },
            subresources: { status: {} },
            additionalPrinterColumns: [
              { name: "Ready", type: "integer", jsonPath: ".status.readyReplicas" },
              { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
            ],
          },
        ],
      },
    });
  });

  it("has no status subresource without a status schema, and spec is optional when it has a default", () => {
    const crd = buildCrd({
      group: "compute.nebula.dev",
      kind: "Quota",
      plural: "quotas",
      scope: "Cluster",
      versions: [
        { name: "v1", spec: z.object({ max: z.number().int().default(3) }).default({ max: 3 }) },
      ],
    });
    const [version] = crd.spec.versions;
    expect(crd.spec.scope).toBe("Cluster");
    expect(version?.subresources).toBeUndefined();
    expect(version?.schema.openAPIV3Schema.required).toBeUndefined();
  });

  it("needs exactly one storage version among several", () => {
    const versions = [
      { name: "v1alpha1", spec, storage: false },
      { name: "v1", spec, storage: true },
    ];
    const crd = buildCrd({ group: "a.nebula.dev", kind: "Thing", plural: "things", versions });
    expect(crd.spec.versions.map((v) => [v.name, v.served, v.storage])).toEqual([
      ["v1alpha1", true, false],
      ["v1", true, true],
    ]);
    expect(
      codeOf(() =>
        buildCrd({
          group: "a.nebula.dev",
          kind: "Thing",
          plural: "things",
          versions: [
            { name: "v1alpha1", spec },
            { name: "v1", spec },
          ],
        }),
      ),
    ).toBe("InvalidOptions");
  });

  it("rejects bad names and printer columns as InvalidOptions", () => {
    const base = {
      group: "a.nebula.dev",
      kind: "Thing",
      plural: "things",
      versions: [{ name: "v1", spec }],
    };
    expect(codeOf(() => buildCrd({ ...base, group: "nodot" }))).toBe("InvalidOptions");
    expect(codeOf(() => buildCrd({ ...base, kind: "thing" }))).toBe("InvalidOptions");
    expect(codeOf(() => buildCrd({ ...base, plural: "Things" }))).toBe("InvalidOptions");
    expect(
      codeOf(() =>
        buildCrd({
          ...base,
          versions: [
            {
              name: "v1",
              spec,
              printerColumns: [{ name: "X", type: "string", jsonPath: "status.x" }],
            },
          ],
        }),
      ),
    ).toBe("InvalidOptions");
    expect(
      codeOf(() => buildCrd({ ...base, versions: [{ name: "v1", spec: "not zod" as never }] })),
    ).toBe("InvalidOptions");
  });

  it("passes on schema errors naming the field under spec or status", () => {
    expect(() =>
      buildCrd({
        group: "a.nebula.dev",
        kind: "Thing",
        plural: "things",
        versions: [{ name: "v1", spec: z.object({ host: z.string().regex(/^(?!-)[a-z-]+$/) }) }],
      }),
    ).toThrow(/spec\.host.*look-ahead/);
  });
});
