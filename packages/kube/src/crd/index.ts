// @nebula/kube/crd: CustomResourceDefinitions from zod schemas.
export {
  buildCrd,
  type CrdOptionsInput,
  type CustomResourceDefinition,
  type InstallCrdOptions,
  installCrd,
  type PrinterColumnInput,
} from "./crd.js";
export { type StructuralSchema, toStructuralSchema } from "./structural-schema.js";
