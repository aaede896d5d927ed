import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type TeardownEvent, TeardownExecutor } from "./executor.js";
import {
  type InstanceObservation,
  type PodTeardownEffect,
  type PodTeardownObservation,
  type PodTeardownParamsInput,
  podTeardown,
} from "./pod.js";
import { decodeRecord } from "./record.js";
import { MemoryStore, type TeardownStore } from "./store.js";
import { type CrashPoint, Process } from "./testkit.js";

/** Crash loops and properties run hundreds of teardowns; give them room on a loaded machine. */
const HEAVY_TIMEOUT_MS = 120_000;

const KEY = "default/web-0";
const INSTANCE = "i-0123456789abcdef0";
const GRACE_S = 20;
const HEADROOM_S = 30;

const params: PodTeardownParamsInput = {
  namespace: "default",
  name: "web-0",
  podUid: "pod-uid-1",
  instanceId: INSTANCE,
  gracePeriodSeconds: GRACE_S,
  headroomSeconds: HEADROOM_S,
  auxiliaries: [
    { apiVersion: "v1", kind: "Secret", namespace: "default", name: "web-0-env", uid: "s-1" },
    { apiVersion: "v1", kind: "ConfigMap", namespace: "default", name: "web-0-files" },
  ],
};

/** A simulated EC2 instance, the Pod object (the store's subject) and the Pod's auxiliary objects. */
class PodWorld {
  t = 1_750_000_000_000;
  readonly store = new MemoryStore();
  instance: InstanceObservation = "running";
  /** How long the host supervisor takes to stop the containers; `Infinity`: it hangs. */
  stopTakesMs = 5_000;
  /** How long the `StopInstances` call takes to return (the request arrives at once). */
  stopCallMs = 0;
  stopRequestedAt: number | undefined;
  terminateRequestedAt: number | undefined;
  readonly auxiliaries = new Set(["web-0-env", "web-0-files"]);
  readonly violations: string[] = [];
  readonly calls: string[] = [];
  lastIdx = -1;

  constructor() {
    this.store.put(KEY, { metadata: { name: "web-0" } }, "pod-uid-1");
  }

  settle(): void {
    if (this.instance === "stopping" && this.stopRequestedAt !== undefined) {
      if (this.t >= this.stopRequestedAt + this.stopTakesMs) this.instance = "stopped";
    }
    if (this.instance === "shutting-down" && this.terminateRequestedAt !== undefined) {
      if (this.t >= this.terminateRequestedAt + 2_000) this.instance = "terminated";
    }
  }

  observe(): PodTeardownObservation {
    this.settle();
    return {
      instance: this.instance,
      auxiliariesRemaining: this.auxiliaries.size,
      pod: this.store.get(KEY) ? "present" : "absent",
    };
  }

  readonly handlers = {
    StopInstance: (e: Extract<PodTeardownEffect, { kind: "StopInstance" }>) => {
      this.settle();
      this.calls.push(e.kind);
      if (this.instance === "running") {
        this.instance = "stopping";
        this.stopRequestedAt = this.t;
      }
      this.t += this.stopCallMs;
    },
    TerminateInstance: (e: Extract<PodTeardownEffect, { kind: "TerminateInstance" }>) => {
      this.settle();
      this.calls.push(e.kind);
      if (this.stopRequestedAt === undefined) this.violations.push("terminated without a stop");
      else if (this.instance === "stopping" && this.t < this.stopRequestedAt + GRACE_S * 1000) {
        this.violations.push("terminated before the grace period elapsed");
      }
      if (this.instance !== "terminated") {
        this.instance = "shutting-down";
        this.terminateRequestedAt ??= this.t;
      }
    },
    DeleteAuxiliary: (e: Extract<PodTeardownEffect, { kind: "DeleteAuxiliary" }>) => {
      this.settle();
      this.calls.push(`${e.kind} ${e.object.name}`);
      if (this.instance !== "terminated") {
        this.violations.push("auxiliary deleted before the instance was terminated");
      }
      this.auxiliaries.delete(e.object.name);
    },
    DeletePod: (e: Extract<PodTeardownEffect, { kind: "DeletePod" }>) => {
      this.calls.push(`${e.kind} uid=${e.uid} grace=${e.gracePeriodSeconds}`);
      if (this.auxiliaries.size > 0) this.violations.push("Pod deleted before its auxiliaries");
      // UID precondition: only this incarnation of the Pod.
      if (this.store.get(KEY)?.uid === e.uid) this.store.remove(KEY);
    },
  };

