/**
 * `InstanceState`: what is true about one Pod's instance, built from the EC2 instance as
 * `DescribeInstances` returns it, the exit report in its tags, an optional console-output report,
 * and the previous observation. Pure and total.
 *
 * @packageDocumentation
 */
import { type Ec2Cause, type Ec2Instance, ec2Cause, parseEc2Instance } from "./instance.js";
import {
  decodeConsoleOutput,
  decodeReportTags,
  ExitReport,
  REPORT_TAG_KEY,
  type ReportReadResult,
} from "./report.js";

/** How long an instance may stay invisible to `DescribeInstances` after launch (EC2 is eventually consistent). */
const DEFAULT_ABSENT_GRACE_MS = 60_000;

/** How long a running instance may go without its first report before it counts as overdue. */
const DEFAULT_BOOT_TIMEOUT_MS = 15 * 60_000;

/**
 * The highest report `seq` accepted: a Kubernetes `int32`. A report claiming more is unreadable,
 * so that a forged huge `seq` cannot silence every later genuine report for ever, and every
 * accepted `seq` survives a JSON round trip exactly.
 */
export const MAX_REPORT_SEQ = 2147483647;

/**
 * How far a report's `seq` may run ahead of the newest report already accepted: this many, plus
 * one per {@link SEQ_JUMP_GROWTH_MS} since that report's observation. The supervisor writes one
 * report per change (restarts backed off, probe reports rate-limited), so a genuine report never
 * comes near it between two observations; a forged console line (a privileged container can
 * write `/dev/console`) cannot jump far ahead and silence its Pod's genuine reports for long.
 */
const MAX_REPORT_SEQ_JUMP = 1000;
/** The allowance of {@link MAX_REPORT_SEQ_JUMP} grows by one report per this many ms. */
const SEQ_JUMP_GROWTH_MS = 10_000;

/** The EC2 facts every state with a readable instance carries. */
export interface InstanceFacts {
  /** EC2 instance ID. */
  readonly instanceId: string;
  /** `State.Name` as EC2 gave it (`pending`, `running`, `stopping`, `stopped`, `shutting-down`, `terminated`, ...). */
  readonly ec2State: string;
  /** Why EC2 says the instance changed state (see {@link Ec2Cause}). */
  readonly cause: Ec2Cause;
  /** `StateReason.Code`, when EC2 gave one. */
  readonly stateReasonCode?: string;
  /** `StateReason.Message`, when EC2 gave one. */
  readonly stateReasonMessage?: string;
  /** `LaunchTime`, when EC2 gave a valid one. */
  readonly launchTime?: Date;
  /** `PrivateIpAddress`: becomes the Pod's `hostIP` and `podIP`. */
  readonly privateIp?: string;
  /** `PublicIpAddress`. */
  readonly publicIp?: string;
}

/** Why an instance was lost: an {@link Ec2Cause}, or `Absent` when `DescribeInstances` no longer lists it. */
export type LostCause = Ec2Cause | "Absent";

/** Why the state is `Unknown`. */
type UnknownReason =
  /** The instance object does not have the shape `DescribeInstances` returns. */
  | "InstanceUnreadable"
  /** The exit report in the tags (or console) could not be read. */
  | "ReportUnreadable"
  /** EC2 gave a `State.Name` this package does not know. */
  | "UnknownInstanceState";

interface StateBase {
  /** The `now` this state was computed at. */
  readonly observedAt: Date;
  /**
   * The accepted report: the readable report with the highest `seq` seen so far (this
   * observation's tags, its console output, or the previous state's report). Pass the whole
   * state back as `previous` next time, so a stale report never replaces a newer one.
   */
  readonly report?: ExitReport;
}

/**
 * The instance is being created: EC2 says `pending`, or the launch is so recent that
 * `DescribeInstances` does not list it yet (`instance` absent).
 */
interface PendingState extends StateBase {
  readonly kind: "Pending";
  readonly instance?: InstanceFacts;
}

