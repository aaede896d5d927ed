/**
 * `Workload`: what a customer runs, in one or more placements.
 *
 * @packageDocumentation
 */
import { ConditionStatus, ReasonCount } from "@nebula/rollup";
import { z } from "zod";
import { API_VERSION, Conditions, DNS_LABEL_PATTERN, ObjectMeta } from "./meta.js";

/** One placement of a Workload: where, and how many replicas. */
const Placement = z.strictObject({
  /** The placement's name, unique within the Workload (an RFC 1123 label). */
  name: z.string().min(1).max(63).regex(new RegExp(DNS_LABEL_PATTERN)),
  /** Desired replicas in this placement. */
  replicas: z.number().int().min(0).max(1_000_000),
});

/** The desired state of a Workload. */
export const WorkloadSpec = z.strictObject({
  /**
   * Its placements. An empty list is accepted; the Workload then reports `NoPlacements` in its
   * `ReferencesResolved` condition.
   */
  placements: z
    .array(Placement)
    .max(64)
    .refine((ps) => new Set(ps.map((p) => p.name)).size === ps.length, {
      message: "placement names must be unique",
    })
    .meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"] }),
});

/** The desired state of a Workload. */
export type WorkloadSpec = z.infer<typeof WorkloadSpec>;

/** The status of one placement inside a Workload's status. */
const PlacementStatus = z.object({
  /** The placement's name. */
  name: z.string(),
  /** Desired replicas. */
  desiredReplicas: z.number().int().min(0),
  /** Instances that exist. */
  replicas: z.number().int().min(0),
  /** Instances that are ready. */
  readyReplicas: z.number().int().min(0),
  /** The placement's `Available` status. */
  available: ConditionStatus,
  /** The placement's `Available` reason. */
  reason: z.string(),
  /** The placement's `Available` message. */
  message: z.string(),
});

/** The observed state of a Workload, written by the operator. */
export const WorkloadStatus = z.object({
  /** The `metadata.generation` this status was computed from. */
  observedGeneration: z.number().int().min(0).optional(),
  /** Desired replicas over all placements. */
  desiredReplicas: z.number().int().min(0).optional(),
  /** Existing instances over all placements. */
  replicas: z.number().int().min(0).optional(),
  /** Ready instances over all placements. */
  readyReplicas: z.number().int().min(0).optional(),
  /** Per placement, sorted by name. */
  placements: z.array(PlacementStatus).optional(),
  /** Not-ready instances by reason over all placements, highest rank first. */
  reasons: z.array(ReasonCount).optional(),
  /** `Available`, `ReplicasReady`, `Degraded`, `Progressing`, `ReferencesResolved`, `Reconciling`, `Stalled`. */
  conditions: Conditions.optional(),
});

/** The observed state of a Workload. */
export type WorkloadStatus = z.infer<typeof WorkloadStatus>;

/** A `Workload` object. */
export const Workload = z.looseObject({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal("Workload"),
  metadata: ObjectMeta,
  spec: WorkloadSpec,
  status: WorkloadStatus.optional(),
});

/** A `Workload` object. */
export type Workload = z.infer<typeof Workload>;
