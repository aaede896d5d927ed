// @nebula/kube/status: the status writer and its pure helpers.
export { PODS, type ResourceType } from "./resource-client.js";
export { mergeConditions, planStatus, type StatusCondition } from "./status-values.js";
export {
  type StatusWriteOutcome,
  StatusWriter,
  type StatusWriterOptionsInput,
} from "./status-writer.js";
