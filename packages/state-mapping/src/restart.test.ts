import type { V1Pod, V1PodStatus } from "@kubernetes/client-node";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type ContainerReport,
  type ExitReport,
  type InstanceState,
  toInstanceState,
  toPodStatus,
} from "./index.js";
import { REPORT_CONDITION_TYPE } from "./pod-status.js";
import { encodeConsoleLine } from "./report.js";
import { crashLooping, ec2, exited, NOW, pod, report, running } from "./test-fixtures.js";

/** Lone surrogates (what the API server turns into U+FFFD). */
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * What a status write and read through the API server does: JSON, as Go's encoder and decoder do
 * it (a lone surrogate becomes U+FFFD; dates become RFC 3339 strings).
 */
function throughApiServer<T>(value: T): T {
  return JSON.parse(
    JSON.stringify(value, (_key, v) => (typeof v === "string" ? v.replace(LONE, "\ufffd") : v)),
  ) as T;
}

const later = (minutes: number) => new Date(NOW.getTime() + minutes * 60_000);
const withStatus = (p: V1Pod, status: V1PodStatus | undefined): V1Pod =>
  status === undefined ? p : { ...p, status: throughApiServer(status) };

describe("the stored status is the durable memory", () => {
  const thePod = pod("Never");

  it("keeps a Succeeded Pod Succeeded after a restart, once its instance is gone", () => {
    const done = report(5, true, [exited(0)]);
    const stopped = toInstanceState(ec2("stopped", { report: done }), { now: NOW });
    const stored = toPodStatus(thePod, stopped, { now: NOW });
    expect(stored.phase).toBe("Succeeded");
    // The controller restarts; meanwhile the instance was terminated and dropped out of EC2.
    const gone = toInstanceState(undefined, { now: later(30) });
    expect(gone.kind).toBe("Lost");
    const after = toPodStatus(withStatus(thePod, stored), gone, { now: later(30) });
    expect(after.phase).toBe("Succeeded");
    expect(after.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 0,
      reason: "Completed",
    });
    expect(throughApiServer(after)).toEqual(throughApiServer(stored));
  });

  it("keeps a Spot interruption a Spot interruption after a restart and the controller's terminate", () => {
    const spot = toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    const stored = toPodStatus(thePod, spot, { now: NOW });
    expect(stored).toMatchObject({ phase: "Failed", reason: "SpotInterruption" });
    const terminated = toInstanceState(
      ec2("terminated", { code: "Client.UserInitiatedShutdown" }),
      { now: later(5) },
    );
    const after = toPodStatus(withStatus(thePod, stored), terminated, { now: later(5) });
    expect(after).toMatchObject({ phase: "Failed", reason: "SpotInterruption" });
    expect(after.message).toBe(stored.message);
  });

  it("lets a newer final report win over a stored loss, keeping the loss's cause", () => {
    const spot = toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    const stored = toPodStatus(thePod, spot, { now: NOW });
    const final: ExitReport = {
      ...report(7, true, [exited(143, "app", { signal: 15, reason: "Error" })]),
      stopRequested: true,
    };
    // After a restart: the console shows the final report; the controller has terminated the instance.
    const observed = ec2("terminated", { code: "Client.UserInitiatedShutdown" });
    const console = encodeConsoleLine(final);
    const inMemory = toPodStatus(
      withStatus(thePod, stored),
      toInstanceState(observed, { now: later(5), previous: spot, consoleOutput: console }),
      { now: later(5) },
    );
    const restarted = toPodStatus(
      withStatus(thePod, stored),
      toInstanceState(observed, { now: later(5), consoleOutput: console }),
      { now: later(5) },
    );
    expect(restarted).toMatchObject({ phase: "Failed", reason: "SpotInterruption" });
    expect(restarted.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(143);
    expect(throughApiServer(restarted)).toEqual(throughApiServer(inMemory));
  });

  it("records the report seq and the cause in a condition of its own", () => {
    const spot = toInstanceState(
      ec2("stopped", {
        code: "Server.SpotInstanceTermination",
        report: report(3, false, [running()]),
      }),
      { now: NOW },
    );
    const status = toPodStatus(thePod, spot, { now: NOW });
    expect(status.conditions?.find((c) => c.type === REPORT_CONDITION_TYPE)).toMatchObject({
      status: "True",
      reason: "ExitReport",
      message: "seq=3 cause=SpotInterruption",
    });
  });
});

