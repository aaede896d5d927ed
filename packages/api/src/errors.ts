/**
 * The typed error of `@nebula/api` and the parse functions that return it.
 *
 * @packageDocumentation
 */
import type { z } from "zod";
import { Instance } from "./instance.js";
import { Workload } from "./workload.js";
import { WorkloadDeployment } from "./workload-deployment.js";

/** Machine-readable cause of an {@link ApiError}: which kind failed validation. */
export type ApiErrorCode = "InvalidWorkload" | "InvalidWorkloadDeployment" | "InvalidInstance";

/** The one error class of this package: a `code` and the `ZodError` as `cause`. */
export class ApiError extends Error {
  /** What went wrong. */
  readonly code: ApiErrorCode;
  /** The underlying `ZodError`, listing every problem. */
  override readonly cause: unknown;
  override readonly name = "ApiError";

  /**
   * @param code - what went wrong.
   * @param message - a sentence for people.
   * @param options - `cause`: the underlying error.
   */
  constructor(code: ApiErrorCode, message: string, options: { cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.code = code;
    this.cause = options.cause;
  }
}

/** The result of a parse function: the value, or the error. Never thrown. */
export type ApiResult<T> = { ok: true; value: T } | { ok: false; error: ApiError };

function parser<T>(schema: z.ZodType<T>, code: ApiErrorCode, kind: string) {
  return (value: unknown): ApiResult<T> => {
    const parsed = schema.safeParse(value);
    if (parsed.success) return { ok: true, value: parsed.data };
    const first = parsed.error.issues[0];
    const where = first?.path.length ? first.path.join(".") : "(root)";
    return {
      ok: false,
      error: new ApiError(code, `invalid ${kind}: ${where}: ${first?.message ?? "invalid"}`, {
        cause: parsed.error,
      }),
    };
  };
}

/** Validates a Workload object; returns it or an `InvalidWorkload` error. Never throws. */
export const parseWorkload: (value: unknown) => ApiResult<Workload> = parser(
  Workload,
  "InvalidWorkload",
  "Workload",
);

/** Validates a WorkloadDeployment object; returns it or an `InvalidWorkloadDeployment` error. Never throws. */
export const parseWorkloadDeployment: (value: unknown) => ApiResult<WorkloadDeployment> = parser(
  WorkloadDeployment,
  "InvalidWorkloadDeployment",
  "WorkloadDeployment",
);

/** Validates an Instance object; returns it or an `InvalidInstance` error. Never throws. */
export const parseInstance: (value: unknown) => ApiResult<Instance> = parser(
  Instance,
  "InvalidInstance",
  "Instance",
);
