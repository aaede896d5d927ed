/**
 * The interfaces the virtual node drives. This package owns them; a provider (for example
 * `@nebula/provider` on EC2) satisfies them structurally, and the app checks that with `satisfies`.
 * Nothing here imports a provider.
 *
 * @packageDocumentation
 */
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import type { AuxiliaryObject } from "@nebula/teardown";

/** Something worth a Kubernetes Event on the Pod (`Launched`, `InsufficientCapacity`, a refusal...). */
export interface PodEventNote {
  /** `Normal` or `Warning`. */
  readonly type: "Normal" | "Warning";
  /** CamelCase reason. */
  readonly reason: string;
  /** A sentence naming the instance, type and subnet, or the field that was refused. */
  readonly message: string;
}

/** What a Pod runs on: shown on the Pod in annotations. */
export interface PodInstanceInfo {
  /** The instance ID. */
  readonly instanceId: string;
  /** The instance type, e.g. `m7i.large`. */
  readonly instanceType?: string | undefined;
  /** The Availability Zone. */
  readonly availabilityZone?: string | undefined;
  /** The subnet. */
  readonly subnetId?: string | undefined;
  /** `spot` or `on-demand`. */
  readonly capacityType?: string | undefined;
  /** A Spot instance's price when it was launched, USD per hour as EC2 wrote it (`"0.031200"`). */
  readonly spotPriceUsdPerHour?: string | undefined;
  /**
   * The instance's price when it was launched, either capacity type, USD per hour as AWS wrote it:
   * the Spot price (`"0.031200"`), or the On-Demand price of the AWS Price List
   * (`"0.0960000000"`).
   */
  readonly priceUsdPerHour?: string | undefined;
}

/** A Pod's status as the provider now observes it. */
export interface PodStatusChange {
  /** The Pod (a copy), as the provider last received it. */
  readonly pod: V1Pod;
  /** The status the provider observes (its own view, before it is merged with the stored status). */
  readonly status: V1PodStatus;
  /** True when `status` is terminal (`Succeeded` or `Failed`). */
  readonly terminal: boolean;
  /** Events to record on the Pod, each delivered once. */
  readonly events?: readonly PodEventNote[];
  /** The instance, once known. */
  readonly instance?: PodInstanceInfo | undefined;
}

/**
 * Receives a status change. The returned promise resolves once the status is written to the API
 * server; a rejection means "not written" and the provider delivers the change again later. A
 * provider reclaims nothing on the strength of a terminal status whose write did not resolve.
 */
export type PodStatusListener = (change: PodStatusChange) => Promise<void>;

/**
 * What the Pod controller drives: the Pod's workload on the provider. Every method is idempotent
 * and may be called again with the same or a newer Pod.
 */
export interface PodLifecycle {
  /**
   * Starts the Pod's workload (for EC2: `RunInstances` with the Pod UID as the idempotency token),
   * and records what it launched durably before resolving. A Pod the provider refuses for good
   * (an unsupported field, a spec it cannot run) resolves after delivering a terminal `Failed`
   * status through {@link PodLifecycle.notifyPods}; a transient failure rejects and the controller
   * calls again after a back-off.
   */
  createPod(pod: V1Pod): Promise<void>;
  /** Records a newer version of the Pod; changes nothing in the cloud. */
  updatePod(pod: V1Pod): Promise<void>;
  /** The provider's latest observation of the Pod, by UID, or `undefined` when it has none. */
  getPodStatus(uid: string): V1PodStatus | undefined;
  /** The Pods the provider knows (copies). */
  listPods(): readonly V1Pod[];
  /** Subscribes to status changes; returns the unsubscribe function. */
  notifyPods(listener: PodStatusListener): () => void;
  /** Drops everything the provider keeps for a Pod, after its teardown completed. */
  forgetPod(uid: string): void | Promise<void>;
}