  checkedStore(): TeardownStore {
    return {
      read: (key) => this.store.read(key),
      write: async (key, change, version, uid) => {
        const outcome = await this.store.write(key, change, version, uid);
        if (outcome.status === "written" && change.record !== null) {
          const decoded = decodeRecord(change.record);
          const idx = decoded.ok ? decoded.record.idx : -1;
          if (idx < this.lastIdx) this.violations.push(`phase went back to ${idx}`);
          this.lastIdx = Math.max(this.lastIdx, idx);
        }
        return outcome;
      },
    };
  }

  executor(process: Process, onEvent?: (e: TeardownEvent) => void) {
    return new TeardownExecutor({
      teardown: podTeardown,
      store: process.store(this.checkedStore()),
      handlers: process.handlers(this.handlers),
      observe: () => process.observe("observe", () => this.observe()),
      now: () => this.t,
      ...(onEvent ? { onEvent } : {}),
    });
  }

  done(): boolean {
    return this.store.get(KEY) === undefined;
  }
}

async function runProcess(world: PodWorld, process: Process, maxTicks = 400): Promise<void> {
  const executor = world.executor(process);
  if (!world.done()) await executor.request(KEY, { params, cause: "DeletionRequested" });
  for (let i = 0; i < maxTicks && process.alive && !world.done(); i++) {
    world.t += 1_000;
    await executor.tick(KEY);
  }
  if (process.alive && !world.done()) throw new Error("the Pod teardown did not complete");
}

function expectCompleted(world: PodWorld): void {
  expect(world.violations).toEqual([]);
  expect(world.done()).toBe(true);
  expect(world.instance).toBe("terminated");
  expect([...world.auxiliaries]).toEqual([]);
}

