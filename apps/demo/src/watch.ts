/**
 * The watch: from the first scenario to the end the demo samples every Pod, WorkloadDeployment,
 * Workload and instance each second, and each sample is checked against the truth the samples
 * themselves show. A contradiction that lasts longer than the system's own reaction time is a
 * violation, named by its object and the moment it was seen. Pure: time comes from the snapshots
 * (`at`), never from a clock; every input gets an answer.
 *
 * The rules (each builds for its class, not only for the samples):
 *
 * 1. **Available while no instance is** (`available-crash-loop`, `available-none-ready`): a
 *    WorkloadDeployment reading `Available=True` while none of the Pods its `spec.selector`
 *    matches is available, or a Workload reading it while none of the Pods of its
 *    WorkloadDeployments (`spec.workloadRef.name`) is. A Pod is available when it is `Running`,
 *    every app container is ready, and no container is crash-looping: waiting in
 *    `CrashLoopBackOff`, or restarted (restart count above 0) less than the stability window ago
 *    (the roll-up's rule, `@nebula/state-mapping`'s `DEFAULT_STABILITY_WINDOW_SECONDS`). The
 *    restart's time is the latest of the current run's `startedAt`, the last exit's `finishedAt`
 *    and the sample in which the watch saw the restart count rise. Partial availability is not a
 *    contradiction (C5: `Available` stays True while any replica is ready). Allowed for
 *    `reactionSeconds` (the operator's reaction to the Pod's change).
 * 2. **Unknown despite a report** (`unknown-despite-report`): a Pod whose container shows the
 *    terminated reason `ContainerStatusUnknown` while its instance (tag `nebula:pod-uid`) carries
 *    a final exit report in its tags (`decodeReportTags`, `final: true`). Allowed for
 *    `pollIntervalSeconds + sampleSeconds + slackSeconds` (the vnode reads tags at its next poll).
 * 3. **A deleted Pod past its deadline** (`deleted-pod-lingers`): a Pod still in the API after
 *    `deletionTimestamp + deletionGracePeriodSeconds + apiHeadroomSeconds + 2 × pollIntervalSeconds
 *    + sampleSeconds + slackSeconds` (a poll to see the instance stopped, one to see it
 *    terminated; the grace counted again on top of `deletionTimestamp`, which already holds it,
 *    covers the terminate step).
 */
import { decodeReportTags } from "@nebula/state-mapping";
import type { ContainerView, PodView, SelectorView, Snapshot, WorkloadView } from "./model.js";

/** The kinds of violation, one per rule (rule 1 has two: with or without a crash loop seen). */
const VIOLATION_KINDS = [
  "available-crash-loop",
  "available-none-ready",
  "unknown-despite-report",
  "deleted-pod-lingers",
] as const;

/** A kind of violation. */
type ViolationKind = (typeof VIOLATION_KINDS)[number];

/** The times the rules allow, in seconds. */
export interface WatchOptions {
  /** A restart less than this long ago is a crash loop (the roll-up's stability window). */
  readonly stabilityWindowSeconds: number;
  /** How long the operator may take to turn a status after a Pod changed. */
  readonly reactionSeconds: number;
  /** The vnode's EC2 poll interval (`provider.pollIntervalSeconds`). */
  readonly pollIntervalSeconds: number;
  /** The vnode's API headroom on a stop's wait (`provider.apiHeadroomSeconds`). */
  readonly apiHeadroomSeconds: number;
  /** The demo's interval between two samples. */
  readonly sampleSeconds: number;
  /** A small allowance for a loaded machine. */
  readonly slackSeconds: number;
}

/** One violation: a contradiction that lasted longer than its rule allows. */
export interface Violation {
  readonly kind: ViolationKind;
  /** `WorkloadDeployment shop-crashing`, `Pod delete-me`. */
  readonly object: string;
  /** Seconds into the run of the first sample that was a violation. */
  readonly elapsedSeconds: number;
  /** Wall-clock time (RFC 3339) of that sample. */
  readonly at: string;
  /** Seconds into the run of the first sample that showed the contradiction. */
  readonly sinceSeconds: number;
  /** Seconds into the run of the last sample that still showed it. */
  readonly lastSeconds: number;
  /** Samples that showed it as a violation. */
  readonly samples: number;
  /** What the first violating sample showed. */
  readonly seen: string;
}

/** One contradiction a single sample shows, before the allowance is applied. */
interface Finding {
  readonly kind: ViolationKind;
  readonly object: string;
  /** Identifies the contradiction across samples (kind and object identity). */
  readonly key: string;
  readonly seen: string;
  /** How long (ms) it may last before it is a violation. */
  readonly allowanceMs: number;
}

