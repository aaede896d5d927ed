/**
 * A `CustomResourceDefinition` built from zod schemas, and its installation on a cluster.
 *
 * @packageDocumentation
 */
import {
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { z } from "zod";
import { KubeError, statusOf } from "../errors.js";
import { type StructuralSchema, structuralSchemaOf } from "./structural-schema.js";

const dnsLabel = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$/;

/** A printer column (`additionalPrinterColumns`): what `kubectl get` shows. */
const PrinterColumn = z.strictObject({
  /** Column header. */
  name: z.string().min(1),
  /** `integer`, `number`, `string`, `boolean` or `date` (shown as an age). */
  type: z.enum(["integer", "number", "string", "boolean", "date"]),
  /** Simple JSONPath into the object, starting with `.`, e.g. `.status.phase`. */
  jsonPath: z.string().startsWith("."),
  /** Shown by `kubectl explain`-like tools. */
  description: z.string().optional(),
  /** `int32`, `int64`, `float`, `double`, `byte`, `date`, `date-time` or `password`. */
  format: z
    .enum(["int32", "int64", "float", "double", "byte", "date", "date-time", "password"])
    .optional(),
  /** 0 (default): always shown; higher: only with `-o wide`. */
  priority: z.number().int().min(0).optional(),
});

/** A printer column accepted by {@link buildCrd}. */
export type PrinterColumnInput = z.input<typeof PrinterColumn>;

const zodSchema = z.custom<z.ZodType>((value) => value instanceof z.ZodType, {
  message: "must be a zod schema",
});

/** One served version of a custom resource. */
const CrdVersion = z.strictObject({
  /** Version name, e.g. `v1alpha1`. */
  name: z.string().regex(dnsLabel),
  /** Served by the API server (default true). */
  served: z.boolean().default(true),
  /** The storage version (exactly one per CRD; default true when there is only one version). */
  storage: z.boolean().optional(),
  /** The zod schema of `spec` (input side: defaulted fields are optional and keep their default). */
  spec: zodSchema,
  /** The zod schema of `status`; when given, the `/status` subresource is enabled. */
  status: zodSchema.optional(),
  /** Columns for `kubectl get`. */
  printerColumns: z.array(PrinterColumn).default([]),
  /** The version is deprecated (clients get a warning). */
  deprecated: z.boolean().optional(),
  /** The warning text for a deprecated version. */
  deprecationWarning: z.string().optional(),
});

/** Options of {@link buildCrd}, validated with zod. */
const CrdOptions = z
  .strictObject({
    /** API group, a DNS subdomain with at least one dot, e.g. `compute.nebula.dev`. */
    group: z.string().max(253).regex(dnsSubdomain, "must be a DNS subdomain with a dot"),
    /** Kind, PascalCase, e.g. `Workload`. */
    kind: z.string().regex(/^[A-Z][A-Za-z0-9]*$/, "must be PascalCase"),
    /** Plural resource name, lower case, e.g. `workloads`. */
    plural: z.string().max(63).regex(dnsLabel),
    /** Singular name (default: the kind in lower case). */
    singular: z.string().max(63).regex(dnsLabel).optional(),
    /** List kind (default `<Kind>List`). */
    listKind: z
      .string()
      .regex(/^[A-Z][A-Za-z0-9]*$/)
      .optional(),
    /** Short names for kubectl, e.g. `["wl"]`. */
    shortNames: z.array(z.string().regex(dnsLabel)).default([]),
    /** Categories for kubectl, e.g. `["all"]`. */
    categories: z.array(z.string().regex(dnsLabel)).default([]),
    /** `Namespaced` (default) or `Cluster`. */
    scope: z.enum(["Namespaced", "Cluster"]).default("Namespaced"),
    /** The versions, at least one. */
    versions: z.array(CrdVersion).min(1),
  })
  .superRefine((crd, context) => {
    const storage = crd.versions.filter((v, _, all) => v.storage ?? all.length === 1);
    if (storage.length !== 1) {
      context.addIssue({
        code: "custom",
        path: ["versions"],
        message: "exactly one version must be the storage version",
      });
    }
    const names = crd.versions.map((v) => v.name);
    if (new Set(names).size !== names.length) {
      context.addIssue({
        code: "custom",
        path: ["versions"],
        message: "version names must be unique",
      });
    }
  });

/** Options accepted by {@link buildCrd}. */
export type CrdOptionsInput = z.input<typeof CrdOptions>;

/** A printer column as written into the CRD. */
type CrdPrinterColumn = z.output<typeof PrinterColumn>;

/** An `apiextensions.k8s.io/v1` CustomResourceDefinition as plain JSON (wire names, ready for `kubectl apply`). */
export interface CustomResourceDefinition {
  /** Always `apiextensions.k8s.io/v1`. */
  apiVersion: "apiextensions.k8s.io/v1";
  /** Always `CustomResourceDefinition`. */
  kind: "CustomResourceDefinition";
  /** `name` is `<plural>.<group>`. */
  metadata: { name: string };
  /** The definition. */
  spec: {
    group: string;
    names: {
      kind: string;
      listKind: string;
      plural: string;
      singular: string;
      shortNames?: string[];
      categories?: string[];
    };
    scope: "Namespaced" | "Cluster";
    versions: Array<{
      name: string;
      served: boolean;
      storage: boolean;
      deprecated?: boolean;
      deprecationWarning?: string;
      schema: { openAPIV3Schema: StructuralSchema };
      subresources?: { status: Record<string, never> };
      additionalPrinterColumns?: CrdPrinterColumn[];
    }>;
  };
}

/**
 * Builds a CustomResourceDefinition from zod schemas: each version's `openAPIV3Schema` is
 * `{ apiVersion, kind, metadata, spec, status }` with `spec` and `status` converted by
 * {@link structuralSchemaOf} (`status` enables the `/status` subresource), plus names, scope,
 * served/storage flags and printer columns. `spec` is required unless its schema has a default.
 *
 * @throws KubeError `InvalidOptions` (bad names, not exactly one storage version),
 *   `UnsupportedSchema` or `UnsupportedPattern` (naming the field, e.g. `spec.image`).
 * @example
 * ```ts
 * const crd = buildCrd({
 *   group: "compute.nebula.dev", kind: "Workload", plural: "workloads", shortNames: ["wl"],
 *   versions: [{
 *     name: "v1alpha1",
 *     spec: z.object({ image: z.string(), replicas: z.number().int().min(0).default(1) }),
 *     status: z.object({ readyReplicas: z.number().int().optional() }),
 *     printerColumns: [{ name: "Ready", type: "integer", jsonPath: ".status.readyReplicas" }],
 *   }],
 * });
 * console.log(dumpYaml(crd)); // or installCrd(kc, crd)
 * ```
 */
export function buildCrd(options: CrdOptionsInput): CustomResourceDefinition {
  const parsed = CrdOptions.safeParse(options);
  if (!parsed.success) {
    throw new KubeError("InvalidOptions", `invalid CRD options: ${parsed.error.message}`, {
      cause: parsed.error,
    });
  }
  const crd = parsed.data;
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${crd.plural}.${crd.group}` },
    spec: {
      group: crd.group,
      names: {
        kind: crd.kind,
        listKind: crd.listKind ?? `${crd.kind}List`,
        plural: crd.plural,
        singular: crd.singular ?? crd.kind.toLowerCase(),
        ...(crd.shortNames.length > 0 ? { shortNames: crd.shortNames } : {}),
        ...(crd.categories.length > 0 ? { categories: crd.categories } : {}),
      },
      scope: crd.scope,
      versions: crd.versions.map((version) => {
        const spec = structuralSchemaOf(version.spec, "spec");
        const status = version.status ? structuralSchemaOf(version.status, "status") : undefined;
        const openAPIV3Schema: StructuralSchema = {
          type: "object",
          properties: {
            apiVersion: { type: "string" },
            kind: { type: "string" },
            metadata: { type: "object" },
            spec,
            ...(status !== undefined ? { status } : {}),
          },
          ...(spec.default === undefined ? { required: ["spec"] } : {}),
        };
        return {
          name: version.name,
          served: version.served,
          storage: version.storage ?? crd.versions.length === 1,
          ...(version.deprecated !== undefined ? { deprecated: version.deprecated } : {}),
          ...(version.deprecationWarning !== undefined
            ? { deprecationWarning: version.deprecationWarning }
            : {}),
          schema: { openAPIV3Schema },
          ...(status !== undefined ? { subresources: { status: {} } } : {}),
          ...(version.printerColumns.length > 0
            ? { additionalPrinterColumns: version.printerColumns }
            : {}),
        };
      }),
    },
  };
}

/** Options of {@link installCrd}. */
export interface InstallCrdOptions {
  /** Field manager of the server-side apply (default `nebula`). */
  readonly fieldManager?: string;
  /** How long to wait for `Established` (default 60 s). */
  readonly timeoutMs?: number;
  /** Poll interval while waiting (default 250 ms). */
  readonly pollMs?: number;
  /** Aborts the wait. */
  readonly signal?: AbortSignal;
}

const CRDS = { group: "apiextensions.k8s.io", version: "v1", plural: "customresourcedefinitions" };

/**
 * Installs (server-side applies) a CRD and waits until the API server serves it (`Established`).
 * Idempotent: re-applying the same definition changes nothing.
 *
 * @throws KubeError `RequestFailed` when the API server rejects the definition, its names are
 *   not accepted, or it is not established before the deadline.
 * @example
 * ```ts
 * await installCrd(kc, buildCrd({ ... }), { fieldManager: "nebula-operator" });
 * ```
 */
export async function installCrd(
  kubeConfig: KubeConfig,
  crd: CustomResourceDefinition,
  options: InstallCrdOptions = {},
): Promise<void> {
  const api = kubeConfig.makeApiClient(CustomObjectsApi);
  const name = crd.metadata.name;
  try {
    await api.patchClusterCustomObject(
      { ...CRDS, name, body: crd, fieldManager: options.fieldManager ?? "nebula", force: true },
      setHeaderOptions("Content-Type", PatchStrategy.ServerSideApply),
    );
  } catch (error) {
    const status = statusOf(error);
    const body = (error as { body?: unknown }).body;
    throw new KubeError(
      "RequestFailed",
      `applying CRD ${name} failed${status ? ` (HTTP ${status})` : ""}${typeof body === "string" ? `: ${body}` : ""}`,
      { cause: error },
    );
  }
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  for (;;) {
    options.signal?.throwIfAborted();
    let conditions: Array<{ type?: string; status?: string; message?: string }> = [];
    try {
      const current = (await api.getClusterCustomObject({ ...CRDS, name })) as {
        status?: { conditions?: typeof conditions };
      };
      conditions = current.status?.conditions ?? [];
    } catch (error) {
      if (statusOf(error) !== 404) {
        throw new KubeError("RequestFailed", `reading CRD ${name} failed`, { cause: error });
      }
    }
    if (conditions.some((c) => c.type === "Established" && c.status === "True")) return;
    const names = conditions.find((c) => c.type === "NamesAccepted");
    if (names?.status === "False") {
      throw new KubeError(
        "RequestFailed",
        `CRD ${name}: names not accepted: ${names.message ?? ""}`,
      );
    }
    if (Date.now() >= deadline) {
      throw new KubeError(
        "RequestFailed",
        `CRD ${name} was not Established within ${options.timeoutMs ?? 60_000} ms`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 250));
  }
}
