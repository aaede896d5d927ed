import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type ExitReport,
  encodeReportTags,
  type InstanceState,
  needsConsoleOutput,
  toInstanceReason,
  toInstanceState,
  toPodStatus,
} from "./index.js";
import { encodeConsoleLine } from "./report.js";
import type { PreviousObservation } from "./state.js";
import { crashLooping, ec2, exited, NOW, pod, report, running } from "./test-fixtures.js";

const later = (ms: number) => new Date(NOW.getTime() + ms);

/**
 * Every EC2 state × report variant, for a one-container Pod with `restartPolicy: Never`.
 * Each row runs once per EC2 state reason below. `lost` in the reason column means the reason
 * follows the state reason: `InsufficientCapacity` for an insufficient-capacity stop, otherwise
 * `InstanceLost`. For the absent instance, the report arrives through the previous observation
 * (the unreadable one through the console output).
 *
 * Report variants: none; running (not final); final-ok (exit 0); final-fail (exit 1); unreadable.
 * `console?` says whether `needsConsoleOutput` asks for the serial console: for a listed instance
 * that stopped without a final report, including one whose tags hold only an older, non-final
 * report (the final `CreateTags` may have been throttled while the console line was written).
 */
const TABLE = `
| EC2 state     | report      | state kind | Pod phase | instance reason   | console? |
| ------------- | ----------- | ---------- | --------- | ----------------- | -------- |
| pending       | none        | Pending    | Pending   | Provisioning      | no       |
| pending       | running     | Pending    | Running   | Starting          | no       |
| pending       | final-ok    | Terminal   | Succeeded | Completed         | no       |
| pending       | final-fail  | Terminal   | Failed    | InstanceCrashing  | no       |
| pending       | unreadable  | Unknown    | Unknown   | Unknown           | no       |
| running       | none        | Booting    | Pending   | Provisioning      | no       |
| running       | running     | Running    | Running   | Ready             | no       |
| running       | final-ok    | Terminal   | Succeeded | Completed         | no       |
| running       | final-fail  | Terminal   | Failed    | InstanceCrashing  | no       |
| running       | unreadable  | Unknown    | Unknown   | Unknown           | no       |
| stopping      | none        | Stopping   | Pending   | Provisioning      | no       |
| stopping      | running     | Stopping   | Running   | Starting          | no       |
| stopping      | final-ok    | Terminal   | Succeeded | Completed         | no       |
| stopping      | final-fail  | Terminal   | Failed    | InstanceCrashing  | no       |
| stopping      | unreadable  | Unknown    | Unknown   | Unknown           | no       |
| shutting-down | none        | Stopping   | Pending   | Provisioning      | no       |
| shutting-down | running     | Stopping   | Running   | Starting          | no       |
| shutting-down | final-ok    | Terminal   | Succeeded | Completed         | no       |
| shutting-down | final-fail  | Terminal   | Failed    | InstanceCrashing  | no       |
| shutting-down | unreadable  | Unknown    | Unknown   | Unknown           | no       |
| stopped       | none        | Lost       | Failed    | lost              | yes      |
| stopped       | running     | Lost       | Failed    | lost              | yes      |
| stopped       | final-ok    | Terminal   | Succeeded | Completed         | no       |
| stopped       | final-fail  | Terminal   | Failed    | InstanceCrashing  | no       |
| stopped       | unreadable  | Lost       | Failed    | lost              | yes      |
| terminated    | none        | Lost       | Failed    | lost              | yes      |
| terminated    | running     | Lost       | Failed    | lost              | yes      |
| terminated    | final-ok    | Terminal   | Succeeded | Completed         | no       |
| terminated    | final-fail  | Terminal   | Failed    | InstanceCrashing  | no       |
| terminated    | unreadable  | Lost       | Failed    | lost              | yes      |
| (absent)      | none        | Lost       | Failed    | InstanceLost      | no       |
| (absent)      | running     | Lost       | Failed    | InstanceLost      | no       |
| (absent)      | final-ok    | Terminal   | Succeeded | Completed         | no       |
| (absent)      | final-fail  | Terminal   | Failed    | InstanceCrashing  | no       |
| (absent)      | unreadable  | Lost       | Failed    | InstanceLost      | no       |
`;

