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
import {
  type InstanceState,
  LOST_CAUSES,
  type LostCause,
  lostMessage,
  MAX_REPORT_SEQ,
  stopFacts,
} from "./state.js";
import { int32Count, statusText } from "./text.js";

/** The exit code of a container whose fate is unknown (the kubelet's: 128 + SIGKILL). */
const UNKNOWN_EXIT_CODE = 137;

/** The termination reason of a container whose instance vanished (the kubelet's word). */
const CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown";

/**
 * The Pod condition type that records, in the Pod's own status, what the status was built from:
 * the accepted report's `seq`, whether that report was final, and, for a lost instance, the cause
 * of the loss. Its message reads `seq=12`, `seq=12 final`, `seq=12 cause=SpotInterruption` or
 * `cause=Absent`; its reason is `ExitReport` and its status always `True`.
 *
 * The stored status is the durable memory of the mapping: after a controller restart (no previous
 * state in memory) {@link toPodStatus} reads this record back, so a terminal status stays what it
 * was unless a newer final report says otherwise, and the recorded cause is kept. Only the
 * controller writes Pod status (tenants cannot), so the record cannot be forged by a Pod's author.
 */
export const REPORT_CONDITION_TYPE = "nebula.dev/ExitReport";

/** Longest termination or waiting message written to a container status, in code points (the kubelet keeps 4096 bytes). */
const MAX_STATUS_MESSAGE_CHARS = 4096;

/**
 * Pod `status.reason` of a Pod whose container reached the restart limit (the
 * `nebula.dev/restart-limit` annotation); `status.message` names the container, the limit and the
 * annotation.
 */
export const RESTART_LIMIT_REASON = "RestartLimitReached";

/** Longest Pod-level `status.message`, in code points. */
const MAX_POD_MESSAGE_CHARS = 1024;

/** Options of {@link toPodStatus}. */
export interface ToPodStatusOptions {
  /**
   * The time of this mapping: the `lastTransitionTime` of conditions that change now, and the
   * `startTime` when neither the Pod nor the instance has one. The mapping never reads the clock.
   */
  readonly now: Date;
}

const ContainerSpec = z.looseObject({
  name: z.string(),
  image: z.string().optional().catch(undefined),
  restartPolicy: z.string().optional().catch(undefined),
});

/** The parts of a Pod's spec this mapping reads, validated at the boundary (bad parts read as absent). */
const SpecView = z
  .looseObject({
    containers: z.array(ContainerSpec).catch([]),
    initContainers: z.array(ContainerSpec).optional().catch(undefined),
    restartPolicy: z.string().optional().catch(undefined),
  })
  .catch({ containers: [] });
type SpecView = z.output<typeof SpecView>;
type ContainerSpec = z.output<typeof ContainerSpec>;

const EMPTY_SPEC: SpecView = { containers: [] };

/**
 * Specs already read, by object: a Pod's spec does not change while its status does, so each
 * spec is validated once (only a cache: the output is the same without it). Do not mutate a Pod
 * object after passing it in; pass a new object instead, as informers do.
 */
const specViews = new WeakMap<object, SpecView>();

