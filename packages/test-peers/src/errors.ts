/**
 * What went wrong while starting or driving a test peer, machine-readable.
 *
 * - `BinaryMissing` — a peer's executable is not where it should be. Run `bash scripts/bootstrap.sh`.
 * - `StartFailed` — the peer process exited (or could not be spawned) before it was ready.
 * - `NotReady` — the peer kept running but did not answer its readiness check in time.
 * - `RequestFailed` — a setup request to a running peer (IAM profile, reset, certificates) failed.
 * - `InvalidOptions` — the options handed to a `start…` function did not parse.
 * - `NotProvided` — a test asked for the shared peers but no global setup provided them.
 *
 * The instance-host simulator (`startInstanceHosts`) adds:
 * - `PrerequisiteMissing` — a host tool it needs (`unshare`, `podman`, `runc`, `curl`, a static busybox) is absent.
 * - `UserDataUnreadable` — an instance's user-data is not valid base64, or its gzip stream is corrupt.
 * - `UnitInvalid` — a systemd unit file the guest installed cannot be run (no `ExecStart=`, bad quoting).
 * - `ImageBuildFailed` — `podman import` of a test image failed.
 * - `Timeout` — a `waitFor…` helper gave up.
 * - `Closed` — the simulator was used after `close()`.
 * - `ContainersLeft` — `close()` found containers of the run still there, or `podman ps` failed, so
 *   that none could be ruled out.
 * - `UnknownInstance` — `interruptSpot`/`recommendRebalance` named an instance the simulator does not play.
 * - `InstanceNotRunning` — `interruptSpot`/`recommendRebalance` named an instance that is not running.
 */
export type TestPeerErrorCode =
  | "BinaryMissing"
  | "StartFailed"
  | "NotReady"
  | "RequestFailed"
  | "InvalidOptions"
  | "NotProvided"
  | "PrerequisiteMissing"
  | "UserDataUnreadable"
  | "UnitInvalid"
  | "ImageBuildFailed"
  | "Timeout"
  | "Closed"
  | "ContainersLeft"
  | "UnknownInstance"
  | "InstanceNotRunning";

/**
 * The one error class `@nebula/test-peers` throws. Check `code`, not the message; the underlying
 * error (spawn error, HTTP error, zod error) is kept in `cause`.
 *
 * @example
 * ```ts
 * try {
 *   await startMoto();
 * } catch (error) {
 *   if (error instanceof TestPeerError && error.code === "BinaryMissing") {
 *     console.error("run: bash scripts/bootstrap.sh");
 *   }
 *   throw error;
 * }
 * ```
 */
export class TestPeerError extends Error {
  override readonly name = "TestPeerError";
  /** What went wrong, machine-readable. */
  readonly code: TestPeerErrorCode;

  /**
   * @param code - what went wrong.
   * @param message - a sentence a person can act on (it includes the peer's last output when useful).
   * @param options - `cause`: the underlying error.
   */
  constructor(code: TestPeerErrorCode, message: string, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}
