/**
 * Test support (not exported from the package): a crash-injecting wrapper around a store and a
 * set of effect handlers, modelling a process that can die at any side effect.
 *
 * Every side effect (a store write, an effect handler call) is one numbered operation. A process
 * told to crash at operation k dies either just before it (the operation never happens) or just
 * after it (it happened, but the process never saw the result). A dead process performs nothing:
 * its in-flight calls all fail, as they would if the process were gone.
 *
 * @packageDocumentation
 */
import type { EffectDescription } from "./machine.js";
import type { StoreSnapshot, StoreWrite, TeardownStore, WriteOutcome } from "./store.js";

/** Thrown inside a dead process. */
class Crash extends Error {
  override readonly name = "Crash";
}

/** Where a process dies. */
export interface CrashPoint {
  /** 0-based index of the side effect. */
  readonly at: number;
  /** `before`: the side effect does not happen; `after`: it happens, the result is lost. */
  readonly when: "before" | "after";
}

/** One simulated process: a generation of the controller. */
export class Process {
  alive = true;
  operations = 0;
  readonly crash: CrashPoint | undefined;
  /** Optional hook run before every operation (fast-check scheduling). */
  readonly pause: ((label: string) => Promise<void>) | undefined;

  constructor(crash?: CrashPoint, pause?: (label: string) => Promise<void>) {
    this.crash = crash;
    this.pause = pause;
  }

  /** Runs one side effect under the crash rules. */
  async perform<T>(label: string, operation: () => Promise<T> | T): Promise<T> {
    if (this.pause) await this.pause(label);
    if (!this.alive) throw new Crash(`process is dead (${label})`);
    const index = this.operations++;
    const dies = this.crash !== undefined && this.crash.at === index;
    if (dies && this.crash?.when === "before") {
      this.alive = false;
      throw new Crash(`crash before ${label}`);
    }
    const result = await operation();
    if (dies) {
      this.alive = false;
      throw new Crash(`crash after ${label}`);
    }
    return result;
  }

  /** Reads are not side effects but a dead process cannot do them either. */
  async observe<T>(label: string, operation: () => Promise<T> | T): Promise<T> {
    if (this.pause) await this.pause(label);
    if (!this.alive) throw new Crash(`process is dead (${label})`);
    return operation();
  }

  /** Wraps a store so its writes are crash points. */
  store(inner: TeardownStore): TeardownStore {
    return {
      read: (key: string): Promise<StoreSnapshot> => this.observe("read", () => inner.read(key)),
      write: (
        key: string,
        change: StoreWrite,
        expectedVersion: string,
        expectedUid?: string,
      ): Promise<WriteOutcome> =>
        this.perform("write", () => inner.write(key, change, expectedVersion, expectedUid)),
    };
  }

  /** Wraps handlers so every call is a crash point. */
  handlers<H extends Record<string, (effect: never, ctx: never) => unknown>>(inner: H): H {
    const out: Record<string, (effect: EffectDescription, ctx: unknown) => Promise<unknown>> = {};
    for (const [kind, handler] of Object.entries(inner)) {
      out[kind] = (effect, ctx) =>
        this.perform(`effect ${kind}`, () =>
          (handler as (e: EffectDescription, c: unknown) => unknown)(effect, ctx),
        );
    }
    return out as unknown as H;
  }
}