function readSpec(spec: unknown): SpecView {
  if (typeof spec !== "object" || spec === null) return EMPTY_SPEC;
  let view = specViews.get(spec);
  if (view === undefined) {
    const parsed = SpecView.safeParse(spec);
    view = parsed.success ? parsed.data : EMPTY_SPEC;
    specViews.set(spec, view);
  }
  return view;
}

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
  REPORT_CONDITION_TYPE,
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
 * - The Pod's stored status is durable memory (see {@link REPORT_CONDITION_TYPE}): a stored
 *   `Succeeded`/`Failed` status is returned as it is unless `state` is `Terminal` with a final
 *   report newer (higher `seq`) than the one it was built from; a newer final report after a loss
 *   keeps the recorded cause of the loss. A live stored status built from a newer report than
 *   `state` has (the previous state was forgotten in a restart) keeps its containers. So the
 *   result is the same whether or not the caller kept the previous state in memory.
 * - Text is sanitised (no control characters or ANSI escapes) and cut on grapheme boundaries
 *   ({@link MAX_STATUS_MESSAGE_CHARS}); restart counts are capped at the `int32` maximum.
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
  const rawStatus = readObject((pod as unknown as Record<string, unknown> | null)?.status);
  const stored = readStored(rawStatus);
  if (!isState(state)) state = UNREADABLE_STATE;
  if (stored.terminal) {
    // A terminal status never changes again, unless a newer final report says otherwise.
    if (state.kind !== "Terminal" || state.report.seq <= (stored.seq ?? -1)) {
      const kept = { ...(rawStatus as V1PodStatus) };
      // A Pod that finished before its instance was lost: the status stays, but the record
      // learns the cause of the loss (once), so that a later report is read as the in-memory
      // history would read it.
      if (state.kind === "Lost" && stored.cause === undefined && !stored.final) {
        const message = recordMessage(stored.seq, false, state.cause);
        const others = (Array.isArray(kept.conditions) ? kept.conditions : []).filter(
          (c) => c?.type !== REPORT_CONDITION_TYPE,
        );
        const at = toDate(options?.now) ?? new Date(0);
        kept.conditions = [
          ...others,
          {
            type: REPORT_CONDITION_TYPE,
            status: "True",
            lastTransitionTime: at,
            reason: "ExitReport",
            message,
          },
        ];
      }
      return kept;
    }
    if (stored.cause !== undefined && state.report.stopRequested === true) {
      // The first loss is the truth: a stop after a recorded loss keeps the loss's cause.
      const stopped = stopFacts(state.instance, stored.cause);
      const { stopped: _ignored, ...rest } = state;
      state = stopped === undefined ? rest : { ...rest, stopped };
    }
  }
  const now = options?.now instanceof Date ? options.now : new Date(Number.NaN);
  const spec = readSpec((pod as unknown as Record<string, unknown> | null)?.spec);
  const podRestartPolicy = spec.restartPolicy ?? "Always";
  const initSpecs = spec.initContainers ?? [];
  const appSpecs = spec.containers;
  const report = state.report;
  // The previous state was forgotten (a restart) while the stored status was built from a newer
  // report than this state has: the stored containers are the newer truth.
  const fromStored =
    stored.seq !== undefined &&
    stored.containers !== undefined &&
    (report === undefined || report.seq < stored.seq) &&
    state.kind !== "Terminal";
  const kind = fromStored && state.kind === "Booting" ? "Running" : state.kind;
  const terminal = kind === "Terminal" || kind === "Lost";
  const live = kind === "Running";
  const lostMessageText =
    state.kind === "Lost"
      ? fromStored
        ? lostMessage(state.instance, state.cause, { seq: stored.seq ?? 0 })
        : state.message
      : undefined;
  const lostNote =
    state.kind === "Lost" && lostMessageText !== undefined
      ? vanishedMessage(lostMessageText, state.reportProblem)
      : undefined;
  const recordSeq = fromStored ? stored.seq : report?.seq;

  const find = (name: string, init: boolean): ContainerReport | undefined => {
    if (report === undefined) return undefined;
    for (const c of report.containers) {
      if (c.name === name && (c.init ?? false) === init) return c;
    }
    return undefined;
  };

  const waitingDefault = (init: boolean): { reason: string; message?: string } => {
    if (state.kind === "Unknown") {
      return {
        reason: "ReportUnreadable",
        message: statusText(state.message, MAX_POD_MESSAGE_CHARS),
      };
    }
    if (!fromStored && report?.containersOmitted !== undefined) {
      return {
        reason: "ContainerStatusUnknown",
        message: `the instance's report left out ${report.containersOmitted} container(s) to fit its tag budget`,
      };
    }
    if (state.kind === "Booting" && state.overdue && !fromStored) {
      return {
        reason: "ContainerCreating",
        message: "the instance has not reported since launch (boot timeout exceeded)",
      };
    }
    return { reason: init || initSpecs.length === 0 ? "ContainerCreating" : "PodInitializing" };
  };

  const unknownFate = (message: string): V1ContainerState => ({
    terminated: { exitCode: UNKNOWN_EXIT_CODE, reason: CONTAINER_STATUS_UNKNOWN, message },
  });

  const build = (spec: ContainerSpec, init: boolean): V1ContainerStatus => {
    if (fromStored) {
      const kept = storedContainer(
        init ? stored.initContainers : stored.containers,
        spec,
        kind === "Lost" ? "lost" : live ? "live" : "idle",
        lostNote,
      );
      if (kept !== undefined) return kept;
    }
    const entry = fromStored ? undefined : find(spec.name, init);
    const status: V1ContainerStatus = {
      name: spec.name,
      image: spec.image ?? "",
      imageID: typeof entry?.imageID === "string" ? statusText(entry.imageID, 256) : "",
      restartCount: int32Count(entry?.restarts),
      ready: false,
      started: false,
    };
    const id = containerId(entry?.containerID);
    if (id !== undefined) status.containerID = id;
    if (entry?.last !== undefined)
      status.lastState = { terminated: terminated(entry.last, entry.containerID) };
    // Whose fate is unknown: a lost instance's containers that had not finished when it last
    // reported; a final report's containers that it leaves out or still shows running.
    const fateUnknown =
      entry === undefined
        ? terminal
        : kind === "Lost"
          ? entry.state !== "terminated"
          : kind === "Terminal" && entry.state === "running";
    if (entry === undefined || fateUnknown) {
      status.state = fateUnknown
        ? unknownFate(
            lostNote ??
              (entry === undefined
                ? "The instance's final report does not include this container."
                : "The instance's final report shows this container still running."),
          )
        : { waiting: waitingDefault(init) };
      return status;
    }
    if (kind === "Terminal" && entry.state === "waiting" && entry.last !== undefined) {
      // No restart is coming any more: the last exit is the container's final state. (A final
      // report's container that never started, e.g. an image never pulled, stays waiting.)
      status.state = { terminated: terminated(entry.last, entry.containerID) };
      delete status.lastState;
      return status;
    }
    status.state = currentState(entry);
    if (entry.state === "running") {
      // Reports of probed containers say whether they started and are ready; older reports and
      // containers without probes are started and ready while running.
      status.started = entry.started ?? true;
      status.ready = live && status.started && (entry.ready ?? true);
    }
    return status;
  };

  const initContainerStatuses: V1ContainerStatus[] = [];
  let initialized = true;
  let incomplete = "";
  for (let i = 0; i < initSpecs.length; i++) {
    const spec = initSpecs[i] as ContainerSpec;
    const built = build(spec, true);
    initContainerStatuses.push(built);
    const done = isSidecar(spec) ? built.started === true : built.state?.terminated?.exitCode === 0;
    if (!done) {
      initialized = false;
      incomplete = incomplete === "" ? built.name : `${incomplete} ${built.name}`;
    }
  }
  const containerStatuses: V1ContainerStatus[] = [];
  for (const spec of appSpecs) {
    const built = build(spec, false);
    if (!initialized && !terminal && built.state?.waiting?.reason === "ContainerCreating") {
      built.state = { waiting: { reason: "PodInitializing" } };
    }
    containerStatuses.push(built);
  }

  let phase: string = podPhase(
    podRestartPolicy,
    initSpecs,
    initContainerStatuses,
    containerStatuses,
    terminal,
  );
  if (terminal && phase !== "Succeeded" && phase !== "Failed") phase = "Failed";
  // Stopped from outside (a Spot interruption, a stop by a user or EC2): interrupted, not done,
  // even when its containers ended their SIGTERM with 0, as the kubelet fails a Pod it ends for
  // a node shutdown. A Job counts it as a failure its podFailurePolicy may ignore (DisruptionTarget).
  if (phase === "Succeeded" && state.kind === "Terminal" && state.stopped !== undefined) {
    phase = "Failed";
  }
  if (kind === "Unknown") phase = "Unknown";
  if (phase === "Succeeded") initialized = true;

  const current = stored.conditions;
  const condition = (type: string, ok: boolean, reason?: string, message?: string) => {
    const status = ok ? "True" : "False";
    let since: Date | undefined;
    for (const c of current) {
      if (c.type === type) {
        if (c.status === status) since = c.lastTransitionTime;
        break;
      }
    }
    const c: V1PodCondition = { type, status, lastTransitionTime: since ?? now };
    if (reason !== undefined) c.reason = reason;
    if (message !== undefined) c.message = message;
    return c;
  };

  let unready = "";
  let allReady = containerStatuses.length > 0;
  const noteUnready = (s: V1ContainerStatus) => {
    if (s.ready) return;
    allReady = false;
    unready = unready === "" ? s.name : `${unready} ${s.name}`;
  };
  for (let i = 0; i < initContainerStatuses.length; i++) {
    if (isSidecar(initSpecs[i])) noteUnready(initContainerStatuses[i] as V1ContainerStatus);
  }
  for (const s of containerStatuses) noteUnready(s);
  const completed = phase === "Succeeded";
  const notReadyReason = kind === "Unknown" ? "ReportUnreadable" : "ContainersNotReady";
  const notReadyMessage =
    state.kind === "Unknown"
      ? statusText(state.message, MAX_POD_MESSAGE_CHARS)
      : `containers with unready status: [${unready}]`;

  // The kubelet's "sandbox ready" condition: here, the host supervisor is up and reporting.
  const hostUp =
    (report !== undefined || fromStored) &&
    (kind === "Running" || kind === "Stopping" || kind === "Unknown");
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
            `containers with incomplete status: [${incomplete}]`,
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
  const recordCause = state.kind === "Lost" ? state.cause : stored.cause;
  if (recordSeq !== undefined || recordCause !== undefined) {
    conditions.push(
      condition(
        REPORT_CONDITION_TYPE,
        true,
        "ExitReport",
        recordMessage(recordSeq, !fromStored && report?.final === true, recordCause),
      ),
    );
  }
  for (const c of stored.otherConditions) conditions.push(c as V1PodCondition);

  const result: V1PodStatus = {};
  if (rawStatus !== undefined) {
    for (const key in rawStatus) {
      if (!OWNED.has(key)) (result as Record<string, unknown>)[key] = rawStatus[key];
    }
  }
  result.phase = phase;
  result.conditions = conditions;
  if (initSpecs.length > 0) result.initContainerStatuses = initContainerStatuses;
  result.containerStatuses = containerStatuses;

  const hostIP = state.instance?.privateIp ?? stored.hostIP;
  const podIP = state.instance?.privateIp ?? stored.podIP;
  if (hostIP !== undefined) {
    result.hostIP = hostIP;
    result.hostIPs = [{ ip: hostIP }];
  }
  if (podIP !== undefined) {
    result.podIP = podIP;
    result.podIPs = [{ ip: podIP }];
  }
  result.startTime = stored.startTime ?? state.instance?.launchTime ?? now;

  if (state.kind === "Lost") {
    result.reason = lostPodReason(state.cause);
    result.message = statusText(lostMessageText ?? state.message, MAX_POD_MESSAGE_CHARS);
  } else if (state.kind === "Unknown") {
    result.reason = state.reason;
    result.message = statusText(state.message, MAX_POD_MESSAGE_CHARS);
  } else if (state.kind === "Terminal" && state.stopped !== undefined) {
    // Stopped from outside (a Spot interruption, a stop by a user or the controller): the same
    // Pod reason a lost instance with that cause gets, so the roll-up does not see a crash.
    result.reason = lostPodReason(state.stopped.cause);
    result.message = statusText(state.stopped.message, MAX_POD_MESSAGE_CHARS);
  } else if (state.kind === "Terminal" && state.restartLimit !== undefined) {
    // The cost guard ended the Pod: say so, naming the limit and the annotation that sets it
    // (the containers keep their own exits; the roll-up reads those, not this reason).
    result.reason = RESTART_LIMIT_REASON;
    result.message = statusText(state.restartLimit.message, MAX_POD_MESSAGE_CHARS);
  }
  // The mark is this mapping's while Spot is the reason (or, before the end, while a notice is
  // known): dropped with it (a newer final report that says the containers completed); a
  // DisruptionTarget another component set is kept.
  const ours = isSpotInterruptionCondition;
  const previous = stored.otherConditions
    .map(readObject)
    .find((c) => ours(c) && c?.status === "True");
  // A notice is never withdrawn: EC2 acts on it. Until the final report, the Pod is marked from
  // the first sign of it (the supervisor's report of the notice, EC2's Spot state reason, or the
  // mark already stored), so it does not flap when a restarted controller reads an older report.
  const notice =
    !terminal &&
    (report?.interruption?.kind === "spot" ||
      state.instance?.cause === "SpotInterruption" ||
      previous !== undefined);
  if (result.reason !== "SpotInterruption" && !notice && conditions.some(ours)) {
    result.conditions = conditions.filter((c) => !ours(c));
  }
  if (result.reason === "SpotInterruption" || notice) {
    // EC2 takes the instance: a disruption, not the Pod's failure, as the kubelet says of a Pod it
    // ends for a node shutdown. A Job's podFailurePolicy can then ignore it (DisruptionTarget),
    // and, marked before its end, a Pod is known to be going while its containers still stop.
    const at = report?.interruption?.time;
    const mark: V1PodCondition = {
      type: DISRUPTION_TARGET,
      status: "True",
      lastTransitionTime: toDate(previous?.lastTransitionTime) ?? now,
      reason: "SpotInterruption",
      message: notice
        ? `EC2 is reclaiming the Spot instance${at === undefined ? "" : ` at ${at}`}: its host supervisor is stopping the containers within the two-minute warning`
        : "EC2 reclaimed the Spot instance: the Pod was interrupted, it did not fail",
    };
    const kept = conditions.filter((c) => c.type !== DISRUPTION_TARGET);
    if (notice) {
      // No longer fit to take new work: Services and load balancers stop sending it traffic
      // while the containers drain (their own readiness is in ContainersReady).
      const i = kept.findIndex((c) => c.type === "Ready");
      const readySince = current.find((c) => c.type === "Ready" && c.status === "False");
      if (i >= 0) {
        kept[i] = {
          type: "Ready",
          status: "False",
          lastTransitionTime: readySince?.lastTransitionTime ?? now,
          reason: "SpotInterruption",
          message: "the Spot instance is being reclaimed: the Pod's containers are stopping",
        };
      }
    }
    result.conditions = [...kept, mark];
  }
  return result;
}