/** An instance a Pod runs on, found by the reclaimer. */
export interface FoundInstance {
  /** The instance ID, e.g. `i-0123456789abcdef0`. */
  readonly instanceId: string;
  /**
   * Its state as last read from EC2: `pending`, `running`, `stopping`, `stopped`,
   * `shutting-down` or `terminated` (anything else is treated as unknown).
   */
  readonly state: string;
}

/**
 * What the teardown's effects call. Every method is idempotent; an instance EC2 does not know
 * (`InvalidInstanceID.NotFound` after the consistency window) counts as done.
 */
export interface InstanceReclaimer {
  /**
   * The Pod's instance: by the durably recorded instance ID first, else by the launch's client
   * token or the `nebula:pod-uid` tag. Resolves `undefined` only when the Pod provably has no
   * instance (none launched, or terminated and gone); rejects when that cannot be told yet (a
   * launch whose outcome is unknown, an instance not yet listed by an eventually consistent
   * `DescribeInstances`, an API failure). "Not listed once" is never an answer.
   */
  findInstance(podUid: string): Promise<FoundInstance | undefined>;
  /**
   * Stops the instance: the host supervisor stops the containers within the grace period, which
   * `options.graceSeconds` (the teardown's: the deletion's, else the Pod's) tells the host before
   * the stop reaches it (it never exceeds the Pod's own).
   */
  stopInstance(
    instanceId: string,
    options?: {
      readonly graceSeconds?: number | undefined;
      /**
       * The Pod whose teardown asks: the provider acts only on an instance that proves it is that
       * Pod's (for EC2: its `nebula:pod-uid` tag), and refuses otherwise.
       */
      readonly podUid?: string | undefined;
    },
  ): Promise<void>;
  /**
   * Terminates the instance. `options.podUid`: the Pod whose teardown asks: the provider acts only
   * on an instance that proves it is that Pod's, and refuses otherwise.
   */
  terminateInstance(
    instanceId: string,
    options?: { readonly podUid?: string | undefined },
  ): Promise<void>;
  /**
   * What else the Pod holds in the cloud, released in the teardown's `releasing` phase once the
   * instance is gone (docs/contracts.md, "Pod teardown", step 4): for example the Parameter Store parameters that carry the
   * Pod's spec. Called when the teardown starts; absent or empty: nothing to release.
   */
  auxiliariesOf?(podUid: string): readonly AuxiliaryObject[];
  /** Releases one object {@link auxiliariesOf} named. Idempotent: a resumed teardown repeats it. */
  releaseAuxiliary?(object: AuxiliaryObject): Promise<void>;
}

/** The provider's view of its cloud, for the Node's conditions. */
export interface NodeHealth {
  /** False while the cloud API is unreachable or failing. */
  readonly ready: boolean;
  /** A CamelCase reason, e.g. `EC2Reachable`, `EC2Throttled`, `EC2Unavailable`. */
  readonly reason: string;
  /** A sentence for the Node condition. */
  readonly message: string;
}

/** Where the Node controller reads the provider's health. */
export interface NodeHealthSource {
  /** The current health. */
  health(): NodeHealth;
  /** Subscribes to health changes; returns the unsubscribe function. */
  onNodeHealth(listener: (health: NodeHealth) => void): () => void;
}

/** A loop the virtual node runs while it leads (the provider's poll, its leak collector). */
export interface Runnable {
  /** Runs until `signal` aborts, then resolves once stopped. */
  run(signal: AbortSignal): Promise<void>;
}

/** The leak collector terminated an instance no live Pod owns (an Event on the Node). */
export interface LeakCollected {
  /** The instance. */
  readonly instanceId: string;
  /** The Pod UID it carried, if any. */
  readonly podUid?: string | undefined;
  /** A sentence for the Event. */
  readonly message: string;
}

/** A provider that reports collected leaks (optional). */
export interface LeakEventSource {
  /** Subscribes; returns the unsubscribe function. */
  onLeakCollected(listener: (leak: LeakCollected) => void): () => void;
}
