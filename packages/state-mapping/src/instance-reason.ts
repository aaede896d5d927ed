/**
 * The reverse mapping for the roll-up: a Pod's (or an Instance object's) status → one instance
 * failure reason (docs/contracts.md#failure-reasons-and-ranking) with a one-sentence message. It reads container state, never the
 * phase: a crash-looping Pod is phase `Running`.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { INSTANCE_REASONS, type InstanceReason, isInstanceReason } from "./reasons.js";
import { sanitize, statusText, truncate } from "./text.js";

/**
 * The default stability window, in seconds: a container that restarted less than this long ago
 * is not ready for availability (it counts as `InstanceCrashing`), whatever the kubelet's
 * `ready` says.
 *
 * Ten minutes is the kubelet's own line between a crash loop and a healthy container: its
 * restart back-off (10 s, doubling to a 300 s cap) is reset only after a container has run for
 * 10 minutes. A container whose runs are shorter than that is still in the same crash loop for
 * the kubelet (its next exit waits for a longer back-off), so it is never available here either;
 * the window is measured from the current run's start, so the back-off waits in between (up to
 * 300 s, while the container is not running and so not ready anyway) do not shorten it. A shorter
 * window (say the 300 s cap) would show a container that crashes after 6 minutes of every run as
 * available for a minute of each cycle.
 */
export const DEFAULT_STABILITY_WINDOW_SECONDS = 600;

/**
 * Longest termination or waiting message quoted in a reason message, in code points (an
 * ellipsis included when cut; the cut falls on a grapheme boundary).
 */
const MAX_QUOTED_MESSAGE_CHARS = 200;

/** Longest reason message, in code points (the roll-up's representative-message budget). */
const MAX_REASON_MESSAGE_CHARS = 1024;

/**
 * Restart counts a message states exactly; above them it says "more than N times" with N the
 * largest of 5, 10, 20, 50, 100, 200, 500, ... below the count. A steady crash loop therefore
 * changes its message (and the roll-up's status) only when the count crosses one of these steps,
 * not on every restart.
 */
const EXACT_RESTART_COUNTS = 5;

/** What {@link toInstanceReason} returns: the reason, whether the instance is ready, one sentence. */
export interface InstanceReasonResult {
  /** One of {@link INSTANCE_REASONS}. */
  readonly reason: InstanceReason;
  /**
   * True when every regular container is ready (the roll-up counts the instance as ready) and,
   * when `now` was given, none restarted within the stability window.
   */
  readonly ready: boolean;
  /** One human sentence about this one instance, free of volatile values (no ages or times). */
  readonly message: string;
  /**
   * When time alone changes this answer: the earliest end of a stability window that holds a
   * running container (only with `now`). Map the Pod again at this moment, even if nothing else
   * changes; absent when the answer waits for a new observation.
   */
  readonly recheckAt?: Date;
}

/** Options of {@link toInstanceReason}. */
export interface InstanceReasonOptions {
  /**
   * The time of the evaluation. With it, a running container that restarted (restart count
   * above 0) less than the stability window ago counts as crashing and not ready. Without it,
   * no window is applied (the kubelet's `ready` alone decides): pass it wherever availability is
   * judged.
   */
  readonly now?: Date | undefined;
  /**
   * The stability window in seconds (default {@link DEFAULT_STABILITY_WINDOW_SECONDS}). A value
   * that is not a finite number of 0 or more reads as the default; 0 applies no window.
   */
  readonly stabilityWindowSeconds?: number | undefined;
}

// Anything that is not a string (or number) reads as absent: `null`, a wrong type, ...
const text = z.string().optional().catch(undefined);
const num = z.number().optional().catch(undefined);
/** A time as the API server sends it (RFC 3339) or as `@kubernetes/client-node` holds it (a Date): ms, or absent. */
const time = z
  .union([z.string(), z.date()])
  .optional()
  .catch(undefined)
  .transform((t) => {
    if (t === undefined) return undefined;
    const ms = typeof t === "string" ? Date.parse(t) : t.getTime();
    return Number.isFinite(ms) ? ms : undefined;
  });

