/**
 * Machine-readable reasons why a Pod could not be turned into user-data.
 *
 * - `InvalidPod`: the Pod is malformed (no containers, empty image, bad names, NUL bytes, ...).
 * - `InvalidOptions`: the render options are malformed.
 * - `SecretInUserData`: a value would come from a Secret (env `secretKeyRef`, `envFrom.secretRef`,
 *   `imagePullSecrets`, a `secret` or projected `secret` volume) or be a service-account token (a
 *   `serviceAccountToken` projection); user-data is readable by anyone who can describe the
 *   instance, so it is refused.
 * - `UnsupportedEnvSource`: an env source this builder cannot resolve (ConfigMap refs, `resourceFieldRef`,
 *   unsupported downward-API fields).
 * - `UnsupportedVolume`: a volume kind other than `emptyDir`, `hostPath`, `configMap`, `secret`,
 *   `projected`, `downwardAPI`; a projected source or downward-API field the host cannot serve
 *   (`clusterTrustBundle`, `podCertificate`, `resourceFieldRef`, `status.*`); or a mount feature
 *   (`subPath` outside those file volumes) the host cannot honour.
 * - `UnsupportedField`: a Pod feature the host supervisor does not implement (gRPC probes, ...).
 * - `HostNetworkNotAllowed`: `hostNetwork: true` without the opt-in annotation
 *   `nebula.dev/allow-host-network: "true"` (host networking reaches IMDS and the instance role).
 * - `TooLarge`: even gzipped, the user-data exceeds EC2's 16 KiB (the warm-pool user-data, never
 *   gzipped: too many images).
 * - `CreateContainerConfigError`: a mandatory ConfigMap or Secret (or one of its keys) the Pod
 *   references is missing from the sources given. The kubelet keeps such a container waiting with
 *   this reason and retries: so should the caller, once the object appears. `reason` names the
 *   Event (`MandatorySecretNotFound`, `MandatoryConfigMapNotFound`).
 * - `SourceTooLarge`: a ConfigMap or Secret value, or all of them together, exceed what the
 *   parameters can carry; the message names the reference.
 */
export type UserDataErrorCode =
  | "InvalidPod"
  | "InvalidOptions"
  | "SecretInUserData"
  | "UnsupportedEnvSource"
  | "UnsupportedVolume"
  | "UnsupportedField"
  | "HostNetworkNotAllowed"
  | "TooLarge"
  | "CreateContainerConfigError"
  | "SourceTooLarge";

/**
 * Why {@link renderUserData} refused a Pod. Never thrown by that renderer: it is returned in the
 * result's `error` field, so callers can map `code` to a Pod condition without a try/catch.
 * `renderPoolUserData`, whose input is configuration rather than a Pod, throws it (`InvalidOptions`,
 * `TooLarge`).
 *
 * @example
 * ```ts
 * const result = renderUserData(pod, { cluster: "prod" });
 * if (!result.ok) console.error(result.error.code, result.error.path, result.error.message);
 * ```
 */
export class UserDataError extends Error {
  /** Machine-readable reason. */
  readonly code: UserDataErrorCode;
  /** Where in the Pod (or options) the problem is, as a dotted path such as `spec.containers[app].env[TOKEN]`. */
  readonly path: string;
  /**
   * The Kubernetes Event reason to publish, when there is one beyond `code` (for
   * `CreateContainerConfigError`: `MandatorySecretNotFound` or `MandatoryConfigMapNotFound`).
   */
  readonly reason: string | undefined;

  /**
   * @param code - machine-readable reason.
   * @param path - where the problem is (dotted path into the Pod or the options).
   * @param message - what is wrong, for a person.
   * @param cause - the underlying error, when there is one (a zod error, for instance).
   * @param reason - the Event reason, when it differs from `code`.
   */
  constructor(
    code: UserDataErrorCode,
    path: string,
    message: string,
    cause?: unknown,
    reason?: string,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "UserDataError";
    this.code = code;
    this.path = path;
    this.reason = reason;
  }
}
