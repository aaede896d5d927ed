/**
 * The demo's scenarios and their judges. A {@link Tracker} is fed every snapshot (time comes
 * from the snapshot, never from a clock), remembers when things first happened, and judges each
 * scenario: what it should show, what it showed, and whether that is it.
 */
import { CHANNEL_PODS, type ChannelSide, channelSide } from "./channel.js";
import type { PodView, Snapshot, WorkloadView } from "./model.js";
import { COLD_INSTANCE_TYPE, WARM_INSTANCE_TYPE, type WarmPlan, WarmPoolRun } from "./warm.js";

/** The scenario ids, in the order the summary lists them. */
export const SCENARIO_IDS = [
  "prints-and-exits",
  "workload-healthy",
  "workload-crashing",
  "workload",
  "image-unavailable",
  "job-completes",
  "logs-after-terminated",
  "oom-killed",
  "kubectl-delete",
  "event-channel",
  "warm-pool",
] as const;

/** A scenario id. */
export type ScenarioId = (typeof SCENARIO_IDS)[number];

/** The Pod whose output the demo reads with `kubectl logs` once its instance is terminated. */
export const LOGS_POD = "job-completes";

/** What {@link LOGS_POD}'s container prints (samples/job-completes.yaml). */
export const LOGS_EXPECTED = "working\ndone\n";

/** The Pod the demo deletes with kubectl once it runs. */
export const DELETE_POD = "delete-me";

/** What a scenario should show. */
function expectedOf(id: ScenarioId, replicas: number, warm: WarmPlan | undefined): string {
  switch (id) {
    case "prints-and-exits":
      return `${replicas}/${replicas} replicas report their container's exit (exit 0, Completed) instead of Running forever`;
    case "workload-healthy":
      return "WorkloadDeployment shop-healthy Available=True";
    case "workload-crashing":
      return "WorkloadDeployment shop-crashing Available=False, reason InstanceCrashing";
    case "workload":
      return "Workload shop Available=True (one placement serves), InstanceCrashing among its reasons";
    case "image-unavailable":
      return "Pod Pending, waiting ErrImagePull or ImagePullBackOff";
    case "job-completes":
      return "Pod Succeeded (exit 0, Completed), its instance terminated";
    case "logs-after-terminated":
      return `kubectl logs ${LOGS_POD}, after its instance is terminated, prints what its container wrote`;
    case "oom-killed":
      return "Pod Failed (OOMKilled, exit 137), its instance terminated";
    case "kubectl-delete":
      return "after kubectl delete: instance terminated, then the Pod gone";
    case "event-channel":
      return `${CHANNEL_PODS}/${CHANNEL_PODS} Pods on each virtual node show their exit (Succeeded, exit 0): through the event channel on one, by the poll on the other`;
    case "warm-pool": {
      const n = warm?.perSide ?? 0;
      const rounds = warm?.rounds ?? 0;
      return `${rounds === 1 ? "" : `${rounds} rounds: `}${n} Pods on ${WARM_INSTANCE_TYPE} take a ready warm-pool host (StartInstances) and ${n} on ${COLD_INSTANCE_TYPE}, created at the same moment, launch cold (RunInstances); start-up times warm vs cold in the summary`;
    }
  }
}

/** One scenario's verdict. */
export interface Verdict {
  readonly id: ScenarioId;
  readonly expected: string;
  readonly observed: string;
  readonly ok: boolean;
}

/** Latency samples in milliseconds. */
export interface Latencies {
  /** Container exit (its `finishedAt`) → the demo first reads that exit in the Pod's status. */
  readonly exitToStatus: readonly number[];
  /** The demo first reads a terminal Pod → first reads its instance `terminated`. */
  readonly terminalToTerminated: readonly number[];
  /** The event channel's comparison Pods: their exit → first read in their status, per side. */
  readonly channel: Readonly<Record<ChannelSide, readonly number[]>>;
}

const byScenario = (verdicts: readonly Verdict[]): Map<ScenarioId, Verdict> =>
  new Map(verdicts.map((v) => [v.id, v]));

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