/** What the watch remembers between samples: when it saw each container's restart count rise. */
export interface WatchMemory {
  /** `podUid/container` → the last restart count seen and the sample time (ms) it last rose. */
  readonly restarts: ReadonlyMap<string, { readonly count: number; readonly roseAt?: number }>;
}

/** Nothing remembered. */
export const EMPTY_MEMORY: WatchMemory = { restarts: new Map() };

const parseTime = (iso: string | undefined): number | undefined => {
  if (iso === undefined) return undefined;
  const ms = Date.parse(iso);
  return Number.isFinite(ms) ? ms : undefined;
};

const ago = (ms: number): string => `${Math.max(0, Math.round(ms / 1000))} s`;

/** The memory after `snapshot`: restart counts that rose are stamped with the sample's time. */
function remember(memory: WatchMemory, snapshot: Snapshot): WatchMemory {
  const restarts = new Map(memory.restarts);
  for (const pod of snapshot.pods) {
    for (const c of pod.containers) {
      const key = `${pod.uid}/${c.init ? "init:" : ""}${c.name}`;
      const before = restarts.get(key);
      if (before === undefined) restarts.set(key, { count: c.restarts });
      else if (c.restarts > before.count)
        restarts.set(key, { count: c.restarts, roseAt: snapshot.at });
      else if (c.restarts !== before.count) restarts.set(key, { ...before, count: c.restarts });
    }
  }
  return { restarts };
}

/** Why a container is crash-looping at `at`, or `undefined` when it is not. */
function crashLoop(
  pod: PodView,
  c: ContainerView,
  at: number,
  memory: WatchMemory,
  options: WatchOptions,
): string | undefined {
  const who = `container "${c.name}"`;
  if (c.waiting === "CrashLoopBackOff")
    return `${who} is waiting in CrashLoopBackOff (restarts ${c.restarts})`;
  if (c.restarts <= 0) return undefined;
  const roseAt = memory.restarts.get(`${pod.uid}/${c.init ? "init:" : ""}${c.name}`)?.roseAt;
  const times = [parseTime(c.runningSince), parseTime(c.lastExit?.finishedAt), roseAt].filter(
    (t): t is number => t !== undefined,
  );
  if (times.length === 0) return undefined;
  const restartedAt = Math.max(...times);
  if (at - restartedAt >= options.stabilityWindowSeconds * 1000) return undefined;
  const last =
    c.lastExit === undefined
      ? ""
      : `; last exit code ${c.lastExit.code}${c.lastExit.reason ? ` ${c.lastExit.reason}` : ""}${c.lastExit.finishedAt ? ` at ${c.lastExit.finishedAt}` : ""}`;
  return `${who} restarted ${ago(at - restartedAt)} before (restarts ${c.restarts}${last}), within the ${options.stabilityWindowSeconds} s window`;
}

/** Whether a Pod is available at `at`, and if not, why (its crash loop first). */
export function podAvailability(
  pod: PodView,
  at: number,
  memory: WatchMemory,
  options: WatchOptions,
): { readonly available: boolean; readonly crashing: boolean; readonly why: string } {
  for (const c of pod.containers) {
    const loop = crashLoop(pod, c, at, memory, options);
    if (loop !== undefined) return { available: false, crashing: true, why: loop };
  }
  const app = pod.containers.filter((c) => !c.init);
  if (pod.phase !== "Running") return { available: false, crashing: false, why: pod.phase };
  if (app.length === 0) return { available: false, crashing: false, why: "no container status" };
  const unready = app.find((c) => !c.ready);
  if (unready !== undefined)
    return { available: false, crashing: false, why: `container "${unready.name}" not ready` };
  return { available: true, crashing: false, why: "available" };
}

/**
 * Whether `selector` selects `labels`, as the operator matches (`@nebula/api`'s
 * `matchesSelector`): every `matchLabels` pair and every `matchExpressions` requirement holds.
 * An empty selector selects nothing (the operator refuses it).
 */