const STATE_REASONS = [
  { code: undefined, cause: "None" },
  { code: "Server.SpotInstanceTermination", cause: "SpotInterruption" },
  { code: "Server.InsufficientInstanceCapacity", cause: "InsufficientCapacity" },
  { code: "Client.UserInitiatedShutdown", cause: "UserInitiatedShutdown" },
  { code: "Client.InstanceInitiatedShutdown", cause: "InstanceInitiatedShutdown" },
  { code: "Server.InternalError", cause: "InternalError" },
] as const;

const REPORTS: Record<string, ExitReport | "unreadable" | undefined> = {
  none: undefined,
  running: report(2, false, [running()]),
  "final-ok": report(3, true, [exited(0)]),
  "final-fail": report(3, true, [exited(1)]),
  unreadable: "unreadable",
};

const rows = TABLE.trim()
  .split("\n")
  .slice(2)
  .map((line) => {
    const [ec2State, variant, kind, phase, reason, console] = line
      .split("|")
      .slice(1, -1)
      .map((cell) => cell.trim());
    return { ec2State, variant, kind, phase, reason, console } as Record<string, string>;
  });

describe("EC2 state × state reason × report", () => {
  it("has a row for every EC2 state and report variant", () => {
    expect(rows).toHaveLength(7 * 5);
  });

  describe.each(STATE_REASONS)("state reason $code", ({ code, cause }) => {
    it.each(rows)("$ec2State + $variant → $kind, $phase, $reason, console $console", (row) => {
      const variant = REPORTS[row.variant ?? ""];
      const absent = row.ec2State === "(absent)";
      let state: InstanceState;
      if (absent) {
        state = toInstanceState(undefined, {
          now: NOW,
          ...(typeof variant === "object" ? { previous: { report: variant } } : {}),
          ...(variant === "unreadable" ? { consoleOutput: "NEBULA-REPORT v1 !!!" } : {}),
        });
      } else {
        const tags =
          variant === "unreadable"
            ? {
                "nebula:report": "v1 seq=9 chunks=1 sha256=0000000000000000",
                "nebula:report:1": "x",
              }
            : {};
        state = toInstanceState(
          ec2(row.ec2State ?? "", {
            ...(code === undefined ? {} : { code }),
            ...(typeof variant === "object" ? { report: variant } : {}),
            tags,
          }),
          { now: NOW },
        );
      }
      expect(state.kind).toBe(row.kind);
      if (state.kind === "Lost") expect(state.cause).toBe(absent ? "Absent" : cause);
      if (state.kind === "Unknown") expect(state.reason).toBe("ReportUnreadable");
      expect(needsConsoleOutput(state)).toBe(row.console === "yes");

      const status = toPodStatus(pod("Never"), state, { now: NOW });
      expect(status.phase).toBe(row.phase);
      const expectedReason =
        row.reason === "lost"
          ? cause === "InsufficientCapacity"
            ? "InsufficientCapacity"
            : "InstanceLost"
          : row.reason;
      expect(toInstanceReason({ spec: pod("Never").spec, status }).reason).toBe(expectedReason);
    });
  });
});

