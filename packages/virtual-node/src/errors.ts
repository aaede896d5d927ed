/** Machine-readable codes of {@link VirtualNodeError}. */
export type VirtualNodeErrorCode =
  /** The configuration failed validation. */
  | "InvalidConfiguration"
  /** A request to the API server failed (transport, authorization, unexpected status). */
  | "RequestFailed"
  /** The provider failed a call the controller could not absorb. */
  | "ProviderFailed"
  /** The API server publishes no client CA to verify the kubelet API's client certificates against. */
  | "ClientCaMissing";

/** An error of `@nebula/virtual-node`, with a machine-readable `code` and the original `cause`. */
export class VirtualNodeError extends Error {
  /** Machine-readable code. */
  readonly code: VirtualNodeErrorCode;
  override readonly name = "VirtualNodeError";
  constructor(code: VirtualNodeErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
