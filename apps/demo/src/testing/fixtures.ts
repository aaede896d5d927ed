/** Builders of snapshots for the unit tests. Test-only. */
import type { InstanceView, PodView, Snapshot, WorkloadView } from "../model.js";

/** A Pod view with defaults. */
export function pod(name: string, fields: Partial<PodView> = {}): PodView {
  return {
    name,
    uid: `uid-${name}`,
    labels: {},
    phase: "Pending",
    reason: undefined,
    restarts: 0,
    exit: undefined,
    lastExit: undefined,
    deleting: false,
    deletionTimestamp: undefined,
    deletionGracePeriodSeconds: undefined,
    containers: [],
    createdAt: undefined,
    readySince: undefined,
    ...fields,
  };
}

/** An instance view for a Pod. */
export function instance(
  podName: string,
  state: string,
  tags: Readonly<Record<string, string>> = {},
): InstanceView {
  return { id: `i-${podName}`, state, podUid: `uid-${podName}`, stateReason: undefined, tags };
}

/** A Workload or WorkloadDeployment view. */
export function workload(
  kind: WorkloadView["kind"],
  name: string,
  fields: Partial<WorkloadView> = {},
): WorkloadView {
  return {
    kind,
    name,
    available: "-",
    reason: "",
    message: "",
    readyReplicas: 0,
    desiredReplicas: 1,
    reasons: [],
    selector: undefined,
    workloadRef: undefined,
    ...fields,
  };
}

/** A snapshot at `atSeconds` after a fixed origin. */
export function snapshot(atSeconds: number, fields: Partial<Snapshot> = {}): Snapshot {
  return {
    elapsedMs: atSeconds * 1000,
    at: Date.parse("2026-11-30T16:00:00Z") + atSeconds * 1000,
    pods: [],
    instances: [],
    workloads: [],
    ec2Calls: {},
    vnodePolls: 0,
    startupEvents: [],
    ...fields,
  };
}

/** The RFC 3339 time `atSeconds` after the origin. */
export const iso = (atSeconds: number): string =>
  new Date(Date.parse("2026-11-30T16:00:00Z") + atSeconds * 1000).toISOString().replace(".000", "");
