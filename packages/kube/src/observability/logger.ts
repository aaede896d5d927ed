/**
 * Structured logs: pino, one JSON object per line on stdout, no transports.
 *
 * @packageDocumentation
 */
import { type DestinationStream, type Logger, pino } from "pino";

export type { Logger } from "pino";

/** Log levels the apps accept (`--log-level`). */
export const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;

/** One of {@link LOG_LEVELS}, or `silent` (tests). */
export type LogLevel = (typeof LOG_LEVELS)[number] | "silent";

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** Minimum level written (default `info`). */
  readonly level?: LogLevel;
  /** Value of the `name` field of every line (e.g. the app's binary name). */
  readonly name?: string;
  /** Where lines go (default: stdout, written synchronously so nothing is lost on exit). */
  readonly destination?: DestinationStream;
}

/**
 * A pino logger writing JSON lines (`level` as a label, `time` as ISO 8601) to stdout.
 *
 * @example
 * ```ts
 * const log = createLogger({ level: "debug", name: "nebula-vnode" });
 * log.info({ pod: "default/web-0" }, "reconciled");
 * // {"level":"info","time":"2026-11-30T15:00:00.000Z","name":"nebula-vnode","pod":"default/web-0","msg":"reconciled"}
 * ```
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  return pino(
    {
      level: options.level ?? "info",
      // No pid/hostname on every line; the name when given.
      base: options.name === undefined ? null : { name: options.name },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    options.destination ?? pino.destination({ dest: 1, sync: true }),
  );
}

/** A logger that writes nothing: the default of every component that takes a `logger` option. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
