/**
 * The instance failure reasons (docs/contracts.md#failure-reasons-and-ranking) that the reverse mapping produces. `@nebula/rollup`
 * owns the catalog (class, phrases, transience) keyed by these names.
 *
 * @packageDocumentation
 */

/**
 * Every reason {@link toInstanceReason} can return, ranked by class (spec rejected, customer must
 * fix, platform blocked, unknown, platform working), then the two "nothing wrong" reasons.
 * `Unknown` (the instance's state could not be read) ranks above the platform's own progress, so
 * an unreadable report is never shown as "being started".
 *
 * Use it to check that a catalog covers every reason, or to validate a reason read from a status.
 *
 * @example
 * ```ts
 * import { INSTANCE_REASONS } from "@nebula/state-mapping";
 * INSTANCE_REASONS.includes("OutOfMemory"); // true
 * ```
 */
export const INSTANCE_REASONS = [
  // spec rejected
  "InvalidSpec",
  "NoMatchingLocation",
  // customer must fix
  "InstanceCrashing",
  "OutOfMemory",
  "ImageUnavailable",
  "ConfigurationError",
  // platform blocked
  "QuotaExceeded",
  "InsufficientCapacity",
  "InstanceLost",
  "PlatformMisconfigured",
  // unknown: the state could not be read (rollup's Unclassified class)
  "Unknown",
  // platform working
  "Provisioning",
  "Starting",
  // not failures: finished OK / running and ready
  "Completed",
  "Ready",
] as const;

/**
 * One instance failure reason: a member of {@link INSTANCE_REASONS}. `Completed` means every
 * container that must finish finished with exit code 0; `Ready` means running and ready.
 */
export type InstanceReason = (typeof INSTANCE_REASONS)[number];

/**
 * True when `value` is one of {@link INSTANCE_REASONS}. Use it to narrow a reason read from a
 * condition or from configuration.
 */
export function isInstanceReason(value: unknown): value is InstanceReason {
  return typeof value === "string" && (INSTANCE_REASONS as readonly string[]).includes(value);
}