/** EC2 says `running`, but the host supervisor has not reported yet (cloud-init, image pull setup). */
interface BootingState extends StateBase {
  readonly kind: "Booting";
  readonly instance: InstanceFacts;
  /** True when the instance has been running longer than the boot timeout without reporting. */
  readonly overdue: boolean;
}

/** EC2 says `running` and the supervisor reports its containers (running, waiting or restarting). */
interface RunningState extends StateBase {
  readonly kind: "Running";
  readonly instance: InstanceFacts;
  readonly report: ExitReport;
}

/** EC2 says `stopping` or `shutting-down`; the final report may still arrive. */
interface StoppingState extends StateBase {
  readonly kind: "Stopping";
  readonly instance: InstanceFacts;
}

/**
 * Why the host supervisor of a `Terminal` instance stopped its containers, when it was stopped
 * from outside: the final report says so (`stopRequested`) and EC2 names a platform or user cause.
 */
export interface StopFacts {
  /** The EC2 cause of the stop: never `InstanceInitiatedShutdown` nor `None` (see {@link STOP_CAUSES}). */
  readonly cause: Ec2Cause;
  /** One sentence saying what happened, free of volatile values (no times). */
  readonly message: string;
}

/**
 * The EC2 causes that make a stop requested from outside the instance (`stopRequested` in the
 * final report) a platform or user stop rather than a customer failure: everything but
 * `InstanceInitiatedShutdown` (the instance powered itself off) and `None` (EC2 gave no cause).
 */
const STOP_CAUSES: readonly Ec2Cause[] = [
  "SpotInterruption",
  "InsufficientCapacity",
  "UserInitiatedShutdown",
  "InternalError",
  "VolumeLimitExceeded",
  "ScheduledStop",
  "Other",
];

/** The supervisor wrote its final report: no container will run again. Whatever EC2 says. */
interface TerminalState extends StateBase {
  readonly kind: "Terminal";
  /** Absent when the instance is already gone (or unreadable) but its final report was kept. */
  readonly instance?: InstanceFacts;
  readonly report: ExitReport;
  /**
   * Present when the final report says the supervisor was stopped from outside
   * (`report.stopRequested`) and EC2 names one of {@link STOP_CAUSES}: the containers that were
   * still running were stopped by the platform or a user, not by their own failure. Once set it is
   * kept from the previous observation (the instance may later vanish from `DescribeInstances`).
   * A final report that carries a Spot interruption notice sets it to `SpotInterruption` whatever
   * EC2 says yet (the instance may still be running when the report arrives).
   */
  readonly stopped?: StopFacts;
  /** Present when a container hit the Pod's restart limit, which ended the Pod. */
  readonly restartLimit?: RestartLimitFacts;
  /** True when console output was passed in and considered (see {@link needsConsoleOutput}). */
  readonly consoleConsulted?: boolean;
}

/** The Pod ended because a container's restarts hit its restart limit. */
interface RestartLimitFacts {
  /** The container that hit the limit. */
  readonly container: string;
  /** The limit. */
  readonly limit: number;
  /** One sentence for the Pod's `status.message`, naming the limit and the annotation that sets it. */
  readonly message: string;
}

/** The Pod annotation that sets the restart limit (the cost guard). */
export const RESTART_LIMIT_ANNOTATION = "nebula.dev/restart-limit";

/**
 * The instance stopped, terminated or vanished without a final report. Its containers' fate is
 * unknown: the Pod becomes `Failed` with `ContainerStatusUnknown` (exit 137), never `Succeeded`.
 * A later final report (for example from the console output) still turns it into `Terminal`.
 */
interface LostState extends StateBase {
  readonly kind: "Lost";
  /** Absent when `DescribeInstances` no longer lists the instance. */
  readonly instance?: InstanceFacts;
  readonly cause: LostCause;
  /** One sentence saying what happened, free of volatile values (no times). */
  readonly message: string;
  /** Why no report could be used, when one was there but unreadable. */
  readonly reportProblem?: string;
  /** True when console output was passed in and considered. */
  readonly consoleConsulted: boolean;
}

