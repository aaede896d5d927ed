/**
 * Typed errors of the provider, classified from AWS SDK errors by their `name` (the EC2 error
 * code), never by message text.
 */

/**
 * What went wrong, machine-readable.
 *
 * - `NotFound` — the instance (or other resource) does not exist (any more).
 * - `NotVisibleYet` — not found, but not proof of absence: a launch of it is under way, or younger
 *   than EC2's eventual-consistency window (`eventualConsistencySeconds`). Ask again: retryable,
 *   and never to be read as "gone" (do not ignore it the way a `NotFound` may be ignored).
 * - `Throttled` — EC2 refused the call for rate (`RequestLimitExceeded` and friends). Retry later.
 * - `InsufficientCapacity` — EC2 has no capacity for this instance type in this zone right now.
 * - `QuotaExceeded` — an account limit (instances, vCPUs, addresses) stops the launch.
 * - `InvalidConfiguration` — the provider's configuration is wrong (bad AMI, subnet, security
 *   group, instance profile, instance type, tags...). A person must fix it.
 * - `InvalidPodSpec` — the Pod asks for something this provider cannot give (conflicting instance
 *   types, requests no mapped instance type fits).
 * - `InstanceTypeNotAllowed` — the Pod asks for an instance type outside the allow-list.
 * - `NotOwned` — an instance does not prove that Nebula launched it for this Pod (tags, instance
 *   profile, client token), so the provider will not act on it.
 * - `Unauthorized` — credentials or IAM policy refuse the call.
 * - `IdempotencyMismatch` — a launch with this Pod's UID as `ClientToken` was made before with other
 *   parameters.
 * - `Unavailable` — EC2 answered with a server error, or could not be reached (region outage,
 *   network), or an attempt outlived the client's timeouts (`requestTimeoutMs`,
 *   `connectionTimeoutMs`: the SDK's `TimeoutError`). Retry later.
 * - `InvalidRequest` — EC2 rejected the request for another client-side reason.
 * - `Unknown` — anything else.
 */
export type ProviderErrorCode =
  | "NotFound"
  | "NotVisibleYet"
  | "Throttled"
  | "InsufficientCapacity"
  | "QuotaExceeded"
  | "InvalidConfiguration"
  | "InvalidPodSpec"
  | "InstanceTypeNotAllowed"
  | "NotOwned"
  | "Unauthorized"
  | "IdempotencyMismatch"
  | "Unavailable"
  | "InvalidRequest"
  | "Unknown";

/** Codes for which trying the same thing again later can succeed. */
const RETRYABLE: ReadonlySet<ProviderErrorCode> = new Set([
  "NotVisibleYet",
  "Throttled",
  "InsufficientCapacity",
  "Unavailable",
]);

/**
 * The one error class the provider throws. Check `code` (a {@link ProviderErrorCode}), not the
 * message; the original SDK error is kept in `cause`, its EC2 error code in `awsCode`.
 *
 * @example
 * ```ts
 * try {
 *   await provider.createPod(pod);
 * } catch (error) {
 *   if (error instanceof ProviderError && error.retryable) requeue(pod);
 *   else throw error;
 * }
 * ```
 */
export class ProviderError extends Error {
  override readonly name = "ProviderError";
  /** What went wrong, machine-readable. */
  readonly code: ProviderErrorCode;
  /** The EC2 error code (`err.name` of the SDK error), when the error came from EC2. */
  readonly awsCode: string | undefined;
  /**
   * A narrower CamelCase reason for a Pod's status, when there is one (for a refused Pod, the
   * `@nebula/userdata` code such as `SecretInUserData` or `UnsupportedVolume`).
   */
  reason: string | undefined;

  /**
   * @param code - what went wrong.
   * @param message - a sentence a person can act on.
   * @param options - `cause`: the underlying error; `awsCode`: the EC2 error code, if any.
   */
  constructor(
    code: ProviderErrorCode,
    message: string,
    options: { cause?: unknown; awsCode?: string } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.awsCode = options.awsCode;
  }

  /** True when the same call may succeed later (throttling, capacity, server errors). */
  get retryable(): boolean {
    return RETRYABLE.has(this.code);
  }
}

