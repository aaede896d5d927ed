import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { KubeError } from "../errors.js";
import { re2Problem } from "./re2.js";
import {
  type StructuralSchema,
  structuralSchemaOf,
  toStructuralSchema,
} from "./structural-schema.js";

const TYPES = new Set(["object", "array", "string", "integer", "number", "boolean"]);
const FORMATS = new Set([
  "int32",
  "int64",
  "float",
  "double",
  "byte",
  "binary",
  "password",
  "date",
  "date-time",
  "datetime",
  "email",
  "hostname",
  "ipv4",
  "ipv6",
  "cidr",
  "mac",
  "uri",
  "uuid",
  "uuid3",
  "uuid4",
  "uuid5",
]);
const NEVER = [
  "$ref",
  "$schema",
  "definitions",
  "$defs",
  "id",
  "$id",
  "patternProperties",
  "dependencies",
  "additionalItems",
  "const",
  "prefixItems",
  "uniqueItems",
  "examples",
  "oneOf",
  "allOf",
  "not",
];
const NOT_IN_JUNCTORS = [
  "type",
  "description",
  "default",
  "nullable",
  "additionalProperties",
  "title",
];

/**
 * The rules the API server applies to a CRD schema (apiextensions validation.go and structural
 * validation.go), as a list of violations: empty means structural.
 */
function violations(node: unknown, path = "", junctor = false, outer?: StructuralSchema): string[] {
  const out: string[] = [];
  if (typeof node !== "object" || node === null || Array.isArray(node))
    return [`${path}: not a schema object`];
  const schema = node as StructuralSchema;
  for (const key of NEVER) if (key in schema) out.push(`${path}: ${key}`);
  if (junctor) {
    for (const key of Object.keys(schema)) {
      if (NOT_IN_JUNCTORS.includes(key) || key.startsWith("x-kubernetes-"))
        out.push(`${path}: ${key} inside anyOf`);
    }
    for (const name of Object.keys(schema.properties ?? {})) {
      if (outer?.properties?.[name] === undefined) out.push(`${path}.${name}: only inside anyOf`);
    }
  } else {
    const typeless =
      schema["x-kubernetes-int-or-string"] === true ||
      schema["x-kubernetes-preserve-unknown-fields"] === true;
    if (schema.type === undefined ? !typeless : !TYPES.has(schema.type))
      out.push(`${path}: type ${String(schema.type)}`);
    if (schema["x-kubernetes-int-or-string"] === true && schema.type !== undefined)
      out.push(`${path}: int-or-string with a type`);
  }
  if (schema.additionalProperties !== undefined) {
    if (typeof schema.additionalProperties !== "object")
      out.push(`${path}: additionalProperties ${String(schema.additionalProperties)}`);
    if (schema.properties !== undefined) out.push(`${path}: additionalProperties with properties`);
    else out.push(...violations(schema.additionalProperties, `${path}.*`, junctor));
  }
  if (schema.format !== undefined && !FORMATS.has(schema.format))
    out.push(`${path}: format ${schema.format}`);
  if (typeof schema.pattern === "string" && re2Problem(schema.pattern) !== undefined)
    out.push(`${path}: pattern`);
  if (Array.isArray(schema.type)) out.push(`${path}: type array`);
  if (schema.items !== undefined)
    out.push(...violations(schema.items, `${path}[]`, junctor, outer?.items));
  for (const [name, child] of Object.entries(schema.properties ?? {})) {
    out.push(
      ...violations(
        child,
        `${path}.${name}`,
        junctor,
        junctor ? outer?.properties?.[name] : undefined,
      ),
    );
  }
  for (const branch of schema.anyOf ?? [])
    out.push(...violations(branch, `${path}|`, true, junctor ? outer : schema));
  return out;
}

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    return error instanceof KubeError ? error.code : `not a KubeError: ${String(error)}`;
  }
}