const Terminated = z.looseObject({
  exitCode: num,
  signal: num,
  reason: text,
  message: text,
  finishedAt: time,
});
const ContainerState = z
  .looseObject({
    running: z.looseObject({ startedAt: time }).optional().catch(undefined),
    waiting: z.looseObject({ reason: text, message: text }).optional().catch(undefined),
    terminated: Terminated.optional().catch(undefined),
  })
  .optional()
  .catch(undefined);

/** The parts of a `V1ContainerStatus` the reverse mapping reads. */
const ContainerStatus = z.looseObject({
  name: z.string(),
  image: text,
  state: ContainerState,
  lastState: ContainerState,
  restartCount: num,
  ready: z.boolean().optional().catch(undefined),
});
type ContainerStatus = z.output<typeof ContainerStatus>;

const Condition = z.looseObject({
  type: z.string(),
  status: z.string(),
  reason: text,
  message: text,
});

const PodStatus = z.looseObject({
  phase: text,
  reason: text,
  message: text,
  conditions: z.array(Condition).optional().catch(undefined),
  containerStatuses: z.array(ContainerStatus).optional().catch(undefined),
  initContainerStatuses: z.array(ContainerStatus).optional().catch(undefined),
});
type PodStatus = z.output<typeof PodStatus>;

const ContainerSpec = z.looseObject({
  name: z.string(),
  image: text,
  restartPolicy: text,
  resources: z
    .looseObject({
      limits: z
        .looseObject({ memory: z.union([z.string(), z.number()]).optional().catch(undefined) })
        .optional()
        .catch(undefined),
    })
    .optional()
    .catch(undefined),
});
const PodSpec = z
  .looseObject({
    containers: z.array(ContainerSpec).catch([]),
    initContainers: z.array(ContainerSpec).optional().catch(undefined),
  })
  .optional()
  .catch(undefined);
type PodSpec = z.output<typeof PodSpec>;

const Wrapped = z.looseObject({ status: z.unknown().optional(), spec: z.unknown().optional() });

const IMAGE_REASONS = new Set([
  "ErrImagePull",
  "ImagePullBackOff",
  "InvalidImageName",
  "ErrImageNeverPull",
  "RegistryUnavailable",
]);
const CONFIG_WAITING_REASONS = new Set([
  "CreateContainerConfigError",
  "CreateContainerError",
  "RunContainerError",
  "PreStartHookError",
  "PostStartHookError",
  "PreCreateHookError",
]);
const START_FAILURE_REASONS = new Set(["ContainerCannotRun", "StartError"]);
const STARTING_REASONS = new Set(["ContainerCreating", "PodInitializing"]);

/** Pod-level reasons for an instance the platform (or a user) stopped: its containers were stopped with it. */
const STOPPED_POD_REASONS = new Set([
  "DeadlineExceeded",
  "SpotInterruption",
  "InstanceLost",
  "InsufficientCapacity",
  "QuotaExceeded",
  "NodeLost",
  "ProviderFailed",
]);

/** Signals `docker stop` ends a container with: SIGTERM, then SIGKILL after the grace period. */
const STOP_SIGNALS = new Set([15, 9]);

/**
 * Pod-level `status.reason` values (besides the names in `INSTANCE_REASONS` themselves) that say
 * why a Pod is not running: ours (`SpotInterruption`), the provider's launch errors
 * (`InvalidPodSpec`, `InvalidConfiguration`), its refusals before launch (the `@nebula/userdata`
 * error codes, `UserDataTooLarge`, `InstanceTypeNotAllowed`) and the kubelet's/virtual-kubelet's
 * (`DeadlineExceeded`: a Pod past its `activeDeadlineSeconds`, a `ConfigurationError`).
 */
