export { bootTimeline } from "./boot-timeline.js";
export { parseEc2Instance } from "./instance.js";
export { DEFAULT_STABILITY_WINDOW_SECONDS, toInstanceReason } from "./instance-reason.js";
export { isSpotInterruptionMarked, toPodStatus } from "./pod-status.js";
export { INSTANCE_REASONS, type InstanceReason } from "./reasons.js";
export {
  CONSOLE_REPORT_MARKER,
  ContainerReport,
  decodeConsoleOutput,
  decodeReportTags,
  ExitReport,
  encodeReportTags,
  LOG_FALLBACK_MAX_BYTES,
  LOG_FALLBACK_MAX_LINES,
  MAX_TERMINATION_MESSAGE_BYTES,
  REPORT_CHUNK_SIZE,
  REPORT_CHUNK_TAG_PREFIX,
  REPORT_MAX_CHUNKS,
  REPORT_TAG_BUDGET,
  REPORT_TAG_KEY,
  REPORT_TAG_MESSAGE_BUDGET,
  REPORT_VERSION,
  TAG_BUDGET_STEPS,
} from "./report.js";
export {
  type InstanceState,
  needsConsoleOutput,
  RESTART_LIMIT_ANNOTATION,
  toInstanceState,
} from "./state.js";