// A property: for any sequence of observations of one instance, forgetting the in-memory previous
// state at any point and resuming from the stored status gives the same final status.

const containerReport = fc.constantFrom<ContainerReport>(
  running(),
  crashLooping(2),
  crashLooping(7),
  exited(0),
  exited(1),
  exited(143, "app", { signal: 15, reason: "Error" }),
  { name: "app", init: false, state: "waiting", reason: "ImagePullBackOff", restarts: 0 },
);
const step = fc.record({
  listed: fc.boolean(),
  ec2State: fc.constantFrom("pending", "running", "stopping", "stopped", "terminated"),
  code: fc.constantFrom(
    undefined,
    "Server.SpotInstanceTermination",
    "Client.UserInitiatedShutdown",
    "Client.InstanceInitiatedShutdown",
  ),
  tags: fc.constantFrom("report", "none", "unreadable"),
  console: fc.boolean(),
  advance: fc.nat(2),
  final: fc.boolean(),
  stopRequested: fc.boolean(),
  containers: fc.array(containerReport, { minLength: 1, maxLength: 1 }),
});

type StepValue = typeof step extends fc.Arbitrary<infer T> ? T : never;

interface Observation {
  readonly instance: Record<string, unknown> | undefined;
  readonly consoleOutput?: string;
}

/**
 * Observations as EC2 gives them over time: report seqs never go down, a seq names one report,
 * and nothing follows a final report.
 */
function observations(steps: readonly StepValue[]): Observation[] {
  let seq = 0;
  let latest: ExitReport | undefined;
  return steps.map((s) => {
    if (latest?.final !== true) {
      seq += s.advance;
      // A new report has a higher seq (the writer's rule); the same seq is the same report.
      if ((s.tags === "report" || s.console) && (latest === undefined || s.advance > 0)) {
        latest = {
          ...report(seq, s.final, s.containers),
          ...(s.stopRequested ? { stopRequested: true } : {}),
        };
      }
    }
    const consoleOutput =
      s.console && latest !== undefined && (s.ec2State === "stopped" || !s.listed)
        ? encodeConsoleLine(latest)
        : undefined;
    if (!s.listed)
      return consoleOutput === undefined
        ? { instance: undefined }
        : { instance: undefined, consoleOutput };
    const tags =
      s.tags === "unreadable"
        ? { "nebula:report": "v1 seq=99 chunks=1 sha256=0000000000000000" }
        : undefined;
    const instance = ec2(s.ec2State, {
      ...(s.code === undefined ? {} : { code: s.code }),
      ...(s.tags === "report" && latest !== undefined ? { report: latest } : {}),
      ...(tags === undefined ? {} : { tags }),
    });
    return consoleOutput === undefined ? { instance } : { instance, consoleOutput };
  });
}

/** Runs the controller loop; `forgetAt` drops the in-memory previous state before that step. */
function run(
  thePod: V1Pod,
  seen: readonly Observation[],
  forgetAt: number,
): V1PodStatus | undefined {
  let previous: InstanceState | undefined;
  let stored: V1PodStatus | undefined;
  seen.forEach((o, i) => {
    const now = later(i);
    if (i === forgetAt) previous = undefined;
    const state = toInstanceState(o.instance, {
      now,
      previous,
      ...(o.consoleOutput === undefined ? {} : { consoleOutput: o.consoleOutput }),
    });
    const status = toPodStatus(withStatus(thePod, stored), state, { now });
    stored = throughApiServer(status);
    previous = state;
  });
  return stored;
}

describe("restart-proof status (property)", () => {
  it("gives the same final status whether or not the previous state was forgotten at any step", {
    timeout: 600_000,
  }, () => {
    fc.assert(
      fc.property(
        fc.array(step, { minLength: 1, maxLength: 8 }),
        fc.nat(8),
        fc.constantFrom<"Always" | "OnFailure" | "Never">("Always", "OnFailure", "Never"),
        (steps, forgetAt, restartPolicy) => {
          const seen = observations(steps);
          const thePod = pod(restartPolicy);
          expect(run(thePod, seen, forgetAt % seen.length)).toEqual(run(thePod, seen, -1));
        },
      ),
      { numRuns: Number(process.env.RESTART_RUNS ?? 1000) },
    );
  });
});