/** Something could not be read; `reason` says what. */
interface UnknownState extends StateBase {
  readonly kind: "Unknown";
  readonly reason: UnknownReason;
  /** One sentence saying what could not be read. */
  readonly message: string;
  readonly instance?: InstanceFacts;
}

/**
 * What is true about one Pod's instance. A discriminated union on `kind`:
 * `Pending` → `Booting` → `Running` → `Stopping` → `Terminal` | `Lost`, plus `Unknown`.
 *
 * Build it with {@link toInstanceState}; turn it into a Pod status with `toPodStatus`.
 */
export type InstanceState =
  | PendingState
  | BootingState
  | RunningState
  | StoppingState
  | TerminalState
  | LostState
  | UnknownState;

/**
 * What {@link toInstanceState} reads from the previous observation. Every {@link InstanceState}
 * is one; a state persisted as JSON and read back also works (its report is re-validated).
 */
export interface PreviousObservation {
  /** The previous state's `kind`: a `Lost` or `Terminal` instance never goes back to a live state. */
  readonly kind?: string;
  /** The previously accepted report (validated again; an invalid one is ignored). */
  readonly report?: unknown;
  /**
   * Present when the previous observation saw the instance in `DescribeInstances`. When it
   * names another `instanceId` than the instance now observed, the previous observation is
   * ignored (the Pod's instance was replaced).
   */
  readonly instance?: unknown;
  /** A previous `Lost` state's cause: kept, so a later termination or disappearance does not rewrite why it was lost. */
  readonly cause?: unknown;
  /** A previous `Lost` state's message, kept with its cause. */
  readonly message?: unknown;
  /** A previous `Terminal` state's {@link TerminalState.stopped}: kept while the report is the same. */
  readonly stopped?: unknown;
  /**
   * When the previous observation was made: how far a new report's `seq` may run ahead of the
   * previous report grows with the time since (absent: no growth).
   */
  readonly observedAt?: unknown;
}

/** Options of {@link toInstanceState}. */
export interface ToInstanceStateOptions {
  /** The time of this observation. The mapping never reads the clock. */
  readonly now: Date;
  /**
   * The previous state of the same instance (or anything with its accepted `report`). Its report
   * competes with the new ones by `seq`, so an older report never overwrites a newer one, and a
   * `Lost`/`Terminal` instance never goes back to a live state.
   */
  readonly previous?: PreviousObservation | undefined;
  /**
   * The instance's serial console output, base64-decoded (`GetConsoleOutput`). Pass it for a
   * stopped instance without a readable report in its tags (see {@link needsConsoleOutput}).
   */
  readonly consoleOutput?: string | undefined;
  /** When the launch was requested. Within {@link ToInstanceStateOptions.absentGraceMs} of it, an unlisted instance is `Pending`, not `Lost`. */
  readonly launchedAt?: Date | undefined;
  /** Grace for an unlisted instance after launch, in ms. Default {@link DEFAULT_ABSENT_GRACE_MS}. */
  readonly absentGraceMs?: number | undefined;
  /** Boot timeout in ms after `LaunchTime` before `Booting.overdue` is true. Default {@link DEFAULT_BOOT_TIMEOUT_MS}. */
  readonly bootTimeoutMs?: number | undefined;
}

type Source = "tags" | "console" | "previous";

interface Candidates {
  readonly best?: ExitReport;
  readonly bestFrom?: Source;
  /** The first unreadable fresh source, when no fresh source gave a report. */
  readonly problem?: string;
}

/**
 * Computes the {@link InstanceState} of one instance. Pure and total: any input gives a state
 * (bad input gives `Unknown` with a reason), and time is the `now` option.
 *
 * @param instance - one element of `DescribeInstances`' `Reservations[].Instances[]`, or
 *   `undefined` when the poll no longer lists the instance.
 * @param options - `now`, the previous state, optional console output; see {@link ToInstanceStateOptions}.
 *
 * @example
 * ```ts
 * const state = toInstanceState(
 *   { InstanceId: "i-0abc", State: { Name: "stopped" }, StateReason: { Code: "Server.SpotInstanceTermination" } },
 *   { now: new Date("2026-11-30T05:00:00Z") },
 * );
 * state.kind; // "Lost" (cause "SpotInterruption"): the Pod will be Failed, never Succeeded
 * ```
 */