export function selects(
  selector: SelectorView | undefined,
  labels: Readonly<Record<string, string>>,
): boolean {
  if (selector === undefined) return false;
  if (Object.keys(selector.matchLabels).length === 0 && selector.matchExpressions.length === 0)
    return false;
  for (const [key, value] of Object.entries(selector.matchLabels))
    if (labels[key] !== value) return false;
  for (const r of selector.matchExpressions) {
    const present = Object.hasOwn(labels, r.key);
    const value = labels[r.key];
    switch (r.operator) {
      case "In":
        if (!present || !r.values.includes(value as string)) return false;
        break;
      case "NotIn":
        if (present && r.values.includes(value as string)) return false;
        break;
      case "Exists":
        if (!present) return false;
        break;
      case "DoesNotExist":
        if (present) return false;
        break;
      default:
        // An operator the API server would refuse: the operator's matcher ignores it too.
        break;
    }
  }
  return true;
}

/** The Pods of a WorkloadDeployment (its selector) or of a Workload (its WorkloadDeployments'). */
function podsOf(view: WorkloadView, snapshot: Snapshot): PodView[] {
  const deployments =
    view.kind === "WorkloadDeployment"
      ? [view]
      : snapshot.workloads.filter(
          (w) => w.kind === "WorkloadDeployment" && w.workloadRef === view.name,
        );
  return snapshot.pods.filter((p) => deployments.some((d) => selects(d.selector, p.labels)));
}

function availabilityFindings(
  snapshot: Snapshot,
  memory: WatchMemory,
  options: WatchOptions,
): Finding[] {
  const out: Finding[] = [];
  for (const view of snapshot.workloads) {
    if (view.available !== "True") continue;
    const pods = podsOf(view, snapshot);
    const judged = pods.map((p) => ({
      pod: p,
      ...podAvailability(p, snapshot.at, memory, options),
    }));
    if (judged.some((j) => j.available)) continue;
    const crashing = judged.some((j) => j.crashing);
    const kind: ViolationKind = crashing ? "available-crash-loop" : "available-none-ready";
    const object = `${view.kind} ${view.name}`;
    const which =
      judged.length === 0
        ? "it matches no Pod"
        : `none of its ${judged.length} Pod${judged.length === 1 ? " is" : "s is"} available: ${judged.map((j) => `${j.pod.name}: ${j.why}`).join("; ")}`;
    out.push({
      kind,
      object,
      key: `available/${object}`,
      seen: `Available=True${view.reason ? ` (${view.reason})` : ""}, ${view.readyReplicas}/${view.desiredReplicas} ready, while ${which}`,
      allowanceMs: options.reactionSeconds * 1000,
    });
  }
  return out;
}

function describeReport(report: { seq: number; containers: readonly unknown[] }): string {
  const containers = report.containers.map((raw) => {
    const c = raw as { name?: string; state?: string; reason?: string; exitCode?: number };
    return `"${c.name ?? "?"}" ${c.state ?? "?"}${c.reason ? ` ${c.reason}` : ""}${c.exitCode === undefined ? "" : ` exit ${c.exitCode}`}`;
  });
  return `seq ${report.seq}${containers.length > 0 ? `: ${containers.join(", ")}` : ""}`;
}

function unknownFindings(snapshot: Snapshot, options: WatchOptions): Finding[] {
  const out: Finding[] = [];
  for (const pod of snapshot.pods) {
    const unknown = pod.containers.filter((c) => c.terminated === "ContainerStatusUnknown");
    if (unknown.length === 0) continue;
    for (const instance of snapshot.instances) {
      if (instance.podUid !== pod.uid) continue;
      const read = decodeReportTags(instance.tags);
      if (read.kind !== "report" || !read.report.final) continue;
      out.push({
        kind: "unknown-despite-report",
        object: `Pod ${pod.name}`,
        key: `unknown/${pod.uid}/${instance.id}`,
        seen: `${unknown.map((c) => `container "${c.name}"`).join(", ")} terminated with ContainerStatusUnknown while instance ${instance.id} (${instance.state}) carries a final report (${describeReport(read.report)})`,
        allowanceMs:
          (options.pollIntervalSeconds + options.sampleSeconds + options.slackSeconds) * 1000,
      });
    }
  }
  return out;
}

/**
 * When a deleted Pod must be gone (ms), or `undefined` when it is not deleted: its
 * `deletionTimestamp` + `deletionGracePeriodSeconds` + `apiHeadroomSeconds` + 2 ×
 * `pollIntervalSeconds` + `sampleSeconds` + `slackSeconds`.
 */
export function deletionDeadline(pod: PodView, options: WatchOptions): number | undefined {
  const deletedAt = parseTime(pod.deletionTimestamp);
  if (deletedAt === undefined) return undefined;
  const grace = Math.max(0, pod.deletionGracePeriodSeconds ?? 0);
  const allowance =
    grace +
    options.apiHeadroomSeconds +
    2 * options.pollIntervalSeconds +
    options.sampleSeconds +
    options.slackSeconds;
  return deletedAt + allowance * 1000;
}