/** The condition the kubelet sets on a Pod it ends for a disruption (Kubernetes 1.26+). */
const DISRUPTION_TARGET = "DisruptionTarget";

/** Whether `condition` is the `DisruptionTarget` condition {@link toPodStatus} writes for Spot (any status). */
function isSpotInterruptionCondition(condition: unknown): boolean {
  const o = readObject(condition);
  return o?.type === DISRUPTION_TARGET && o.reason === "SpotInterruption";
}

/**
 * Whether a Pod's status carries the mark {@link toPodStatus} gives a Pod whose Spot instance EC2
 * is reclaiming: `DisruptionTarget=True` with reason `SpotInterruption`. Total: anything that is
 * not such a status (`undefined`, a malformed object) answers `false`.
 *
 * @example
 * ```ts
 * if (!isSpotInterruptionMarked(stored) && isSpotInterruptionMarked(next)) recordEvent("SpotInterruption");
 * ```
 */
export function isSpotInterruptionMarked(status: unknown): boolean {
  const conditions = readObject(status)?.conditions;
  return (
    Array.isArray(conditions) &&
    conditions.some((c) => isSpotInterruptionCondition(c) && readObject(c)?.status === "True")
  );
}

/** What {@link toPodStatus} reads from the Pod's stored status. */
interface StoredStatus {
  /** The stored phase is `Succeeded` or `Failed`. */
  readonly terminal: boolean;
  /** The report `seq` the stored status was built from (its {@link REPORT_CONDITION_TYPE} record). */
  readonly seq?: number;
  /** The recorded report was final. */
  readonly final: boolean;
  /** The recorded cause of a loss. */
  readonly cause?: LostCause;
  readonly containers?: readonly unknown[];
  readonly initContainers?: readonly unknown[];
  /** The stored conditions this mapping owns, with a valid `lastTransitionTime`. */
  readonly conditions: readonly { type: string; status: string; lastTransitionTime?: Date }[];
  /** Stored conditions of other types, kept as they are. */
  readonly otherConditions: readonly unknown[];
  readonly hostIP?: string;
  readonly podIP?: string;
  readonly startTime?: Date;
}