export function toInstanceState(instance: unknown, options: ToInstanceStateOptions): InstanceState {
  options = readOptions(options);
  const observedAt = options.now;
  // A previous observation of another instance (the Pod's instance was replaced) says nothing
  // about this one: its report's seq must not hide this instance's first reports.
  const effective = sameInstance(options.previous, instance)
    ? options
    : { ...options, previous: undefined };
  return mapInstance(instance, effective, observedAt);
}

function mapInstance(
  instance: unknown,
  options: ToInstanceStateOptions,
  observedAt: Date,
): InstanceState {
  const previousReport = readPrevious(options.previous);
  const seqLimit = seqLimitOf(previousReport, options.previous?.observedAt, observedAt);
  const previousSawInstance =
    options.previous?.instance !== undefined && options.previous?.instance !== null;
  const previousKind = options.previous?.kind;
  const consoleConsulted = options.consoleOutput !== undefined;
  const consoleRead: ReportReadResult = consoleConsulted
    ? decodeConsoleOutput(options.consoleOutput, seqLimit)
    : { kind: "absent" };

  const frozen = frozenLoss(options.previous);

  if (instance === undefined || instance === null) {
    const { best, problem } = pickReport(previousReport, { kind: "absent" }, consoleRead, seqLimit);
    if (best?.final)
      return terminal(best, undefined, options.previous, observedAt, consoleConsulted);
    const launchedAt = options.launchedAt;
    const grace = options.absentGraceMs ?? DEFAULT_ABSENT_GRACE_MS;
    if (
      !previousSawInstance &&
      previousKind !== "Lost" &&
      launchedAt !== undefined &&
      observedAt.getTime() - launchedAt.getTime() < grace
    ) {
      return withReport({ kind: "Pending", observedAt }, best);
    }
    return withReport(
      {
        kind: "Lost",
        observedAt,
        cause: frozen?.cause ?? "Absent",
        message: frozen?.message ?? lostMessage(undefined, "Absent", best),
        consoleConsulted,
        ...(problem === undefined ? {} : { reportProblem: problem }),
      },
      best,
    );
  }

  const parsed = parseEc2Instance(instance);
  if (!parsed.ok) {
    const { best } = pickReport(previousReport, { kind: "absent" }, consoleRead, seqLimit);
    if (best?.final)
      return terminal(best, undefined, options.previous, observedAt, consoleConsulted);
    return withReport(
      {
        kind: "Unknown",
        observedAt,
        reason: "InstanceUnreadable",
        message: parsed.error.message,
      },
      best,
    );
  }

  const facts = toFacts(parsed.instance);
  const { best, bestFrom, problem } = pickReport(
    previousReport,
    readTags(parsed.instance, previousReport),
    consoleRead,
    seqLimit,
  );
  if (best?.final) return terminal(best, facts, options.previous, observedAt, consoleConsulted);
  const unreadable = problem !== undefined && bestFrom !== "tags" && bestFrom !== "console";

  const lost = (): LostState =>
    withReport(
      {
        kind: "Lost",
        observedAt,
        instance: facts,
        cause: frozen?.cause ?? facts.cause,
        message: frozen?.message ?? lostMessage(facts, facts.cause, best),
        consoleConsulted,
        ...(unreadable ? { reportProblem: problem } : {}),
      },
      best,
    );

  // Never back from lost to alive: a Pod that went Failed stays terminal (only a final report wins).
  if (previousKind === "Lost" || previousKind === "Terminal") return lost();

  switch (facts.ec2State) {
    case "stopped":
    case "terminated":
      return lost();
    case "pending":
    case "running":
    case "stopping":
    case "shutting-down":
      break;
    default:
      return withReport(
        {
          kind: "Unknown",
          observedAt,
          instance: facts,
          reason: "UnknownInstanceState",
          message: `EC2 instance ${facts.instanceId} is in state ${JSON.stringify(facts.ec2State)}, which this version does not know`,
        },
        best,
      );
  }
  if (unreadable) {
    return withReport(
      {
        kind: "Unknown",
        observedAt,
        instance: facts,
        reason: "ReportUnreadable",
        message: `the exit report of instance ${facts.instanceId} could not be read: ${problem}`,
      },
      best,
    );
  }
  if (facts.ec2State === "pending") {
    return withReport({ kind: "Pending", observedAt, instance: facts }, best);
  }
  if (facts.ec2State === "stopping" || facts.ec2State === "shutting-down") {
    return withReport({ kind: "Stopping", observedAt, instance: facts }, best);
  }
  if (best === undefined) {
    const timeout = options.bootTimeoutMs ?? DEFAULT_BOOT_TIMEOUT_MS;
    const overdue =
      facts.launchTime !== undefined && observedAt.getTime() - facts.launchTime.getTime() > timeout;
    return { kind: "Booting", observedAt, instance: facts, overdue };
  }
  return withReport({ kind: "Running", observedAt, instance: facts, report: best }, best);
}

