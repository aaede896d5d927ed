/**
 * Pod status from an {@link InstanceState} and the Pod: phase by the kubelet's own rules
 * (restartPolicy decides), the four standard conditions, container statuses, addresses and
 * start time. Output types are `@kubernetes/client-node`'s, imported as types only.
 *
 * @packageDocumentation
 */
import { Buffer } from "node:buffer";
import type {
  V1ContainerState,
  V1ContainerStateTerminated,
  V1ContainerStatus,
  V1Pod,
  V1PodCondition,
  V1PodStatus,
} from "@kubernetes/client-node";
import { z } from "zod";
import type { ContainerReport, TerminationReport } from "./report.js";
import type { InstanceState, LostCause } from "./state.js";

/** The exit code of a container whose fate is unknown (the kubelet's: 128 + SIGKILL). */
export const UNKNOWN_EXIT_CODE = 137;

/** The termination reason of a container whose instance vanished (the kubelet's word). */
export const CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown";

/** Options of {@link toPodStatus}. */
export interface ToPodStatusOptions {
  /**
   * The time of this mapping: the `lastTransitionTime` of conditions that change now, and the
   * `startTime` when neither the Pod nor the instance has one. The mapping never reads the clock.
   */
  readonly now: Date;
}

const date = z
  .union([z.date(), z.iso.datetime({ offset: true })])
  .optional()
  .catch(undefined)
  .transform((value) => {
    if (value === undefined) return undefined;
    const d = typeof value === "string" ? new Date(value) : value;
    return Number.isNaN(d.getTime()) ? undefined : d;
  });

const ContainerSpec = z.looseObject({
  name: z.string(),
  image: z.string().optional().catch(undefined),
  restartPolicy: z.string().optional().catch(undefined),
});

/** The parts of a Pod this mapping reads, validated at the boundary (bad parts read as absent). */
const PodView = z.looseObject({
  spec: z
    .looseObject({
      containers: z.array(ContainerSpec).catch([]),
      initContainers: z.array(ContainerSpec).optional().catch(undefined),
      restartPolicy: z.string().optional().catch(undefined),
    })
    .catch({ containers: [] }),
  status: z
    .looseObject({
      conditions: z
        .array(z.looseObject({ type: z.string(), status: z.string(), lastTransitionTime: date }))
        .optional()
        .catch(undefined),
      startTime: date,
      podIP: z.string().optional().catch(undefined),
      hostIP: z.string().optional().catch(undefined),
    })
    .optional()
    .catch(undefined),
});
type PodView = z.output<typeof PodView>;
type ContainerSpec = z.output<typeof ContainerSpec>;

/** Pod status fields this mapping owns; every other field of the Pod's current status is kept. */
const OWNED = new Set([
  "phase",
  "conditions",
  "containerStatuses",
  "initContainerStatuses",
  "hostIP",
  "hostIPs",
  "podIP",
  "podIPs",
  "startTime",
  "reason",
  "message",
]);

const OWNED_CONDITIONS = new Set([
  "PodScheduled",
  "PodReadyToStartContainers",
  "Initialized",
  "ContainersReady",
  "Ready",
]);

/**
 * Builds the Pod status for a Pod whose instance is in `state`. Pure and total: a malformed Pod
 * reads as one without the bad parts, and time is `options.now`.
 *
 * - The phase follows the kubelet's rules: `Succeeded` only when every container that must finish
 *   finished with 0, `Running` while `restartPolicy` restarts a failed container (a crash-looping
 *   Pod is `Running`), `Failed` otherwise once terminal.
 * - In a final report, a container that was waiting to restart shows its last exit as its final
 *   `terminated` state (no back-off is running any more); one that never started (an image never
 *   pulled) stays `waiting` with its reason, in a `Failed` Pod.
 * - A `Lost` instance gives `Failed`, and every container without a reported exit is `terminated`
 *   with reason `ContainerStatusUnknown`, exit 137 and a message saying the instance vanished
 *   without reporting. It is never `Succeeded` on a guess.
 * - `Unknown` (an unreadable report on a live instance) gives phase `Unknown`, with the last
 *   accepted report's containers shown not ready.
 * - A `Terminal` state stopped from outside (`stopped`: the final report has `stopRequested` and
 *   EC2 names a platform or user cause) gets the `status.reason` a `Lost` instance with that
 *   cause gets (`SpotInterruption`, `InstanceLost`, ...) and the stop's message; the containers
 *   keep their reported exits (143 / signal 15 from `docker stop`).
 * - Conditions `PodScheduled`, `PodReadyToStartContainers` (true while the host supervisor is up
 *   and reporting), `Initialized`, `ContainersReady`, `Ready` are set with the kubelet's reasons
 *   (`ContainersNotInitialized`, `ContainersNotReady`, `PodCompleted`); their
 *   `lastTransitionTime` only moves when their status flips. Other conditions are kept.
 *
 * @example
 * ```ts
 * const status = toPodStatus(pod, toInstanceState(instance, { now }), { now });
 * await coreV1.replaceNamespacedPodStatus({ name, namespace, body: { ...pod, status } });
 * ```
 */