const POD_REASONS: Readonly<Record<string, InstanceReason>> = {
  SpotInterruption: "InstanceLost",
  InvalidPodSpec: "InvalidSpec",
  // The provider's own configuration (an AMI, subnet, security group or instance profile EC2
  // refuses): the operator's to fix, not the customer's; the Pod's spec is not at fault.
  InvalidConfiguration: "PlatformMisconfigured",
  // A Pod the provider refuses before launch carries the refusal's code as its reason: nothing can
  // be placed until the spec changes, so it ranks as a rejected spec, never as "starting".
  InvalidPod: "InvalidSpec",
  SecretInUserData: "InvalidSpec",
  UnsupportedEnvSource: "InvalidSpec",
  UnsupportedVolume: "InvalidSpec",
  UnsupportedField: "InvalidSpec",
  UserDataTooLarge: "InvalidSpec",
  TooLarge: "InvalidSpec",
  InstanceTypeNotAllowed: "InvalidSpec",
  NodeLost: "InstanceLost",
  ProviderFailed: "InstanceLost",
  NotFound: "InstanceLost",
  // Past its spec.activeDeadlineSeconds (the kubelet's reason, and the virtual node's): the
  // customer's own deadline ended it, so the customer decides (a longer deadline, a faster job).
  DeadlineExceeded: "ConfigurationError",
};

const SIGNALS: Readonly<Record<number, string>> = {
  1: "SIGHUP",
  2: "SIGINT",
  3: "SIGQUIT",
  4: "SIGILL",
  5: "SIGTRAP",
  6: "SIGABRT",
  7: "SIGBUS",
  8: "SIGFPE",
  9: "SIGKILL",
  10: "SIGUSR1",
  11: "SIGSEGV",
  12: "SIGUSR2",
  13: "SIGPIPE",
  14: "SIGALRM",
  15: "SIGTERM",
};

interface Finding {
  readonly reason: InstanceReason;
  readonly message: string;
}

/** The evaluation time and window, resolved once per call. */
interface Clock {
  /** ms since the epoch, or undefined: no window. */
  readonly now: number | undefined;
  readonly windowMs: number;
  /** `10 minutes`, as the crash-loop sentence states the window. */
  readonly windowText: string;
}

function clockOf(options: InstanceReasonOptions | undefined): Clock {
  const raw = options?.stabilityWindowSeconds;
  const seconds =
    typeof raw === "number" && Number.isFinite(raw) && raw >= 0
      ? raw
      : DEFAULT_STABILITY_WINDOW_SECONDS;
  const at = options?.now instanceof Date ? options.now.getTime() : Number.NaN;
  return {
    now: Number.isFinite(at) && seconds > 0 ? at : undefined,
    windowMs: seconds * 1000,
    windowText: windowText(seconds),
  };
}

/** `10 minutes`, `1 minute`, `90 seconds`, `1 hour`. */
function windowText(seconds: number): string {
  const unit = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
  if (seconds >= 3600 && seconds % 3600 === 0) return unit(seconds / 3600, "hour");
  if (seconds >= 60 && seconds % 60 === 0) return unit(seconds / 60, "minute");
  return unit(Math.round(seconds * 1000) / 1000, "second");
}

/**
 * The end of the stability window that holds a running container (ms), or undefined when none
 * does: it has restarted, and its current run started (or, when that is not known, its last run
 * ended) less than the window before `now`.
 */
function heldUntil(c: ContainerStatus, clock: Clock): number | undefined {
  if (clock.now === undefined || (c.restartCount ?? 0) <= 0) return undefined;
  const running = c.state?.running ?? undefined;
  if (running === undefined || c.state?.waiting != null || c.state?.terminated != null) {
    return undefined;
  }
  const restartedAt = running.startedAt ?? c.lastState?.terminated?.finishedAt ?? undefined;
  if (restartedAt === undefined) return undefined;
  const end = restartedAt + clock.windowMs;
  return clock.now < end ? end : undefined;
}

