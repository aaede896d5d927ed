import type { PodLedger } from "@nebula/teardown";
import type { Ec2PodProvider } from "../provider.js";

/** The calls that change the world: EC2 launches, stops, terminations and SSM parameter writes. */
const MUTATING = new Set([
  "RunInstancesCommand",
  "StopInstancesCommand",
  "TerminateInstancesCommand",
  "PutParameterCommand",
  "AddTagsToResourceCommand",
  "DeleteParametersCommand",
]);
/** The ledger calls that write. */
const LEDGER_WRITES = new Set(["ensure", "recordLaunch", "write", "remove"]);

/**
 * A process that dies at its k-th side effect (an EC2 or SSM mutation, or a ledger write), before
 * or after it: every later call of that process fails, as a killed process makes none. For the
 * crash-at-every-step tests (tests only).
 */
export class Mortal {
  count = 0;
  dead = false;
  constructor(
    readonly k: number,
    readonly when: "before" | "after",
  ) {}

  async effect<T>(run: () => Promise<T>): Promise<T> {
    if (this.dead) throw new Error("process is dead");
    const mine = this.count++;
    if (mine === this.k && this.when === "before") {
      this.dead = true;
      throw new Error(`crash before side effect ${mine}`);
    }
    const result = await run();
    if (mine === this.k) {
      this.dead = true;
      throw new Error(`crash after side effect ${mine}`);
    }
    return result;
  }

  /** The ledger as this process sees it: its writes are side effects. */
  ledger(inner: PodLedger): PodLedger {
    return new Proxy(inner, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (this.dead) return Promise.reject(new Error("process is dead"));
          const call = () => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          return LEDGER_WRITES.has(String(prop)) ? this.effect(call) : call();
        };
      },
    });
  }

  /** The provider's EC2 and SSM clients: their mutations are side effects. */
  clients(provider: Ec2PodProvider): void {
    const middleware =
      (next: (args: unknown) => Promise<unknown>, context: { commandName?: string }) =>
      async (args: unknown) => {
        if (this.dead) throw new Error("process is dead");
        if (!MUTATING.has(context.commandName ?? "")) return next(args);
        return this.effect(() => next(args));
      };
    const options = { step: "initialize" as const, name: "mortal" };
    provider.client.middlewareStack.add(middleware as never, options);
    provider.ssm.middlewareStack.add(middleware as never, options);
  }
}