export function toPodStatus(
  pod: V1Pod,
  state: InstanceState,
  options: ToPodStatusOptions,
): V1PodStatus {
  const view = readPod(pod);
  const now = options.now;
  const podRestartPolicy = view.spec.restartPolicy ?? "Always";
  const initSpecs = view.spec.initContainers ?? [];
  const appSpecs = view.spec.containers;
  const terminal = state.kind === "Terminal" || state.kind === "Lost";
  const live = state.kind === "Running";
  const report = state.report;
  const lostNote = state.kind === "Lost" ? vanishedMessage(state) : undefined;

  const find = (name: string, init: boolean) =>
    report?.containers.find((c) => c.name === name && (c.init ?? false) === init);

  const initDone = (statuses: V1ContainerStatus[]) =>
    statuses.every((s, i) =>
      isSidecar(initSpecs[i]) ? s.started === true : s.state?.terminated?.exitCode === 0,
    );

  const waitingDefault = (init: boolean): { reason: string; message?: string } => {
    if (state.kind === "Unknown") return { reason: "ReportUnreadable", message: state.message };
    if (report?.containersOmitted !== undefined) {
      return {
        reason: "ContainerStatusUnknown",
        message: `the instance's report left out ${report.containersOmitted} container(s) to fit its tag budget`,
      };
    }
    if (state.kind === "Booting" && state.overdue) {
      return {
        reason: "ContainerCreating",
        message: "the instance has not reported since launch (boot timeout exceeded)",
      };
    }
    return { reason: init || initSpecs.length === 0 ? "ContainerCreating" : "PodInitializing" };
  };

  const build = (spec: ContainerSpec, init: boolean): V1ContainerStatus => {
    const entry = find(spec.name, init);
    const status: V1ContainerStatus = {
      name: spec.name,
      image: spec.image ?? "",
      imageID: entry?.imageID ?? "",
      restartCount: entry?.restarts ?? 0,
      ready: false,
      started: false,
    };
    if (entry?.containerID !== undefined) status.containerID = containerId(entry.containerID);
    if (entry?.last !== undefined)
      status.lastState = { terminated: terminated(entry.last, entry.containerID) };
    // Whose fate is unknown: a lost instance's containers that had not finished when it last
    // reported; a final report's containers that it leaves out or still shows running.
    const fateUnknown =
      entry === undefined
        ? terminal
        : state.kind === "Lost"
          ? entry.state !== "terminated"
          : state.kind === "Terminal" && entry.state === "running";
    if (entry === undefined || fateUnknown) {
      if (fateUnknown) {
        status.state = {
          terminated: {
            exitCode: UNKNOWN_EXIT_CODE,
            reason: CONTAINER_STATUS_UNKNOWN,
            message:
              lostNote ??
              (entry === undefined
                ? "The instance's final report does not include this container."
                : "The instance's final report shows this container still running."),
          },
        };
      } else {
        status.state = { waiting: waitingDefault(init) };
      }
      return status;
    }
    if (state.kind === "Terminal" && entry.state === "waiting" && entry.last !== undefined) {
      // No restart is coming any more: the last exit is the container's final state. (A final
      // report's container that never started, e.g. an image never pulled, stays waiting.)
      status.state = { terminated: terminated(entry.last, entry.containerID) };
      delete status.lastState;
      return status;
    }
    status.state = currentState(entry);
    if (entry.state === "running") {
      status.started = true;
      status.ready = live;
    }
    return status;
  };

  const initContainerStatuses = initSpecs.map((spec) => build(spec, true));
  let initialized = initDone(initContainerStatuses);
  const containerStatuses = appSpecs.map((spec) => {
    const built = build(spec, false);
    if (!initialized && !terminal && built.state?.waiting?.reason === "ContainerCreating") {
      built.state = { waiting: { reason: "PodInitializing" } };
    }
    return built;
  });

  let phase: string = podPhase(
    podRestartPolicy,
    initSpecs,
    initContainerStatuses,
    containerStatuses,
    terminal,
  );
  if (terminal && phase !== "Succeeded" && phase !== "Failed") phase = "Failed";
  if (state.kind === "Unknown") phase = "Unknown";
  if (phase === "Succeeded") initialized = true;

  const current = view.status?.conditions ?? [];
  const condition = (type: string, ok: boolean, reason?: string, message?: string) => {
    const status = ok ? "True" : "False";
    const before = current.find((c) => c.type === type);
    const c: V1PodCondition = {
      type,
      status,
      lastTransitionTime:
        before !== undefined && before.status === status && before.lastTransitionTime !== undefined
          ? before.lastTransitionTime
          : now,
    };
    if (reason !== undefined) c.reason = reason;
    if (message !== undefined) c.message = message;
    return c;
  };

  const sidecarStatuses = initContainerStatuses.filter((_, i) => isSidecar(initSpecs[i]));
  const unready = [...sidecarStatuses, ...containerStatuses]
    .filter((s) => !s.ready)
    .map((s) => s.name);
  const incomplete = initContainerStatuses
    .filter((s, i) =>
      isSidecar(initSpecs[i]) ? s.started !== true : s.state?.terminated?.exitCode !== 0,
    )
    .map((s) => s.name);
  const allReady = unready.length === 0 && containerStatuses.length > 0;
  const completed = phase === "Succeeded";
  const notReadyReason = state.kind === "Unknown" ? "ReportUnreadable" : "ContainersNotReady";
  const notReadyMessage =
    state.kind === "Unknown"
      ? state.message
      : `containers with unready status: [${unready.join(" ")}]`;

  // The kubelet's "sandbox ready" condition: here, the host supervisor is up and reporting.
  const hostUp =
    report !== undefined &&
    (state.kind === "Running" || state.kind === "Stopping" || state.kind === "Unknown");
  const conditions: V1PodCondition[] = [
    condition("PodScheduled", true),
    condition("PodReadyToStartContainers", hostUp),
    completed
      ? condition("Initialized", true, "PodCompleted")
      : initialized
        ? condition("Initialized", true)
        : condition(
            "Initialized",
            false,
            "ContainersNotInitialized",
            `containers with incomplete status: [${incomplete.join(" ")}]`,
          ),
    completed
      ? condition("ContainersReady", false, "PodCompleted")
      : allReady
        ? condition("ContainersReady", true)
        : condition("ContainersReady", false, notReadyReason, notReadyMessage),
    completed
      ? condition("Ready", false, "PodCompleted")
      : allReady
        ? condition("Ready", true)
        : condition("Ready", false, notReadyReason, notReadyMessage),
  ];
  const others = (Array.isArray(pod?.status?.conditions) ? pod.status.conditions : []).filter(
    (c) => c !== null && typeof c === "object" && !OWNED_CONDITIONS.has(c.type),
  );

  const kept: Record<string, unknown> = {};
  const rawStatus = pod?.status;
  if (rawStatus !== null && typeof rawStatus === "object") {
    for (const [key, value] of Object.entries(rawStatus)) if (!OWNED.has(key)) kept[key] = value;
  }
  const result: V1PodStatus = {
    ...(kept as V1PodStatus),
    phase,
    conditions: [...conditions, ...others],
  };
  if (initSpecs.length > 0) result.initContainerStatuses = initContainerStatuses;
  result.containerStatuses = containerStatuses;

  const hostIP = state.instance?.privateIp ?? view.status?.hostIP ?? undefined;
  const podIP = state.instance?.privateIp ?? view.status?.podIP ?? undefined;
  if (hostIP !== undefined) {
    result.hostIP = hostIP;
    result.hostIPs = [{ ip: hostIP }];
  }
  if (podIP !== undefined) {
    result.podIP = podIP;
    result.podIPs = [{ ip: podIP }];
  }
  const startTime = view.status?.startTime ?? state.instance?.launchTime ?? now;
  result.startTime = startTime;

  if (state.kind === "Lost") {
    result.reason = lostPodReason(state.cause);
    result.message = state.message;
  } else if (state.kind === "Unknown") {
    result.reason = state.reason;
    result.message = state.message;
  } else if (state.kind === "Terminal" && state.stopped !== undefined) {
    // Stopped from outside (a Spot interruption, a stop by a user or the controller): the same
    // Pod reason a lost instance with that cause gets, so the roll-up does not see a crash.
    result.reason = lostPodReason(state.stopped.cause);
    result.message = state.stopped.message;
  }
  return result;
}

