/**
 * Leader election on a `coordination.k8s.io/v1` Lease, with client-go's rules.
 *
 * - Every write is a compare-and-swap: a PUT carrying the `resourceVersion` that was read (409 =
 *   someone else wrote first = this round is lost), or a create when the Lease does not exist.
 * - A Lease held by another identity is taken only after `leaseDuration` has passed since this
 *   process last saw its record change (its own clock, so clock skew between replicas is harmless).
 * - The leader renews every `retryPeriod`; when no renewal succeeds for `renewDeadline` it stops
 *   leading (`renewDeadline` < `leaseDuration`, so it stops before anyone else may take over).
 * - `acquireTime`/`renewTime` are `V1MicroTime` (the API server rejects a plain `Date`'s
 *   millisecond format).
 * - On cancellation the leader stops leading, waits for `onStoppedLeading` (the drain), then
 *   releases: holder cleared and a 1 s duration, so a standby takes over at its next retry.
 *
 * @packageDocumentation
 */
import {
  CoordinationV1Api,
  type KubeConfig,
  type V1Lease,
  V1MicroTime,
} from "@kubernetes/client-node";
import { z } from "zod";
import { withSignal } from "../cache/request-options.js";
import { KubeError, statusOf } from "../errors.js";
import type { Logger } from "../observability/logger.js";
import { silentLogger } from "../observability/logger.js";
import type { ControllerMetrics } from "../observability/metrics.js";
import { abortableSleep } from "../sleep.js";

/** Options of {@link LeaderElector} (validated with zod). */
export const LeaderElectionOptions = z
  .object({
    /** Namespace of the Lease. */
    namespace: z.string().min(1),
    /** Name of the Lease, e.g. `nebula-operator`. */
    name: z.string().min(1),
    /** This replica's identity (default: hostname + random suffix). Must be unique per replica. */
    identity: z.string().min(1),
    /** How long a Lease stays valid after its last renewal, in ms (default 15 000; whole seconds on the wire). */
    leaseDurationMs: z.number().int().min(1000).default(15_000),
    /** How long the leader keeps trying to renew before it stops leading, in ms (default 10 000). */
    renewDeadlineMs: z.number().int().positive().default(10_000),
    /** Pause between attempts, in ms (default 2 000). */
    retryPeriodMs: z.number().int().positive().default(2_000),
    /** Release the Lease when cancelled (default true). */
    releaseOnCancel: z.boolean().default(true),
  })
  .refine((o) => o.renewDeadlineMs < o.leaseDurationMs, {
    message: "renewDeadlineMs must be less than leaseDurationMs",
    path: ["renewDeadlineMs"],
  })
  .refine((o) => o.retryPeriodMs < o.renewDeadlineMs, {
    message: "retryPeriodMs must be less than renewDeadlineMs",
    path: ["retryPeriodMs"],
  });

/** Input of {@link LeaderElector}'s options. */
export type LeaderElectionOptionsInput = z.input<typeof LeaderElectionOptions>;

/** Why a term ended. */
export type StoppedLeadingReason =
  /** The run was cancelled (shutdown): the Lease is released after `onStoppedLeading`. */
  | "cancelled"
  /** No renewal succeeded within the renew deadline (or another holder took the Lease). */
  | "lost";

/** Callbacks of {@link LeaderElector.run}. */
export interface LeadershipCallbacks {
  /**
   * This replica became the leader. `signal` aborts when it stops leading. Not awaited: start the
   * work and return (a rejection is logged).
   */
  onStartedLeading(signal: AbortSignal): void | Promise<void>;
  /**
   * This replica stopped leading. Awaited before the Lease is released, so the caller can drain
   * in-flight work while still holding it.
   */
  onStoppedLeading?(reason: StoppedLeadingReason): void | Promise<void>;
  /** The observed holder changed (`undefined`: nobody holds the Lease). */
  onNewLeader?(identity: string | undefined): void;
}

/** Extra dependencies of {@link LeaderElector}. */
export interface LeaderElectorDeps {
  /** Logger (default: silent). */
  readonly logger?: Logger;
  /** Sets `nebula_leader_election_is_leader`. */
  readonly metrics?: ControllerMetrics;
  /** Clock in ms (default `Date.now`). */
  readonly now?: () => number;
}

/** Per-request deadline: aborts the HTTP request after `ms`. */
function deadline(ms: number) {
  return withSignal(AbortSignal.timeout(ms));
}

/**
 * One replica's side of a Lease election.
 *
 * @example
 * ```ts
 * const elector = new LeaderElector(kubeConfig, {
 *   namespace: "nebula-system", name: "nebula-operator", identity: hostname(),
 * });
 * const reason = await elector.run(signal, {
 *   onStartedLeading: (leading) => void controller.run({ signal: leading }),
 *   onStoppedLeading: async () => { await drained; },
 * });
 * // reason: "cancelled" (signal aborted, Lease released) or "lost"
 * ```
 */
