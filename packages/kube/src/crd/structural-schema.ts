/**
 * zod → structural `apiextensions.k8s.io/v1` schema: `z.toJSONSchema` (OpenAPI 3.0, input side)
 * rewritten into the subset of JSON Schema the API server accepts for a CRD.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { KubeError } from "../errors.js";
import { re2Problem } from "./re2.js";

/**
 * A node of a structural schema (`JSONSchemaProps` as the API server reads it, with the
 * `x-kubernetes-*` keys spelled as on the wire). Plain JSON: `kubectl apply` and YAML dumps take
 * it as it is.
 */
export interface StructuralSchema {
  /** `object`, `array`, `string`, `integer`, `number` or `boolean`. */
  type?: "object" | "array" | "string" | "integer" | "number" | "boolean";
  /** Fields of an object. */
  properties?: Record<string, StructuralSchema>;
  /** Required fields of an object. */
  required?: string[];
  /** The schema of every value of a map (an object without `properties`). */
  additionalProperties?: StructuralSchema;
  /** The schema of every item of an array. */
  items?: StructuralSchema;
  /** Allowed values. */
  enum?: unknown[];
  /** A Kubernetes string/number format (`date-time`, `int64`, …). */
  format?: string;
  /** `null` is accepted (and kept). */
  nullable?: boolean;
  /** Applied by the API server when the field is absent. */
  default?: unknown;
  /** Shown by `kubectl explain`. */
  description?: string;
  /** Any JSON is kept as is below this node. */
  "x-kubernetes-preserve-unknown-fields"?: true;
  /** An integer or a string (like `intstr.IntOrString`). */
  "x-kubernetes-int-or-string"?: true;
  /** `atomic`, `set` or `map` (merge semantics of a list). */
  "x-kubernetes-list-type"?: "atomic" | "set" | "map";
  /** The keys of a `map` list. */
  "x-kubernetes-list-map-keys"?: string[];
  /** Value validations only (no `type`), alternatives of which one must hold. */
  anyOf?: StructuralSchema[];
  /** Value bounds, patterns, CEL rules and other keywords the API server knows. */
  [keyword: string]: unknown;
}