/** Writes a {@link REPORT_CONDITION_TYPE} message. */
function recordMessage(
  seq: number | undefined,
  final: boolean,
  cause: LostCause | undefined,
): string {
  const parts: string[] = [];
  if (seq !== undefined) parts.push(`seq=${seq}`);
  if (final) parts.push("final");
  if (cause !== undefined) parts.push(`cause=${cause}`);
  return parts.join(" ");
}

/** Reads a {@link REPORT_CONDITION_TYPE} message: `seq=12`, `cause=Absent`, or both. */
function readRecord(message: string): { seq?: number; final: boolean; cause?: LostCause } {
  const record: { seq?: number; final: boolean; cause?: LostCause } = { final: false };
  for (const part of message.split(" ")) {
    if (part === "final") record.final = true;
    if (part.startsWith("seq=")) {
      const digits = part.slice(4);
      if (/^\d{1,10}$/.test(digits) && Number(digits) <= MAX_REPORT_SEQ)
        record.seq = Number(digits);
    } else if (part.startsWith("cause=") && LOST_CAUSES.has(part.slice(6))) {
      record.cause = part.slice(6) as LostCause;
    }
  }
  return record;
}

/**
 * Stored statuses already read, by object: an informer hands the same object until the Pod
 * changes (only a cache: the output is the same without it; do not mutate a status passed in).
 */
