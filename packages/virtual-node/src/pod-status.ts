/**
 * Pure Pod-status composition: the status to write is the Pod's stored status plus the provider's
 * observation, so that a restarted virtual node (whose provider remembers nothing) never rewrites
 * the truth already recorded. No clock reads, never throws.
 *
 * @packageDocumentation
 */
import type {
  V1ContainerStatus,
  V1Pod,
  V1PodCondition,
  V1PodReadinessGate,
  V1PodStatus,
} from "@kubernetes/client-node";

/** The kubelet's reason and message for a Pod past its `spec.activeDeadlineSeconds`. */
export const DEADLINE_EXCEEDED = {
  reason: "DeadlineExceeded",
  message: "Pod was active on the node longer than the specified deadline",
} as const;

/** The reason the kubelet gives a container whose host vanished without a report. */
const LOST_REASON = "ContainerStatusUnknown";

/** True for `Succeeded` and `Failed`. */
export function isTerminalPhase(phase: string | undefined): boolean {
  return phase === "Succeeded" || phase === "Failed";
}

function isLost(status: V1PodStatus): boolean {
  const all = [...(status.containerStatuses ?? []), ...(status.initContainerStatuses ?? [])];
  return all.some((c) => c.state?.terminated?.reason === LOST_REASON);
}

function hasReport(status: V1PodStatus): boolean {
  const all = [...(status.containerStatuses ?? []), ...(status.initContainerStatuses ?? [])];
  return (
    all.length > 0 &&
    all.every((c) => c.state?.terminated === undefined || c.state.terminated.reason !== LOST_REASON)
  );
}

/**
 * The status to write for a Pod:
 *
 * - no observation: the stored status, unchanged;
 * - a terminal stored status stays, whatever is observed ("finished stays finished"), except a
 *   Pod recorded lost (`ContainerStatusUnknown`) whose report arrives late: the report wins; and
 *   a container the stored status still shows running or waiting takes its observed termination
 *   (a Pod failed by the virtual node, past its `activeDeadlineSeconds`, whose containers the host
 *   then stops: their ends are shown as the kubelet shows them), or recorded lost and then
 *   reported. Phase, reason and conditions stay; a container's reported end never changes again;
 * - otherwise the observation, with the stored conditions of types the observation does not set
 *   kept (`PodScheduled`, `DisruptionTarget`, readiness gates), the stored `startTime` kept, and no
 *   container's `restartCount` lowered. A condition whose status is unchanged keeps its stored
 *   `lastTransitionTime`; one that changes gets `now` (when given) unless the observation's own
 *   time is later than the stored change (`Ready` restored after the node controller set it
 *   `False` transitions now, not when it first became `True`).
 * - with `readinessGates` (the Pod's `spec.readinessGates`), `Ready` is `True` only when the
 *   containers are ready and every gate's condition (written by whoever owns the gate) is `True`:
 *   otherwise `False` with the kubelet's reason `ReadinessGatesNotReady` and its message
 *   ({@link gateReady}). `ContainersReady` is not gated.
 *
 * @example
 * ```ts
 * const status = composePodStatus(pod.status, provider.getPodStatus(pod.metadata.uid));
 * ```
 */
export function composePodStatus(
  stored: V1PodStatus | undefined,
  observed: V1PodStatus | undefined,
  now?: Date,
  readinessGates?: readonly V1PodReadinessGate[],
): V1PodStatus | undefined {
  if (observed === undefined) return stored;
  if (stored !== undefined && isTerminalPhase(stored.phase)) {
    // A Pod the virtual node failed itself (past its deadline) keeps its reason: only its
    // containers' ends are filled in.
    const lateReport =
      stored.reason !== DEADLINE_EXCEEDED.reason &&
      isLost(stored) &&
      isTerminalPhase(observed.phase) &&
      hasReport(observed) &&
      !isLost(observed);
    if (!lateReport) return settleContainers(stored, observed);
  }
  const result: V1PodStatus = { ...observed };
  const ownTypes = new Set((observed.conditions ?? []).map((c) => c.type));
  const kept: V1PodCondition[] = (stored?.conditions ?? []).filter((c) => !ownTypes.has(c.type));
  if (kept.length > 0 || observed.conditions !== undefined) {
    const merged = gateReady([...kept, ...(observed.conditions ?? [])], readinessGates);
    result.conditions = merged.map((c) => {
      const before = stored?.conditions?.find((s) => s.type === c.type);
      if (before === undefined || before.lastTransitionTime === undefined) return c;
      // An unchanged condition keeps the time it last changed.
      if (before.status === c.status)
        return { ...c, lastTransitionTime: before.lastTransitionTime };
      // A changed one changed now, unless the observation says when, after the stored change
      // (Ready restored after the node controller set it False: not the time it first became True).
      return now !== undefined && !isAfter(c.lastTransitionTime, before.lastTransitionTime)
        ? { ...c, lastTransitionTime: now }
        : c;
    });
  }
  if (stored?.startTime !== undefined) result.startTime = stored.startTime;
  if (observed.containerStatuses !== undefined) {
    result.containerStatuses = keepRestarts(stored?.containerStatuses, observed.containerStatuses);
  }
  if (observed.initContainerStatuses !== undefined) {
    result.initContainerStatuses = keepRestarts(
      stored?.initContainerStatuses,
      observed.initContainerStatuses,
    );
  }
  return result;
}