describe("toInstanceState", () => {
  it("keeps the EC2 facts", () => {
    const state = toInstanceState(ec2("running", { report: report(1, false, [running()]) }), {
      now: NOW,
    });
    expect(state).toMatchObject({
      kind: "Running",
      observedAt: NOW,
      instance: {
        instanceId: "i-0abc",
        ec2State: "running",
        cause: "None",
        privateIp: "10.0.1.23",
        publicIp: "3.3.3.3",
        launchTime: new Date("2026-11-30T05:50:00Z"),
      },
      report: { seq: 1 },
    });
  });

  it("never lets an older report (lower seq) overwrite a newer one", () => {
    const newer = report(7, false, [crashLooping(3)]);
    const stale = report(5, false, [running()]);
    const state = toInstanceState(ec2("running", { report: stale }), {
      now: NOW,
      previous: { kind: "Running", report: newer, instance: {} },
    });
    expect(state.kind).toBe("Running");
    expect(state.report?.seq).toBe(7);
  });

  it("lets a later final report win over a Lost guess", () => {
    const lost = toInstanceState(ec2("stopped", { code: "Client.InstanceInitiatedShutdown" }), {
      now: NOW,
    });
    expect(lost.kind).toBe("Lost");
    expect(needsConsoleOutput(lost)).toBe(true);
    const before = toPodStatus(pod("OnFailure"), lost, { now: NOW });
    expect(before.phase).toBe("Failed");

    const consoleOutput = `boot\n${encodeConsoleLine(report(4, true, [exited(0)]))}\npower off`;
    const found = toInstanceState(ec2("stopped", { code: "Client.InstanceInitiatedShutdown" }), {
      now: later(5_000),
      previous: lost,
      consoleOutput,
    });
    expect(found.kind).toBe("Terminal");
    expect(needsConsoleOutput(found)).toBe(false);
    const after = toPodStatus({ ...pod("OnFailure"), status: before }, found, {
      now: later(5_000),
    });
    expect(after.phase).toBe("Succeeded");
    expect(after.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 0,
      reason: "Completed",
    });
    expect(after.reason).toBeUndefined();
  });

  it("asks for the console when the tags hold only an older, non-final report (final CreateTags throttled)", () => {
    const older = report(5, false, [running()]);
    const lost = toInstanceState(
      ec2("stopped", { code: "Client.InstanceInitiatedShutdown", report: older }),
      { now: NOW },
    );
    expect(lost).toMatchObject({ kind: "Lost", report: { seq: 5, final: false } });
    expect(needsConsoleOutput(lost)).toBe(true);

    const consoleOutput = `${encodeConsoleLine(older)}\n${encodeConsoleLine(report(6, true, [exited(0)]))}\n`;
    const found = toInstanceState(
      ec2("stopped", { code: "Client.InstanceInitiatedShutdown", report: older }),
      { now: later(5_000), previous: lost, consoleOutput },
    );
    expect(found).toMatchObject({ kind: "Terminal", report: { seq: 6, final: true } });
    expect(needsConsoleOutput(found)).toBe(false);
    expect(toPodStatus(pod("Never"), found, { now: later(5_000) }).phase).toBe("Succeeded");
  });

  it("refuses a forged console report whose seq jumps far ahead, and keeps accepting the genuine ones", () => {
    // A privileged container can write /dev/console: a final "Succeeded" line with a huge seq.
    const genuine = report(5, false, [running()]);
    const lost = toInstanceState(
      ec2("stopped", { code: "Client.InstanceInitiatedShutdown", report: genuine }),
      { now: NOW },
    );
    const forged = encodeConsoleLine(report(1_000_000, true, [exited(0)]));
    const read = toInstanceState(
      ec2("stopped", { code: "Client.InstanceInitiatedShutdown", report: genuine }),
      { now: later(5_000), previous: lost, consoleOutput: `${forged}\n` },
    );
    // Not Terminal: the readable tags' report (seq 5) stands.
    expect(read).toMatchObject({ kind: "Lost", report: { seq: 5, final: false } });
    // The supervisor's own final report, next in line, is still accepted after the forgery.
    const finalLine = encodeConsoleLine(report(6, true, [exited(3)]));
    const found = toInstanceState(
      ec2("stopped", { code: "Client.InstanceInitiatedShutdown", report: genuine }),
      { now: later(10_000), previous: read, consoleOutput: `${forged}\n${finalLine}\n` },
    );
    expect(found).toMatchObject({ kind: "Terminal", report: { seq: 6, final: true } });
  });

  it("lets a genuine seq jump grow with the time since the last observation", () => {
    const previous = toInstanceState(ec2("running", { report: report(5, false, [running()]) }), {
      now: NOW,
    });
    // 1,000 ahead is allowed at once; 1,001 is not ...
    const at = (seq: number, ms: number) =>
      toInstanceState(ec2("running", { report: report(seq, false, [running()]) }), {
        now: later(ms),
        previous,
      });
    expect(at(1005, 1).report?.seq).toBe(1005);
    expect(at(1006, 1).report?.seq).toBe(5);
    // ... until an hour has passed (one more per 10 s: 360), as after a virtual node's outage.
    expect(at(1006 + 359, 3_600_000).report?.seq).toBe(1365);
    expect(at(1006 + 360, 3_600_000).report?.seq).toBe(5);
  });

  it("does not ask again once the console was consulted", () => {
    const state = toInstanceState(
      ec2("stopped", {
        code: "Client.InstanceInitiatedShutdown",
        report: report(5, false, [running()]),
      }),
      { now: NOW, consoleOutput: "boot\nno report here\n" },
    );
    expect(state.kind).toBe("Lost");
    expect(needsConsoleOutput(state)).toBe(false);
  });

  it("reuses the previous report while the report header tag is unchanged", () => {
    const first = toInstanceState(ec2("running", { report: report(3, false, [running()]) }), {
      now: NOW,
    });
    const tags = encodeReportTags(report(3, false, [running()]));
    // Same header (same seq and checksum), a chunk read back damaged: the header vouches for the
    // chunks the previous report was decoded from.
    const damaged = ec2("running", { tags: { ...tags, "nebula:report:1": "AAAA" } });
    expect(toInstanceState(damaged, { now: NOW, previous: first })).toMatchObject({
      kind: "Running",
      report: { seq: 3 },
    });
    expect(toInstanceState(damaged, { now: NOW })).toMatchObject({
      kind: "Unknown",
      reason: "ReportUnreadable",
    });
    // A new header is decoded again.
    const next = ec2("running", { report: report(4, false, [crashLooping(1)]) });
    expect(toInstanceState(next, { now: NOW, previous: first }).report?.seq).toBe(4);
  });

  it("ignores a previous observation of another instance", () => {
    const old = toInstanceState(ec2("running", { report: report(40, false, [crashLooping(3)]) }), {
      now: NOW,
    });
    const replacement = {
      ...ec2("running", { report: report(1, false, [running()]) }),
      InstanceId: "i-0new",
    };
    const state = toInstanceState(replacement, { now: later(1000), previous: old });
    expect(state).toMatchObject({
      kind: "Running",
      report: { seq: 1 },
      instance: { instanceId: "i-0new" },
    });
  });

  it("never goes back from Lost to a live state", () => {
    const lost = toInstanceState(undefined, {
      now: NOW,
      previous: { kind: "Running", instance: {} },
    });
    expect(lost.kind).toBe("Lost");
    const again = toInstanceState(ec2("running", { report: report(1, false, [running()]) }), {
      now: later(1_000),
      previous: lost,
    });
    expect(again.kind).toBe("Lost");
  });

  it("keeps why an instance was lost when it is terminated or disappears afterwards", () => {
    const spot = toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    const terminated = toInstanceState(
      ec2("terminated", { code: "Client.UserInitiatedShutdown" }),
      {
        now: later(60_000),
        previous: spot,
      },
    );
    const gone = toInstanceState(undefined, { now: later(120_000), previous: terminated });
    for (const state of [terminated, gone]) {
      expect(state).toMatchObject({
        kind: "Lost",
        cause: "SpotInterruption",
        message: spot.kind === "Lost" ? spot.message : "",
      });
    }
    const p = pod("Never");
    const first = toPodStatus(p, spot, { now: NOW });
    const last = toPodStatus({ ...p, status: first }, gone, { now: later(120_000) });
    expect(last).toEqual(first);
  });

  it("gives a fresh launch a grace period before calling an unlisted instance lost", () => {
    const launchedAt = later(-30_000);
    expect(toInstanceState(undefined, { now: NOW, launchedAt }).kind).toBe("Pending");
    expect(toInstanceState(undefined, { now: later(60_000), launchedAt }).kind).toBe("Lost");
    expect(
      toInstanceState(undefined, {
        now: NOW,
        launchedAt,
        previous: { kind: "Booting", instance: {} },
      }).kind,
    ).toBe("Lost");
    expect(toInstanceState(undefined, { now: NOW }).kind).toBe("Lost");
  });

  it("marks a silent running instance overdue after the boot timeout", () => {
    const early = toInstanceState(ec2("running"), { now: NOW });
    expect(early).toMatchObject({ kind: "Booting", overdue: false });
    const late = toInstanceState(ec2("running"), { now: later(60 * 60_000) });
    expect(late).toMatchObject({ kind: "Booting", overdue: true });
    expect(toInstanceState(ec2("running"), { now: NOW, bootTimeoutMs: 1 })).toMatchObject({
      overdue: true,
    });
  });

  it("carries the last accepted report through an unreadable one, and a final one wins", () => {
    const tags = { "nebula:report": "v1 seq=9 chunks=2 sha256=0000000000000000" };
    const previous = { kind: "Running", report: report(3, false, [running()]), instance: {} };
    const unknown = toInstanceState(ec2("running", { tags }), { now: NOW, previous });
    expect(unknown).toMatchObject({
      kind: "Unknown",
      reason: "ReportUnreadable",
      report: { seq: 3 },
      message: expect.stringContaining("chunk 1 of 2 is missing"),
    });
    const final = { ...previous, report: report(4, true, [exited(0)]) };
    expect(toInstanceState(ec2("running", { tags }), { now: NOW, previous: final }).kind).toBe(
      "Terminal",
    );
  });

  it("says which input it could not read", () => {
    expect(toInstanceState({ InstanceId: 7 }, { now: NOW })).toMatchObject({
      kind: "Unknown",
      reason: "InstanceUnreadable",
    });
    expect(toInstanceState(ec2("hibernating"), { now: NOW })).toMatchObject({
      kind: "Unknown",
      reason: "UnknownInstanceState",
    });
  });

  it("writes a stable Lost message that says the instance vanished without reporting", () => {
    const a = toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    const b = toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), {
      now: later(60_000),
    });
    expect(a.kind === "Lost" && a.message).toBe(
      "instance i-0abc was reclaimed by a Spot interruption (Server.SpotInstanceTermination: detail) and vanished without reporting its final container state",
    );
    expect(b.kind === "Lost" && b.message).toBe(a.kind === "Lost" && a.message);
  });
});