/** The options as this module uses them: anything that is not of the documented type is absent. */
function readOptions(raw: unknown): ToInstanceStateOptions {
  const o = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const date = (value: unknown) => (value instanceof Date ? value : undefined);
  const ms = (value: unknown) =>
    typeof value === "number" && !Number.isNaN(value) ? value : undefined;
  const previous = o.previous;
  return {
    now: date(o.now) ?? new Date(Number.NaN),
    previous:
      typeof previous === "object" && previous !== null
        ? (previous as PreviousObservation)
        : undefined,
    consoleOutput: typeof o.consoleOutput === "string" ? o.consoleOutput : undefined,
    launchedAt: date(o.launchedAt),
    absentGraceMs: ms(o.absentGraceMs),
    bootTimeoutMs: ms(o.bootTimeoutMs),
  };
}

function sameInstance(previous: ToInstanceStateOptions["previous"], instance: unknown): boolean {
  const before = (previous?.instance as { instanceId?: unknown } | null | undefined)?.instanceId;
  const now = (instance as { InstanceId?: unknown } | null | undefined)?.InstanceId;
  return typeof before !== "string" || typeof now !== "string" || before === now;
}

/**
 * True when the controller should fetch `GetConsoleOutput` for this instance and call
 * {@link toInstanceState} again with it, and the console has not been consulted yet: the instance
 * is stopped (still listed) and has no final report (none at all, or only an older, non-final
 * one: the final `CreateTags` may have failed while the console line was written); or its final
 * report came from the tags with `cut: true` (text was shortened to fit the tags, and the console
 * line carries all of it).
 */
export function needsConsoleOutput(state: InstanceState): boolean {
  if (typeof state !== "object" || state === null) return false;
  if (state.kind === "Terminal") {
    return state.instance !== undefined && state.report?.cut === true && !state.consoleConsulted;
  }
  return (
    state.kind === "Lost" &&
    state.instance !== undefined &&
    state.report?.final !== true &&
    !state.consoleConsulted
  );
}

/** Builds a `Terminal` state, with {@link TerminalState.stopped} when the report asks for it. */
function terminal(
  report: ExitReport,
  facts: InstanceFacts | undefined,
  previous: ToInstanceStateOptions["previous"],
  observedAt: Date,
  consoleConsulted: boolean,
): TerminalState {
  const stopped =
    report.interruption?.kind === "spot"
      ? spotStop(facts, report)
      : report.stopRequested === true
        ? (keptStop(previous, report) ?? stopFacts(facts, frozenLoss(previous)?.cause))
        : undefined;
  const limit = restartLimitFacts(report);
  return withReport(
    {
      kind: "Terminal",
      observedAt,
      ...(facts === undefined ? {} : { instance: facts }),
      report,
      ...(stopped === undefined ? {} : { stopped }),
      ...(limit === undefined ? {} : { restartLimit: limit }),
      ...(consoleConsulted ? { consoleConsulted } : {}),
    },
    report,
  );
}