/** The kubelet's reason for a `Ready` held back by a readiness gate. */
const GATES_NOT_READY = "ReadinessGatesNotReady";

/**
 * The kubelet's readiness gates (`GeneratePodReadyCondition`): a `Ready: True` among `conditions`
 * becomes `False`, reason `ReadinessGatesNotReady`, when a gate's condition is missing or not
 * `True`, with one message per such gate (joined by ", "). Any other `Ready`, and every other
 * condition, is returned as it is.
 *
 * @example
 * ```ts
 * gateReady([{ type: "Ready", status: "True" }], [{ conditionType: "example.com/lb" }]);
 * // [{ type: "Ready", status: "False", reason: "ReadinessGatesNotReady",
 * //    message: 'corresponding condition of pod readiness gate "example.com/lb" does not exist.' }]
 * ```
 */
export function gateReady(
  conditions: readonly V1PodCondition[],
  readinessGates: readonly V1PodReadinessGate[] | undefined,
): V1PodCondition[] {
  const unready: string[] = [];
  for (const gate of readinessGates ?? []) {
    const type = gate?.conditionType;
    if (typeof type !== "string") continue;
    const c = conditions.find((x) => x.type === type);
    if (c === undefined) {
      unready.push(`corresponding condition of pod readiness gate "${type}" does not exist.`);
    } else if (c.status !== "True") {
      unready.push(`the status of pod readiness gate "${type}" is not "True", but ${c.status}`);
    }
  }
  if (unready.length === 0) return [...conditions];
  return conditions.map((c) =>
    c.type === "Ready" && c.status === "True"
      ? { ...c, status: "False", reason: GATES_NOT_READY, message: unready.join(", ") }
      : c,
  );
}

/**
 * A terminal stored status with each container it shows running or waiting given the observed
 * termination of the same container, when there is one (never ready, its `restartCount` never
 * lowered), and a container recorded lost (`ContainerStatusUnknown`) given the end its host
 * reported; the stored status itself when nothing changes.
 */
function settleContainers(stored: V1PodStatus, observed: V1PodStatus): V1PodStatus {
  let changed = false;
  const settle = (
    before: readonly V1ContainerStatus[] | undefined,
    seen: readonly V1ContainerStatus[] | undefined,
  ): V1ContainerStatus[] | undefined =>
    before?.map((c) => {
      const o = seen?.find((x) => x.name === c.name);
      const end = o?.state?.terminated;
      if (o === undefined || end === undefined) return c;
      const was = c.state?.terminated;
      if (was !== undefined && !(was.reason === LOST_REASON && end.reason !== LOST_REASON))
        return c;
      changed = true;
      return { ...o, ready: false, restartCount: Math.max(c.restartCount, o.restartCount) };
    });
  const containerStatuses = settle(stored.containerStatuses, observed.containerStatuses);
  const initContainerStatuses = settle(
    stored.initContainerStatuses,
    observed.initContainerStatuses,
  );
  if (!changed) return stored;
  return {
    ...stored,
    ...(containerStatuses === undefined ? {} : { containerStatuses }),
    ...(initContainerStatuses === undefined ? {} : { initContainerStatuses }),
  };
}

/**
 * The status the virtual node writes for a Pod past its `spec.activeDeadlineSeconds`, as the
 * kubelet writes it: phase `Failed`, reason `DeadlineExceeded` and the kubelet's message; `Ready`
 * and `ContainersReady` `False` (reason `PodCompleted`), transitioning at `now` when they were not
 * already `False`; no container ready. The containers' states stay as they are: the host is then
 * stopped with the Pod's grace, and its final report settles them ({@link composePodStatus}).
 *
 * @example
 * ```ts
 * const failed = deadlineExceededStatus(pod.status, new Date());
 * ```
 */