describe("structuralSchemaOf: shapes", () => {
  it("objects: required and optional fields, defaults, descriptions, strictness removed", () => {
    const schema = structuralSchemaOf(
      z.strictObject({
        image: z.string().min(1).describe("container image"),
        replicas: z.number().int().min(0).default(1),
        paused: z.boolean().optional(),
      }),
    );
    expect(schema).toEqual({
      type: "object",
      properties: {
        image: { type: "string", minLength: 1, description: "container image" },
        replicas: { type: "integer", minimum: 0, default: 1, format: "int64" },
        paused: { type: "boolean" },
      },
      required: ["image"],
    });
  });

  it("unknown and any become preserve-unknown-fields; loose objects keep unknown fields", () => {
    expect(structuralSchemaOf(z.object({ raw: z.unknown(), any: z.any() }).partial())).toEqual({
      type: "object",
      properties: {
        raw: { "x-kubernetes-preserve-unknown-fields": true },
        any: { "x-kubernetes-preserve-unknown-fields": true },
      },
    });
    expect(structuralSchemaOf(z.looseObject({ a: z.string() }))).toEqual({
      type: "object",
      properties: { a: { type: "string" } },
      required: ["a"],
      "x-kubernetes-preserve-unknown-fields": true,
    });
    expect(structuralSchemaOf(z.record(z.string(), z.unknown()))).toEqual({
      type: "object",
      "x-kubernetes-preserve-unknown-fields": true,
    });
  });

  it("records keep a value schema", () => {
    expect(structuralSchemaOf(z.record(z.string(), z.number().int()))).toEqual({
      type: "object",
      additionalProperties: { type: "integer", format: "int64" },
    });
  });

  it("int-or-string, either way round, and by meta", () => {
    const expected = { "x-kubernetes-int-or-string": true };
    expect(structuralSchemaOf(z.union([z.number().int(), z.string()]))).toEqual(expected);
    expect(structuralSchemaOf(z.union([z.string(), z.number().int().min(0)]))).toEqual(expected);
    expect(
      structuralSchemaOf(
        z.string().meta({ "x-kubernetes-int-or-string": true, description: "port" }),
      ),
    ).toEqual({
      ...expected,
      description: "port",
    });
  });

  it("literal unions and enums become one enum", () => {
    expect(
      structuralSchemaOf(z.union([z.literal("a"), z.literal("b"), z.enum(["c", "a"])])),
    ).toEqual({
      type: "string",
      enum: ["a", "b", "c"],
    });
    expect(structuralSchemaOf(z.union([z.literal(1), z.literal(2.5)]))).toEqual({
      type: "number",
      enum: [1, 2.5],
    });
  });

  it("nullable fields, including nullable unions, keep nullable", () => {
    expect(
      structuralSchemaOf(
        z.object({
          a: z.string().nullable(),
          b: z.union([z.literal("x"), z.literal("y")]).nullish(),
        }),
      ),
    ).toEqual({
      type: "object",
      properties: {
        a: { type: "string", nullable: true },
        b: { type: "string", enum: ["x", "y"], nullable: true },
      },
      required: ["a"],
    });
  });

  it("discriminated unions become one object plus anyOf of each variant's requirements", () => {
    const schema = structuralSchemaOf(
      z.discriminatedUnion("kind", [
        z.object({ kind: z.literal("image"), image: z.string() }),
        z.strictObject({
          kind: z.literal("vm"),
          cpus: z.number().int().min(1),
          memory: z.string().optional(),
        }),
      ]),
    );
    expect(schema).toEqual({
      type: "object",
      properties: {
        kind: { type: "string", enum: ["image", "vm"] },
        image: { type: "string" },
        cpus: { type: "integer", format: "int64" }, // its bound applies to its variant only
        memory: { type: "string" },
      },
      required: ["kind"],
      anyOf: [
        { properties: { kind: { enum: ["image"] } }, required: ["kind", "image"] },
        {
          properties: { kind: { enum: ["vm"] }, cpus: { minimum: 1 } },
          required: ["kind", "cpus"],
        },
      ],
    });
    expect(violations(schema)).toEqual([]);
  });

  it("string unions with different constraints keep them as alternatives", () => {
    expect(structuralSchemaOf(z.union([z.string().min(3), z.string().regex(/^x/)]))).toEqual({
      type: "string",
      anyOf: [{ minLength: 3 }, { pattern: "^x" }],
    });
  });

  it("formats: Kubernetes formats replace zod's patterns; unknown formats are dropped", () => {
    expect(
      structuralSchemaOf(
        z.object({
          at: z.iso.datetime(),
          mail: z.email(),
          id: z.uuid(),
          ip: z.ipv4(),
          c: z.cuid(),
        }),
      ),
    ).toEqual({
      type: "object",
      properties: {
        at: { type: "string", format: "date-time" },
        mail: { type: "string", format: "email" },
        id: { type: "string", format: "uuid" },
        ip: { type: "string", format: "ipv4" },
        c: { type: "string", pattern: expect.any(String) },
      },
      required: ["at", "mail", "id", "ip", "c"],
    });
  });

  it("numbers: exclusive bounds and safe-integer bounds", () => {
    expect(structuralSchemaOf(z.number().gt(0).lt(10))).toEqual({
      type: "number",
      minimum: 0,
      exclusiveMinimum: true,
      maximum: 10,
      exclusiveMaximum: true,
    });
    expect(structuralSchemaOf(z.number().int().max(5))).toEqual({
      type: "integer",
      maximum: 5,
      format: "int64",
    });
    expect(structuralSchemaOf(z.int32())).toEqual({
      type: "integer",
      minimum: -(2 ** 31),
      maximum: 2 ** 31 - 1,
      format: "int32",
    });
  });

  it("arrays: bounds kept, sets of scalars, conditions as a list-map", () => {
    expect(structuralSchemaOf(z.array(z.string()).min(1).max(3))).toEqual({
      type: "array",
      items: { type: "string" },
      minItems: 1,
      maxItems: 3,
    });
    const conditions = structuralSchemaOf(
      z.object({
        conditions: z.array(z.object({ type: z.string(), status: z.string() })).optional(),
      }),
    );
    expect(conditions.properties?.conditions).toMatchObject({
      "x-kubernetes-list-type": "map",
      "x-kubernetes-list-map-keys": ["type"],
    });
    expect(
      toStructuralSchema({ type: "array", items: { type: "string" }, uniqueItems: true }),
    ).toEqual({
      type: "array",
      items: { type: "string" },
      "x-kubernetes-list-type": "set",
    });
  });

  it("intersections merge", () => {
    expect(
      structuralSchemaOf(
        z.intersection(z.object({ a: z.string() }), z.object({ b: z.number().optional() })),
      ),
    ).toEqual({
      type: "object",
      properties: { a: { type: "string" }, b: { type: "number" } },
      required: ["a"],
    });
    expect(
      toStructuralSchema({
        allOf: [
          { type: "object", properties: { a: { type: "string" } } },
          { properties: { b: { type: "boolean" } }, required: ["b"] },
        ],
      }),
    ).toEqual({
      type: "object",
      properties: { a: { type: "string" }, b: { type: "boolean" } },
      required: ["b"],
    });
  });

  it("references are inlined", () => {
    const shared = z.object({ x: z.string() }).meta({ id: "Shared" });
    const schema = structuralSchemaOf(z.object({ a: shared, b: shared.optional() }));
    expect(schema).toEqual({
      type: "object",
      properties: {
        a: { type: "object", properties: { x: { type: "string" } }, required: ["x"] },
        b: { type: "object", properties: { x: { type: "string" } }, required: ["x"] },
      },
      required: ["a"],
    });
    expect(JSON.stringify(schema)).not.toContain("$ref");
  });

  it("x-kubernetes keys pass through (CEL rules, opaque subtrees)", () => {
    const schema = structuralSchemaOf(
      z
        .object({
          min: z.number().int(),
          max: z.number().int(),
          extra: z.object({ a: z.string() }).meta({ "x-kubernetes-preserve-unknown-fields": true }),
        })
        .meta({
          "x-kubernetes-validations": [{ rule: "self.min <= self.max", message: "min > max" }],
        }),
    );
    expect(schema["x-kubernetes-validations"]).toEqual([
      { rule: "self.min <= self.max", message: "min > max" },
    ]);
    expect(schema.properties?.extra).toEqual({
      type: "object",
      properties: { a: { type: "string" } },
      required: ["a"],
      "x-kubernetes-preserve-unknown-fields": true,
    });
  });
});