type Json = { [key: string]: unknown };

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Formats the API server validates; others are dropped (it would ignore them and warn). */
const KUBERNETES_FORMATS = new Set([
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

/** Keys that describe a node rather than constrain its values: never inside `anyOf`. */
const NON_VALIDATION_KEYS = new Set([
  "type",
  "description",
  "title",
  "default",
  "nullable",
  "additionalProperties",
  "example",
  "externalDocs",
]);

/** Keys dropped everywhere: JSON Schema bookkeeping the API server does not take. */
const DROPPED_KEYS = new Set([
  "$schema",
  "$id",
  "id",
  "$comment",
  "examples",
  "readOnly",
  "writeOnly",
  "deprecated",
  "propertyNames",
  "contentEncoding",
  "contentMediaType",
]);

const FORBIDDEN_KEYS: Record<string, string> = {
  patternProperties: "patternProperties (a record keyed by a pattern)",
  dependencies: "dependencies",
  dependentRequired: "dependentRequired",
  dependentSchemas: "dependentSchemas",
  additionalItems: "additionalItems",
  prefixItems: "tuples",
  contains: "contains",
  not: "not",
  if: "if/then/else",
};

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function unsupported(path: string, what: string): KubeError {
  return new KubeError(
    "UnsupportedSchema",
    `${path || "(root)"}: ${what} has no structural apiextensions.k8s.io/v1 form`,
  );
}

function childPath(path: string, key: string): string {
  return path === "" ? key : `${path}.${key}`;
}

interface Context {
  readonly definitions: Json;
  readonly resolving: readonly string[];
}

/**
 * Rewrites a JSON Schema produced by `z.toJSONSchema` (OpenAPI 3.0 target, `io: "input"`) into a
 * structural schema the API server accepts in a CRD:
 *
 * - `$ref`/`definitions`/`$defs` are inlined (a recursive schema is an error: CRDs cannot recurse);
 * - `additionalProperties: false` is removed (structural schemas prune unknown fields instead);
 *   `additionalProperties: {}`/`true` and `{}`/`z.unknown()` become
 *   `x-kubernetes-preserve-unknown-fields: true`; a record keeps `additionalProperties: <schema>`;
 * - `integer | string` becomes `x-kubernetes-int-or-string: true`;
 * - unions: `null` branches become `nullable`, literal unions one `enum`, object unions one
 *   object holding every variant's fields (required = those required by all) with an `anyOf` of
 *   the variants' value validations (`required`, discriminator `enum`s) so a variant is still
 *   enforced; a union of different types is an error;
 * - `pattern`s are checked to compile with Go's RE2 (`UnsupportedPattern` names the field); a
 *   zod pattern next to a Kubernetes `format` is dropped (the format validates), formats the API
 *   server does not know (or reads differently, like ISO `duration`) are dropped;
 * - zod's safe-integer bounds become `format: int64`; `const` becomes `enum`; `uniqueItems`
 *   becomes `x-kubernetes-list-type: set`; an array named `conditions` of objects with a required
 *   `type` becomes a list-map keyed by `type` (server-side apply merges conditions by type);
 * - `default`s, `description`s, bounds and formats are kept;
 * - `.meta({ "x-kubernetes-preserve-unknown-fields": true })` keeps a subtree opaque, and other
 *   `x-kubernetes-*` keys (e.g. `x-kubernetes-validations` CEL rules) pass through.
 *
 * @param path dotted field path used in error messages (e.g. `spec`).
 * @throws KubeError `UnsupportedSchema` or `UnsupportedPattern`, naming the field.
 * @example
 * ```ts
 * toStructuralSchema({ type: "object", properties: { n: { type: "integer", minimum: 0 } },
 *   additionalProperties: false }, "spec");
 * // { type: "object", properties: { n: { type: "integer", minimum: 0, format: "int64" } } }
 * ```
 */
export function toStructuralSchema(jsonSchema: unknown, path = ""): StructuralSchema {
  const root = isObject(jsonSchema) ? jsonSchema : {};
  const definitions = {
    ...(isObject(root.definitions) ? root.definitions : {}),
    ...(isObject(root.$defs) ? root.$defs : {}),
  };
  return convert(jsonSchema, path, { definitions, resolving: [] });
}

/**
 * The structural schema of a zod schema: `z.toJSONSchema(schema, { target: "openapi-3.0",
 * io: "input", unrepresentable: "throw", cycles: "throw", reused: "inline" })` rewritten by
 * {@link toStructuralSchema}. Input side: fields with a `.default()` are optional and keep their
 * `default`.
 *
 * @throws KubeError `UnsupportedSchema` (also for zod types JSON Schema cannot express, such as
 *   `z.date()`, `z.bigint()`, recursive schemas) or `UnsupportedPattern`.
 * @example
 * ```ts
 * structuralSchemaOf(z.object({ replicas: z.number().int().min(0).default(1) }), "spec");
 * // { type: "object", properties: { replicas: { type: "integer", minimum: 0, default: 1, format: "int64" } } }
 * ```
 */
export function structuralSchemaOf(schema: z.ZodType, path = ""): StructuralSchema {
  let jsonSchema: unknown;
  try {
    jsonSchema = z.toJSONSchema(schema, {
      target: "openapi-3.0",
      io: "input",
      unrepresentable: "throw",
      cycles: "throw",
      reused: "inline",
    });
  } catch (error) {
    throw new KubeError(
      "UnsupportedSchema",
      `${path || "(root)"}: zod cannot express this schema as JSON Schema (${error instanceof Error ? error.message : String(error)})`,
      { cause: error },
    );
  }
  return toStructuralSchema(jsonSchema, path);
}

function convert(input: unknown, path: string, initial: Context): StructuralSchema {
  let context = initial;
  if (input === true || input === undefined)
    return { "x-kubernetes-preserve-unknown-fields": true };
  if (input === false) throw unsupported(path, "a schema that accepts nothing");
  if (!isObject(input)) throw unsupported(path, "a non-object schema node");
  let node: Json = { ...input };
  delete node.definitions;
  delete node.$defs;

  if (typeof node.$ref === "string") {
    const ref = node.$ref;
    const name = /^#\/(?:definitions|\$defs)\/(.+)$/.exec(ref)?.[1];
    const target = name === undefined ? undefined : context.definitions[name];
    if (name === undefined || target === undefined) throw unsupported(path, `the reference ${ref}`);
    if (context.resolving.includes(name)) throw unsupported(path, `the recursive schema ${name}`);
    const { $ref: _ref, ...siblings } = node;
    return convert({ ...(isObject(target) ? target : {}), ...siblings }, path, {
      ...context,
      resolving: [...context.resolving, name],
    });
  }

  for (const key of Object.keys(node)) if (DROPPED_KEYS.has(key)) delete node[key];
  for (const [key, what] of Object.entries(FORBIDDEN_KEYS)) {
    if (key in node) throw unsupported(path, what);
  }

  if (node["x-kubernetes-preserve-unknown-fields"] === true && node.properties === undefined) {
    return pick(node, ["description", "nullable", "default"], {
      "x-kubernetes-preserve-unknown-fields": true,
      ...(node.type === "object" ? { type: "object" } : {}),
    });
  }
  if (node["x-kubernetes-int-or-string"] === true) {
    return pick(node, ["description", "nullable", "default"], {
      "x-kubernetes-int-or-string": true,
    });
  }

  if ("const" in node) {
    node.enum = [node.const];
    delete node.const;
  }
  if (Array.isArray(node.type)) {
    const types = node.type.filter((t) => t !== "null");
    if (types.length !== node.type.length) node.nullable = true;
    if (types.length !== 1)
      throw unsupported(path, `a value of several types (${types.join(", ")})`);
    node.type = types[0];
  }
  if (node.type === "null") throw unsupported(path, "a value that can only be null");
  if (Array.isArray(node.enum) && node.enum.includes(null)) {
    node.enum = node.enum.filter((v) => v !== null);
    node.nullable = true;
    if ((node.enum as unknown[]).length === 0)
      throw unsupported(path, "a value that can only be null");
  }

  if (Array.isArray(node.allOf)) {
    let resolving = context.resolving;
    for (let depth = 0; Array.isArray(node.allOf); depth++) {
      if (depth > 32) throw unsupported(path, "an allOf nested this deeply");
      const parts: unknown[] = node.allOf;
      delete node.allOf;
      for (const part of parts) {
        const { schema, name } = dereference(part, path, resolving, context);
        if (name !== undefined) resolving = [...resolving, name];
        node = intersect(node, schema, path);
      }
    }
    context = { ...context, resolving };
  }

  const union = Array.isArray(node.anyOf)
    ? node.anyOf
    : Array.isArray(node.oneOf)
      ? node.oneOf
      : undefined;
  if (
    union !== undefined &&
    node.type !== undefined &&
    union.every((b) => isObject(b) && b.type === undefined && b.$ref === undefined)
  ) {
    // Already structural: a typed node with value validations as alternatives.
    const key = Array.isArray(node.anyOf) ? "anyOf" : "oneOf";
    delete node.anyOf;
    delete node.oneOf;
    for (const branch of union) checkPatterns(branch, path);
    return { ...convert(node, path, context), [key]: union };
  }
  if (union !== undefined) {
    delete node.anyOf;
    delete node.oneOf;
    return convertUnion(union, node, path, context);
  }

  const meaningful = Object.keys(node).filter(
    (k) => !["description", "title", "default", "nullable"].includes(k),
  );
  if (meaningful.length === 0) {
    return pick(node, ["description", "nullable", "default"], {
      "x-kubernetes-preserve-unknown-fields": true,
    });
  }
  if (node.type === undefined) {
    if (isObject(node.properties) || "additionalProperties" in node) node.type = "object";
    else if ("items" in node) node.type = "array";
    else if (typeof node.pattern === "string" || "minLength" in node || "format" in node)
      node.type = "string";
    else if (Array.isArray(node.enum) && node.enum.length > 0)
      node.type = scalarType(node.enum, path);
    else throw unsupported(path, `a schema without a type (${meaningful.join(", ")})`);
  }

  switch (node.type) {
    case "object":
      return convertObject(node, path, context);
    case "array":
      return convertArray(node, path, context);
    case "string":
      return convertString(node, path);
    case "integer":
    case "number":
      return convertNumber(node);
    case "boolean":
      return finish(node);
    default:
      throw unsupported(path, `the type ${String(node.type)}`);
  }
}

/** A `$ref` part of an `allOf` replaced by its definition, and the definition's name. */
function dereference(
  part: unknown,
  path: string,
  resolving: readonly string[],
  context: Context,
): { schema: unknown; name?: string } {
  if (!isObject(part) || typeof part.$ref !== "string") return { schema: part };
  const name = /^#\/(?:definitions|\$defs)\/(.+)$/.exec(part.$ref)?.[1];
  const target = name === undefined ? undefined : context.definitions[name];
  if (name === undefined || !isObject(target))
    throw unsupported(path, `the reference ${part.$ref}`);
  if (resolving.includes(name)) throw unsupported(path, `the recursive schema ${name}`);
  const { $ref: _ref, ...siblings } = part;
  return { schema: { ...target, ...siblings }, name };
}

/** Every `pattern` below `node` must compile with RE2. */
function checkPatterns(node: unknown, path: string): void {
  if (Array.isArray(node)) {
    for (const item of node) checkPatterns(item, path);
    return;
  }
  if (!isObject(node)) return;
  if (typeof node.pattern === "string") checkPattern(node.pattern, path);
  for (const [key, value] of Object.entries(node)) {
    if (key === "enum" || key === "default" || key === "example") continue;
    checkPatterns(
      value,
      key === "properties" || key === "items" || key === "anyOf" ? path : childPath(path, key),
    );
  }
}

function checkPattern(pattern: string, path: string): void {
  const problem = re2Problem(pattern);
  if (problem !== undefined) {
    throw new KubeError(
      "UnsupportedPattern",
      `${path || "(root)"}: the pattern ${JSON.stringify(pattern)} uses a ${problem}, which Go's RE2 (the API server's regexp) cannot compile`,
    );
  }
}

function scalarType(values: readonly unknown[], path: string): StructuralSchema["type"] {
  const types = new Set(
    values.map((v) =>
      typeof v === "number" ? (Number.isInteger(v) ? "integer" : "number") : typeof v,
    ),
  );
  if (types.has("number")) types.delete("integer");
  const [only] = types;
  if (types.size !== 1 || !["string", "integer", "number", "boolean"].includes(String(only))) {
    throw unsupported(path, `an enum of mixed types (${[...types].join(", ")})`);
  }
  return only as StructuralSchema["type"];
}

function pick(node: Json, keys: readonly string[], base: Json): StructuralSchema {
  const out: Json = { ...base };
  for (const key of keys) if (node[key] !== undefined) out[key] = node[key];
  for (const [key, value] of Object.entries(node)) {
    if (key.startsWith("x-kubernetes-") && out[key] === undefined) out[key] = value;
  }
  return out as StructuralSchema;
}

function finish(node: Json): StructuralSchema {
  delete node.title;
  return node as StructuralSchema;
}

function convertObject(node: Json, path: string, context: Context): StructuralSchema {
  const properties = isObject(node.properties) ? node.properties : undefined;
  const additional = node.additionalProperties;
  delete node.additionalProperties;
  if (properties !== undefined) {
    const converted: Record<string, StructuralSchema> = {};
    for (const [name, child] of Object.entries(properties)) {
      converted[name] = convert(child, childPath(path, name), context);
      if (name === "conditions") markConditions(converted[name]);
    }
    node.properties = converted;
    if (Array.isArray(node.required)) {
      node.required = node.required.filter((r) => typeof r === "string" && r in converted);
      if ((node.required as unknown[]).length === 0) delete node.required;
    }
  }
  if (additional === true || (isObject(additional) && Object.keys(additional).length === 0)) {
    // Unknown fields are kept (a loose object, a record of anything).
    node["x-kubernetes-preserve-unknown-fields"] = true;
  } else if (isObject(additional)) {
    if (properties !== undefined && Object.keys(properties).length > 0) {
      // `properties` and a schema for the others cannot coexist: keep the others unvalidated.
      node["x-kubernetes-preserve-unknown-fields"] = true;
    } else {
      delete node.properties;
      node.additionalProperties = convert(additional, childPath(path, "*"), context);
    }
  }
  return finish(node);
}

function markConditions(schema: StructuralSchema | undefined): void {
  if (schema?.type !== "array" || schema.items?.type !== "object") return;
  const items = schema.items;
  if (items.properties?.type?.type !== "string" || !items.required?.includes("type")) return;
  schema["x-kubernetes-list-type"] ??= "map";
  schema["x-kubernetes-list-map-keys"] ??= ["type"];
}

function convertArray(node: Json, path: string, context: Context): StructuralSchema {
  if (Array.isArray(node.items)) throw unsupported(path, "a tuple");
  node.items = convert(node.items, childPath(path, "[]"), context);
  if (node.uniqueItems === true) {
    const itemType = (node.items as StructuralSchema).type;
    if (itemType !== "object" && itemType !== "array" && itemType !== undefined) {
      node["x-kubernetes-list-type"] ??= "set";
    }
  }
  delete node.uniqueItems;
  return finish(node);
}

function convertString(node: Json, path: string): StructuralSchema {
  const format = typeof node.format === "string" ? node.format : undefined;
  if (format !== undefined) {
    if (KUBERNETES_FORMATS.has(format)) delete node.pattern;
    else delete node.format;
  }
  if (typeof node.pattern === "string") checkPattern(node.pattern, path);
  return finish(node);
}

function convertNumber(node: Json): StructuralSchema {
  if (node.minimum === -MAX_SAFE) delete node.minimum;
  if (node.maximum === MAX_SAFE) delete node.maximum;
  if (typeof node.exclusiveMinimum === "number") {
    node.minimum = node.exclusiveMinimum;
    node.exclusiveMinimum = true;
  }
  if (typeof node.exclusiveMaximum === "number") {
    node.maximum = node.exclusiveMaximum;
    node.exclusiveMaximum = true;
  }
  if (node.type === "integer" && node.format === undefined) {
    node.format = node.minimum === -(2 ** 31) && node.maximum === 2 ** 31 - 1 ? "int32" : "int64";
  }
  return finish(node);
}

/** `allOf` parts merged into one node (zod emits them for intersections it cannot merge itself). */
function intersect(into: Json, part: unknown, path: string): Json {
  if (!isObject(part)) return into;
  const out: Json = { ...into };
  for (const [key, value] of Object.entries(part)) {
    if (key === "properties" && isObject(value)) {
      out.properties = { ...(isObject(out.properties) ? out.properties : {}), ...value };
    } else if (key === "required" && Array.isArray(value)) {
      out.required = [...new Set([...(Array.isArray(out.required) ? out.required : []), ...value])];
    } else if (key === "type" && out.type !== undefined && out.type !== value) {
      throw unsupported(path, `an intersection of ${String(out.type)} and ${String(value)}`);
    } else if (out[key] === undefined) {
      out[key] = value;
    }
  }
  return out;
}

function isNullBranch(branch: unknown): boolean {
  if (!isObject(branch)) return false;
  if (branch.type === "null") return true;
  return Array.isArray(branch.enum) && branch.enum.length === 1 && branch.enum[0] === null;
}

function convertUnion(
  branches: readonly unknown[],
  siblings: Json,
  path: string,
  context: Context,
): StructuralSchema {
  const nonNull = branches.filter((b) => !isNullBranch(b));
  const nullable = nonNull.length !== branches.length || siblings.nullable === true;
  const decorations = pick(
    siblings,
    ["description", "default"],
    nullable ? { nullable: true } : {},
  );
  const { description: _d, default: _f, nullable: _n, title: _t, ...constraints } = siblings;
  const converted = nonNull.map((branch) =>
    convert(
      { ...constraintsFor(branch, constraints), ...(isObject(branch) ? branch : {}) },
      path,
      context,
    ),
  );
  if (converted.length === 0) throw unsupported(path, "a value that can only be null");
  const combined = combine(converted, path);
  return { ...combined, ...decorations } as StructuralSchema;
}

/** Sibling constraints of a union (rare) apply to every branch of the matching type. */
function constraintsFor(branch: unknown, constraints: Json): Json {
  if (!isObject(branch) || Object.keys(constraints).length === 0) return {};
  return constraints.type === undefined || constraints.type === branch.type ? constraints : {};
}

/** One structural schema accepting what any of `schemas` accepts (as closely as the rules allow). */
function combine(schemas: readonly StructuralSchema[], path: string): StructuralSchema {
  const [first, ...rest] = schemas;
  if (first === undefined) throw unsupported(path, "an empty union");
  if (rest.length === 0) return first;
  if (
    schemas.some((s) => s["x-kubernetes-preserve-unknown-fields"] === true && s.type === undefined)
  ) {
    return { "x-kubernetes-preserve-unknown-fields": true };
  }
  const types = new Set(
    schemas.map((s) => (s["x-kubernetes-int-or-string"] ? "int-or-string" : s.type)),
  );
  if (types.has("integer") && types.has("number")) {
    types.delete("integer");
    schemas = schemas.map((s) => (s.type === "integer" ? withoutIntFormat(s) : s));
  }
  const intOrString =
    types.size <= 3 &&
    [...types].every((t) => t === "integer" || t === "string" || t === "int-or-string") &&
    (types.has("int-or-string") || (types.has("integer") && types.has("string")));
  if (intOrString) return { "x-kubernetes-int-or-string": true };
  if (types.size !== 1) {
    throw unsupported(path, `a union of ${[...types].map(String).join(" and ")}`);
  }
  const [type] = types;
  const nullable = schemas.some((s) => s.nullable === true);
  const base: StructuralSchema = { type: type as NonNullable<StructuralSchema["type"]> };
  if (nullable) base.nullable = true;
  const description = schemas.find((s) => s.description !== undefined)?.description;
  if (description !== undefined) base.description = description;

  if (type === "object") return combineObjects(schemas, base, path);
  if (type === "array") {
    const items = combine(
      schemas.map((s) => s.items ?? { "x-kubernetes-preserve-unknown-fields": true }),
      childPath(path, "[]"),
    );
    return withAlternatives({ ...base, items }, schemas);
  }
  // Scalars: literal unions become one enum; other constraints become alternatives.
  if (
    schemas.every(
      (s) =>
        Array.isArray(s.enum) && onlyKeys(s, ["type", "enum", "description", "nullable", "format"]),
    )
  ) {
    const values: unknown[] = [];
    for (const s of schemas) for (const v of s.enum ?? []) if (!values.includes(v)) values.push(v);
    const format = schemas.every((s) => s.format === first.format) ? first.format : undefined;
    return { ...base, ...(format !== undefined ? { format } : {}), enum: values };
  }
  const format = schemas.every((s) => s.format === first.format) ? first.format : undefined;
  return withAlternatives({ ...base, ...(format !== undefined ? { format } : {}) }, schemas);
}

function withoutIntFormat(schema: StructuralSchema): StructuralSchema {
  const { format, ...rest } = schema;
  return {
    ...rest,
    type: "number",
    ...(format !== undefined && format !== "int64" ? { format } : {}),
  };
}

function onlyKeys(schema: StructuralSchema, keys: readonly string[]): boolean {
  return Object.keys(schema).every((k) => keys.includes(k));
}

function combineObjects(
  schemas: readonly StructuralSchema[],
  base: StructuralSchema,
  path: string,
): StructuralSchema {
  const fieldSchemas = new Map<string, StructuralSchema[]>();
  for (const schema of schemas) {
    for (const [name, child] of Object.entries(schema.properties ?? {})) {
      const list = fieldSchemas.get(name) ?? [];
      list.push(child);
      fieldSchemas.set(name, list);
    }
  }
  const properties: Record<string, StructuralSchema> = {};
  for (const [name, list] of fieldSchemas) {
    properties[name] =
      list.length === 1 && list[0] ? structureOnly(list[0]) : combine(list, childPath(path, name));
  }
  const requiredSets = schemas.map((s) => new Set(s.required ?? []));
  const required = [...(requiredSets[0] ?? [])].filter((r) =>
    requiredSets.every((set) => set.has(r)),
  );
  const out: StructuralSchema = { ...base, properties };
  if (required.length > 0) out.required = required;
  if (schemas.some((s) => s["x-kubernetes-preserve-unknown-fields"] === true)) {
    out["x-kubernetes-preserve-unknown-fields"] = true;
  }
  return withAlternatives(out, schemas);
}

/**
 * A field only some variants have keeps its structure (types, formats, nesting) but not its value
 * validations or default: those belong to its variant and go into that variant's `anyOf`
 * alternative, so they do not apply to the other variants.
 */
function structureOnly(schema: StructuralSchema): StructuralSchema {
  const out: StructuralSchema = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === "properties" && isObject(value)) {
      out.properties = Object.fromEntries(
        Object.entries(value).map(([name, child]) => [
          name,
          structureOnly(child as StructuralSchema),
        ]),
      );
    } else if (key === "items" && isObject(value)) {
      out.items = structureOnly(value as StructuralSchema);
    } else if (
      ["type", "format", "description", "nullable", "additionalProperties"].includes(key) ||
      key.startsWith("x-kubernetes-")
    ) {
      out[key] = value;
    }
  }
  return out;
}