/**
 * Maps a Pod (or its `V1PodStatus`), or an Instance object (or its status), to the instance
 * failure reason the roll-up ranks, whether the instance is ready, and one sentence about it.
 *
 * Reads container state, never the phase: `CrashLoopBackOff` → `InstanceCrashing` although the
 * Pod is `Running`; an OOM kill → `OutOfMemory` (with the memory limit when a Pod spec is given);
 * image pull failures → `ImageUnavailable`; config and start failures → `ConfigurationError`; a
 * container lost with its instance → `InstanceLost` (or `InsufficientCapacity`/`QuotaExceeded`
 * from the Pod's `status.reason`). The termination message the application wrote and the
 * signal that killed it are quoted. When several containers fail, the highest-ranked reason in
 * {@link INSTANCE_REASONS} wins.
 *
 * A Pod whose instance state is unknown (phase `Unknown`, e.g. `status.reason`
 * `ReportUnreadable`) gives `Unknown`, unless a container shows a higher-ranked failure. A Pod
 * whose instance was stopped from outside (`status.reason` `SpotInterruption`, `InstanceLost`,
 * `InsufficientCapacity`, ...) does not count the containers that the stop killed (SIGTERM or
 * SIGKILL, not an OOM kill) as crashes: it gives the Pod reason's instance reason.
 *
 * Availability survives a restart: with `options.now`, a running container (a native sidecar
 * too) that has restarted and whose current run started less than the stability window ago
 * (`options.stabilityWindowSeconds`, default {@link DEFAULT_STABILITY_WINDOW_SECONDS}; its last
 * exit's `finishedAt` when the start is not known) is not ready, whatever the kubelet's `ready`
 * says, and gives `InstanceCrashing` (or `OutOfMemory` when its last run was OOM-killed) with the
 * same sentence as while it waits in `CrashLoopBackOff`: restart count and last exit, never an
 * age. So between two restarts a crash loop reads as it does during the back-off. `recheckAt`
 * says when the window ends; after it, a container that stayed up is ready again. The Pod's own
 * status is not touched: this is the roll-up's view.
 *
 * Total: input it cannot read gives `Unknown` with a message saying so.
 *
 * @example
 * ```ts
 * toInstanceReason(pod, { now: new Date() });
 * // { reason: "InstanceCrashing", ready: false, message: 'container "app" has exited and restarted
 * //   3 times without staying up for 10 minutes. Its last exit was with code 1.',
 * //   recheckAt: <the current run's start + 10 minutes, while it runs> }
 * ```
 */
export function toInstanceReason(
  podOrInstanceStatus: unknown,
  options?: InstanceReasonOptions,
): InstanceReasonResult {
  const result = reasonOf(podOrInstanceStatus, clockOf(options));
  return { ...result, message: statusText(result.message, MAX_REASON_MESSAGE_CHARS) };
}

function reasonOf(podOrInstanceStatus: unknown, clock: Clock): InstanceReasonResult {
  let statusInput: unknown = podOrInstanceStatus;
  let spec: PodSpec;
  const wrapped = Wrapped.safeParse(podOrInstanceStatus);
  if (wrapped.success && wrapped.data.status !== undefined) {
    statusInput = wrapped.data.status;
    spec = PodSpec.safeParse(wrapped.data.spec).data;
  }
  const pod = PodStatus.safeParse(statusInput);
  if (!pod.success) {
    return {
      reason: "Unknown",
      ready: false,
      message: "the instance's status could not be read.",
    };
  }
  const hasContainers =
    (pod.data.containerStatuses?.length ?? 0) > 0 ||
    (pod.data.initContainerStatuses?.length ?? 0) > 0;
  if (!hasContainers) {
    const fromInstance = fromInstanceConditions(pod.data.conditions ?? []);
    if (fromInstance !== undefined) return fromInstance;
  }
  return fromPod(pod.data, spec, clock);
}

function fromInstanceConditions(
  conditions: readonly z.output<typeof Condition>[],
): InstanceReasonResult | undefined {
  const carrying = conditions.filter((c) => isInstanceReason(c.reason));
  const chosen =
    carrying.find((c) => c.type === "Ready") ??
    carrying.find((c) => c.type === "Available") ??
    carrying[0];
  if (chosen === undefined || !isInstanceReason(chosen.reason)) return undefined;
  const readyCondition = conditions.find((c) => c.type === "Ready");
  const ready =
    readyCondition !== undefined ? readyCondition.status === "True" : chosen.reason === "Ready";
  return {
    reason: chosen.reason,
    ready,
    message: chosen.message ?? `the instance reports ${chosen.reason}.`,
  };
}