describe("structuralSchemaOf: what has no structural form", () => {
  it("rejects patterns RE2 cannot compile, naming the field", () => {
    let error: unknown;
    try {
      structuralSchemaOf(z.object({ name: z.string().regex(/^(?!-)[a-z-]+$/) }), "spec");
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(KubeError);
    expect((error as KubeError).code).toBe("UnsupportedPattern");
    expect((error as KubeError).message).toContain("spec.name");
    expect((error as KubeError).message).toContain("look-ahead");
    expect(codeOf(() => structuralSchemaOf(z.object({ d: z.iso.duration() })))).toBe(
      "UnsupportedPattern",
    );
  });

  it("rejects mixed unions, tuples, recursion and unrepresentable types", () => {
    expect(
      codeOf(() => structuralSchemaOf(z.union([z.string(), z.object({ a: z.string() })]))),
    ).toBe("UnsupportedSchema");
    expect(codeOf(() => structuralSchemaOf(z.union([z.string(), z.number()])))).toBe(
      "UnsupportedSchema",
    );
    expect(codeOf(() => structuralSchemaOf(z.tuple([z.string(), z.number()])))).toBe(
      "UnsupportedSchema",
    );
    expect(codeOf(() => structuralSchemaOf(z.object({ at: z.date() })))).toBe("UnsupportedSchema");
    expect(codeOf(() => structuralSchemaOf(z.object({ n: z.bigint() })))).toBe("UnsupportedSchema");
    const Tree: z.ZodType = z.lazy(() => z.object({ children: z.array(Tree) }));
    expect(codeOf(() => structuralSchemaOf(Tree))).toBe("UnsupportedSchema");
    expect(
      codeOf(() =>
        toStructuralSchema({
          $ref: "#/definitions/T",
          definitions: { T: { type: "object", properties: { c: { $ref: "#/definitions/T" } } } },
        }),
      ),
    ).toBe("UnsupportedSchema");
    expect(
      codeOf(() =>
        toStructuralSchema({ type: "object", patternProperties: { "^a": { type: "string" } } }),
      ),
    ).toBe("UnsupportedSchema");
    expect(codeOf(() => structuralSchemaOf(z.null()))).toBe("UnsupportedSchema");
  });

  it("names the field in the error", () => {
    expect(() =>
      structuralSchemaOf(
        z.object({ a: z.object({ b: z.union([z.string(), z.boolean()]) }) }),
        "spec",
      ),
    ).toThrow(/spec\.a\.b/);
  });
});

/** Random zod schemas built only from shapes that have a structural form. */
const zodSchemas = fc.letrec<{ node: z.ZodType; leaf: z.ZodType; object: z.ZodObject }>((tie) => {
  // Variants of a union get disjoint field names (`a…` and `b…`): one field with two
  // different types in two variants has no structural form (tested separately).
  const objectWith = (prefix: string) =>
    fc
      .dictionary(
        fc.stringMatching(/^[a-z][a-zA-Z]{0,5}$/).map((key) => `${prefix}${key}`),
        fc.tuple(tie("node"), fc.constantFrom("plain", "optional", "nullable", "describe")),
        { maxKeys: 3 },
      )
      .chain((fields) =>
        fc.constantFrom("object", "strict", "loose").map((kind) => {
          const shape: Record<string, z.ZodType> = {};
          for (const [name, [child, modifier]] of Object.entries(fields)) {
            shape[name] =
              modifier === "optional"
                ? child.optional()
                : modifier === "nullable"
                  ? child.nullable()
                  : modifier === "describe"
                    ? child.describe(`the ${name}`)
                    : child;
          }
          return kind === "strict"
            ? z.strictObject(shape)
            : kind === "loose"
              ? z.looseObject(shape)
              : z.object(shape);
        }),
      );
  return {
    leaf: fc.constantFrom<z.ZodType>(
      z.string(),
      z.string().min(1).max(63),
      z.string().regex(/^[a-z]([-a-z0-9]*[a-z0-9])?$/),
      z.enum(["Always", "Never"]),
      z.literal("x"),
      z.number(),
      z.number().int().min(0).max(100),
      z.number().positive(),
      z.boolean().default(false),
      z.unknown(),
      z.iso.datetime(),
      z.email(),
      z.uuid(),
      z.union([z.number().int(), z.string()]),
      z.union([z.literal("a"), z.literal("b")]),
    ),
    object: objectWith("f"),
    node: fc.oneof(
      { depthSize: "small", maxDepth: 3 },
      tie("leaf"),
      tie("object"),
      tie("node").map((child) => z.array(child)),
      tie("node").map((child) => z.record(z.string(), child)),
      fc.tuple(objectWith("a"), objectWith("b")).map(([a, b]) => z.union([a, b])),
      fc
        .tuple(objectWith("a"), objectWith("b"))
        .map(([a, b]) =>
          z.discriminatedUnion("kind", [
            a.extend({ kind: z.literal("one") }),
            b.extend({ kind: z.literal("two") }),
          ]),
        ),
    ),
  };
});

describe("structuralSchemaOf: properties", () => {
  it("turns every schema built from supported shapes into a structural schema (property)", () => {
    fc.assert(
      fc.property(zodSchemas.node, (schema: z.ZodType) => {
        const structural = structuralSchemaOf(schema, "spec");
        expect(violations(structural)).toEqual([]);
      }),
      { numRuns: 150 },
    );
  }, 60_000);

  it("is idempotent: a structural schema rewritten again is unchanged (property)", () => {
    fc.assert(
      fc.property(zodSchemas.node, (schema) => {
        const once = structuralSchemaOf(schema);
        expect(toStructuralSchema(once)).toEqual(once);
      }),
      { numRuns: 100 },
    );
  }, 60_000);

  it("either converts or fails with a typed error, for any JSON Schema-ish input (property)", () => {
    const scalar = fc.oneof(
      fc.string({ maxLength: 3 }),
      fc.integer(),
      fc.double(),
      fc.boolean(),
      fc.constant(null),
    );
    const leaf = fc.oneof(
      fc.constant({}),
      fc.boolean(),
      fc.record(
        {
          type: fc.constantFrom("string", "integer", "number", "boolean", "null", [
            "string",
            "null",
          ]),
          enum: fc.array(scalar, { maxLength: 3 }),
          pattern: fc.constantFrom("^a", "(?=a)", "\\1"),
          const: scalar,
        },
        { requiredKeys: [] },
      ),
    );
    const schema: fc.Memo<unknown> = fc.memo((n) =>
      n <= 1
        ? leaf
        : fc.oneof(
            leaf,
            fc.record(
              {
                type: fc.constantFrom("object", "array", "string", "integer", "null", [
                  "string",
                  "null",
                ]),
                properties: fc.dictionary(fc.string({ maxLength: 3 }), schema(n - 1), {
                  maxKeys: 2,
                }),
                items: schema(n - 1),
                anyOf: fc.array(schema(n - 1), { maxLength: 2 }),
                allOf: fc.array(schema(n - 1), { maxLength: 2 }),
                additionalProperties: fc.oneof(fc.boolean(), schema(n - 1)),
                enum: fc.array(scalar, { maxLength: 3 }),
                const: scalar,
              },
              { requiredKeys: [] },
            ),
          ),
    );
    fc.assert(
      fc.property(schema(4), (input) => {
        try {
          toStructuralSchema(input);
        } catch (error) {
          expect(error).toBeInstanceOf(KubeError);
          expect(["UnsupportedSchema", "UnsupportedPattern"]).toContain((error as KubeError).code);
        }
      }),
      { numRuns: 500 },
    );
  }, 60_000);
});