/** Adds `anyOf` of each variant's value validations, unless one variant accepts everything. */
function withAlternatives(
  out: StructuralSchema,
  schemas: readonly StructuralSchema[],
): StructuralSchema {
  const alternatives = schemas.map(validationsOnly);
  if (alternatives.some((a) => a === undefined)) return out;
  const unique: StructuralSchema[] = [];
  for (const a of alternatives) {
    if (a !== undefined && !unique.some((u) => JSON.stringify(u) === JSON.stringify(a)))
      unique.push(a);
  }
  if (unique.length === 0) return out;
  if (unique.length === 1 && unique[0] !== undefined)
    return { ...out, ...mergeValidations(out, unique[0]) };
  return { ...out, anyOf: unique };
}

/** Validations shared by all variants apply directly (only where the merged node has none of its own). */
function mergeValidations(out: StructuralSchema, only: StructuralSchema): StructuralSchema {
  const merged: StructuralSchema = {};
  for (const [key, value] of Object.entries(only)) {
    if (key === "properties" || key === "required" || key === "items") continue;
    if (out[key] === undefined) merged[key] = value;
  }
  return merged;
}

/**
 * The value validations of a schema (what may appear inside `anyOf`), or `undefined` when it has
 * none (it accepts every value of its type).
 */
function validationsOnly(schema: StructuralSchema): StructuralSchema | undefined {
  const out: StructuralSchema = {};
  for (const [key, value] of Object.entries(schema)) {
    if (NON_VALIDATION_KEYS.has(key) || key.startsWith("x-kubernetes-")) continue;
    if (key === "properties" && isObject(value)) {
      const properties: Record<string, StructuralSchema> = {};
      for (const [name, child] of Object.entries(value)) {
        const inner = validationsOnly(child as StructuralSchema);
        if (inner !== undefined) properties[name] = inner;
      }
      if (Object.keys(properties).length > 0) out.properties = properties;
    } else if (key === "items" && isObject(value)) {
      const inner = validationsOnly(value as StructuralSchema);
      if (inner !== undefined) out.items = inner;
    } else if (key === "anyOf" && Array.isArray(value)) {
      out.anyOf = value as StructuralSchema[];
    } else if (key !== "format" || schema.type === "string") {
      out[key] = value;
    }
  }
  return Object.keys(out).length === 0 ? undefined : out;
}
