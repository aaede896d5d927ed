/**
 * `WorkloadDeployment`: one placement of a Workload and the instances that serve it.
 *
 * @packageDocumentation
 */
import { ReasonCount } from "@nebula/rollup";
import { z } from "zod";
import {
  API_VERSION,
  Conditions,
  DNS_LABEL_PATTERN,
  LabelSelector,
  LocalObjectReference,
  ObjectMeta,
} from "./meta.js";

/** The desired state of a WorkloadDeployment. */
export const WorkloadDeploymentSpec = z.strictObject({
  /** The Workload this deployment is a placement of (same namespace). */
  workloadRef: LocalObjectReference,
  /** The name of the Workload's placement this deployment serves. */
  placement: z.string().min(1).max(63).regex(new RegExp(DNS_LABEL_PATTERN)),
  /** Desired replicas. */
  replicas: z.number().int().min(0).max(1_000_000),
  /**
   * Selects its instances: Pods (on the Nebula virtual node, the common case) and `Instance`
   * objects in the same namespace.
   */
  selector: LabelSelector,
});

/** The desired state of a WorkloadDeployment. */
export type WorkloadDeploymentSpec = z.infer<typeof WorkloadDeploymentSpec>;

/** The observed state of a WorkloadDeployment, written by the operator. */
export const WorkloadDeploymentStatus = z.object({
  /** The `metadata.generation` this status was computed from. */
  observedGeneration: z.number().int().min(0).optional(),
  /** Desired replicas (copied from the spec so that the status reads on its own). */
  desiredReplicas: z.number().int().min(0).optional(),
  /** Instances that exist. */
  replicas: z.number().int().min(0).optional(),
  /** Instances that are ready. */
  readyReplicas: z.number().int().min(0).optional(),
  /** Not-ready instances and blocked replicas by reason, highest rank first. */
  reasons: z.array(ReasonCount).optional(),
  /** `Available`, `ReplicasReady`, `Degraded`, `Progressing`, `ReferencesResolved`, `Reconciling`, `Stalled`. */
  conditions: Conditions.optional(),
});

/** The observed state of a WorkloadDeployment. */
export type WorkloadDeploymentStatus = z.infer<typeof WorkloadDeploymentStatus>;

/** A `WorkloadDeployment` object. */
export const WorkloadDeployment = z.looseObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal("WorkloadDeployment"),
  metadata: ObjectMeta,
  spec: WorkloadDeploymentSpec,
  status: WorkloadDeploymentStatus.optional(),
});

/** A `WorkloadDeployment` object. */
export type WorkloadDeployment = z.infer<typeof WorkloadDeployment>;
