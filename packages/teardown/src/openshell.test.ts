/**
 * The worked example from the OpenShell incident (NVIDIA/OpenShell#3421): stop a sandbox by
 * deleting its supervisor while the workload boundary is reachable, waiting until the supervisor
 * is gone, suspending the workload in the same write as the phase change, waiting until the
 * workload is gone, deleting the generation Secrets separately, and clearing the record.
 *
 * The world below is a small simulation with OpenShell's reported failure (NVIDIA/OpenShell#3421) built in: a supervisor whose
 * cleanup runs after the workload is suspended loses its boundary and is force-killed.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { TeardownExecutor, type TickResult } from "./executor.js";
import { defineTeardown } from "./machine.js";
import { decodeRecord } from "./record.js";
import { MemoryStore, type StoreWrite, type TeardownStore } from "./store.js";
import { type CrashPoint, Process } from "./testkit.js";

/** Crash loops and properties run hundreds of teardowns; give them room on a loaded machine. */
const HEAVY_TIMEOUT_MS = 120_000;

type OpenShellEffect =
  | { readonly kind: "DeletePod"; readonly name: string; readonly uid: string }
  | { readonly kind: "DeleteSecret"; readonly name: string };

interface OpenShellObservation {
  readonly supervisor: "present" | "absent";
  readonly workload: "present" | "absent";
  readonly secrets: number;
}

const OpenShellParams = z.strictObject({
  supervisorUid: z.string(),
  secrets: z.array(z.string()),
  graceSeconds: z.number().int().default(30),
  headroomSeconds: z.number().int().default(30),
});

const openShellStop = defineTeardown<
  OpenShellObservation,
  OpenShellEffect,
  z.infer<typeof OpenShellParams>
>({
  name: "openshell.ai/sandbox-stop",
  params: OpenShellParams,
  phases: [
    {
      name: "releasing",
      waitsFor: "the supervisor Pod to be gone",
      action: ({ params }) => [
        { kind: "DeletePod", name: "supervisor", uid: params.supervisorUid },
      ],
      isDone: (o) => o.supervisor === "absent",
      // The supervisor's grace plus API headroom; the order is strict, so re-delete, never skip ahead.
      deadline: {
        afterMs: ({ params }) => (params.graceSeconds + params.headroomSeconds) * 1000,
        onExpiry: "reissue",
      },
    },
    {
      name: "suspending",
      waitsFor: "the workload Pod to be gone",
      subject: () => ({ spec: { replicas: 0 } }),
      isDone: (o) => o.workload === "absent",
    },
    {
      name: "cleaning",
      waitsFor: "the generation Secrets to be deleted",
      action: ({ params }) =>
        params.secrets.map((name) => ({ kind: "DeleteSecret", name }) as const),
      isDone: (o) => o.secrets === 0,
    },
  ],
  complete: () => ({ status: { stopped: true } }),
});

const KEY = "sandboxes/s1";
const SECRETS = ["os-sandbox-s1-7", "os-supervisor-s1-7"];
const CLEANUP_MS = 3_000;
const WORKLOAD_TEARDOWN_MS = 2_000;

/** The simulated cluster: a supervisor Pod, a workload Pod, Secrets, and the Sandbox object (the store). */
class World {
  t = 1_700_000_000_000;
  readonly store = new MemoryStore();
  supervisor: { uid: string; deletedAt?: number } | undefined = { uid: "sup-uid-1" };
  workload = true;
  suspendedAt: number | undefined;
  readonly secrets = new Set(SECRETS);
  readonly violations: string[] = [];
  readonly log: string[] = [];
  lastIdx = -1;

  constructor() {
    this.store.put(KEY, { spec: { replicas: 1 } }, "sandbox-uid-1");
  }