/** The stop facts of a final report written on a Spot interruption notice. */
function spotStop(facts: InstanceFacts | undefined, report: ExitReport): StopFacts {
  const who = facts === undefined ? "the instance" : `instance ${facts.instanceId}`;
  const action = report.interruption?.action ?? "terminate";
  return {
    cause: "SpotInterruption",
    message: `${who} ${CAUSE_PHRASE.SpotInterruption} (Spot interruption notice: ${action}); its host supervisor stopped the containers within the two-minute warning and reported their final state`,
  };
}

/** The restart-limit facts of a final report, with the sentence the Pod's message uses. */
function restartLimitFacts(report: ExitReport): RestartLimitFacts | undefined {
  const limit = report.restartLimit;
  if (limit === undefined) return undefined;
  const exit = report.containers.find((c) => c.name === limit.container);
  const how =
    exit?.state === "terminated" && exit.exitCode !== undefined
      ? ` after its last exit (code ${exit.exitCode}${exit.reason === undefined ? "" : `, ${exit.reason}`})`
      : "";
  const times = limit.limit === 1 ? "1 restart" : `${limit.limit} restarts`;
  return {
    container: limit.container,
    limit: limit.limit,
    message: `container ${JSON.stringify(limit.container)} reached the restart limit of ${times}${how}, so the Pod was ended and its instance released; the limit is set by the Pod annotation ${RESTART_LIMIT_ANNOTATION}`,
  };
}

/**
 * The stop's cause: the cause a previous `Lost` state froze (the first loss is the truth, as for
 * `Lost`), else the one EC2 gives now. Neither among {@link STOP_CAUSES}: no stop facts.
 * (Internal: `toPodStatus` also calls it with the cause recorded in a stored Pod status.)
 */
export function stopFacts(
  facts: InstanceFacts | undefined,
  frozenCause: LostCause | undefined,
): StopFacts | undefined {
  const isStop = (cause: LostCause | undefined): cause is Ec2Cause =>
    cause !== undefined && (STOP_CAUSES as readonly string[]).includes(cause);
  const cause = isStop(frozenCause) ? frozenCause : isStop(facts?.cause) ? facts?.cause : undefined;
  if (cause === undefined) return undefined;
  const who = facts === undefined ? "the instance" : `instance ${facts.instanceId}`;
  const detail =
    cause === facts?.cause ? (facts.stateReasonMessage ?? facts.stateReasonCode) : undefined;
  const code = detail === undefined ? "" : ` (${detail})`;
  return {
    cause,
    message: `${who} ${CAUSE_PHRASE[cause]}${code}; its host supervisor stopped the containers and reported their final state`,
  };
}

/** A previous `Terminal` state's stop facts, when it accepted the same final report. */
function keptStop(
  previous: ToInstanceStateOptions["previous"],
  report: ExitReport,
): StopFacts | undefined {
  if (previous === undefined || previous === null || previous.kind !== "Terminal") return undefined;
  const prior = readPrevious(previous);
  if (prior === undefined || prior.seq !== report.seq) return undefined;
  const stopped = previous.stopped as { cause?: unknown; message?: unknown } | null | undefined;
  if (stopped === undefined || stopped === null || typeof stopped !== "object") return undefined;
  const { cause, message } = stopped;
  if (typeof cause !== "string" || typeof message !== "string") return undefined;
  if (!(STOP_CAUSES as readonly string[]).includes(cause)) return undefined;
  return { cause: cause as Ec2Cause, message };
}