const arbitraryTags = fc.dictionary(
  fc.constantFrom("nebula:report", "nebula:report:1", "nebula:report:2", "Name"),
  fc.oneof(fc.string(), fc.constant("v1 seq=1 chunks=1 sha256=0123456789abcdef")),
);

describe("properties", () => {
  it("is total: arbitrary JSON for the instance, the report or the console never throws", () => {
    fc.assert(
      fc.property(
        fc.jsonValue(),
        fc.jsonValue(),
        fc.option(fc.string(), { nil: undefined }),
        arbitraryTags,
        fc.constantFrom("pending", "running", "stopped", "weird"),
        (instance, previousReport, consoleOutput, tags, stateName) => {
          const options = {
            now: NOW,
            // Half the time a plausible previous state, half the time anything at all (persisted JSON).
            previous: (typeof previousReport === "object" && previousReport !== null
              ? previousReport
              : { report: previousReport }) as PreviousObservation,
            ...(consoleOutput === undefined ? {} : { consoleOutput }),
          };
          const a = toInstanceState(instance, options);
          if (instance !== null && a.kind !== "Terminal") {
            expect(a).toMatchObject({ kind: "Unknown", reason: "InstanceUnreadable" });
          }
          const b = toInstanceState(ec2(stateName, { tags }), options);
          expect([
            "Pending",
            "Booting",
            "Running",
            "Stopping",
            "Terminal",
            "Lost",
            "Unknown",
          ]).toContain(b.kind);
          expect(toPodStatus(pod(), b, { now: NOW }).phase).toBeTypeOf("string");
        },
      ),
      { numRuns: 300 },
    );
  });

  it("is total on a previous observation of any shape", () => {
    fc.assert(
      fc.property(
        fc.record(
          {
            kind: fc.oneof(
              fc.constantFrom("Lost", "Terminal", "Running", "Booting"),
              fc.jsonValue(),
            ),
            cause: fc.oneof(fc.constantFrom("SpotInterruption", "Absent", "Bogus"), fc.jsonValue()),
            message: fc.jsonValue(),
            instance: fc.jsonValue(),
            report: fc.jsonValue(),
          },
          { requiredKeys: [] },
        ),
        fc.constantFrom(undefined, "running", "stopped"),
        (previous, stateName) => {
          const state = toInstanceState(stateName === undefined ? undefined : ec2(stateName), {
            now: NOW,
            previous: previous as PreviousObservation,
          });
          expect([
            "Pending",
            "Booting",
            "Running",
            "Stopping",
            "Terminal",
            "Lost",
            "Unknown",
          ]).toContain(state.kind);
          if (state.kind === "Lost") {
            expect(state.message).toBeTypeOf("string");
            expect(toPodStatus(pod(), state, { now: NOW }).phase).toBe("Failed");
          }
        },
      ),
    );
  });

  it("is deterministic and does not mutate its inputs", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("pending", "running", "stopping", "stopped", "terminated"),
        fc.constantFrom(undefined, ...STATE_REASONS.map((r) => r.code).filter(Boolean)),
        fc.constantFrom(...Object.values(REPORTS).filter((r) => typeof r === "object")),
        (stateName, code, rep) => {
          const instance = ec2(stateName, { ...(code ? { code } : {}), report: rep });
          const copy = structuredClone(instance);
          const first = toInstanceState(instance, { now: NOW });
          const second = toInstanceState(instance, { now: NOW });
          expect(second).toEqual(first);
          expect(instance).toEqual(copy);
          const p = pod("OnFailure");
          const podCopy = structuredClone(p);
          expect(toPodStatus(p, first, { now: NOW })).toEqual(toPodStatus(p, second, { now: NOW }));
          expect(p).toEqual(podCopy);
        },
      ),
    );
  });

  it("applies report sequence numbers monotonically, whatever order the reports arrive in", () => {
    const containerState = fc.constantFrom(running(), crashLooping(2), exited(1));
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.nat({ max: 1000 }), { minLength: 1, maxLength: 8 }),
        fc.array(containerState, { minLength: 8, maxLength: 8 }),
        (seqs, states) => {
          let state: InstanceState | undefined;
          let highest = -1;
          seqs.forEach((seq, i) => {
            const rep = report(seq, false, [states[i] ?? running()]);
            state = toInstanceState(ec2("running", { report: rep }), {
              now: later(i * 1000),
              ...(state === undefined ? {} : { previous: state }),
            });
            highest = Math.max(highest, seq);
            expect(state.report?.seq).toBe(highest);
          });
          // The Pod status is the one the newest report alone gives.
          const newest = seqs.indexOf(highest);
          const alone = toInstanceState(
            ec2("running", { report: report(highest, false, [states[newest] ?? running()]) }),
            { now: NOW },
          );
          if (state === undefined) return;
          expect(toPodStatus(pod(), state, { now: NOW }).containerStatuses).toEqual(
            toPodStatus(pod(), alone, { now: NOW }).containerStatuses,
          );
        },
      ),
    );
  });

  it("never reports Succeeded for a stopped or vanished instance without a report", () => {
    const containers = fc.uniqueArray(fc.constantFrom("app", "sidecar", "worker"), {
      minLength: 1,
      maxLength: 3,
    });
    fc.assert(
      fc.property(
        fc.constantFrom("stopped", "terminated", "absent"),
        fc.constantFrom(...STATE_REASONS.map((r) => r.code)),
        fc.constantFrom("Always" as const, "OnFailure" as const, "Never" as const),
        containers,
        fc.boolean(),
        fc.option(fc.string(), { nil: undefined }),
        (stateName, code, policy, names, withInit, consoleOutput) => {
          const state = toInstanceState(
            stateName === "absent" ? undefined : ec2(stateName, code === undefined ? {} : { code }),
            { now: NOW, ...(consoleOutput === undefined ? {} : { consoleOutput }) },
          );
          const p = pod(
            policy,
            names.map((name) => ({ name })),
            withInit ? [{ name: "init" }] : [],
          );
          const status = toPodStatus(p, state, { now: NOW });
          expect(status.phase).toBe("Failed");
          for (const c of [
            ...(status.initContainerStatuses ?? []),
            ...(status.containerStatuses ?? []),
          ]) {
            expect(c.state?.terminated).toMatchObject({
              exitCode: 137,
              reason: "ContainerStatusUnknown",
              message: expect.stringContaining("vanished without reporting"),
            });
          }
        },
      ),
    );
  });
});