  /** Lets time act: supervisor termination and workload suspension. */
  settle(): void {
    const replicas = (this.store.get(KEY)?.body.spec as { replicas?: number } | undefined)
      ?.replicas;
    if (replicas === 0 && this.suspendedAt === undefined) this.suspendedAt = this.t;
    const sup = this.supervisor;
    if (sup?.deletedAt !== undefined && this.t >= sup.deletedAt + CLEANUP_MS) {
      if (this.suspendedAt !== undefined) {
        this.violations.push("supervisor cleanup lost its boundary (workload already suspended)");
      }
      this.supervisor = undefined;
      this.log.push("supervisor gone");
    }
    if (this.workload && this.suspendedAt !== undefined) {
      if (this.t >= this.suspendedAt + WORKLOAD_TEARDOWN_MS) {
        this.workload = false;
        this.log.push("workload gone");
      }
    }
  }

  observe(): OpenShellObservation {
    this.settle();
    return {
      supervisor: this.supervisor ? "present" : "absent",
      workload: this.workload ? "present" : "absent",
      secrets: this.secrets.size,
    };
  }

  readonly handlers = {
    DeletePod: (effect: Extract<OpenShellEffect, { kind: "DeletePod" }>) => {
      this.settle();
      // UID precondition: a stale request never deletes a newer supervisor.
      if (this.supervisor && this.supervisor.uid === effect.uid) {
        this.supervisor.deletedAt ??= this.t;
        this.log.push("supervisor delete requested");
      }
    },
    DeleteSecret: (effect: Extract<OpenShellEffect, { kind: "DeleteSecret" }>) => {
      this.settle();
      if (this.workload)
        this.violations.push(`secret ${effect.name} deleted before the workload was gone`);
      if (this.secrets.delete(effect.name)) this.log.push(`secret ${effect.name} deleted`);
    },
  };

  /** The store, with the order invariants checked at every successful write. */
  checkedStore(): TeardownStore {
    return {
      read: (key) => this.store.read(key),
      write: async (key, change: StoreWrite, version, uid) => {
        this.settle();
        const spec = change.subject?.spec as { replicas?: number } | undefined;
        const outcome = await this.store.write(key, change, version, uid);
        if (outcome.status !== "written") return outcome;
        if (spec?.replicas === 0 && this.supervisor) {
          this.violations.push("workload suspended while the supervisor still existed");
        }
        let idx = Number.POSITIVE_INFINITY;
        if (change.record !== null) {
          const decoded = decodeRecord(change.record);
          if (!decoded.ok) this.violations.push(`wrote an unreadable record: ${decoded.reason}`);
          else idx = decoded.record.idx;
        } else if (this.supervisor || this.workload || this.secrets.size > 0) {
          this.violations.push("record cleared before everything was gone");
        }
        if (idx < this.lastIdx)
          this.violations.push(`phase went back from ${this.lastIdx} to ${idx}`);
        this.lastIdx = Math.max(this.lastIdx, idx);
        return outcome;
      },
    };
  }

  executor(
    process: Process,
  ): TeardownExecutor<OpenShellObservation, OpenShellEffect, z.infer<typeof OpenShellParams>> {
    return new TeardownExecutor({
      teardown: openShellStop,
      store: process.store(this.checkedStore()),
      handlers: process.handlers(this.handlers),
      observe: () => process.observe("observe", () => this.observe()),
      // A fresh clock per process, reading the world's time.
      now: () => this.t,
    });
  }

  done(): boolean {
    const subject = this.store.get(KEY);
    return subject !== undefined && subject.record === undefined && this.lastIdx === Infinity;
  }
}

const STOP = { params: { supervisorUid: "sup-uid-1", secrets: SECRETS }, cause: "StopRequested" };

/** One process generation: the stop request (or its retry), then reconcile ticks, 1 s apart. */
async function runProcess(world: World, process: Process, maxTicks = 200): Promise<void> {
  const executor = world.executor(process);
  // The stop request (or the client's retry of it); once the stop is complete, only ticks.
  let result: TickResult = world.done() ? { status: "idle" } : await executor.request(KEY, STOP);
  for (let i = 0; i < maxTicks && process.alive && !world.done(); i++) {
    world.t += 1_000;
    result = await executor.tick(KEY);
  }
  if (process.alive && !world.done()) {
    throw new Error(`teardown did not complete: ${JSON.stringify(result)}`);
  }
}

