// @nebula/kube/observability: logs, metrics and the health/metrics server.
export {
  createLogger,
  type Logger,
  type LoggerOptions,
  type LogLevel,
  silentLogger,
} from "./logger.js";
export { ControllerMetrics, createRegistry, type Registry } from "./metrics.js";
export { type ProbeServer, type ProbeServerOptions, startProbeServer } from "./server.js";
