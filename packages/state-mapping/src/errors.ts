/**
 * What can go wrong when this package reads data it was handed. Nothing here is thrown by the
 * mapping functions: errors travel inside results (and become `Unknown` states with a reason).
 */
export type StateMappingErrorCode =
  /** The EC2 instance does not have the shape `DescribeInstances` returns. */
  | "InstanceUnreadable"
  /** A `DescribeInstances` page does not have the shape EC2 returns. */
  | "PageUnreadable";

/**
 * A typed error from reading input at this package's boundary. It carries a machine-readable
 * {@link StateMappingError.code} and the underlying `cause` (usually a `ZodError`).
 *
 * It is returned inside results, never thrown by the mapping functions.
 *
 * @example
 * ```ts
 * const parsed = parseEc2Instance({ nope: true });
 * if (!parsed.ok) console.log(parsed.error.code); // "InstanceUnreadable"
 * ```
 */
export class StateMappingError extends Error {
  /** Always `"StateMappingError"`. */
  override readonly name = "StateMappingError";
  /** Which kind of input could not be read. */
  readonly code: StateMappingErrorCode;

  /**
   * @param code - which kind of input could not be read.
   * @param message - a sentence a person can act on.
   * @param options - `cause`: the underlying error (e.g. the `ZodError`).
   */
  constructor(code: StateMappingErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