/**
 * The Pod-level `status.reason` for a lost instance: `SpotInterruption`, `InsufficientCapacity`,
 * `QuotaExceeded` (a volume limit), or `InstanceLost`. The reverse mapping reads it back.
 */
export function lostPodReason(
  cause: LostCause,
): "SpotInterruption" | "InsufficientCapacity" | "QuotaExceeded" | "InstanceLost" {
  switch (cause) {
    case "SpotInterruption":
      return "SpotInterruption";
    case "InsufficientCapacity":
      return "InsufficientCapacity";
    case "VolumeLimitExceeded":
      return "QuotaExceeded";
    default:
      return "InstanceLost";
  }
}

function vanishedMessage(state: Extract<InstanceState, { kind: "Lost" }>): string {
  // Built from the frozen Lost message only, so that later observations write nothing new.
  const problem =
    state.reportProblem === undefined ? "" : ` Its report was unreadable: ${state.reportProblem}.`;
  return `The instance vanished without reporting this container's exit: ${state.message}.${problem}`;
}

function readPod(pod: unknown): PodView {
  const parsed = PodView.safeParse(pod);
  return parsed.success ? parsed.data : { spec: { containers: [] } };
}

function isSidecar(spec: ContainerSpec | undefined): boolean {
  return spec?.restartPolicy === "Always";
}

