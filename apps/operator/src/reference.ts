/**
 * The API reference page (`docs/api-reference.md`), generated from the CRDs, which are
 * generated from `@nebula/api`'s zod schemas: one table of fields per kind, with types,
 * constraints and printer columns.
 *
 * @packageDocumentation
 */

import { KINDS } from "@nebula/api";
import type { CustomResourceDefinition, StructuralSchema } from "@nebula/kube/crd";
import { operatorCrds } from "./crds.js";

const cell = (text: string) => text.replaceAll("|", "\\|").replaceAll("\n", " ");

function constraints(schema: StructuralSchema): string {
  const parts: string[] = [];
  const s = schema as Record<string, unknown>;
  if (Array.isArray(s.enum))
    parts.push(`one of ${(s.enum as unknown[]).map((v) => `\`${String(v)}\``).join(", ")}`);
  if (s.minimum !== undefined) parts.push(`≥ ${String(s.minimum)}`);
  if (s.maximum !== undefined) parts.push(`≤ ${String(s.maximum)}`);
  if (s.minLength !== undefined) parts.push(`length ≥ ${String(s.minLength)}`);
  if (s.maxLength !== undefined) parts.push(`length ≤ ${String(s.maxLength)}`);
  if (s.maxItems !== undefined) parts.push(`at most ${String(s.maxItems)} items`);
  if (s.maxProperties !== undefined) parts.push(`at most ${String(s.maxProperties)} entries`);
  if (typeof s.pattern === "string") parts.push(`pattern \`${s.pattern}\``);
  if (s["x-kubernetes-list-type"] === "map") {
    parts.push(
      `unique by ${(s["x-kubernetes-list-map-keys"] as string[]).map((k) => `\`${k}\``).join(", ")}`,
    );
  }
  for (const rule of (s["x-kubernetes-validations"] as { message?: string }[] | undefined) ?? []) {
    if (rule.message) parts.push(rule.message);
  }
  return parts.join("; ");
}

function typeOf(schema: StructuralSchema): string {
  const s = schema as Record<string, unknown>;
  if (s.type === "array") return `${typeOf((s.items ?? {}) as StructuralSchema)}[]`;
  if (s.type === "object" && s.additionalProperties !== undefined && s.properties === undefined) {
    return `map[string]${typeOf(s.additionalProperties as StructuralSchema)}`;
  }
  return String(s.type ?? "any");
}

function rows(schema: StructuralSchema, path: string, required: boolean, out: string[]): void {
  const s = schema as Record<string, unknown>;
  out.push(
    `| \`${path}\` | ${cell(typeOf(schema))} | ${required ? "yes" : ""} | ${cell(constraints(schema))} |`,
  );
  const properties = (
    s.type === "array" ? (s.items as Record<string, unknown>)?.properties : s.properties
  ) as Record<string, StructuralSchema> | undefined;
  const requiredSet = new Set(
    ((s.type === "array" ? (s.items as Record<string, unknown>)?.required : s.required) as
      | string[]
      | undefined) ?? [],
  );
  for (const [name, child] of Object.entries(properties ?? {})) {
    rows(child, `${path}${s.type === "array" ? "[]" : ""}.${name}`, requiredSet.has(name), out);
  }
}

function section(crd: CustomResourceDefinition, description: string): string {
  const version = crd.spec.versions[0];
  const root = version?.schema.openAPIV3Schema.properties ?? {};
  const out: string[] = [
    `## ${crd.spec.names.kind}`,
    "",
    description,
    "",
    `\`${crd.spec.group}/${version?.name}\`, ${crd.spec.scope.toLowerCase()}, resource \`${crd.spec.names.plural}\`, short names ${(crd.spec.names.shortNames ?? []).map((n) => `\`${n}\``).join(", ")}, status subresource.`,
    "",
    "| field | type | required | constraints |",
    "| --- | --- | --- | --- |",
  ];
  for (const part of ["spec", "status"] as const) {
    const schema = root[part];
    if (schema !== undefined) rows(schema, part, part === "spec", out);
  }
  out.push(
    "",
    "`kubectl get` columns:",
    "",
    "| column | JSONPath | shown |",
    "| --- | --- | --- |",
  );
  for (const c of version?.additionalPrinterColumns ?? []) {
    out.push(`| ${c.name} | \`${cell(c.jsonPath)}\` | ${c.priority ? "`-o wide`" : "always"} |`);
  }
  return out.join("\n");
}

/** The whole reference page, as Markdown. */
export function apiReference(): string {
  const crds = operatorCrds();
  return [
    "# compute.nebula.dev/v1alpha1 API reference",
    "",
    "Generated from `@nebula/api`'s zod schemas through the CRDs in `deploy/crds/` (`apps/operator/src/reference.ts`); do not edit.",
    "Regenerate: `UPDATE_CRDS=1 npx nx run @nebula/operator-app:test`.",
    "",
    ...crds.map((crd, i) => `${section(crd, KINDS[i]?.description ?? "")}\n`),
  ].join("\n");
}