function fromPod(status: PodStatus, spec: PodSpec, clock: Clock): InstanceReasonResult {
  const init = status.initContainerStatuses ?? [];
  const app = status.containerStatuses ?? [];
  // The stability window: a running container (a sidecar included) that restarted within it is
  // crashing, not ready, whatever the kubelet's `ready` says; the earliest end is when to look again.
  let recheckAt: number | undefined;
  const held = new Set<ContainerStatus>();
  for (const c of [...init, ...app]) {
    const end = heldUntil(c, clock);
    if (end === undefined) continue;
    held.add(c);
    if (recheckAt === undefined || end < recheckAt) recheckAt = end;
  }
  const ready = app.length > 0 && app.every((c) => c.ready === true) && held.size === 0;
  const findings: Finding[] = [];
  for (const c of init) {
    const f = examine(c, status, spec, true, held.has(c), clock);
    if (f) findings.push(f);
  }
  for (const c of app) {
    const f = examine(c, status, spec, false, held.has(c), clock);
    if (f) findings.push(f);
  }
  const timed = (result: InstanceReasonResult): InstanceReasonResult =>
    recheckAt === undefined ? result : { ...result, recheckAt: new Date(recheckAt) };
  const scheduled = status.conditions?.find((c) => c.type === "PodScheduled");
  if (scheduled?.status === "False" && scheduled.reason !== "SchedulingGated") {
    findings.push({
      reason: "NoMatchingLocation",
      message: `the instance could not be placed${scheduled.message ? `: ${quoteless(scheduled.message)}` : ""}.`,
    });
  }
  const podReason =
    POD_REASONS[status.reason ?? ""] ??
    (isInstanceReason(status.reason) && rankOf(status.reason) < rankOf("Provisioning")
      ? status.reason
      : undefined);
  if (podReason !== undefined) {
    findings.push({
      reason: podReason,
      message: status.message ? sentence(status.message) : `the instance reports ${status.reason}.`,
    });
  } else if (status.phase === "Unknown" || status.reason === "ReportUnreadable") {
    findings.push({
      reason: "Unknown",
      message: status.message ? sentence(status.message) : "the instance's state is unknown.",
    });
  } else if (app.length === 0 && init.length === 0 && status.phase === "Failed") {
    findings.push({
      reason: "InstanceLost",
      message: status.message
        ? `${sentence(status.message)}`
        : `the instance failed${status.reason ? ` (${status.reason})` : ""}.`,
    });
  }
  const worst = rank(findings, (r) => rankOf(r) < rankOf("Provisioning"));
  if (worst) return timed({ ...worst, ready });
  if (ready) {
    return {
      reason: "Ready",
      ready,
      message:
        app.length === 1
          ? `container "${app[0]?.name}" is running and ready.`
          : `all ${app.length} containers are running and ready.`,
    };
  }
  if (app.length > 0 && app.every((c) => c.state?.terminated?.exitCode === 0)) {
    return {
      reason: "Completed",
      ready: false,
      message:
        app.length === 1
          ? `container "${app[0]?.name}" finished successfully.`
          : `all ${app.length} containers finished successfully.`,
    };
  }
  const sandbox = status.conditions?.find((c) => c.type === "PodReadyToStartContainers");
  const nothingStarted = [...init, ...app].every(
    (c) =>
      c.state?.running == null &&
      c.state?.terminated == null &&
      c.lastState?.terminated == null &&
      STARTING_REASONS.has(c.state?.waiting?.reason ?? "ContainerCreating"),
  );
  if (sandbox?.status === "False" && nothingStarted && status.phase !== "Failed") {
    return { reason: "Provisioning", ready: false, message: "the instance is being provisioned." };
  }
  const working = rank(findings, () => true);
  if (working) return timed({ ...working, ready });
  if (app.length === 0 && init.length === 0) {
    return { reason: "Provisioning", ready: false, message: "the instance is being provisioned." };
  }
  return { reason: "Starting", ready: false, message: "the instance is starting." };
}

