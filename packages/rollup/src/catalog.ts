/**
 * The reason catalog: what each instance failure reason means for the roll-up (its class, how to
 * say it about one or several instances, whether waiting helps).
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { RollupError, type RollupResult } from "./errors.js";
import { compareStrings } from "./text.js";

/**
 * Reason classes, highest rank first. The roll-up reports the highest-ranked reason present.
 *
 * - `SpecRejected`: nothing can be placed, so nothing is running to fail (`InvalidSpec`).
 * - `CustomerMustFix`: the workload itself is failing (`InstanceCrashing`, `ImageUnavailable`).
 * - `PlatformBlocked`: the platform cannot give what was asked (`QuotaExceeded`).
 * - `Unclassified`: a reason the catalog does not know, and `Unknown` (an instance whose state
 *   could not be read, e.g. an unreadable exit report). It ranks above the platform's own
 *   progress so that an unexpected failure is never hidden behind "being provisioned".
 * - `PlatformWorking`: wait (`Provisioning`, `Starting`).
 * - `NotAFailure`: nothing is wrong (`Completed`, or `Ready` on an instance not yet ready).
 */
export const REASON_CLASSES = [
  "SpecRejected",
  "CustomerMustFix",
  "PlatformBlocked",
  "Unclassified",
  "PlatformWorking",
  "NotAFailure",
] as const;

/** One of {@link REASON_CLASSES}. */
export type ReasonClass = (typeof REASON_CLASSES)[number];

/**
 * The rank of a class: 0 for `SpecRejected` (highest) up to 5 for `NotAFailure`. Lower wins.
 *
 * @example
 * ```ts
 * reasonClassRank("CustomerMustFix") < reasonClassRank("PlatformWorking"); // true
 * ```
 */
export function reasonClassRank(reasonClass: ReasonClass): number {
  const rank = REASON_CLASSES.indexOf(reasonClass);
  return rank < 0 ? REASON_CLASSES.indexOf("Unclassified") : rank;
}

/**
 * The shape Kubernetes requires of a condition `reason`: CamelCase, starting with a letter
 * (`metav1.Condition`'s validation pattern).
 */
export const CONDITION_REASON_PATTERN = /^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/;

/** Kubernetes' maximum length of a condition `reason`. */
export const MAX_REASON_LENGTH = 1024;

/** A valid condition reason name: CamelCase, at most {@link MAX_REASON_LENGTH} characters. */
const ReasonName = z.string().max(MAX_REASON_LENGTH).regex(CONDITION_REASON_PATTERN);

/** What the catalog knows about one reason. */
export const ReasonDefinition = z.object({
  /** The reason's class, which decides its rank. */
  class: z.enum(REASON_CLASSES),
  /**
   * The verb phrase for one instance, completing "1 of 3 instances ...":
   * `"is repeatedly exiting and restarting"`.
   */
  singular: z.string().min(1).max(200),
  /** The verb phrase for several instances: `"are repeatedly exiting and restarting"`. */
  plural: z.string().min(1).max(200),
  /** True when waiting is the right advice (the platform will get there by itself). */
  transient: z.boolean(),
});

/** What the catalog knows about one reason: class, phrases, transience. */
export type ReasonDefinition = z.infer<typeof ReasonDefinition>;

/**
 * The reason the roll-up uses for an instance whose reason is missing or is not a valid
 * condition reason. It is also the reason `@nebula/state-mapping` gives an instance whose state
 * is unknown (`INSTANCE_REASONS` includes it): class `Unclassified`, "is in an unknown state".
 */
export const UNKNOWN_REASON = "Unknown";

const BUILT_IN_REASONS: Readonly<Record<string, ReasonDefinition>> = {
  InvalidSpec: {
    class: "SpecRejected",
    singular: "cannot be placed because its spec was rejected",
    plural: "cannot be placed because their spec was rejected",
    transient: false,
  },
  NoMatchingLocation: {
    class: "SpecRejected",
    singular: "has no location that can run it",
    plural: "have no location that can run them",
    transient: false,
  },
  InstanceCrashing: {
    class: "CustomerMustFix",
    singular: "is repeatedly exiting and restarting",
    plural: "are repeatedly exiting and restarting",
    transient: false,
  },
  OutOfMemory: {
    class: "CustomerMustFix",
    singular: "ran out of memory",
    plural: "ran out of memory",
    transient: false,
  },
  ImageUnavailable: {
    class: "CustomerMustFix",
    singular: "could not pull its image",
    plural: "could not pull their images",
    transient: false,
  },
  ConfigurationError: {
    class: "CustomerMustFix",
    singular: "cannot start because of its configuration",
    plural: "cannot start because of their configuration",
    transient: false,
  },
  QuotaExceeded: {
    class: "PlatformBlocked",
    singular: "is waiting for quota",
    plural: "are waiting for quota",
    transient: false,
  },
  InsufficientCapacity: {
    class: "PlatformBlocked",
    singular: "is waiting for capacity",
    plural: "are waiting for capacity",
    transient: true,
  },
  InstanceLost: {
    class: "PlatformBlocked",
    singular: "was lost by the platform",
    plural: "were lost by the platform",
    transient: true,
  },
  PlatformMisconfigured: {
    class: "PlatformBlocked",
    singular: "cannot be launched until the platform's configuration is fixed",
    plural: "cannot be launched until the platform's configuration is fixed",
    transient: false,
  },
  Provisioning: {
    class: "PlatformWorking",
    singular: "is being provisioned",
    plural: "are being provisioned",
    transient: true,
  },
  Starting: {
    class: "PlatformWorking",
    singular: "is starting",
    plural: "are starting",
    transient: true,
  },
  Completed: {
    class: "NotAFailure",
    singular: "has completed",
    plural: "have completed",
    transient: false,
  },
  Ready: {
    class: "NotAFailure",
    singular: "is running but not ready",
    plural: "are running but not ready",
    transient: true,
  },
  [UNKNOWN_REASON]: {
    class: "Unclassified",
    singular: "is in an unknown state",
    plural: "are in an unknown state",
    transient: false,
  },
};