/** Sets the accepted report on a state this module has just built (no copy: it is new). */
function withReport<T extends InstanceState>(state: T, report: ExitReport | undefined): T {
  if (report === undefined) return state;
  accepted.add(report);
  (state as { report?: ExitReport }).report = report;
  return state;
}

/** Every {@link LostCause}. */
export const LOST_CAUSES: ReadonlySet<string> = new Set<LostCause>([
  "SpotInterruption",
  "InsufficientCapacity",
  "UserInitiatedShutdown",
  "InstanceInitiatedShutdown",
  "InternalError",
  "VolumeLimitExceeded",
  "ScheduledStop",
  "Other",
  "None",
  "Absent",
]);

/**
 * Why a previously `Lost` instance was lost. The first loss is the truth: the controller's own
 * `TerminateInstances` afterwards (or the instance dropping out of `DescribeInstances`) must not
 * rewrite a Spot interruption into "terminated by an API call", nor churn the Pod's status.
 */
function frozenLoss(
  previous: ToInstanceStateOptions["previous"],
): { cause: LostCause; message: string } | undefined {
  if (previous === undefined || previous === null || previous.kind !== "Lost") return undefined;
  const { cause, message } = previous;
  if (typeof cause !== "string" || !LOST_CAUSES.has(cause) || typeof message !== "string") {
    return undefined;
  }
  return { cause: cause as LostCause, message };
}

/**
 * Reports this module accepted, so that a previous state's report is not validated again on
 * every poll. Only a cache: the output is the same with or without it.
 */
const accepted = new WeakSet<object>();

/** The report header tag each accepted tag report was decoded from (a cache, like {@link accepted}). */
const headerOf = new WeakMap<object, string>();

/**
 * Reads the report from the instance's tags. When the header tag (which carries the `seq` and a
 * SHA-256 prefix of the chunks) is the one the previous report was decoded from, the chunks are
 * the same and the previous report is reused without decoding them again: most instances have
 * not reported anything new since the last poll.
 */
function readTags(instance: Ec2Instance, previous: ExitReport | undefined): ReportReadResult {
  let header: string | undefined;
  for (const tag of instance.Tags) {
    if (tag.Key === REPORT_TAG_KEY) header = tag.Value;
  }
  if (header !== undefined && previous !== undefined && headerOf.get(previous) === header) {
    return { kind: "report", report: previous };
  }
  const read = decodeReportTags(instance.Tags);
  if (read.kind === "report" && header !== undefined) headerOf.set(read.report, header);
  return read;
}

function readPrevious(previous: ToInstanceStateOptions["previous"]): ExitReport | undefined {
  if (previous === undefined || previous === null || typeof previous !== "object") return undefined;
  const report = previous.report;
  if (report === undefined || report === null) return undefined;
  if (typeof report === "object" && accepted.has(report)) return report as ExitReport;
  const parsed = ExitReport.safeParse(report);
  if (!parsed.success || parsed.data.seq > MAX_REPORT_SEQ) return undefined;
  accepted.add(parsed.data);
  return parsed.data;
}

/**
 * The highest `seq` a new report may have: the previous report's plus {@link MAX_REPORT_SEQ_JUMP}
 * and one per {@link SEQ_JUMP_GROWTH_MS} since it was observed. Undefined without a previous
 * report (only {@link MAX_REPORT_SEQ} applies then).
 */
function seqLimitOf(
  previous: ExitReport | undefined,
  previousObservedAt: unknown,
  observedAt: Date,
): number | undefined {
  if (previous === undefined) return undefined;
  const since =
    previousObservedAt instanceof Date || typeof previousObservedAt === "string"
      ? observedAt.getTime() - new Date(previousObservedAt).getTime()
      : Number.NaN;
  const growth = Number.isFinite(since) && since > 0 ? Math.floor(since / SEQ_JUMP_GROWTH_MS) : 0;
  return previous.seq + MAX_REPORT_SEQ_JUMP + growth;
}

/**
 * The readable report with the highest `seq`, at most `limit` (see {@link seqLimitOf}). On a tie
 * the console wins (it carries whole messages), then the tags, then the previous report.
 */
