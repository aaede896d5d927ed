/**
 * `Instance`: one instance, for platforms that have instance objects of their own instead of
 * Pods. Its provider writes `status.state` and the `Ready` condition with one of the instance
 * failure reasons; the operator adds `Reconciling` and `Stalled`.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { API_VERSION, Conditions, ObjectMeta } from "./meta.js";

/** The lifecycle states an Instance's provider reports. */
export const INSTANCE_STATES = [
  "Pending",
  "Running",
  "Stopping",
  "Stopped",
  "Failed",
  "Unknown",
] as const;

/** The desired state of an Instance. */
export const InstanceSpec = z.strictObject({
  /** The provider's id of the machine (for example an EC2 instance id). */
  providerID: z.string().max(1024).optional(),
});

/** The desired state of an Instance. */
export type InstanceSpec = z.infer<typeof InstanceSpec>;

/** The observed state of an Instance, written by its provider (conditions also by the operator). */
export const InstanceStatus = z.object({
  /** The `metadata.generation` the provider last acted on. */
  observedGeneration: z.number().int().min(0).optional(),
  /** The instance's lifecycle state. */
  state: z.enum(INSTANCE_STATES).optional(),
  /** `Ready` (its reason is an instance failure reason such as `InstanceCrashing`), `Reconciling`, `Stalled`. */
  conditions: Conditions.optional(),
});

/** The observed state of an Instance. */
export type InstanceStatus = z.infer<typeof InstanceStatus>;

/** An `Instance` object. */
export const Instance = z.looseObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal("Instance"),
  metadata: ObjectMeta,
  spec: InstanceSpec.optional(),
  status: InstanceStatus.optional(),
});

/** An `Instance` object. */
export type Instance = z.infer<typeof Instance>;