export function deadlineExceededStatus(status: V1PodStatus | undefined, now: Date): V1PodStatus {
  const notReady = (type: string): V1PodCondition => {
    const before = status?.conditions?.find((c) => c.type === type);
    return {
      type,
      status: "False",
      reason: "PodCompleted",
      lastTransitionTime:
        before?.status === "False" && before.lastTransitionTime !== undefined
          ? before.lastTransitionTime
          : now,
    };
  };
  const conditions = (status?.conditions ?? []).filter(
    (c) => c.type !== "Ready" && c.type !== "ContainersReady",
  );
  const unready = (list: readonly V1ContainerStatus[] | undefined) =>
    list?.map((c) => ({ ...c, ready: false }));
  const containerStatuses = unready(status?.containerStatuses);
  const initContainerStatuses = unready(status?.initContainerStatuses);
  return {
    ...status,
    phase: "Failed",
    reason: DEADLINE_EXCEEDED.reason,
    message: DEADLINE_EXCEEDED.message,
    conditions: [...conditions, notReady("ContainersReady"), notReady("Ready")],
    ...(containerStatuses === undefined ? {} : { containerStatuses }),
    ...(initContainerStatuses === undefined ? {} : { initContainerStatuses }),
  };
}

/** What an ephemeral container (`kubectl debug`) shows: Nebula cannot add one to a running Pod. */
export const EPHEMERAL_NOT_SUPPORTED = {
  reason: "EphemeralContainersNotSupported",
  message:
    "ephemeral containers cannot start on Nebula: a Pod's containers are fixed when its instance starts. Debug a copy instead (kubectl debug --copy-to=<name>), which runs as a Pod of its own",
} as const;

/**
 * `status` with a waiting status (reason `EphemeralContainersNotSupported`, and what to do instead)
 * for each of the Pod's `spec.ephemeralContainers` it has no status for, so `kubectl describe`
 * and `kubectl debug` say why the container never starts instead of leaving it unmentioned.
 * Statuses already there are kept. Pure.
 *
 * @example
 * ```ts
 * withEphemeralStatuses(pod.spec?.ephemeralContainers, status);
 * ```
 */
export function withEphemeralStatuses(
  ephemeral: readonly { readonly name?: string; readonly image?: string }[] | undefined,
  status: V1PodStatus,
): V1PodStatus {
  const have = new Set((status.ephemeralContainerStatuses ?? []).map((c) => c.name));
  const added: V1ContainerStatus[] = [];
  for (const c of ephemeral ?? []) {
    if (typeof c?.name !== "string" || have.has(c.name)) continue;
    have.add(c.name);
    added.push({
      name: c.name,
      image: typeof c.image === "string" ? c.image : "",
      imageID: "",
      ready: false,
      restartCount: 0,
      state: { waiting: { ...EPHEMERAL_NOT_SUPPORTED } },
    });
  }
  if (added.length === 0) return status;
  return {
    ...status,
    ephemeralContainerStatuses: [...(status.ephemeralContainerStatuses ?? []), ...added],
  };
}

function isAfter(a: Date | string | undefined, b: Date | string): boolean {
  if (a === undefined) return false;
  const ms = (t: Date | string) => (t instanceof Date ? t.getTime() : Date.parse(t));
  return ms(a) > ms(b);
}

function keepRestarts(
  stored: readonly V1ContainerStatus[] | undefined,
  observed: readonly V1ContainerStatus[],
): V1ContainerStatus[] {
  return observed.map((c) => {
    const before = stored?.find((s) => s.name === c.name);
    return before !== undefined && before.restartCount > c.restartCount
      ? { ...c, restartCount: before.restartCount }
      : c;
  });
}

/**
 * A canonical string of a status for "write only on change": keys sorted, times at the API
 * server's precision (whole seconds), empty lists and `undefined`s dropped. Two statuses the
 * server stores identically give the same string.
 */
export function canonicalStatus(status: V1PodStatus | undefined): string {
  return JSON.stringify(canonical(status ?? {}));
}

/** True when writing `desired` over `stored` would change what the API server keeps. */
export function podStatusChanged(
  stored: V1PodStatus | undefined,
  desired: V1PodStatus | undefined,
): boolean {
  if (desired === undefined) return false;
  return canonicalStatus(stored) !== canonicalStatus(desired);
}

const isoTime = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

