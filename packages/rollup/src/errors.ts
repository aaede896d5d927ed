/**
 * Typed errors of `@nebula/rollup`. The roll-up functions themselves never throw; these errors
 * are returned (never thrown) by the functions that parse input at a boundary.
 *
 * @packageDocumentation
 */
import { z } from "zod";

/**
 * Machine-readable cause of a {@link RollupError}:
 *
 * - `InvalidDeploymentInput`: a WorkloadDeployment roll-up input failed validation.
 * - `InvalidWorkloadInput`: a Workload roll-up input failed validation.
 * - `InvalidReasonDefinition`: a reason added to a catalog has a bad name or definition.
 */
export type RollupErrorCode =
  | "InvalidDeploymentInput"
  | "InvalidWorkloadInput"
  | "InvalidReasonDefinition";

/**
 * The one error class of this package: a `code` to branch on and the underlying `cause`
 * (usually a `ZodError` listing every problem).
 *
 * @example
 * ```ts
 * const parsed = parseWorkloadDeploymentInput(json);
 * if (!parsed.ok && parsed.error.code === "InvalidDeploymentInput") log(parsed.error.cause);
 * ```
 */
export class RollupError extends Error {
  /** What went wrong, as a string literal you can switch on. */
  readonly code: RollupErrorCode;
  /** The error that caused this one (a `ZodError` for validation failures). */
  override readonly cause: unknown;
  override readonly name = "RollupError";

  /**
   * @param code - what went wrong.
   * @param message - a sentence for people.
   * @param options - `cause`: the underlying error.
   */
  constructor(code: RollupErrorCode, message: string, options: { cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.code = code;
    this.cause = options.cause;
  }
}

/**
 * The result of a function that validates input instead of throwing: either the value or a
 * {@link RollupError}.
 */
export type RollupResult<T> = { ok: true; value: T } | { ok: false; error: RollupError };

/**
 * Validates `value` with `schema`, turning a failure into a {@link RollupError} with `code`
 * whose message names `what` and lists every problem. Internal: the public parsers call it.
 */
export function parseInput<T>(
  schema: z.ZodType<T>,
  value: unknown,
  code: RollupErrorCode,
  what: string,
): RollupResult<T> {
  const parsed = schema.safeParse(value);
  return parsed.success
    ? { ok: true, value: parsed.data }
    : {
        ok: false,
        error: new RollupError(code, `invalid ${what}: ${z.prettifyError(parsed.error)}`, {
          cause: parsed.error,
        }),
      };
}