/** A reason as the roll-up uses it: a valid condition reason name and its definition. */
export interface ResolvedReason {
  /** The condition reason (CamelCase). Equal to the input when the input was a valid name. */
  readonly reason: string;
  /** Its definition, from the catalog or the `Unclassified` fallback. */
  readonly definition: ReasonDefinition;
  /** Whether the catalog has an entry for this reason. */
  readonly known: boolean;
}

/**
 * An immutable set of reason definitions keyed by reason name. Start from
 * {@link DEFAULT_REASON_CATALOG} and add your own with {@link ReasonCatalog.extend}.
 *
 * @example
 * ```ts
 * const result = DEFAULT_REASON_CATALOG.extend({
 *   LicenseExpired: {
 *     class: "CustomerMustFix",
 *     singular: "cannot start because its license expired",
 *     plural: "cannot start because their license expired",
 *     transient: false,
 *   },
 * });
 * if (result.ok) rollupWorkloadDeployment(input, { now, catalog: result.value });
 * ```
 */
export class ReasonCatalog {
  readonly #entries: ReadonlyMap<string, ReasonDefinition>;

  private constructor(entries: ReadonlyMap<string, ReasonDefinition>) {
    this.#entries = entries;
  }

  /** The built-in catalog; the same object as {@link DEFAULT_REASON_CATALOG}. */
  static readonly builtIn: ReasonCatalog = new ReasonCatalog(
    new Map(Object.entries(BUILT_IN_REASONS)),
  );

  /**
   * A new catalog with these definitions added (a name already present is replaced). Every name
   * must be a valid condition reason and every definition complete; otherwise the result is an
   * `InvalidReasonDefinition` error and this catalog is unchanged.
   *
   * @param definitions - reason name → definition, e.g. read from configuration.
   */
  extend(definitions: unknown): RollupResult<ReasonCatalog> {
    const parsed = z.record(ReasonName, ReasonDefinition).safeParse(definitions);
    if (!parsed.success) {
      return {
        ok: false,
        error: new RollupError(
          "InvalidReasonDefinition",
          `invalid reason definitions: ${z.prettifyError(parsed.error)}`,
          { cause: parsed.error },
        ),
      };
    }
    const entries = new Map(this.#entries);
    for (const [name, definition] of Object.entries(parsed.data)) entries.set(name, definition);
    return { ok: true, value: new ReasonCatalog(entries) };
  }

  /** The definition of `reason`, or `undefined` when the catalog has none. */
  get(reason: string): ReasonDefinition | undefined {
    return this.#entries.get(reason);
  }

  /** Every reason name in the catalog, sorted. */
  names(): string[] {
    return [...this.#entries.keys()].sort(compareStrings);
  }

  /**
   * Resolves any value an instance may carry as its reason. Total:
   * - a name in the catalog → its definition;
   * - another valid condition reason → class `Unclassified`, phrase "is not ready (Name)";
   * - anything else (missing, empty, not CamelCase) → {@link UNKNOWN_REASON}.
   */
  resolve(reason: unknown): ResolvedReason {
    const name =
      typeof reason === "string" &&
      reason.length <= MAX_REASON_LENGTH &&
      CONDITION_REASON_PATTERN.test(reason)
        ? reason
        : UNKNOWN_REASON;
    const definition = this.#entries.get(name);
    if (definition !== undefined) return { reason: name, definition, known: true };
    const fallback = BUILT_IN_REASONS[UNKNOWN_REASON];
    if (name === UNKNOWN_REASON && fallback !== undefined) {
      return { reason: name, definition: fallback, known: false };
    }
    return {
      reason: name,
      definition: {
        class: "Unclassified",
        singular: `is not ready (${name})`,
        plural: `are not ready (${name})`,
        transient: false,
      },
      known: false,
    };
  }
}

/**
 * The built-in catalog: every reason `@nebula/state-mapping` produces (`INSTANCE_REASONS`,
 * {@link UNKNOWN_REASON} included). Pass a catalog built with {@link ReasonCatalog.extend} to add your own.
 */
export const DEFAULT_REASON_CATALOG: ReasonCatalog = ReasonCatalog.builtIn;