function rankOf(reason: InstanceReason): number {
  return INSTANCE_REASONS.indexOf(reason);
}

function rank(
  findings: readonly Finding[],
  keep: (r: InstanceReason) => boolean,
): Finding | undefined {
  let best: Finding | undefined;
  for (const f of findings) {
    if (!keep(f.reason)) continue;
    if (best === undefined || rankOf(f.reason) < rankOf(best.reason)) best = f;
  }
  return best;
}

/** What one container's status says, or nothing when it is fine or finished well. */
function examine(
  c: ContainerStatus,
  pod: PodStatus,
  spec: PodSpec,
  init: boolean,
  held: boolean,
  clock: Clock,
): Finding | undefined {
  const who = `${init ? "init container" : "container"} "${c.name}"`;
  const waiting = c.state?.waiting ?? undefined;
  const term = c.state?.terminated ?? undefined;
  if (term !== undefined && STOPPED_POD_REASONS.has(pod.reason ?? "") && stoppedFromOutside(term)) {
    // Running until its instance was stopped from outside: not the container's failure. The
    // Pod-level reason (SpotInterruption, InstanceLost, ...) says what happened.
    return undefined;
  }
  const last = c.lastState?.terminated ?? undefined;
  const restarts = c.restartCount ?? 0;

  if (term?.reason === "ContainerStatusUnknown") {
    const reason: InstanceReason =
      pod.reason === "InsufficientCapacity"
        ? "InsufficientCapacity"
        : pod.reason === "QuotaExceeded"
          ? "QuotaExceeded"
          : "InstanceLost";
    const detail = pod.message ?? term.message;
    return {
      reason,
      message: detail ? sentence(detail) : `${who} was lost with its instance.`,
    };
  }
  if (waiting?.reason !== undefined && IMAGE_REASONS.has(waiting.reason)) {
    const image = c.image ? ` "${c.image}"` : "";
    const why = waiting.message ? `: ${quoteless(waiting.message)}` : "";
    return {
      reason: "ImageUnavailable",
      message: `${who} could not pull its image${image}${why}.`,
    };
  }
  if (waiting?.reason !== undefined && CONFIG_WAITING_REASONS.has(waiting.reason)) {
    const why = waiting.message ? `: ${quoteless(waiting.message)}` : ` (${waiting.reason})`;
    return {
      reason: "ConfigurationError",
      message: `${who} could not be started because of its configuration${why}.`,
    };
  }
  const oom = term?.reason === "OOMKilled" ? term : last?.reason === "OOMKilled" ? last : undefined;
  if (oom) {
    const limit = memoryLimit(spec, c.name, init);
    return {
      reason: "OutOfMemory",
      message: `${who} was killed because it ran out of memory${limit ? ` (limit ${limit})` : ""}.`,
    };
  }
  const startFailure =
    term?.reason !== undefined && START_FAILURE_REASONS.has(term.reason)
      ? term
      : waiting && last?.reason !== undefined && START_FAILURE_REASONS.has(last.reason)
        ? last
        : undefined;
  if (startFailure) {
    const why = startFailure.message
      ? `: ${quoteless(startFailure.message)}`
      : ` (${startFailure.reason})`;
    return { reason: "ConfigurationError", message: `${who} could not be started${why}.` };
  }
  const restarting = waiting !== undefined && last !== undefined;
  // Running again, but restarted within the stability window: the same sentence as while it
  // waits to restart, so a crash loop reads the same between two restarts as during the back-off.
  if (waiting?.reason === "CrashLoopBackOff" || (restarting && last?.exitCode !== 0) || held) {
    const times =
      restarts === 0
        ? "has exited and is waiting to restart"
        : `has exited and restarted ${restartCount(restarts)} without staying up for ${clock.windowText}`;
    return {
      reason: "InstanceCrashing",
      message: `${who} ${times}.${last ? ` ${lastExit(last)}` : ""}`,
    };
  }
  if (term !== undefined && term.exitCode !== 0) {
    if (restarts > 0) {
      return {
        reason: "InstanceCrashing",
        message: `${who} has exited and restarted ${restartCount(restarts)} without staying up for ${clock.windowText}. ${lastExit(term)}`,
      };
    }
    return { reason: "InstanceCrashing", message: `${who} ${exitClause(term)}.` };
  }
  if (waiting !== undefined) {
    if (waiting.reason === undefined || STARTING_REASONS.has(waiting.reason)) {
      return { reason: "Starting", message: `${who} is starting.` };
    }
    const why = waiting.message ? `: ${quoteless(waiting.message)}` : "";
    return { reason: "Starting", message: `${who} is waiting (${waiting.reason})${why}.` };
  }
  if (c.state?.running != null && c.ready !== true && !init) {
    return { reason: "Starting", message: `${who} is running but not ready.` };
  }
  if (c.state == null && !init) return { reason: "Starting", message: `${who} is starting.` };
  return undefined;
}