const storedStatuses = new WeakMap<object, StoredStatus>();

const NO_STORED_STATUS: StoredStatus = {
  terminal: false,
  final: false,
  conditions: [],
  otherConditions: [],
};

function readStored(status: Record<string, unknown> | undefined): StoredStatus {
  if (status === undefined) return NO_STORED_STATUS;
  let stored = storedStatuses.get(status);
  if (stored === undefined) {
    stored = readStoredNow(status);
    storedStatuses.set(status, stored);
  }
  return stored;
}

function readStoredNow(status: Record<string, unknown>): StoredStatus {
  const phase = status.phase;
  const conditions: { type: string; status: string; lastTransitionTime?: Date }[] = [];
  const otherConditions: unknown[] = [];
  let seq: number | undefined;
  let final = false;
  let cause: LostCause | undefined;
  if (Array.isArray(status.conditions)) {
    for (const c of status.conditions) {
      if (typeof c !== "object" || c === null) continue;
      const {
        type,
        status: conditionStatus,
        lastTransitionTime,
        message,
      } = c as Record<string, unknown>;
      if (typeof type !== "string") continue;
      if (!OWNED_CONDITIONS.has(type)) {
        otherConditions.push(c);
        continue;
      }
      if (typeof conditionStatus !== "string") continue;
      const since = toDate(lastTransitionTime);
      conditions.push(
        since === undefined
          ? { type, status: conditionStatus }
          : { type, status: conditionStatus, lastTransitionTime: since },
      );
      if (type === REPORT_CONDITION_TYPE && typeof message === "string") {
        ({ seq, final, cause } = readRecord(message));
      }
    }
  }
  const list = (value: unknown) => (Array.isArray(value) ? value : undefined);
  const text = (value: unknown) => (typeof value === "string" ? value : undefined);
  const containers = list(status.containerStatuses);
  const initContainers = list(status.initContainerStatuses);
  const hostIP = text(status.hostIP);
  const podIP = text(status.podIP);
  const startTime = toDate(status.startTime);
  return {
    terminal: phase === "Succeeded" || phase === "Failed",
    final,
    ...(seq === undefined ? {} : { seq }),
    ...(cause === undefined ? {} : { cause }),
    ...(containers === undefined ? {} : { containers }),
    ...(initContainers === undefined ? {} : { initContainers }),
    conditions,
    otherConditions,
    ...(hostIP === undefined ? {} : { hostIP }),
    ...(podIP === undefined ? {} : { podIP }),
    ...(startTime === undefined ? {} : { startTime }),
  };
}