describe("podTeardown (docs/contracts.md#pod-teardown)", () => {
  it("stops, waits, terminates, releases auxiliaries, then deletes the Pod with grace 0 and its UID", async () => {
    const world = new PodWorld();
    const transitions: string[] = [];
    const executor = world.executor(new Process(), (e) => {
      if (e.type === "transition") transitions.push(`${e.transition.to}:${e.transition.reason}`);
    });
    await executor.request(KEY, { params, cause: "DeletionRequested" });
    for (let i = 0; i < 100 && !world.done(); i++) {
      world.t += 1_000;
      await executor.tick(KEY);
    }
    expectCompleted(world);
    expect(world.calls).toEqual([
      "StopInstance",
      "TerminateInstance",
      "DeleteAuxiliary web-0-env",
      "DeleteAuxiliary web-0-files",
      "DeletePod uid=pod-uid-1 grace=0",
    ]);
    expect(transitions).toEqual([
      "stopping:Started",
      "terminating:Done",
      "releasing:Done",
      "removing:Done",
    ]);
  });

  it("waits exactly grace + headroom from the recorded stop request for a hung instance, then terminates", async () => {
    const world = new PodWorld();
    world.stopTakesMs = Number.POSITIVE_INFINITY;
    const executor = world.executor(new Process());
    const start = world.t;
    await executor.request(KEY, { params, cause: "TerminalReportRecorded" });
    const stored = decodeRecord(world.store.get(KEY)?.record);
    if (!stored.ok) throw new Error(stored.reason);
    expect(stored.record.deadline).toBe(start + (GRACE_S + HEADROOM_S) * 1000);
    let terminatedAt: number | undefined;
    for (let i = 0; i < 200 && !world.done(); i++) {
      world.t += 1_000;
      await executor.tick(KEY);
      if (terminatedAt === undefined && world.terminateRequestedAt !== undefined) {
        terminatedAt = world.t;
      }
    }
    expect(terminatedAt).toBe(start + (GRACE_S + HEADROOM_S) * 1000);
    expectCompleted(world);
  });

  it("measures the stop deadline from the recorded claim, not the acknowledgement: claim t0, ack t0+45 s → t0+60 s", () => {
    const t0 = Date.parse("2026-11-30T06:00:00Z");
    const p = { ...params, gracePeriodSeconds: 30, headroomSeconds: 30 };
    const started = podTeardown.start({ params: p, cause: "DeletionRequested" }, t0);
    if (started.kind !== "step") throw new Error(started.reason);
    expect(started.record).toMatchObject({ phase: "stopping", attempt: 1, claimedAt: t0 });
    expect(started.effects).toEqual([
      { kind: "StopInstance", podUid: "pod-uid-1", instanceId: INSTANCE },
    ]);
    // StopInstances returned 45 s later.
    const acked = podTeardown.acknowledge(started.record, t0 + 45_000);
    if (acked.kind !== "step") throw new Error(acked.reason);
    expect(acked.record).toMatchObject({ issuedAt: t0 + 45_000, deadline: t0 + 60_000 });
    // A restarted process reads the same deadline from the stored record.
    const stored = decodeRecord(JSON.stringify(acked.record));
    if (!stored.ok) throw new Error(stored.reason);
    const stopping: PodTeardownObservation = { instance: "stopping", pod: "present" };
    expect(podTeardown.step(stored.record, stopping, t0 + 59_999)).toMatchObject({
      status: "waiting",
      write: "none",
    });
    const expired = podTeardown.step(stored.record, stopping, t0 + 60_000);
    if (expired.kind !== "step") throw new Error(expired.reason);
    expect(expired.transitions).toEqual([
      {
        from: "stopping",
        to: "terminating",
        reason: "DeadlineExpired",
        skipped: [],
        at: t0 + 60_000,
      },
    ]);
    expect(expired.effects).toEqual([
      { kind: "TerminateInstance", podUid: "pod-uid-1", instanceId: INSTANCE },
    ]);
  });

  it("a slow StopInstances call counts against the stop deadline (executor)", async () => {
    const world = new PodWorld();
    world.stopTakesMs = Number.POSITIVE_INFINITY;
    world.stopCallMs = 45_000;
    const t0 = world.t;
    const executor = world.executor(new Process());
    const p = { ...params, gracePeriodSeconds: 30, headroomSeconds: 30 };
    await executor.request(KEY, { params: p, cause: "DeletionRequested" });
    const stored = decodeRecord(world.store.get(KEY)?.record);
    if (!stored.ok) throw new Error(stored.reason);
    expect(stored.record).toMatchObject({ issuedAt: t0 + 45_000, deadline: t0 + 60_000 });
    let terminatedAt: number | undefined;
    for (let i = 0; i < 200 && !world.done(); i++) {
      world.t += 1_000;
      await executor.tick(KEY);
      if (terminatedAt === undefined && world.terminateRequestedAt !== undefined) {
        terminatedAt = world.t;
      }
    }
    expect(terminatedAt).toBe(t0 + 60_000);
    expectCompleted(world);
  });

  it("keeps the recorded deadline across a restart: a deadline that passed while down advances at once", async () => {
    const world = new PodWorld();
    world.stopTakesMs = Number.POSITIVE_INFINITY;
    await world.executor(new Process()).request(KEY, { params, cause: "DeletionRequested" });
    world.t += 10 * 60_000;
    const events: TeardownEvent[] = [];
    const result = await world.executor(new Process(), (e) => events.push(e)).tick(KEY);
    expect(result.status).toBe("progressed");
    expect(events.find((e) => e.type === "transition")).toMatchObject({
      transition: { from: "stopping", to: "terminating", reason: "DeadlineExpired" },
    });
  });

  it("skips stop and terminate when no instance was launched, and can end by clearing the record", async () => {
    const world = new PodWorld();
    const executor = world.executor(new Process());
    const noInstance = { ...params, finish: "clear" as const };
    delete noInstance.instanceId;
    world.instance = "terminated";
    await executor.request(KEY, { params: noInstance, cause: "DeletionRequested" });
    for (let i = 0; i < 10; i++) await executor.tick(KEY);
    expect(world.calls).toEqual(["DeleteAuxiliary web-0-env", "DeleteAuxiliary web-0-files"]);
    const kept = decodeRecord(world.store.get(KEY)?.record);
    expect(kept.ok && kept.record.phase).toBe("complete");
  });

  it("a completed teardown is kept as complete: a later request never starts it again", async () => {
    const world = new PodWorld();
    const executor = world.executor(new Process());
    const clear = { ...params, finish: "clear" as const };
    await executor.request(KEY, { params: clear, cause: "DeletionRequested" });
    let result = await executor.tick(KEY);
    for (let i = 0; i < 200 && result.status !== "complete"; i++) {
      world.t += 1_000;
      result = await executor.tick(KEY);
    }
    expect(result.status).toBe("complete");
    const calls = world.calls.length;
    const writes = world.store.history.length;
    // A stale request (a restarted process, a late watch event) finds it complete.
    const again = await world
      .executor(new Process())
      .request(KEY, { params: clear, cause: "TerminalStatusWritten" });
    expect(again.status).toBe("complete");
    expect(world.calls.length).toBe(calls);
    expect(world.store.history.length).toBe(writes);
  });

  it("with a launch requested but no instance ID, stop and terminate carry the Pod UID", () => {
    const p = { ...params, launchRequested: true };
    delete p.instanceId;
    const started = podTeardown.start({ params: p, cause: "DeletionRequested" }, 0);
    if (started.kind !== "step") throw new Error(started.reason);
    expect(started.effects).toEqual([{ kind: "StopInstance", podUid: "pod-uid-1" }]);
  });

  it("a StopInstances refused for good escalates to terminate once the stop deadline passes", async () => {
    const world = new PodWorld();
    let refusals = 0;
    const refusing = {
      ...world.handlers,
      StopInstance: () => {
        refusals++;
        throw new Error("UnsupportedOperation: the instance has an instance-store root");
      },
    };
    const executor = new TeardownExecutor({
      teardown: podTeardown,
      store: world.checkedStore(),
      handlers: refusing,
      observe: () => world.observe(),
      now: () => world.t,
    });
    const t0 = world.t;
    await executor.request(KEY, { params, cause: "DeletionRequested" });
    let terminatedAt: number | undefined;
    for (let i = 0; i < 300 && !world.done(); i++) {
      world.t += 1_000;
      await executor.tick(KEY);
      if (terminatedAt === undefined && world.calls.includes("TerminateInstance")) {
        terminatedAt = world.t;
      }
    }
    expect(refusals).toBeGreaterThan(1);
    expect(terminatedAt).toBe(t0 + (GRACE_S + HEADROOM_S) * 1000);
    expect(world.instance).toBe("terminated");
    expect(world.done()).toBe(true);
  });

  it("a stale delete never removes a recreated Pod of the same name (UID precondition)", async () => {
    const world = new PodWorld();
    world.store.put(KEY, { metadata: { name: "web-0" } }, "pod-uid-2");
    world.handlers.DeletePod({
      kind: "DeletePod",
      namespace: "default",
      name: "web-0",
      uid: "pod-uid-1",
      gracePeriodSeconds: 0,
    });
    expect(world.store.get(KEY)?.uid).toBe("pod-uid-2");
  });

  it("holds termination for pre-terminate holders, at most the hold timeout", async () => {
    const record = podTeardown.start({ params, cause: "DeletionRequested" }, 0);
    if (record.kind !== "step") throw new Error(record.reason);
    const confirmed = podTeardown.acknowledge(record.record, 0);
    if (confirmed.kind !== "step") throw new Error(confirmed.reason);
    const held = podTeardown.step(
      confirmed.record,
      { instance: "stopped", pod: "present", holds: ["backup"] },
      1_000,
    );
    expect(held).toMatchObject({ status: "held", write: "update", effects: [] });
  });

  it("describes a waiting teardown for people", async () => {
    const world = new PodWorld();
    world.stopTakesMs = Number.POSITIVE_INFINITY;
    await world.executor(new Process()).request(KEY, { params, cause: "DeletionRequested" });
    const stored = decodeRecord(world.store.get(KEY)?.record);
    if (!stored.ok) throw new Error(stored.reason);
    expect(podTeardown.describe(stored.record, world.t + 12_000).text).toBe(
      "stopping (1/4) for 12s since 2025-06-15T15:06:40.000Z; waiting for the instance to stop; deadline in 38s (2025-06-15T15:07:30.000Z); cause DeletionRequested",
    );
  });

  describe("crash injection at every side effect", () => {
    const counter = new Process();
    const counted = runProcess(new PodWorld(), counter).then(() => counter.operations);

    for (const when of ["before", "after"] as const) {
      for (const downtimeMs of [1_000, 15 * 60_000]) {
        it(
          `completes in order after a crash ${when} each effect k, down ${downtimeMs} ms`,
          async () => {
            const total = await counted;
            expect(total).toBeGreaterThanOrEqual(10);
            for (let at = 0; at < total; at++) {
              for (const hung of [false, true]) {
                const world = new PodWorld();
                if (hung) world.stopTakesMs = Number.POSITIVE_INFINITY;
                const crash: CrashPoint = { at, when };
                const first = new Process(crash);
                await runProcess(world, first);
                // Hung or not, the run has the same side effects, so every crash point is reached.
                expect(first.alive, `crash point ${at} reached (hung ${hung})`).toBe(false);
                world.t += downtimeMs;
                await runProcess(world, new Process());
                expect(world.violations, `crash ${when} effect ${at}, hung ${hung}`).toEqual([]);
                expectCompleted(world);
              }
            }
          },
          HEAVY_TIMEOUT_MS,
        );
      }
    }

    it(
      "completes in order after any sequence of crashes (property)",
      async () => {
        await fc.assert(
          fc.asyncProperty(
            fc.array(
              fc.record({
                at: fc.nat({ max: 10 }),
                when: fc.constantFrom("before" as const, "after" as const),
              }),
              { maxLength: 6 },
            ),
            fc.integer({ min: 0, max: 120_000 }),
            fc.boolean(),
            async (crashes, downtime, hung) => {
              const world = new PodWorld();
              if (hung) world.stopTakesMs = Number.POSITIVE_INFINITY;
              for (const crash of crashes) {
                await runProcess(world, new Process(crash));
                world.t += downtime;
              }
              await runProcess(world, new Process());
              expectCompleted(world);
            },
          ),
          { numRuns: 150 },
        );
      },
      HEAVY_TIMEOUT_MS,
    );
  });
});