function canonical(value: unknown): unknown {
  if (value instanceof Date) {
    const ms = value.getTime();
    return Number.isNaN(ms) ? null : new Date(Math.floor(ms / 1000) * 1000).toISOString();
  }
  if (typeof value === "string" && isoTime.test(value)) {
    const ms = Date.parse(value);
    return Number.isNaN(ms) ? value : new Date(Math.floor(ms / 1000) * 1000).toISOString();
  }
  if (Array.isArray(value)) {
    const items = value.map(canonical);
    return items.length === 0 ? undefined : items;
  }
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      const v = canonical((value as Record<string, unknown>)[key]);
      if (v !== undefined && v !== null) out[key] = v;
    }
    return Object.keys(out).length === 0 ? undefined : out;
  }
  return value;
}

/** An Event the Pod controller records about a Pod (see {@link podStatusEvents}). */
export interface PodEventSpec {
  /** `Normal` or `Warning`. */
  readonly type: "Normal" | "Warning";
  /** CamelCase reason. */
  readonly reason: string;
  /** What happened, for a person. */
  readonly note: string;
}

function allStatuses(status: V1PodStatus | undefined): V1ContainerStatus[] {
  return [...(status?.initContainerStatuses ?? []), ...(status?.containerStatuses ?? [])];
}

function finishKey(c: V1ContainerStatus): string | undefined {
  const t = c.state?.terminated ?? c.lastState?.terminated;
  if (t === undefined) return undefined;
  return `${c.restartCount}/${t.exitCode}/${t.reason ?? ""}/${String(t.finishedAt ?? "")}`;
}

/**
 * The Events a status change is worth, from the status stored before to the status written:
 * a container exited (code and reason; `Warning` when non-zero), a container entered back-off,
 * the restart limit was reached (a Pod that restarts containers became `Failed`).
 *
 * @example
 * ```ts
 * for (const e of podStatusEvents(pod, before, after)) recorder.record(pod, e);
 * ```
 */
export function podStatusEvents(
  pod: V1Pod,
  before: V1PodStatus | undefined,
  after: V1PodStatus | undefined,
): PodEventSpec[] {
  const events: PodEventSpec[] = [];
  const previous = new Map(allStatuses(before).map((c) => [c.name, c]));
  for (const c of allStatuses(after)) {
    const was = previous.get(c.name);
    const key = finishKey(c);
    if (key !== undefined && (was === undefined || finishKey(was) !== key)) {
      const t = c.state?.terminated ?? c.lastState?.terminated;
      if (t !== undefined) {
        events.push({
          type: t.exitCode === 0 ? "Normal" : "Warning",
          reason: "ContainerExited",
          note: `Container ${c.name} exited with code ${t.exitCode}${t.reason ? ` (${t.reason})` : ""}${t.message ? `: ${t.message.slice(0, 200)}` : ""}`,
        });
      }
    }
    const waiting = c.state?.waiting?.reason;
    if (waiting === "CrashLoopBackOff" && was?.state?.waiting?.reason !== "CrashLoopBackOff") {
      events.push({
        type: "Warning",
        reason: "BackOff",
        note: `Back-off restarting failed container ${c.name}${c.state?.waiting?.message ? `: ${c.state.waiting.message}` : ""}`,
      });
    }
  }
  const seen = new Set((before?.ephemeralContainerStatuses ?? []).map((c) => c.name));
  for (const c of after?.ephemeralContainerStatuses ?? []) {
    if (seen.has(c.name) || c.state?.waiting?.reason !== EPHEMERAL_NOT_SUPPORTED.reason) continue;
    events.push({
      type: "Warning",
      reason: EPHEMERAL_NOT_SUPPORTED.reason,
      note: `Ephemeral container ${c.name}: ${EPHEMERAL_NOT_SUPPORTED.message}`,
    });
  }
  // Under Always a Pod only ends when its restart limit is reached; under OnFailure, when it fails.
  const policy = pod.spec?.restartPolicy ?? "Always";
  const restarted = allStatuses(after).some((c) => c.restartCount > 0);
  const limitReached =
    (policy === "Always" && isTerminalPhase(after?.phase)) ||
    (policy === "OnFailure" && after?.phase === "Failed");
  if (
    restarted &&
    limitReached &&
    !isTerminalPhase(before?.phase) &&
    after &&
    !isLost(after) &&
    after.reason !== DEADLINE_EXCEEDED.reason
  ) {
    events.push({
      type: "Warning",
      reason: "RestartLimitReached",
      note: `Restart limit reached: the Pod is ${after.phase}${after.reason ? ` (${after.reason})` : ""}${after.message ? `: ${after.message.slice(0, 200)}` : ""}`,
    });
  }
  return events;
}