/** The median of sorted samples (0 for none). */
const median = (sorted: readonly number[]): number => {
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length === 0) return 0;
  return sorted.length % 2 === 1
    ? (sorted[mid] ?? 0)
    : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

const describeExit = (pod: PodView): string => {
  const exit = pod.exit ?? pod.lastExit;
  return exit === undefined
    ? "no exit"
    : `exit ${exit.code}${exit.reason ? ` ${exit.reason}` : ""}`;
};

/** What the {@link Tracker} runs besides the defaults. */
export interface TrackerOptions {
  /** The scenarios to run and judge (default: every one). */
  readonly scenarios?: readonly ScenarioId[];
  /** How the warm pool's comparison runs (needed for `warm-pool`). */
  readonly warm?: WarmPlan;
}

/** Remembers first occurrences across snapshots and judges the scenarios. */
export class Tracker {
  readonly #replicas: number;
  readonly #ids: readonly ScenarioId[];
  readonly #warmPlan: WarmPlan | undefined;
  /** The warm pool's comparison, when `warm-pool` is among the scenarios. */
  readonly warm: WarmPoolRun | undefined;
  readonly #uidByName = new Map<string, string>();
  readonly #terminalAt = new Map<string, number>();
  readonly #goneAt = new Map<string, number>();
  readonly #instanceTerminatedAt = new Map<string, number>();
  readonly #exitsSeen = new Map<string, number>();
  /** The comparison Pods' first exit seen, by UID. */
  readonly #channelExits = new Map<string, { side: ChannelSide; ms: number }>();
  readonly #blocked = new Map<ScenarioId, string>();
  readonly #settled = new Map<ScenarioId, Verdict>();
  #deleteRequestedAt: number | undefined;
  #deleteUid: string | undefined;
  #logs: { text: string; afterTerminated: boolean } | undefined;
  #last: Snapshot | undefined;
  /** The verdicts when the scenarios' time ran out, if it did. */
  #closed: Map<ScenarioId, Verdict> | undefined;

  /** @param replicas the print-and-exit Deployment's replicas */
  constructor(replicas: number, options: TrackerOptions = {}) {
    this.#replicas = replicas;
    this.#ids = SCENARIO_IDS.filter((id) => (options.scenarios ?? SCENARIO_IDS).includes(id));
    this.#warmPlan = options.warm;
    this.warm =
      this.#ids.includes("warm-pool") && options.warm !== undefined
        ? new WarmPoolRun(options.warm)
        : undefined;
  }

  /** The scenarios this run judges, in the summary's order. */
  get scenarios(): readonly ScenarioId[] {
    return this.#ids;
  }

