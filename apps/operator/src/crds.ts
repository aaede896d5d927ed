/**
 * The operator's CustomResourceDefinitions, generated from `@nebula/api`'s zod schemas with
 * `@nebula/kube`'s generator (one source of truth), and their checked-in YAML form.
 *
 * @packageDocumentation
 */
import { KINDS, type KindDescription } from "@nebula/api";
import { buildCrd, type CustomResourceDefinition } from "@nebula/kube/crd";
import { stringify } from "yaml";

/** The CRD of one kind: status subresource, printer columns, categories and short names. */
function crdOf(kind: KindDescription): CustomResourceDefinition {
  return buildCrd({
    group: kind.group,
    kind: kind.kind,
    plural: kind.plural,
    singular: kind.singular,
    shortNames: [...kind.shortNames],
    categories: [...kind.categories],
    scope: kind.scope,
    versions: [
      {
        name: kind.version,
        spec: kind.spec,
        status: kind.status,
        printerColumns: kind.printerColumns.map((c) => ({ ...c })),
      },
    ],
  });
}

/** The three CRDs, in the order of `KINDS`. */
export function operatorCrds(): CustomResourceDefinition[] {
  return KINDS.map(crdOf);
}

/** The file name of a CRD under `deploy/crds/`: `<group>_<plural>.yaml`. */
export function crdFileName(crd: CustomResourceDefinition): string {
  return `${crd.spec.group}_${crd.spec.names.plural}.yaml`;
}

/** The checked-in YAML of a CRD (a header comment, then the object). */
export function crdYaml(crd: CustomResourceDefinition): string {
  return `# Generated from @nebula/api's zod schemas by apps/operator (src/crds.ts); do not edit.\n# Regenerate: UPDATE_CRDS=1 npx nx run @nebula/operator-app:test\n${stringify(crd, { lineWidth: 0, aliasDuplicateObjects: false })}`;
}
