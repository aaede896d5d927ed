/**
 * What went wrong in the instance-host simulator, machine-readable.
 *
 * - `InvalidOptions` — the options handed to {@link startInstanceHosts} (or an image builder) did not parse.
 * - `PrerequisiteMissing` — a host tool the simulator needs (`unshare`, `podman`, `runc`, `curl`, a static busybox) is absent.
 * - `UserDataUnreadable` — an instance's user-data is not valid base64, or its gzip stream is corrupt.
 * - `UnitInvalid` — a systemd unit file the guest installed cannot be run (no `ExecStart=`, bad quoting).
 * - `ImageBuildFailed` — `podman import` of a test image failed.
 * - `Timeout` — a `waitFor…` helper gave up.
 * - `Closed` — the simulator was used after `close()`.
 *
 * @see {@link HostSimulatorError}
 */
export type HostSimulatorErrorCode =
  | "InvalidOptions"
  | "PrerequisiteMissing"
  | "UserDataUnreadable"
  | "UnitInvalid"
  | "ImageBuildFailed"
  | "Timeout"
  | "Closed";

/**
 * The error the instance-host simulator returns or throws. Check `code`, not the message; the
 * underlying error (spawn error, SDK error, zod error) is kept in `cause`.
 *
 * @example
 * ```ts
 * const decoded = decodeUserData(base64);
 * if (!decoded.ok && decoded.error.code === "UserDataUnreadable") console.error(decoded.error.message);
 * ```
 */
export class HostSimulatorError extends Error {
  override readonly name = "HostSimulatorError";
  /** What went wrong, machine-readable. */
  readonly code: HostSimulatorErrorCode;

  /**
   * @param code - what went wrong.
   * @param message - a sentence a person can act on.
   * @param options - `cause`: the underlying error.
   */
  constructor(code: HostSimulatorErrorCode, message: string, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}