/**
 * A container status kept from the stored status (built from a newer report than the current
 * state has), as the mapping would have built it from that report for the current state: not
 * ready unless live and running; for a lost instance, a container that had not finished gets the
 * unknown fate.
 */
function storedContainer(
  list: readonly unknown[] | undefined,
  spec: ContainerSpec,
  how: "lost" | "live" | "idle",
  lostNote: string | undefined,
): V1ContainerStatus | undefined {
  let raw: Record<string, unknown> | undefined;
  for (const item of list ?? []) {
    const c = readObject(item);
    if (c?.name === spec.name) {
      raw = c;
      break;
    }
  }
  if (raw === undefined) return undefined;
  const text = (value: unknown) => (typeof value === "string" ? value : undefined);
  const status: V1ContainerStatus = {
    name: spec.name,
    image: spec.image ?? "",
    imageID: text(raw.imageID) ?? "",
    restartCount: int32Count(raw.restartCount),
    ready: false,
    started: false,
  };
  const containerID = text(raw.containerID);
  if (containerID !== undefined) status.containerID = containerID;
  const last = readTerminated(readObject(readObject(raw.lastState)?.terminated));
  if (last !== undefined) status.lastState = { terminated: last };
  const state = readObject(raw.state);
  const ended = readTerminated(readObject(state?.terminated));
  if (how === "lost") {
    status.state =
      ended !== undefined && ended.reason !== CONTAINER_STATUS_UNKNOWN
        ? { terminated: ended }
        : {
            terminated: {
              exitCode: UNKNOWN_EXIT_CODE,
              reason: CONTAINER_STATUS_UNKNOWN,
              message: lostNote ?? "",
            },
          };
    return status;
  }
  const running = readObject(state?.running);
  const waiting = readObject(state?.waiting);
  if (running !== undefined) {
    const startedAt = toDate(running.startedAt);
    status.state = { running: startedAt === undefined ? {} : { startedAt } };
    status.started = true;
    status.ready = how === "live";
  } else if (ended !== undefined) {
    status.state = { terminated: ended };
  } else {
    const reason = text(waiting?.reason) ?? "ContainerCreating";
    const message = text(waiting?.message);
    status.state = { waiting: message === undefined ? { reason } : { reason, message } };
  }
  return status;
}