function expectCompleted(world: World): void {
  expect(world.violations).toEqual([]);
  expect(world.done()).toBe(true);
  expect(world.supervisor).toBeUndefined();
  expect(world.workload).toBe(false);
  expect([...world.secrets]).toEqual([]);
  expect(world.store.get(KEY)?.body).toEqual({ spec: { replicas: 0 }, status: { stopped: true } });
}

describe("the OpenShell stop order (worked example)", () => {
  it("deletes the supervisor, waits, suspends, waits, deletes Secrets, then clears the record", async () => {
    const world = new World();
    await runProcess(world, new Process());
    expectCompleted(world);
    expect(world.log).toEqual([
      "supervisor delete requested",
      "supervisor gone",
      "workload gone",
      `secret ${SECRETS[0]} deleted`,
      `secret ${SECRETS[1]} deleted`,
    ]);
  });

  it("reports every transition, in order", async () => {
    const world = new World();
    const seen: string[] = [];
    const executor = new TeardownExecutor({
      teardown: openShellStop,
      store: world.checkedStore(),
      handlers: world.handlers,
      observe: () => world.observe(),
      now: () => world.t,
      onEvent: (e) => {
        if (e.type === "transition")
          seen.push(`${e.transition.from}->${e.transition.to}:${e.transition.reason}`);
      },
    });
    await executor.request(KEY, STOP);
    for (let i = 0; i < 100 && !world.done(); i++) {
      world.t += 1_000;
      await executor.tick(KEY);
    }
    expect(seen).toEqual([
      "null->releasing:Started",
      "releasing->suspending:Done",
      "suspending->cleaning:Done",
      "cleaning->complete:Done",
    ]);
  });

  it("the reported wrong order (suspend first) is caught by the world's invariants", async () => {
    // A control for the harness: the wrong order must be visible as a violation.
    const world = new World();
    await world.store.write(KEY, { record: null, subject: { spec: { replicas: 0 } } }, "1");
    world.handlers.DeletePod({ kind: "DeletePod", name: "supervisor", uid: "sup-uid-1" });
    world.t += CLEANUP_MS;
    world.settle();
    expect(world.violations).toEqual([
      "supervisor cleanup lost its boundary (workload already suspended)",
    ]);
  });

  describe("crash injection at every side effect", () => {
    const baseline = new World();
    const counter = new Process();
    // Count the side effects of an uninterrupted run.
    const counted = runProcess(baseline, counter).then(() => counter.operations);

    it("the uninterrupted run has side effects to crash at", async () => {
      expect(await counted).toBeGreaterThanOrEqual(8);
    });

    for (const when of ["before", "after"] as const) {
      for (const downtimeMs of [500, 10 * 60_000]) {
        it(
          `resumes after a crash ${when} each effect k, down ${downtimeMs} ms`,
          async () => {
            const total = await counted;
            for (let at = 0; at < total; at++) {
              const world = new World();
              const crash: CrashPoint = { at, when };
              const first = new Process(crash);
              await runProcess(world, first);
              expect(first.alive, `crash point ${at} was reached`).toBe(false);
              world.t += downtimeMs;
              // All in-memory state is gone: a fresh process, executor and clock resume from the store.
              await runProcess(world, new Process());
              expect(world.violations, `crash ${when} effect ${at}`).toEqual([]);
              expectCompleted(world);
            }
          },
          HEAVY_TIMEOUT_MS,
        );
      }
    }

    it(
      "survives any sequence of crashes across restarts (property)",
      async () => {
        const crashPoint = fc.record({
          at: fc.nat({ max: 8 }),
          when: fc.constantFrom("before" as const, "after" as const),
        });
        await fc.assert(
          fc.asyncProperty(
            fc.array(crashPoint, { maxLength: 8 }),
            fc.array(fc.integer({ min: 0, max: 120_000 }), { minLength: 8, maxLength: 8 }),
            async (crashes, downtimes) => {
              const world = new World();
              for (const [i, crash] of crashes.entries()) {
                await runProcess(world, new Process(crash));
                world.t += downtimes[i] ?? 0;
              }
              await runProcess(world, new Process());
              expectCompleted(world);
            },
          ),
          { numRuns: 200 },
        );
      },
      HEAVY_TIMEOUT_MS,
    );
  });

  describe("races: stop request, reconcile ticks and crash-restart against one store", () => {
    it(
      "never violates the order, never goes back, never acts after a lost compare-and-swap",
      async () => {
        let conflicts = 0;
        await fc.assert(
          fc.asyncProperty(
            fc.scheduler(),
            fc.integer({ min: 1, max: 12 }),
            fc.integer({ min: 0, max: 12 }),
            fc.boolean(),
            async (s, ticks, crashAfter, crashes) => {
              const world = new World();
              const calls = new AsyncLocalStorage<number>();
              // Per call: the sequence of side effects it performed.
              const trace = new Map<number, string[]>();
              const note = (what: string) => {
                const id = calls.getStore();
                if (id !== undefined) trace.get(id)?.push(what);
              };
              const checked = world.checkedStore();
              const traced: TeardownStore = {
                read: (key) => checked.read(key),
                write: async (key, change, version, uid) => {
                  const outcome = await checked.write(key, change, version, uid);
                  note(`write:${outcome.status}`);
                  return outcome;
                },
              };
              const pause = (label: string) => s.schedule(Promise.resolve(), label);
              let process = new Process(undefined, pause);
              const makeExecutor = (p: Process) =>
                new TeardownExecutor({
                  teardown: openShellStop,
                  store: p.store(traced),
                  handlers: p.handlers({
                    DeletePod: (e: Extract<OpenShellEffect, { kind: "DeletePod" }>) => {
                      note("effect");
                      world.handlers.DeletePod(e);
                    },
                    DeleteSecret: (e: Extract<OpenShellEffect, { kind: "DeleteSecret" }>) => {
                      note("effect");
                      world.handlers.DeleteSecret(e);
                    },
                  }),
                  observe: () => p.observe("observe", () => world.observe()),
                  now: () => world.t,
                });
              let executor = makeExecutor(process);
              let nextCall = 0;
              const call = (fn: () => Promise<TickResult>) => {
                const id = nextCall++;
                trace.set(id, []);
                return calls.run(id, fn);
              };
              const tasks: Promise<unknown>[] = [];
              tasks.push(call(() => executor.request(KEY, STOP)).catch(() => undefined));
              for (let i = 0; i < ticks; i++) {
                tasks.push(
                  s
                    .schedule(Promise.resolve(), `tick ${i}`)
                    .then(() => {
                      world.t += 1_000;
                      return call(() => executor.tick(KEY));
                    })
                    .catch(() => undefined),
                );
                if (crashes && i === crashAfter) {
                  tasks.push(
                    s.schedule(Promise.resolve(), "crash-restart").then(() => {
                      process.alive = false;
                      process = new Process(undefined, pause);
                      executor = makeExecutor(process);
                      // The new process resumes from the store on its first reconcile tick.
                      return call(() => executor.tick(KEY)).catch(() => undefined);
                    }),
                  );
                }
              }
              await s.waitIdle();
              await Promise.all(tasks);

              for (const [id, ops] of trace) {
                const conflict = ops.indexOf("write:conflict");
                if (conflict >= 0) conflicts++;
                // Nothing after a lost compare-and-swap in the same call: no blind re-apply.
                if (conflict >= 0) expect(ops.slice(conflict + 1), `call ${id}`).toEqual([]);
                // Every effect is preceded, in its own call, by a successful write that claimed it.
                const firstEffect = ops.indexOf("effect");
                if (firstEffect >= 0) {
                  expect(ops.slice(0, firstEffect), `call ${id}`).toContain("write:written");
                }
              }
              expect(world.violations).toEqual([]);

              // Whatever the interleaving, a fresh process finishes the job.
              world.t += 1_000;
              await runProcess(world, new Process());
              expectCompleted(world);
            },
          ),
          { numRuns: 300 },
        );
        // The interleavings did produce lost compare-and-swaps (the property is not vacuous).
        expect(conflicts).toBeGreaterThan(0);
      },
      HEAVY_TIMEOUT_MS,
    );
  });
});