/** `1 time`, `3 times`, then `more than 5 times`, `more than 10 times`, `more than 20 times`, ... */
function restartCount(restarts: number): string {
  if (restarts <= EXACT_RESTART_COUNTS) return `${restarts} ${restarts === 1 ? "time" : "times"}`;
  let step = EXACT_RESTART_COUNTS;
  for (let decade = 10; decade <= Number.MAX_SAFE_INTEGER; decade *= 10) {
    for (const next of [decade, decade * 2, decade * 5]) {
      if (next >= restarts) return `more than ${step} times`;
      step = next;
    }
  }
  return `more than ${step} times`;
}

/** True for an exit `docker stop` causes: SIGTERM or SIGKILL (signal or 128 + signal), not an OOM kill. */
function stoppedFromOutside(t: z.output<typeof Terminated>): boolean {
  if (t.reason === "OOMKilled") return false;
  const signal = t.signal ?? (t.exitCode !== undefined && t.exitCode > 128 ? t.exitCode - 128 : 0);
  return STOP_SIGNALS.has(signal);
}

/** "exited with code 1 and the message "..."" / "was killed by signal 9 (SIGKILL)". */
function exitClause(t: z.output<typeof Terminated>): string {
  const message = t.message ? ` and the message "${quoteless(t.message)}"` : "";
  if (t.signal !== undefined && t.signal > 0) {
    const name = SIGNALS[t.signal];
    return `was killed by signal ${t.signal}${name ? ` (${name})` : ""}${message}`;
  }
  return `exited with code ${t.exitCode ?? "unknown"}${message}`;
}

/** "Its last exit was with code 1." / "Its last run was killed by signal 9 (SIGKILL)." */
function lastExit(t: z.output<typeof Terminated>): string {
  const message = t.message ? ` and the message "${quoteless(t.message)}"` : "";
  if (t.signal !== undefined && t.signal > 0) {
    const name = SIGNALS[t.signal];
    return `Its last run was killed by signal ${t.signal}${name ? ` (${name})` : ""}${message}.`;
  }
  return `Its last exit was with code ${t.exitCode ?? "unknown"}${message}.`;
}

function memoryLimit(spec: PodSpec, name: string, init: boolean): string | undefined {
  const list = init ? (spec?.initContainers ?? []) : (spec?.containers ?? []);
  const memory = list.find((c) => c.name === name)?.resources?.limits?.memory;
  return memory === undefined || memory === null ? undefined : String(memory);
}

/**
 * One line, trimmed, without double quotes, control characters or escapes, at most
 * {@link MAX_QUOTED_MESSAGE_CHARS} code points, cut on a grapheme boundary.
 */
function quoteless(message: string): string {
  const one = sanitize(message).replace(/\s+/g, " ").replace(/"/g, "'").trim().replace(/[.]$/, "");
  return truncate(one, MAX_QUOTED_MESSAGE_CHARS);
}

function sentence(message: string): string {
  const one = quoteless(message);
  return /[.!?]$/.test(one) ? one : `${one}.`;
}