function deletionFindings(snapshot: Snapshot, options: WatchOptions): Finding[] {
  const out: Finding[] = [];
  for (const pod of snapshot.pods) {
    const deadline = deletionDeadline(pod, options);
    if (deadline === undefined || snapshot.at <= deadline) continue;
    out.push({
      kind: "deleted-pod-lingers",
      object: `Pod ${pod.name}`,
      key: `deleted/${pod.uid}`,
      seen: `still present ${ago(snapshot.at - deadline)} past its deadline ${new Date(deadline).toISOString()} (deletionTimestamp ${pod.deletionTimestamp} + grace ${pod.deletionGracePeriodSeconds ?? 0} s + headroom ${options.apiHeadroomSeconds} s + 2 polls of ${options.pollIntervalSeconds} s + sample ${options.sampleSeconds} s + slack ${options.slackSeconds} s); ${pod.phase}${pod.reason ? ` ${pod.reason}` : ""}`,
      allowanceMs: 0,
    });
  }
  return out;
}

/** Every contradiction one sample shows (before any allowance), given what came before. */
function findings(snapshot: Snapshot, memory: WatchMemory, options: WatchOptions): Finding[] {
  return [
    ...availabilityFindings(snapshot, memory, options),
    ...unknownFindings(snapshot, options),
    ...deletionFindings(snapshot, options),
  ];
}

interface Run {
  readonly since: number;
  readonly sinceElapsed: number;
  violation: { -readonly [K in keyof Violation]: Violation[K] } | undefined;
}

/**
 * Folds samples (in time order) into violations. A contradiction is open from the first sample
 * that shows it to the first that does not; it becomes one violation once it has lasted longer
 * than its allowance, and a later contradiction of the same object is a new one.
 */
export class Watch {
  readonly #options: WatchOptions;
  #memory: WatchMemory = EMPTY_MEMORY;
  readonly #open = new Map<string, Run>();
  readonly #violations: Violation[] = [];
  #samples = 0;

  constructor(options: WatchOptions) {
    this.#options = options;
  }

  /** Takes one sample in; returns the violations it opened. */
  observe(snapshot: Snapshot): Violation[] {
    this.#samples += 1;
    this.#memory = remember(this.#memory, snapshot);
    const found = findings(snapshot, this.#memory, this.#options);
    const seen = new Set<string>();
    const opened: Violation[] = [];
    for (const f of found) {
      if (seen.has(f.key)) continue;
      seen.add(f.key);
      let run = this.#open.get(f.key);
      if (run === undefined) {
        run = { since: snapshot.at, sinceElapsed: snapshot.elapsedMs, violation: undefined };
        this.#open.set(f.key, run);
      }
      if (snapshot.at - run.since <= f.allowanceMs && f.allowanceMs > 0) continue;
      const elapsed = Math.round(snapshot.elapsedMs / 100) / 10;
      if (run.violation === undefined) {
        run.violation = {
          kind: f.kind,
          object: f.object,
          elapsedSeconds: elapsed,
          at: new Date(snapshot.at).toISOString(),
          sinceSeconds: Math.round(run.sinceElapsed / 100) / 10,
          lastSeconds: elapsed,
          samples: 1,
          seen: f.seen,
        };
        this.#violations.push(run.violation);
        opened.push({ ...run.violation });
      } else {
        run.violation.lastSeconds = elapsed;
        run.violation.samples += 1;
      }
    }
    for (const key of [...this.#open.keys()]) if (!seen.has(key)) this.#open.delete(key);
    return opened;
  }

  /** Every violation so far, in the order they were opened. */
  violations(): Violation[] {
    return this.#violations.map((v) => ({ ...v }));
  }

  /** The samples taken in. */
  get samples(): number {
    return this.#samples;
  }
}

/** The violations of a sequence of samples (in time order). */
export function watchSamples(snapshots: readonly Snapshot[], options: WatchOptions): Violation[] {
  const watch = new Watch(options);
  for (const s of snapshots) watch.observe(s);
  return watch.violations();
}

/** One line for a violation: kind, object, moment, what was seen. */
export function violationLine(v: Violation): string {
  return `VIOLATION ${v.kind}: ${v.object} at ${v.elapsedSeconds} s (${v.at}; since ${v.sinceSeconds} s, last ${v.lastSeconds} s, ${v.samples} sample${v.samples === 1 ? "" : "s"}): ${v.seen}`;
}
