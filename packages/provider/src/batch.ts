import { isNotFound, toProviderError } from "./errors.js";

/** Cuts `items` into consecutive chunks of at most `size` (size ≥ 1). Pure. */
export function chunk<T>(items: readonly T[], size: number): T[][] {
  const step = Math.max(1, Math.floor(size));
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += step) out.push(items.slice(i, i + step));
  return out;
}

/**
 * Instance IDs an EC2 `InvalidInstanceID.NotFound` message names
 * (`The instance IDs 'i-1, i-2' do not exist`, `The instance ID 'i-1' does not exist`). Pure.
 */
export function missingInstanceIds(message: string): string[] {
  return [...message.matchAll(/i-[0-9a-f]+/g)].map((m) => m[0]);
}

/** How one batched call ended for one ID. */
export type BatchOutcome = "done" | "notFound";

interface Pending {
  readonly resolve: (outcome: BatchOutcome) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Gathers instance IDs requested within a short window into as few EC2 calls as possible
 * (`StopInstances`, `TerminateInstances` and `CreateTags` all take many IDs), at most `batchSize`
 * per call. Each `add` resolves when its call has succeeded: `"notFound"` when EC2 says the
 * instance does not exist (the other IDs of that call are sent again without it).
 *
 * @example
 * ```ts
 * const terminate = new InstanceBatcher((ids) => ec2.send(new TerminateInstancesCommand({ InstanceIds: ids })), "TerminateInstances", { batchSize: 500, windowMs: 100 });
 * await Promise.all(ids.map((id) => terminate.add(id)));
 * ```
 */
export class InstanceBatcher {
  readonly #waiting = new Map<string, Pending[]>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #calls = 0;

  /**
   * @param run - makes one EC2 call for these IDs.
   * @param action - the call's name, for error messages.
   * @param options - `batchSize`: IDs per call; `windowMs`: how long to gather before calling.
   */
  constructor(
    private readonly run: (ids: string[]) => Promise<unknown>,
    private readonly action: string,
    private readonly options: { batchSize: number; windowMs: number },
  ) {}

  /** EC2 calls made so far (not counting the SDK's own retries). */
  get calls(): number {
    return this.#calls;
  }

  /** Queues an instance ID; resolves when the call that carried it succeeded. */
  add(instanceId: string): Promise<BatchOutcome> {
    return new Promise((resolve, reject) => {
      const list = this.#waiting.get(instanceId) ?? [];
      list.push({ resolve, reject });
      this.#waiting.set(instanceId, list);
      if (this.#waiting.size >= this.options.batchSize) void this.flush();
      else this.#timer ??= setTimeout(() => void this.flush(), this.options.windowMs);
    });
  }

  /** Sends everything queued now. */
  async flush(): Promise<void> {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    const batch = new Map(this.#waiting);
    this.#waiting.clear();
    await Promise.all(
      chunk([...batch.keys()], this.options.batchSize).map((ids) => this.#send(ids, batch)),
    );
  }

  async #send(ids: string[], batch: Map<string, Pending[]>): Promise<void> {
    let remaining = ids;
    // At most a few rounds: each NotFound round removes at least one ID.
    for (let round = 0; remaining.length > 0 && round < 5; round++) {
      try {
        this.#calls++;
        await this.run(remaining);
        for (const id of remaining) for (const p of batch.get(id) ?? []) p.resolve("done");
        return;
      } catch (error) {
        if (isNotFound(error)) {
          const missing = new Set(missingInstanceIds(error instanceof Error ? error.message : ""));
          const gone = remaining.filter((id) => missing.has(id));
          if (gone.length === 0 && remaining.length === 1) {
            for (const p of batch.get(remaining[0] ?? "") ?? []) p.resolve("notFound");
            return;
          }
          if (gone.length > 0) {
            for (const id of gone) for (const p of batch.get(id) ?? []) p.resolve("notFound");
            remaining = remaining.filter((id) => !missing.has(id));
            continue;
          }
        }
        const wrapped = toProviderError(
          error,
          `${this.action} for ${remaining.length} instance(s)`,
        );
        // One bad ID (a state EC2 refuses, an unsupported operation) fails the whole call: send
        // each ID on its own so only that one fails. Throttling and outages are not split.
        if (remaining.length > 1 && !wrapped.retryable) {
          await Promise.all(remaining.map((id) => this.#send([id], batch)));
          return;
        }
        for (const id of remaining) for (const p of batch.get(id) ?? []) p.reject(wrapped);
        return;
      }
    }
    const wrapped = toProviderError(new Error("too many NotFound rounds"), this.action);
    for (const id of remaining) for (const p of batch.get(id) ?? []) p.reject(wrapped);
  }
}
