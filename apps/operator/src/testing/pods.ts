/**
 * Pods in the states of the roll-up's truth table, with the statuses `@nebula/state-mapping`
 * writes for them (built by its own `toInstanceState` + `toPodStatus` from an EC2 instance and
 * an exit report), so that tests read what the virtual node would store. Test-only.
 */
import { Buffer } from "node:buffer";
import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import {
  type ContainerReport,
  type ExitReport,
  encodeReportTags,
  toInstanceState,
  toPodStatus,
} from "@nebula/state-mapping";

/** The fixed observation time of the fixtures. */
export const FIXTURE_NOW = new Date("2026-11-30T06:00:00Z");

/** The states of the truth table a Pod can be put in. */
export type PodScenario =
  | "ready"
  | "crashing"
  | "restarted"
  | "oom"
  | "image"
  | "provisioning"
  | "quota";

const b64 = (text: string) => Buffer.from(text, "utf8").toString("base64");

const CONTAINERS: Record<Exclude<PodScenario, "provisioning" | "quota">, ContainerReport> = {
  ready: {
    name: "app",
    init: false,
    state: "running",
    restarts: 0,
    startedAt: "2026-11-30T05:55:00Z",
    containerID: "abc123",
    imageID: "sha256:feed",
  },
  crashing: {
    name: "app",
    init: false,
    state: "waiting",
    reason: "CrashLoopBackOff",
    restarts: 3,
    messageB64: b64("back-off 40s restarting failed container=app"),
    last: {
      exitCode: 1,
      reason: "Error",
      startedAt: "2026-11-30T05:57:00Z",
      finishedAt: "2026-11-30T05:57:02Z",
    },
  },
  // Between two restarts of the crash loop: running (ready, for the kubelet) since 2 s.
  restarted: {
    name: "app",
    init: false,
    state: "running",
    restarts: 3,
    startedAt: "2026-11-30T05:59:58Z",
    last: {
      exitCode: 1,
      reason: "Error",
      startedAt: "2026-11-30T05:57:00Z",
      finishedAt: "2026-11-30T05:57:02Z",
    },
  },
  oom: {
    name: "app",
    init: false,
    state: "waiting",
    reason: "CrashLoopBackOff",
    restarts: 2,
    last: {
      exitCode: 137,
      reason: "OOMKilled",
      startedAt: "2026-11-30T05:57:00Z",
      finishedAt: "2026-11-30T05:57:30Z",
    },
  },
  image: {
    name: "app",
    init: false,
    state: "waiting",
    reason: "ImagePullBackOff",
    restarts: 0,
    messageB64: b64('Back-off pulling image "registry.example/app:missing"'),
  },
};

/** A Pod on the virtual node with one container, labelled `labels`, without a status. */
export function podTemplate(
  name: string,
  namespace: string,
  labels: Record<string, string>,
): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace, labels },
    spec: {
      nodeName: "nebula-vnode",
      restartPolicy: "Always",
      containers: [
        {
          name: "app",
          image: "registry.example/app:1",
          resources: { limits: { memory: "256Mi" } },
        },
      ],
    },
  };
}

/**
 * The status the virtual node writes for `pod` in `scenario`. `quota` is the status the provider
 * writes while a launch is retried because of quota (phase Pending, `status.reason`).
 */
export function podStatus(pod: V1Pod, scenario: PodScenario): V1PodStatus {
  if (scenario === "quota") {
    return {
      phase: "Pending",
      reason: "QuotaExceeded",
      message: "The instance could not be launched: the account's vCPU quota is exhausted.",
      conditions: [{ type: "PodScheduled", status: "True", lastTransitionTime: FIXTURE_NOW }],
    };
  }
  const uid = pod.metadata?.uid ?? "uid-1";
  const tags: Record<string, string> = { "nebula:cluster": "c1", "nebula:pod-uid": uid };
  if (scenario !== "provisioning") {
    const report: ExitReport = {
      v: 1,
      seq: 5,
      time: "2026-11-30T05:59:00Z",
      final: false,
      containers: [CONTAINERS[scenario]],
    };
    Object.assign(tags, encodeReportTags(report));
  }
  const instance = {
    InstanceId: `i-${uid.replaceAll("-", "").slice(0, 12)}`,
    InstanceType: "m7i.large",
    State: { Name: scenario === "provisioning" ? "pending" : "running", Code: 16 },
    StateTransitionReason: "",
    LaunchTime: new Date("2026-11-30T05:50:00Z"),
    PrivateIpAddress: "10.0.1.23",
    Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
  };
  const state = toInstanceState(instance, { now: FIXTURE_NOW });
  return toPodStatus(pod, state, { now: FIXTURE_NOW });
}

/**
 * The status the virtual node writes at `now` for one container in the state `container`
 * reports (its times are the caller's: tests over time build the crash loop step by step).
 */
export function podStatusAt(pod: V1Pod, container: ContainerReport, now: Date): V1PodStatus {
  const uid = pod.metadata?.uid ?? "uid-1";
  const report: ExitReport = {
    v: 1,
    seq: Math.floor(now.getTime() / 1000),
    time: now.toISOString(),
    final: false,
    containers: [container],
  };
  const tags: Record<string, string> = {
    "nebula:cluster": "c1",
    "nebula:pod-uid": uid,
    ...encodeReportTags(report),
  };
  const instance = {
    InstanceId: `i-${uid.replaceAll("-", "").slice(0, 12)}`,
    InstanceType: "m7i.large",
    State: { Name: "running", Code: 16 },
    StateTransitionReason: "",
    LaunchTime: new Date(now.getTime() - 3_600_000),
    PrivateIpAddress: "10.0.1.23",
    Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
  };
  return toPodStatus(pod, toInstanceState(instance, { now }), { now });
}

/** A Pod in `scenario`, status included (for pure tests). */
export function podIn(
  scenario: PodScenario,
  name: string,
  namespace = "team-a",
  labels: Record<string, string> = { app: "web" },
): V1Pod {
  const pod = podTemplate(name, namespace, labels);
  return { ...pod, status: podStatus(pod, scenario) };
}