export class LeaderElector {
  /** The validated options. */
  readonly options: z.output<typeof LeaderElectionOptions>;
  readonly #api: CoordinationV1Api;
  readonly #log: Logger;
  readonly #metrics: ControllerMetrics | undefined;
  readonly #now: () => number;
  #leading = false;
  #holder: string | undefined;
  #observed: { record: string; at: number } | undefined;
  #running = false;
  #onNewLeader: ((identity: string | undefined) => void) | undefined;

  /** Throws {@link KubeError} `InvalidOptions` when the options do not validate. */
  constructor(
    kubeConfig: KubeConfig,
    options: LeaderElectionOptionsInput,
    deps: LeaderElectorDeps = {},
  ) {
    const parsed = LeaderElectionOptions.safeParse(options);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new KubeError(
        "InvalidOptions",
        `leader election: ${issue?.path.join(".")}: ${issue?.message}`,
        { cause: parsed.error },
      );
    }
    this.options = parsed.data;
    this.#api = kubeConfig.makeApiClient(CoordinationV1Api);
    this.#log = (deps.logger ?? silentLogger()).child({
      lease: `${parsed.data.namespace}/${parsed.data.name}`,
      identity: parsed.data.identity,
    });
    this.#metrics = deps.metrics;
    this.#now = deps.now ?? Date.now;
  }

  /** Whether this replica currently leads. */
  isLeader(): boolean {
    return this.#leading;
  }

  /** The last observed holder (`undefined`: unknown or nobody). */
  leader(): string | undefined {
    return this.#holder;
  }

  /**
   * Campaigns until this replica leads, leads until the term ends, then returns why. Returns
   * `cancelled` at once when `signal` aborts before leading. Run it again to campaign again.
   */
  async run(signal: AbortSignal, callbacks: LeadershipCallbacks): Promise<StoppedLeadingReason> {
    if (this.#running)
      throw new KubeError("AlreadyRunning", "this LeaderElector is already running");
    this.#running = true;
    this.#onNewLeader = callbacks.onNewLeader;
    try {
      // Campaign. Times are taken before each request: the server's renewTime is no earlier.
      let acquiredAt = this.#now();
      while (!(await this.#tryAcquireOrRenew())) {
        if (signal.aborted) return "cancelled";
        await abortableSleep(this.#jittered(this.options.retryPeriodMs), signal);
        if (signal.aborted) return "cancelled";
        acquiredAt = this.#now();
      }
      this.#setLeading(true);
      this.#log.info("started leading");
      const term = new AbortController();
      // Not awaited: the callback starts the work; renewals must go on meanwhile.
      void (async () => {
        try {
          await callbacks.onStartedLeading(term.signal);
        } catch (error) {
          this.#log.error({ err: error }, "onStartedLeading failed");
        }
      })();
      // Renew. Every attempt must end by the renew deadline, so a hanging request cannot keep
      // this replica leading after the Lease may have passed to another.
      let lastRenew = acquiredAt;
      let reason: StoppedLeadingReason = "cancelled";
      while (!signal.aborted) {
        await abortableSleep(this.options.retryPeriodMs, signal);
        if (signal.aborted) break;
        const attemptAt = this.#now();
        const remaining = lastRenew + this.options.renewDeadlineMs - attemptAt;
        if (remaining > 0 && (await this.#tryAcquireOrRenew(remaining))) {
          lastRenew = attemptAt;
          continue;
        }
        if (this.#holder !== undefined && this.#holder !== this.options.identity) {
          reason = "lost";
          break;
        }
        if (this.#now() - lastRenew >= this.options.renewDeadlineMs) {
          reason = "lost";
          break;
        }
      }
      this.#setLeading(false);
      term.abort(new Error(`stopped leading: ${reason}`));
      this.#log.info({ reason }, "stopped leading");
      try {
        await callbacks.onStoppedLeading?.(reason);
      } catch (error) {
        this.#log.error({ err: error }, "onStoppedLeading failed");
      }
      if (reason === "cancelled" && this.options.releaseOnCancel) await this.#release();
      return reason;
    } finally {
      this.#running = false;
      this.#onNewLeader = undefined;
      this.#setLeading(false);
    }
  }

  #jittered(ms: number): number {
    return Math.round(ms * (1 + Math.random() * 0.2));
  }

  #setLeading(leading: boolean): void {
    this.#leading = leading;
    this.#metrics?.isLeader.set(
      { lease: `${this.options.namespace}/${this.options.name}` },
      leading ? 1 : 0,
    );
  }

  #observe(lease: V1Lease): void {
    const spec = lease.spec ?? {};
    const record = JSON.stringify([
      spec.holderIdentity ?? "",
      String(spec.renewTime ?? ""),
      spec.leaseDurationSeconds,
    ]);
    if (this.#observed?.record !== record) this.#observed = { record, at: this.#now() };
    const holder = spec.holderIdentity || undefined;
    if (holder !== this.#holder) {
      this.#holder = holder;
      this.#log.info({ holder }, "new leader observed");
      try {
        this.#onNewLeader?.(holder);
      } catch (error) {
        this.#log.error({ err: error }, "onNewLeader threw");
      }
    }
  }

  /** One client-go `tryAcquireOrRenew` round; false on any failure (logged). */
  async #tryAcquireOrRenew(timeoutMs: number = this.options.renewDeadlineMs): Promise<boolean> {
    const { namespace, name, identity } = this.options;
    const leaseDurationSeconds = Math.ceil(this.options.leaseDurationMs / 1000);
    const now = new V1MicroTime(this.#now());
    const requestDeadline = deadline(Math.max(1, Math.round(timeoutMs)));
    let current: V1Lease;
    try {
      current = await this.#api.readNamespacedLease({ namespace, name }, requestDeadline);
    } catch (error) {
      if (statusOf(error) !== 404) {
        this.#log.warn({ err: error }, "cannot read the Lease");
        return false;
      }
      try {
        const created = await this.#api.createNamespacedLease(
          {
            namespace,
            body: {
              metadata: { name, namespace },
              spec: {
                holderIdentity: identity,
                leaseDurationSeconds,
                acquireTime: now,
                renewTime: now,
                leaseTransitions: 0,
              },
            },
          },
          requestDeadline,
        );
        this.#observe(created);
        return true;
      } catch (createError) {
        this.#log.debug({ err: createError }, "lost the race to create the Lease");
        return false;
      }
    }
    this.#observe(current);
    const spec = current.spec ?? {};
    const holder = spec.holderIdentity || undefined;
    const durationMs = (spec.leaseDurationSeconds ?? leaseDurationSeconds) * 1000;
    const observedAt = this.#observed?.at ?? this.#now();
    if (holder !== undefined && holder !== identity && observedAt + durationMs > this.#now()) {
      return false; // held by someone else and not expired
    }
    const ours = holder === identity;
    const resourceVersion = current.metadata?.resourceVersion;
    try {
      const updated = await this.#api.replaceNamespacedLease(
        {
          namespace,
          name,
          body: {
            ...current,
            metadata: {
              ...current.metadata,
              ...(resourceVersion === undefined ? {} : { resourceVersion }),
            },
            spec: {
              ...spec,
              holderIdentity: identity,
              leaseDurationSeconds,
              acquireTime: ours && spec.acquireTime ? toMicroTime(spec.acquireTime) : now,
              renewTime: now,
              leaseTransitions: ours
                ? (spec.leaseTransitions ?? 0)
                : (spec.leaseTransitions ?? 0) + 1,
            },
          },
        },
        requestDeadline,
      );
      this.#observe(updated);
      return true;
    } catch (error) {
      if (statusOf(error) === 409) this.#log.debug("Lease changed under us (409)");
      else this.#log.warn({ err: error }, "cannot update the Lease");
      return false;
    }
  }

  /** Clears the holder (if still ours) so a standby takes over at its next retry. */
  async #release(): Promise<void> {
    const { namespace, name, identity } = this.options;
    const requestDeadline = deadline(this.options.renewDeadlineMs);
    try {
      const current = await this.#api.readNamespacedLease({ namespace, name }, requestDeadline);
      if (current.spec?.holderIdentity !== identity) return;
      const now = new V1MicroTime(this.#now());
      await this.#api.replaceNamespacedLease(
        {
          namespace,
          name,
          body: {
            ...current,
            spec: {
              ...current.spec,
              holderIdentity: "",
              leaseDurationSeconds: 1,
              renewTime: now,
              ...(current.spec.acquireTime
                ? { acquireTime: toMicroTime(current.spec.acquireTime) }
                : {}),
            },
          },
        },
        requestDeadline,
      );
      this.#holder = undefined;
      this.#log.info("released the Lease");
    } catch (error) {
      this.#log.warn({ err: error }, "cannot release the Lease; it expires after its duration");
    }
  }
}

/**
 * A MicroTime from what the API returned: read-back values are strings despite the model's type,
 * and a plain `Date` would be written with 3 fractional digits (rejected).
 */
export function toMicroTime(value: Date | string | number): V1MicroTime {
  return new V1MicroTime(typeof value === "string" ? Date.parse(value) : value.valueOf());
}