function pickReport(
  previous: ExitReport | undefined,
  tags: ReportReadResult,
  consoleRead: ReportReadResult,
  limit: number | undefined,
): Candidates {
  let best: ExitReport | undefined = previous;
  let bestFrom: Source | undefined = previous === undefined ? undefined : "previous";
  let problem: string | undefined;
  const consider = (from: "tags" | "console", read: ReportReadResult) => {
    if (read.kind === "report" && read.report.seq > MAX_REPORT_SEQ) {
      const message = `report seq ${read.report.seq} is over the limit of ${MAX_REPORT_SEQ}`;
      problem ??= from === "tags" ? message : `console: ${message}`;
    } else if (read.kind === "report" && limit !== undefined && read.report.seq > limit) {
      const message = `report seq ${read.report.seq} jumps too far past the last accepted seq ${previous?.seq} (at most ${limit} now)`;
      problem ??= from === "tags" ? message : `console: ${message}`;
    } else if (read.kind === "unreadable") {
      problem ??= from === "tags" ? read.message : `console: ${read.message}`;
    } else if (read.kind === "report") {
      if (best === undefined || read.report.seq >= best.seq) {
        best = read.report;
        bestFrom = from;
      }
    }
  };
  consider("tags", tags);
  consider("console", consoleRead);
  const candidates: { best?: ExitReport; bestFrom?: Source; problem?: string } = {};
  if (best !== undefined) candidates.best = best;
  if (bestFrom !== undefined) candidates.bestFrom = bestFrom;
  if (problem !== undefined) candidates.problem = problem;
  return candidates;
}

function toFacts(instance: Ec2Instance): InstanceFacts {
  const code = instance.StateReason?.Code;
  const message = instance.StateReason?.Message;
  const facts: { -readonly [K in keyof InstanceFacts]: InstanceFacts[K] } = {
    instanceId: instance.InstanceId,
    ec2State: instance.State.Name,
    cause: ec2Cause(code, instance.StateTransitionReason),
  };
  if (code !== undefined) facts.stateReasonCode = code;
  if (message !== undefined) facts.stateReasonMessage = message;
  if (instance.LaunchTime !== undefined) facts.launchTime = instance.LaunchTime;
  if (instance.PrivateIpAddress !== undefined) facts.privateIp = instance.PrivateIpAddress;
  if (instance.PublicIpAddress !== undefined) facts.publicIp = instance.PublicIpAddress;
  return facts;
}

const CAUSE_PHRASE: Readonly<Record<LostCause, string>> = {
  SpotInterruption: "was reclaimed by a Spot interruption",
  InsufficientCapacity: "was stopped because EC2 had insufficient capacity",
  UserInitiatedShutdown: "was stopped or terminated by an API call",
  InstanceInitiatedShutdown: "powered itself off",
  InternalError: "was stopped by an EC2 internal error",
  VolumeLimitExceeded: "could not run because a volume limit was exceeded",
  ScheduledStop: "was stopped for scheduled maintenance",
  Other: "was stopped by EC2",
  None: "stopped",
  Absent: "is no longer listed by EC2",
};

/**
 * The sentence a `Lost` state carries. Stable: no times, no ages. (Internal: `toPodStatus` also
 * calls it with the report `seq` recorded in a stored Pod status.)
 */
export function lostMessage(
  facts: InstanceFacts | undefined,
  cause: LostCause,
  report: { readonly seq: number } | undefined,
): string {
  const who = facts === undefined ? "the instance" : `instance ${facts.instanceId}`;
  let what = CAUSE_PHRASE[cause];
  if (cause === "None" && facts?.ec2State === "terminated") what = "was terminated";
  const detail = facts?.stateReasonMessage ?? facts?.stateReasonCode;
  const code = detail === undefined ? "" : ` (${detail})`;
  const after = report === undefined ? "" : ` after its report ${report.seq}`;
  return `${who} ${what}${code} and vanished without reporting its final container state${after}`;
}
