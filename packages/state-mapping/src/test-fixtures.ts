/**
 * Builders shared by this package's tests (not exported from the package).
 */
import { Buffer } from "node:buffer";
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { type ContainerReport, type ExitReport, encodeReportTags } from "./report.js";

export const NOW = new Date("2026-11-30T06:00:00Z");
export const LAUNCH = "2026-11-30T05:50:00Z";

export const b64 = (text: string): string => Buffer.from(text, "utf8").toString("base64");

/** A Pod on the virtual node with the given containers (default: one "app"). */
export function pod(
  restartPolicy: "Always" | "OnFailure" | "Never" = "Always",
  containers: Partial<V1Container>[] = [{ name: "app" }],
  initContainers: Partial<V1Container>[] = [],
): V1Pod {
  const full = (c: Partial<V1Container>): V1Container => ({
    name: c.name ?? "app",
    image: c.image ?? `registry.example/${c.name ?? "app"}:1`,
    ...c,
  });
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "p", namespace: "default", uid: "uid-1" },
    spec: {
      nodeName: "nebula",
      restartPolicy,
      containers: containers.map(full),
      ...(initContainers.length > 0 ? { initContainers: initContainers.map(full) } : {}),
    },
    status: { phase: "Pending", qosClass: "BestEffort" },
  };
}

/** A report with the given containers. */
export function report(seq: number, final: boolean, containers: ContainerReport[]): ExitReport {
  return { v: 1, seq, time: "2026-11-30T05:59:00Z", final, containers };
}

export const running = (name = "app", restarts = 0): ContainerReport => ({
  name,
  init: false,
  state: "running",
  restarts,
  startedAt: "2026-11-30T05:55:00Z",
  containerID: "abc123",
  imageID: "sha256:feed",
});

export const exited = (exitCode: number, name = "app", extra: Partial<ContainerReport> = {}) =>
  ({
    name,
    init: false,
    state: "terminated",
    restarts: 0,
    exitCode,
    reason: exitCode === 0 ? "Completed" : "Error",
    startedAt: "2026-11-30T05:55:00Z",
    finishedAt: "2026-11-30T05:58:00Z",
    ...extra,
  }) satisfies ContainerReport;

export const crashLooping = (restarts = 3, name = "app"): ContainerReport => ({
  name,
  init: false,
  state: "waiting",
  reason: "CrashLoopBackOff",
  restarts,
  messageB64: b64(`back-off 40s restarting failed container=${name}`),
  last: {
    exitCode: 1,
    reason: "Error",
    startedAt: "2026-11-30T05:57:00Z",
    finishedAt: "2026-11-30T05:57:02Z",
  },
});

/** An EC2 instance as `DescribeInstances` returns it (SDK shape: `LaunchTime` a `Date`). */
export function ec2(
  state: string,
  options: {
    code?: string;
    message?: string;
    report?: ExitReport;
    tags?: Record<string, string>;
  } = {},
): Record<string, unknown> {
  const tags: Record<string, string> = {
    "nebula:cluster": "c1",
    "nebula:pod-uid": "uid-1",
    ...(options.report ? encodeReportTags(options.report) : {}),
    ...options.tags,
  };
  return {
    InstanceId: "i-0abc",
    InstanceType: "m7i.large",
    State: { Name: state, Code: 16 },
    ...(options.code
      ? {
          StateReason: {
            Code: options.code,
            Message: options.message ?? `${options.code}: detail`,
          },
        }
      : {}),
    StateTransitionReason: options.code ? "User initiated (2026-11-30 05:59:00 GMT)" : "",
    LaunchTime: new Date(LAUNCH),
    PrivateIpAddress: "10.0.1.23",
    PublicIpAddress: "3.3.3.3",
    Tags: Object.entries(tags).map(([Key, Value]) => ({ Key, Value })),
  };
}
