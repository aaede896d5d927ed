/**
 * The three kinds as data: names, scope, printer columns and schemas, so that a CRD generator,
 * an API reference page and a client read one description.
 *
 * @packageDocumentation
 */
import type { z } from "zod";
import { Instance, InstanceSpec, InstanceStatus } from "./instance.js";
import { GROUP, VERSION } from "./meta.js";
import { Workload, WorkloadSpec, WorkloadStatus } from "./workload.js";
import {
  WorkloadDeployment,
  WorkloadDeploymentSpec,
  WorkloadDeploymentStatus,
} from "./workload-deployment.js";

/** A column of `kubectl get` (`additionalPrinterColumns` of a CRD version). */
interface PrinterColumn {
  /** The column header. */
  readonly name: string;
  /** The OpenAPI type of the value. */
  readonly type: "string" | "integer" | "number" | "boolean" | "date";
  /** A JSONPath (kubectl's dialect) into the object. */
  readonly jsonPath: string;
  /** What the column shows. */
  readonly description: string;
  /** 0: always shown; 1: only with `-o wide`. */
  readonly priority?: number;
}

/** Everything a CRD needs to know about one kind. */
export interface KindDescription {
  /** `compute.nebula.dev`. */
  readonly group: string;
  /** `v1alpha1`. */
  readonly version: string;
  /** The kind, e.g. `Workload`. */
  readonly kind: string;
  /** The resource name, e.g. `workloads`. */
  readonly plural: string;
  /** The singular name, e.g. `workload`. */
  readonly singular: string;
  /** Short names for kubectl. */
  readonly shortNames: readonly string[];
  /** Categories for `kubectl get <category>`. */
  readonly categories: readonly string[];
  /** Whether objects live in a namespace. */
  readonly scope: "Namespaced";
  /** One sentence for `kubectl explain` and the API reference. */
  readonly description: string;
  /** The zod schema of `spec`. */
  readonly spec: z.ZodType;
  /** The zod schema of `status`. */
  readonly status: z.ZodType;
  /** The zod schema of the whole object. */
  readonly object: z.ZodType;
  /** Columns for `kubectl get`. */
  readonly printerColumns: readonly PrinterColumn[];
}

const condition = (type: string, field: "status" | "reason" | "message") =>
  `.status.conditions[?(@.type=="${type}")].${field}`;

const AGE: PrinterColumn = {
  name: "Age",
  type: "date",
  jsonPath: ".metadata.creationTimestamp",
  description: "Time since the object was created.",
};

/** The columns `kubectl get workloads` and `kubectl get workloaddeployments` show. */
const REPLICA_SET_COLUMNS: readonly PrinterColumn[] = [
  {
    name: "Ready",
    type: "integer",
    jsonPath: ".status.readyReplicas",
    description: "Ready instances.",
  },
  {
    name: "Desired",
    type: "integer",
    jsonPath: ".status.desiredReplicas",
    description: "Desired replicas.",
  },
  {
    name: "Available",
    type: "string",
    jsonPath: condition("Available", "status"),
    description: "Whether any instance is ready.",
  },
  {
    name: "Reason",
    type: "string",
    jsonPath: condition("Available", "reason"),
    description: "Why, when not available: the highest-ranked instance failure reason.",
  },
  AGE,
  {
    name: "Message",
    type: "string",
    jsonPath: condition("Available", "message"),
    description: "The Available condition's message.",
    priority: 1,
  },
];

/** The columns `kubectl get instances` shows. */
const INSTANCE_COLUMNS: readonly PrinterColumn[] = [
  {
    name: "State",
    type: "string",
    jsonPath: ".status.state",
    description: "The instance's lifecycle state.",
  },
  {
    name: "Ready",
    type: "string",
    jsonPath: condition("Ready", "status"),
    description: "Whether the instance is ready.",
  },
  {
    name: "Reason",
    type: "string",
    jsonPath: condition("Ready", "reason"),
    description: "The instance failure reason, when not ready.",
  },
  AGE,
  {
    name: "Message",
    type: "string",
    jsonPath: condition("Ready", "message"),
    description: "The Ready condition's message.",
    priority: 1,
  },
];

/** `Workload` as data. */
export const WORKLOAD_KIND: KindDescription = {
  group: GROUP,
  version: VERSION,
  kind: "Workload",
  plural: "workloads",
  singular: "workload",
  shortNames: ["wl"],
  categories: ["nebula"],
  scope: "Namespaced",
  description:
    "What a customer runs, in one or more placements; its status rolls up the failure reasons of every instance.",
  spec: WorkloadSpec,
  status: WorkloadStatus,
  object: Workload,
  printerColumns: REPLICA_SET_COLUMNS,
};

/** `WorkloadDeployment` as data. */
export const WORKLOAD_DEPLOYMENT_KIND: KindDescription = {
  group: GROUP,
  version: VERSION,
  kind: "WorkloadDeployment",
  plural: "workloaddeployments",
  singular: "workloaddeployment",
  shortNames: ["wld"],
  categories: ["nebula"],
  scope: "Namespaced",
  description:
    "One placement of a Workload; its status counts its instances (Pods or Instance objects matched by its selector) by failure reason.",
  spec: WorkloadDeploymentSpec,
  status: WorkloadDeploymentStatus,
  object: WorkloadDeployment,
  printerColumns: REPLICA_SET_COLUMNS,
};

/** `Instance` as data. */
export const INSTANCE_KIND: KindDescription = {
  group: GROUP,
  version: VERSION,
  kind: "Instance",
  plural: "instances",
  singular: "instance",
  shortNames: ["nins"],
  categories: ["nebula"],
  scope: "Namespaced",
  description:
    "One instance, for platforms with instance objects of their own; its Ready condition carries an instance failure reason.",
  spec: InstanceSpec,
  status: InstanceStatus,
  object: Instance,
  printerColumns: INSTANCE_COLUMNS,
};

/** The three kinds, in the order a reader meets them. */
export const KINDS: readonly KindDescription[] = [
  WORKLOAD_KIND,
  WORKLOAD_DEPLOYMENT_KIND,
  INSTANCE_KIND,
];