describe("a stop requested from outside (final report with stopRequested)", () => {
  const stoppedReport = (containers = [exited(143, "app", { signal: 15 })]): ExitReport => ({
    ...report(8, true, containers),
    stopRequested: true,
  });
  const reverse = (state: InstanceState, restartPolicy: "Always" | "Never" = "Always") => {
    const p = pod(
      restartPolicy,
      [{ name: "app" }, { name: "side" }].slice(0, state.report?.containers.length ?? 1),
    );
    const status = toPodStatus(p, state, { now: NOW });
    return { status, reason: toInstanceReason({ spec: p.spec, status }) };
  };

  it("gives a Spot interruption the Lost Pod reason, and no crash", () => {
    const state = toInstanceState(
      ec2("stopped", { code: "Server.SpotInstanceTermination", report: stoppedReport() }),
      { now: NOW },
    );
    expect(state).toMatchObject({ kind: "Terminal", stopped: { cause: "SpotInterruption" } });
    const { status, reason } = reverse(state);
    expect(status.phase).toBe("Failed");
    expect(status.reason).toBe("SpotInterruption");
    expect(status.message).toBe(
      "instance i-0abc was reclaimed by a Spot interruption (Server.SpotInstanceTermination: detail); its host supervisor stopped the containers and reported their final state",
    );
    // The container's exit is shown as the host saw it ...
    expect(status.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 143,
      signal: 15,
    });
    // ... but it is not counted as the customer's crash.
    expect(reason.reason).toBe("InstanceLost");
    expect(reason.message).not.toContain("signal 15");
  });

  it("gives a stop by a user or the controller InstanceLost, not InstanceCrashing", () => {
    const state = toInstanceState(
      ec2("terminated", { code: "Client.UserInitiatedShutdown", report: stoppedReport() }),
      { now: NOW },
    );
    const { status, reason } = reverse(state);
    expect(status.reason).toBe("InstanceLost");
    expect(reason.reason).toBe("InstanceLost");
  });

  it("still counts a container that failed before the stop as a crash", () => {
    const state = toInstanceState(
      ec2("stopped", {
        code: "Server.SpotInstanceTermination",
        report: stoppedReport([exited(1, "app"), exited(143, "side", { signal: 15 })]),
      }),
      { now: NOW },
    );
    const { status, reason } = reverse(state, "Never");
    expect(status.reason).toBe("SpotInterruption");
    expect(reason).toMatchObject({
      reason: "InstanceCrashing",
      message: 'container "app" exited with code 1.',
    });
  });

  it("counts a container the grace period ran out on (SIGKILL, 137) as stopped, an OOM kill as OOM", () => {
    const killed = toInstanceState(
      ec2("stopped", {
        code: "Server.SpotInstanceTermination",
        report: stoppedReport([exited(137, "app", { signal: 9 })]),
      }),
      { now: NOW },
    );
    expect(reverse(killed).reason.reason).toBe("InstanceLost");
    const oom = toInstanceState(
      ec2("stopped", {
        code: "Server.SpotInstanceTermination",
        report: stoppedReport([exited(137, "app", { reason: "OOMKilled" })]),
      }),
      { now: NOW },
    );
    expect(reverse(oom).reason.reason).toBe("OutOfMemory");
  });

  it("without stopRequested, or with a cause that is not the platform's or a user's, stays a crash", () => {
    const plain = toInstanceState(
      ec2("stopped", {
        code: "Server.SpotInstanceTermination",
        report: report(8, true, [exited(143, "app", { signal: 15 })]),
      }),
      { now: NOW },
    );
    expect(plain.kind === "Terminal" && plain.stopped).toBe(undefined);
    expect(reverse(plain).status.reason).toBeUndefined();
    expect(reverse(plain).reason.reason).toBe("InstanceCrashing");

    const self = toInstanceState(
      ec2("stopped", { code: "Client.InstanceInitiatedShutdown", report: stoppedReport() }),
      { now: NOW },
    );
    expect(self.kind === "Terminal" && self.stopped).toBe(undefined);
    expect(reverse(self).reason.reason).toBe("InstanceCrashing");
  });

  it("keeps the cause a Lost state froze when the final report arrives later on the console", () => {
    const lost = toInstanceState(ec2("stopped", { code: "Server.SpotInstanceTermination" }), {
      now: NOW,
    });
    expect(lost).toMatchObject({ kind: "Lost", cause: "SpotInterruption" });
    // The controller then terminated the instance: EC2's reason is now an API call.
    const found = toInstanceState(ec2("terminated", { code: "Client.UserInitiatedShutdown" }), {
      now: later(5_000),
      previous: lost,
      consoleOutput: encodeConsoleLine(stoppedReport()),
    });
    expect(found).toMatchObject({ kind: "Terminal", stopped: { cause: "SpotInterruption" } });
    expect(reverse(found).status.reason).toBe("SpotInterruption");
  });

  it("learns the cause once EC2 gives it, and keeps it after the instance is gone", () => {
    const first = toInstanceState(ec2("running", { report: stoppedReport() }), { now: NOW });
    expect(first.kind === "Terminal" && first.stopped).toBe(undefined);
    const second = toInstanceState(
      ec2("stopped", { code: "Server.SpotInstanceTermination", report: stoppedReport() }),
      { now: later(1_000), previous: first },
    );
    expect(second).toMatchObject({ kind: "Terminal", stopped: { cause: "SpotInterruption" } });
    const gone = toInstanceState(undefined, {
      now: later(2_000),
      previous: JSON.parse(JSON.stringify(second)),
    });
    expect(gone).toMatchObject({ kind: "Terminal", stopped: { cause: "SpotInterruption" } });
    expect(reverse(gone).status.reason).toBe("SpotInterruption");
  });
});