const BY_NAME: ReadonlyArray<readonly [ProviderErrorCode, ReadonlyArray<string | RegExp>]> = [
  [
    "NotFound",
    [
      /^InvalidInstanceID\.NotFound$/,
      "InvalidInstanceID.Malformed",
      // SSM (Pod parameters): a parameter that does not exist, to read or to tag.
      "ParameterNotFound",
      "ParameterVersionNotFound",
      "InvalidResourceId",
    ],
  ],
  [
    "Throttled",
    [
      "RequestLimitExceeded",
      "Throttling",
      "ThrottlingException",
      "RequestThrottled",
      "RequestThrottledException",
      "TooManyRequestsException",
      "SlowDown",
      // SSM: concurrent updates of one parameter.
      "TooManyUpdates",
    ],
  ],
  [
    "InsufficientCapacity",
    [
      /^Insufficient(Instance|Host|ReservedInstance)?Capacity$/,
      "InsufficientCapacityOnHost",
      "Unsupported",
      // Spot: the market price is above what the request allows (no capacity at that price).
      "SpotMaxPriceTooLow",
    ],
  ],
  [
    "QuotaExceeded",
    [
      "InstanceLimitExceeded",
      "VcpuLimitExceeded",
      "MaxSpotInstanceCountExceeded",
      "InsufficientFreeAddressesInSubnet",
      "AddressLimitExceeded",
      "TagLimitExceeded",
      "ResourceLimitExceeded",
      // SSM: parameters per account and Region, tags per parameter.
      "ParameterLimitExceeded",
      "TooManyTagsError",
    ],
  ],
  [
    "InvalidConfiguration",
    [
      /^InvalidAMIID\./,
      /^InvalidSubnetID?\./,
      /^InvalidSubnet$/,
      /^InvalidGroup\./,
      /^InvalidSecurityGroupID\./,
      /^InvalidKeyPair\./,
      "InvalidInstanceType",
      "InvalidBlockDeviceMapping",
      "InvalidUserData.Malformed",
      "NoSuchEntity",
      "InvalidIamInstanceProfile",
      "InvalidParameterValue",
      "MissingParameter",
      "VPCIdNotSpecified",
      "InvalidVpcID.NotFound",
      // SSM: the configured KMS key, the parameter hierarchy.
      "InvalidKeyId",
      "HierarchyLevelLimitExceededException",
      "HierarchyTypeMismatchException",
    ],
  ],
  [
    "Unauthorized",
    [
      "UnauthorizedOperation",
      "AuthFailure",
      "AccessDenied",
      "AccessDeniedException",
      "Blocked",
      "OptInRequired",
      "PendingVerification",
      "InvalidClientTokenId",
      "SignatureDoesNotMatch",
      "ExpiredToken",
      "RequestExpired",
    ],
  ],
  ["IdempotencyMismatch", ["IdempotentParameterMismatch"]],
  [
    "Unavailable",
    [
      "InternalError",
      "InternalFailure",
      "InternalServerError",
      "ServiceUnavailable",
      "Unavailable",
      "InsufficientInstanceCapacityTemporarily",
      "TimeoutError",
      "RequestTimeout",
      "RequestTimeoutException",
      "ECONNRESET",
      "ECONNREFUSED",
      "EPIPE",
      "ETIMEDOUT",
      "ENOTFOUND",
      "EAI_AGAIN",
      "EHOSTUNREACH",
      "ENETUNREACH",
    ],
  ],
];

function matches(name: string, pattern: string | RegExp): boolean {
  return typeof pattern === "string" ? name === pattern : pattern.test(name);
}

/**
 * Classifies anything thrown by `@aws-sdk/client-ec2` (or by the network under it) into a
 * {@link ProviderErrorCode}, by the error's `name` (the EC2 error code), then its `code`
 * (Node.js network errors), then the HTTP status / `$fault` the SDK recorded. Total: any value
 * gives a code.
 *
 * @example
 * ```ts
 * classifyAwsError({ name: "RequestLimitExceeded" }); // "Throttled"
 * classifyAwsError(Object.assign(new Error("socket hang up"), { code: "ECONNRESET" })); // "Unavailable"
 * ```
 */
export function classifyAwsError(error: unknown): ProviderErrorCode {
  if (error instanceof ProviderError) return error.code;
  if (typeof error !== "object" || error === null) return "Unknown";
  const record = error as {
    name?: unknown;
    code?: unknown;
    $fault?: unknown;
    $metadata?: { httpStatusCode?: unknown };
    $retryable?: { throttling?: unknown };
  };
  for (const candidate of [record.name, record.code]) {
    if (typeof candidate !== "string") continue;
    for (const [code, patterns] of BY_NAME) {
      if (patterns.some((pattern) => matches(candidate, pattern))) return code;
    }
  }
  if (record.$retryable?.throttling === true) return "Throttled";
  const status = record.$metadata?.httpStatusCode;
  if (typeof status === "number") {
    if (status === 429) return "Throttled";
    if (status >= 500) return "Unavailable";
  }
  if (record.$fault === "server") return "Unavailable";
  if (record.$fault === "client") return "InvalidRequest";
  if (typeof record.name === "string" && /socket hang up|aborted/i.test(String(error))) {
    return "Unavailable";
  }
  return "Unknown";
}

/**
 * Wraps anything thrown by an EC2 call into a {@link ProviderError}, keeping the original as
 * `cause`. A `ProviderError` passes through unchanged.
 *
 * @param error - what the SDK threw.
 * @param action - what the provider was doing, for the message (`"RunInstances for pod ns/name"`).
 */
export function toProviderError(error: unknown, action: string): ProviderError {
  if (error instanceof ProviderError) return error;
  const code = classifyAwsError(error);
  const awsCode =
    typeof error === "object" && error !== null && typeof (error as Error).name === "string"
      ? (error as Error).name
      : undefined;
  const detail = error instanceof Error ? error.message : String(error);
  return new ProviderError(code, `${action} failed (${awsCode ?? code}): ${detail}`, {
    cause: error,
    ...(awsCode === undefined ? {} : { awsCode }),
  });
}

/** True when `error` is a {@link ProviderError} (or classifies) as `NotFound`. */
export function isNotFound(error: unknown): boolean {
  return classifyAwsError(error) === "NotFound";
}