function readTerminated(
  raw: Record<string, unknown> | undefined,
): V1ContainerStateTerminated | undefined {
  if (raw === undefined) return undefined;
  const out: V1ContainerStateTerminated = {
    exitCode: typeof raw.exitCode === "number" ? raw.exitCode : UNKNOWN_EXIT_CODE,
  };
  if (typeof raw.reason === "string") out.reason = raw.reason;
  if (typeof raw.signal === "number") out.signal = raw.signal;
  const startedAt = toDate(raw.startedAt);
  if (startedAt !== undefined) out.startedAt = startedAt;
  const finishedAt = toDate(raw.finishedAt);
  if (finishedAt !== undefined) out.finishedAt = finishedAt;
  if (typeof raw.message === "string") out.message = raw.message;
  if (typeof raw.containerID === "string") out.containerID = raw.containerID;
  return out;
}

function readObject(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function toDate(value: unknown): Date | undefined {
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? undefined : value;
  if (typeof value !== "string" || !ISO_DATE.test(value)) return undefined;
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? undefined : d;
}

const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/;

const STATE_KINDS = new Set([
  "Pending",
  "Booting",
  "Running",
  "Stopping",
  "Terminal",
  "Lost",
  "Unknown",
]);

/** A state that is not one: shown as an unreadable instance state. */
const UNREADABLE_STATE: InstanceState = {
  kind: "Unknown",
  observedAt: new Date(0),
  reason: "InstanceUnreadable",
  message: "the instance state handed to the mapping could not be read",
};

function isState(value: unknown): value is InstanceState {
  const o = readObject(value);
  if (o === undefined || typeof o.kind !== "string" || !STATE_KINDS.has(o.kind)) return false;
  if (o.report !== undefined && !isReportLike(o.report)) return false;
  if ((o.kind === "Running" || o.kind === "Terminal") && o.report === undefined) return false;
  if (o.kind === "Lost" && (typeof o.message !== "string" || typeof o.cause !== "string")) {
    return false;
  }
  if (o.kind === "Unknown" && (typeof o.message !== "string" || typeof o.reason !== "string")) {
    return false;
  }
  if (o.instance !== undefined && readObject(o.instance) === undefined) return false;
  return true;
}

function isReportLike(value: unknown): boolean {
  const o = readObject(value);
  return (
    o !== undefined &&
    typeof o.seq === "number" &&
    Array.isArray(o.containers) &&
    o.containers.every((c) => readObject(c) !== undefined && typeof c.name === "string")
  );
}

/**
 * The Pod-level `status.reason` for a lost instance: `SpotInterruption`, `InsufficientCapacity`,
 * `QuotaExceeded` (a volume limit), or `InstanceLost`. The reverse mapping reads it back.
 */
function lostPodReason(
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

function vanishedMessage(message: string, reportProblem: string | undefined): string {
  // Built from the frozen Lost message only, so that later observations write nothing new.
  const problem =
    reportProblem === undefined ? "" : ` Its report was unreadable: ${reportProblem}.`;
  return statusText(
    `The instance vanished without reporting this container's exit: ${message}.${problem}`,
    MAX_STATUS_MESSAGE_CHARS,
  );
}

function isSidecar(spec: ContainerSpec | undefined): boolean {
  return spec?.restartPolicy === "Always";
}

/** Epoch milliseconds of report times (only a cache: reports repeat from poll to poll). */
const reportTimes = new Map<string, number>();

/** A report's RFC 3339 time as a new `Date` (callers may own and change it). */
function reportDate(time: string): Date {
  let ms = reportTimes.get(time);
  if (ms === undefined) {
    ms = Date.parse(time);
    if (reportTimes.size >= 4096) reportTimes.clear();
    reportTimes.set(time, ms);
  }
  return new Date(ms);
}

function currentState(entry: ContainerReport): V1ContainerState {
  switch (entry.state) {
    case "running":
      return entry.startedAt === undefined
        ? { running: {} }
        : { running: { startedAt: reportDate(String(entry.startedAt)) } };
    case "waiting": {
      const waiting: { reason: string; message?: string } = {
        reason: reasonText(entry.reason) ?? "ContainerCreating",
      };
      const message = decode(entry.messageB64);
      if (message !== undefined) waiting.message = message;
      return { waiting };
    }
    case "terminated": {
      const exitCode = entry.exitCode ?? UNKNOWN_EXIT_CODE;
      const out: V1ContainerStateTerminated = {
        exitCode,
        reason: reasonText(entry.reason) ?? (exitCode === 0 ? "Completed" : "Error"),
      };
      fillTerminated(out, entry, entry.containerID);
      return { terminated: out };
    }
    default:
      return { waiting: { reason: "ContainerCreating" } };
  }
}

function terminated(t: TerminationReport, id: unknown): V1ContainerStateTerminated {
  const out: V1ContainerStateTerminated = {
    exitCode: typeof t.exitCode === "number" ? t.exitCode : UNKNOWN_EXIT_CODE,
    reason: reasonText(t.reason) ?? "Error",
  };
  fillTerminated(out, t, id);
  return out;
}

function fillTerminated(
  out: V1ContainerStateTerminated,
  t: Pick<TerminationReport, "signal" | "startedAt" | "finishedAt" | "messageB64">,
  id: unknown,
): void {
  if (t.signal !== undefined) out.signal = t.signal;
  if (typeof t.startedAt === "string") out.startedAt = reportDate(t.startedAt);
  if (typeof t.finishedAt === "string") out.finishedAt = reportDate(t.finishedAt);
  const message = decode(t.messageB64);
  if (message !== undefined) out.message = message;
  const containerID = containerId(id);
  if (containerID !== undefined) out.containerID = containerID;
}

/** A reason from a report, fit for a status (reports allow 128 characters). */
function reasonText(reason: unknown): string | undefined {
  if (typeof reason !== "string") return undefined;
  const text = statusText(reason, 128);
  return text === "" ? undefined : text;
}

/** Decoded messages by their base64 (only a cache: reports repeat from poll to poll). */
const decodedMessages = new Map<string, string | undefined>();

/** A report's base64 message as status text: sanitised and cut; `undefined` when empty. */
function decode(b64: unknown): string | undefined {
  if (typeof b64 !== "string") return undefined;
  if (decodedMessages.has(b64)) return decodedMessages.get(b64);
  const text = statusText(Buffer.from(b64, "base64").toString("utf8"), MAX_STATUS_MESSAGE_CHARS);
  const message = text === "" ? undefined : text;
  if (decodedMessages.size >= 1024) decodedMessages.clear();
  decodedMessages.set(b64, message);
  return message;
}

function containerId(id: unknown): string | undefined {
  if (typeof id !== "string") return undefined;
  const clean = statusText(id, 256);
  return clean.includes("://") ? clean : `docker://${clean}`;
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