function currentState(entry: ContainerReport): V1ContainerState {
  switch (entry.state) {
    case "running":
      return entry.startedAt === undefined
        ? { running: {} }
        : { running: { startedAt: new Date(entry.startedAt) } };
    case "waiting": {
      const waiting: { reason: string; message?: string } = {
        reason: entry.reason ?? "ContainerCreating",
      };
      const message = decode(entry.messageB64);
      if (message !== undefined) waiting.message = message;
      return { waiting };
    }
    case "terminated":
      return {
        terminated: terminated(
          {
            exitCode: entry.exitCode ?? UNKNOWN_EXIT_CODE,
            reason: entry.reason ?? (entry.exitCode === 0 ? "Completed" : "Error"),
            ...(entry.signal === undefined ? {} : { signal: entry.signal }),
            ...(entry.startedAt === undefined ? {} : { startedAt: entry.startedAt }),
            ...(entry.finishedAt === undefined ? {} : { finishedAt: entry.finishedAt }),
            ...(entry.messageB64 === undefined ? {} : { messageB64: entry.messageB64 }),
          },
          entry.containerID,
        ),
      };
  }
}

function terminated(t: TerminationReport, id: string | undefined): V1ContainerStateTerminated {
  const out: V1ContainerStateTerminated = { exitCode: t.exitCode, reason: t.reason };
  if (t.signal !== undefined) out.signal = t.signal;
  if (t.startedAt !== undefined) out.startedAt = new Date(t.startedAt);
  if (t.finishedAt !== undefined) out.finishedAt = new Date(t.finishedAt);
  const message = decode(t.messageB64);
  if (message !== undefined) out.message = message;
  if (id !== undefined) out.containerID = containerId(id);
  return out;
}

function decode(b64: string | undefined): string | undefined {
  if (b64 === undefined) return undefined;
  const text = Buffer.from(b64, "base64").toString("utf8");
  return text === "" ? undefined : text;
}

function containerId(id: string): string {
  return id.includes("://") ? id : `docker://${id}`;
}

/**
 * The kubelet's phase rules (`getPhase` in pkg/kubelet/kubelet_pods.go), over the statuses built
 * above. `terminal` means no container will run again (the kubelet's `podIsTerminal`).
 */
function podPhase(
  restartPolicy: string,
  initSpecs: readonly ContainerSpec[],
  initStatuses: readonly V1ContainerStatus[],
  statuses: readonly V1ContainerStatus[],
  terminal: boolean,
): "Pending" | "Running" | "Succeeded" | "Failed" {
  let pendingInitialization = 0;
  let failedInitialization = 0;
  initStatuses.forEach((s, i) => {
    const sidecar = isSidecar(initSpecs[i]);
    if (s.state?.running) {
      if (!sidecar || s.started !== true) pendingInitialization++;
    } else if (s.state?.terminated) {
      if (!sidecar && s.state.terminated.exitCode !== 0) failedInitialization++;
    } else if (s.lastState?.terminated) {
      if (!sidecar && s.lastState.terminated.exitCode !== 0) failedInitialization++;
    } else {
      pendingInitialization++;
    }
  });
  let running = 0;
  let waiting = 0;
  let stopped = 0;
  let succeeded = 0;
  let anyStarted = false;
  for (const s of statuses) {
    if (s.state?.running) {
      running++;
      anyStarted = true;
    } else if (s.state?.terminated) {
      stopped++;
      anyStarted = true;
      if (s.state.terminated.exitCode === 0) succeeded++;
    } else if (s.lastState?.terminated) {
      stopped++;
      anyStarted = true;
    } else {
      waiting++;
    }
  }
  if (failedInitialization > 0 && restartPolicy === "Never") return "Failed";
  if ((pendingInitialization > 0 && !anyStarted) || waiting > 0) {
    return terminal && failedInitialization > 0 ? "Failed" : "Pending";
  }
  if (running > 0) return "Running";
  if (stopped > 0) {
    if (terminal) return stopped === succeeded ? "Succeeded" : "Failed";
    if (restartPolicy === "Always") return "Running";
    if (stopped === succeeded) return "Succeeded";
    if (restartPolicy === "Never") return "Failed";
    return "Running";
  }
  return "Pending";
}