  /** Takes one snapshot in (snapshots come in time order). */
  observe(snapshot: Snapshot): void {
    const present = new Set<string>();
    for (const pod of snapshot.pods) {
      present.add(pod.uid);
      this.#uidByName.set(pod.name, pod.uid);
      if ((pod.phase === "Succeeded" || pod.phase === "Failed") && !this.#terminalAt.has(pod.uid))
        this.#terminalAt.set(pod.uid, snapshot.at);
      for (const exit of [pod.exit, pod.lastExit]) {
        if (exit?.finishedAt === undefined) continue;
        const finished = Date.parse(exit.finishedAt);
        if (Number.isNaN(finished)) continue;
        const key = `${pod.uid}/${exit.finishedAt}`;
        if (!this.#exitsSeen.has(key))
          this.#exitsSeen.set(key, Math.max(0, snapshot.at - finished));
        // The comparison measures the planned exit (code 0), not a kill by the clean-up.
        const side = channelSide(pod.name);
        if (side !== undefined && exit.code === 0 && !this.#channelExits.has(pod.uid))
          this.#channelExits.set(pod.uid, { side, ms: Math.max(0, snapshot.at - finished) });
      }
    }
    for (const uid of this.#uidByName.values()) {
      if (!present.has(uid) && !this.#goneAt.has(uid)) this.#goneAt.set(uid, snapshot.at);
    }
    for (const instance of snapshot.instances) {
      if (instance.state !== "terminated" || instance.podUid === undefined) continue;
      if (!this.#instanceTerminatedAt.has(instance.podUid))
        this.#instanceTerminatedAt.set(instance.podUid, snapshot.at);
    }
    this.#last = snapshot;
    this.warm?.observe(snapshot);
    for (const verdict of this.#judgeAll(snapshot)) {
      if (verdict.ok && !this.#settled.has(verdict.id)) this.#settled.set(verdict.id, verdict);
    }
  }

  /** Records that the running Pod {@link DELETE_POD} was deleted with kubectl at `at`. */
  markDeleteRequested(at: number, uid: string): void {
    this.#deleteRequestedAt = at;
    this.#deleteUid = uid;
  }

  /**
   * Whether {@link LOGS_POD}'s output should be read now: its instance is terminated and no
   * read so far showed the expected output.
   */
  logsWanted(): boolean {
    const uid = this.#uidByName.get(LOGS_POD);
    if (uid === undefined || this.#instanceTerminated(uid) === undefined) return false;
    return !(this.#logs?.afterTerminated === true && this.#logs.text === LOGS_EXPECTED);
  }

  /** Records what `kubectl logs` printed for {@link LOGS_POD} (its instance terminated before). */
  markLogs(text: string): void {
    const uid = this.#uidByName.get(LOGS_POD);
    this.#logs = {
      text,
      afterTerminated: uid !== undefined && this.#instanceTerminated(uid) !== undefined,
    };
  }

  /** Whether the kubectl delete was already sent. */
  get deleteRequested(): boolean {
    return this.#deleteRequestedAt !== undefined;
  }

  /** Marks a scenario as impossible to run, with the reason (its verdict is then not ok). */
  block(id: ScenarioId, why: string): void {
    if (!this.#blocked.has(id)) this.#blocked.set(id, why);
  }

  /**
   * Records that the scenarios' time ran out: a scenario that never got there is reported as it
   * stood then, not as the clean-up (which deletes every Pod) leaves it.
   */
  close(): void {
    this.#closed ??= byScenario(this.#judgeAll(this.#last));
  }

  /**
   * The verdict of every scenario: the first ok verdict once reached, else the latest (after
   * {@link Tracker.close}, the one when the time ran out).
   */
  verdicts(): Verdict[] {
    const latest = this.#judgeAll(this.#last);
    return latest.map((v) => this.#settled.get(v.id) ?? this.#closed?.get(v.id) ?? v);
  }

  /** Every scenario has an ok verdict. */
  allOk(): boolean {
    return this.verdicts().every((v) => v.ok);
  }

  /** The scenarios still to settle: neither ok nor blocked. */
  pending(): ScenarioId[] {
    return this.verdicts()
      .filter((v) => !v.ok && !this.#blocked.has(v.id))
      .map((v) => v.id);
  }

  /** The latency samples collected so far. */
  latencies(): Latencies {
    const terminalToTerminated: number[] = [];
    for (const [uid, at] of this.#terminalAt) {
      const terminated = this.#instanceTerminatedAt.get(uid);
      if (terminated !== undefined) terminalToTerminated.push(Math.max(0, terminated - at));
    }
    const channel: Record<ChannelSide, number[]> = { on: [], off: [] };
    for (const { side, ms } of this.#channelExits.values()) channel[side].push(ms);
    return { exitToStatus: [...this.#exitsSeen.values()], terminalToTerminated, channel };
  }

  #judgeAll(snapshot: Snapshot | undefined): Verdict[] {
    return this.#ids.map((id) => {
      const expected = expectedOf(id, this.#replicas, this.#warmPlan);
      const blocked = this.#blocked.get(id);
      if (blocked !== undefined)
        return { id, expected, observed: `could not run: ${blocked}`, ok: false };
      if (snapshot === undefined) return { id, expected, observed: "not started", ok: false };
      return { id, expected, ...this.#judge(id, snapshot) };
    });
  }

  #pod(snapshot: Snapshot, name: string): PodView | undefined {
    return snapshot.pods.find((p) => p.name === name && !p.deleting);
  }

  #instanceTerminated(uid: string): number | undefined {
    return this.#instanceTerminatedAt.get(uid);
  }

  #judge(id: ScenarioId, snapshot: Snapshot): { observed: string; ok: boolean } {
    switch (id) {
      case "prints-and-exits":
        return this.#judgeIncident(snapshot);
      case "workload-healthy":
        return judgeWorkload(
          find(snapshot, "WorkloadDeployment", "shop-healthy"),
          (w) => w.available === "True",
        );
      case "workload-crashing":
        return judgeWorkload(
          find(snapshot, "WorkloadDeployment", "shop-crashing"),
          (w) => w.available === "False" && w.reason === "InstanceCrashing",
        );
      case "workload":
        return judgeWorkload(
          find(snapshot, "Workload", "shop"),
          (w) => w.available === "True" && w.reasons.includes("InstanceCrashing"),
        );
      case "image-unavailable": {
        const pod = this.#pod(snapshot, "image-unavailable");
        if (pod === undefined) return { observed: "no Pod yet", ok: false };
        const ok =
          pod.phase === "Pending" &&
          (pod.reason === "ErrImagePull" || pod.reason === "ImagePullBackOff");
        return { observed: `${pod.phase}${pod.reason ? `, waiting ${pod.reason}` : ""}`, ok };
      }
      case "job-completes":
        return this.#judgeTerminal(snapshot, "job-completes", "Succeeded", (p) => {
          const exit = p.exit;
          return exit?.code === 0 && exit.reason === "Completed";
        });
      case "oom-killed":
        return this.#judgeTerminal(
          snapshot,
          "oom-killed",
          "Failed",
          (p) => p.exit?.reason === "OOMKilled",
        );
      case "logs-after-terminated":
        return this.#judgeLogs(snapshot);
      case "kubectl-delete":
        return this.#judgeDelete(snapshot);
      case "event-channel":
        return this.#judgeChannel(snapshot);
      case "warm-pool":
        return this.warm?.judge() ?? { observed: "not configured", ok: false };
    }
  }

  #judgeChannel(snapshot: Snapshot): { observed: string; ok: boolean } {
    const sides = (["on", "off"] as const).map((side) => {
      const pods = snapshot.pods.filter((p) => channelSide(p.name) === side && !p.deleting);
      const done = pods.filter((p) => p.phase === "Succeeded" && p.exit?.code === 0);
      const seen = [...this.#channelExits.values()]
        .filter((e) => e.side === side)
        .map((e) => e.ms)
        .sort((a, b) => a - b);
      const figures =
        seen.length === 0
          ? ""
          : `, exit → shown median ${seconds(median(seen))}, max ${seconds(seen.at(-1) ?? 0)}`;
      return {
        side,
        ok: done.length === CHANNEL_PODS,
        text: `${side}: ${done.length}/${CHANNEL_PODS} Succeeded${figures}`,
      };
    });
    return { observed: sides.map((s) => s.text).join("; "), ok: sides.every((s) => s.ok) };
  }

  #judgeLogs(snapshot: Snapshot): { observed: string; ok: boolean } {
    const logs = this.#logs;
    if (logs === undefined) {
      const pod = this.#pod(snapshot, LOGS_POD);
      return {
        observed:
          pod === undefined
            ? "no Pod yet"
            : `waiting for its instance to be terminated (${pod.phase})`,
        ok: false,
      };
    }
    const printed = JSON.stringify(
      logs.text.length > 60 ? `${logs.text.slice(0, 60)}…` : logs.text,
    );
    return {
      observed: `kubectl logs printed ${printed}${logs.afterTerminated ? " after the instance was terminated" : ""}`,
      ok: logs.afterTerminated && logs.text === LOGS_EXPECTED,
    };
  }

  #judgeIncident(snapshot: Snapshot): { observed: string; ok: boolean } {
    const pods = snapshot.pods.filter((p) => p.labels.app === "prints-and-exits" && !p.deleting);
    if (pods.length === 0) return { observed: "no Pods yet", ok: false };
    const exited = pods.filter((p) => [p.exit, p.lastExit].some((e) => e?.code === 0));
    const completed = exited.filter((p) =>
      [p.exit, p.lastExit].some((e) => e?.code === 0 && e.reason === "Completed"),
    );
    const restarts = pods.map((p) => p.restarts);
    const running = pods.filter((p) => p.phase === "Running" && p.exit === undefined).length;
    const observed =
      `${exited.length}/${this.#replicas} replicas report their exit` +
      (exited.length > 0
        ? ` (exit 0${completed.length === exited.length ? ", Completed" : ""})`
        : "") +
      `; restarts ${Math.min(...restarts)}-${Math.max(...restarts)}; ${pods.length} Pods, ${running} with a running container`;
    return {
      observed,
      ok: completed.length >= this.#replicas && exited.length === completed.length,
    };
  }

  #judgeTerminal(
    snapshot: Snapshot,
    name: string,
    phase: string,
    good: (pod: PodView) => boolean,
  ): { observed: string; ok: boolean } {
    const pod = this.#pod(snapshot, name);
    if (pod === undefined) return { observed: "no Pod yet", ok: false };
    const terminalAt = this.#terminalAt.get(pod.uid);
    const terminatedAt = this.#instanceTerminated(pod.uid);
    const instance =
      terminatedAt === undefined
        ? terminalAt === undefined
          ? ""
          : "; instance not terminated yet"
        : `; instance terminated ${seconds(Math.max(0, terminatedAt - (terminalAt ?? terminatedAt)))} after`;
    const observed = `${pod.phase} (${describeExit(pod)})${instance}`;
    return { observed, ok: pod.phase === phase && good(pod) && terminatedAt !== undefined };
  }

  #judgeDelete(snapshot: Snapshot): { observed: string; ok: boolean } {
    const requested = this.#deleteRequestedAt;
    const uid = this.#deleteUid;
    if (requested === undefined || uid === undefined) {
      const pod = this.#pod(snapshot, DELETE_POD);
      return {
        observed: pod === undefined ? "no Pod yet" : `waiting for it to run (${pod.phase})`,
        ok: false,
      };
    }
    const terminatedAt = this.#instanceTerminated(uid);
    const goneAt = this.#goneAt.get(uid);
    const parts = ["deleted with kubectl"];
    parts.push(
      terminatedAt === undefined
        ? "instance not terminated yet"
        : `instance terminated after ${seconds(Math.max(0, terminatedAt - requested))}`,
    );
    parts.push(
      goneAt === undefined
        ? "Pod still present"
        : `Pod gone after ${seconds(Math.max(0, goneAt - requested))}`,
    );
    const inOrder = terminatedAt !== undefined && goneAt !== undefined && terminatedAt <= goneAt;
    if (terminatedAt !== undefined && goneAt !== undefined && !inOrder)
      parts.push("the Pod went first");
    if (goneAt !== undefined && terminatedAt === undefined)
      parts.push("the Pod went before its instance");
    return { observed: parts.join("; "), ok: inOrder };
  }
}

function find(
  snapshot: Snapshot,
  kind: WorkloadView["kind"],
  name: string,
): WorkloadView | undefined {
  return snapshot.workloads.find((w) => w.kind === kind && w.name === name);
}

function judgeWorkload(
  view: WorkloadView | undefined,
  good: (view: WorkloadView) => boolean,
): { observed: string; ok: boolean } {
  if (view === undefined) return { observed: "not created yet", ok: false };
  if (view.available === "-") return { observed: "no status yet", ok: false };
  const reasons = view.reasons.length > 0 ? `; reasons ${view.reasons.join(", ")}` : "";
  return {
    observed: `Available=${view.available}${view.reason ? `, ${view.reason}` : ""} (${view.readyReplicas}/${view.desiredReplicas} ready)${reasons}`,
    ok: good(view),
  };
}
