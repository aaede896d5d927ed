/**
 * The Pod ledger: durable, per-Pod state of the controller that launches instances, kept where a
 * tenant cannot write it (a controller-owned object in the controller's namespace, one per Pod
 * UID). It holds the launch (requested, then the instance ID as soon as `RunInstances` returned)
 * and the Pod's teardown record. It is also the {@link TeardownStore} of the Pod teardown, keyed by
 * Pod UID, so that a reused Pod name never meets another Pod's record.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import type { JsonValue } from "./machine.js";
import type { StoreSnapshot, StoreWrite, TeardownStore, WriteOutcome } from "./store.js";

const millis = z.number().int().min(0).max(8.64e15);
const name = z.string().min(1).max(253);

/**
 * The launch of a Pod's instance as the controller recorded it. Written before `RunInstances` is
 * sent (`requestedAt`, `clientToken`) and again as soon as it returned (`instanceId`).
 */
export const LaunchEntry = z.strictObject({
  /** The Pod's UID (the ledger key, repeated for readers). */
  podUid: z.string().min(1).max(128),
  /** The Pod's namespace, for people and Events. */
  namespace: name,
  /** The Pod's name, for people and Events. */
  name,
  /** When the (latest) launch was requested, before `RunInstances` was sent. */
  requestedAt: millis.optional(),
  /** The `ClientToken` of that request: EC2 returns the same instance for a repeat. */
  clientToken: z.string().min(1).max(64).optional(),
  /** The instance `RunInstances` returned. */
  instanceId: z
    .string()
    .regex(/^i-[0-9a-f]{8,17}$/)
    .optional(),
  /** When `RunInstances` returned the instance. */
  launchedAt: millis.optional(),
});

/** A parsed launch entry. */
export type LaunchEntry = z.infer<typeof LaunchEntry>;

/** One Pod's ledger entry: the launch, and the teardown record string when one was started. */
export interface LedgerEntry {
  /** The launch as recorded. */
  readonly launch: LaunchEntry;
  /** The stored teardown record (`@nebula/teardown`'s encoded record), if any. */
  readonly record: string | undefined;
  /**
   * The entry's version as read (a Kubernetes `resourceVersion`), when the store has one: hand it
   * to {@link PodLedger.remove} so that an entry changed since it was read is not deleted.
   */
  readonly version?: string | undefined;
}

/**
 * Durable per-Pod state keyed by Pod UID, and the {@link TeardownStore} of the Pod teardown.
 *
 * - `read`/`write` (the teardown store): the subject is the ledger entry; `found: false` when the
 *   Pod has no entry; `write` is a compare-and-swap on the entry's version.
 * - `ensure` creates the entry when absent (never overwrites one).
 * - `recordLaunch` merges launch fields into the entry (creating it when absent).
 * - `list` returns every entry (a restarted controller resumes from it).
 * - `remove` deletes the entry once the Pod is gone and its teardown complete.
 *
 * Implementations keep the entries where tenants cannot write (in Kubernetes: objects in the
 * controller's own namespace; `@nebula/kube`'s `ConfigMapPodLedger`).
 */
export interface PodLedger extends TeardownStore {
  /** Creates the entry for `launch.podUid` unless one exists; returns the entry now stored. */
  ensure(launch: LaunchEntry): Promise<LedgerEntry>;
  /** Merges `fields` into the Pod's launch entry (creating it from `base` when absent). */
  recordLaunch(base: LaunchEntry, fields: Partial<LaunchEntry>): Promise<LedgerEntry>;
  /** The Pod's entry, or `undefined`. */
  get(podUid: string): Promise<LedgerEntry | undefined>;
  /** Every entry. */
  list(): Promise<LedgerEntry[]>;
  /**
   * Deletes the Pod's entry (absent counts as done). With `ifVersion` (an entry's
   * {@link LedgerEntry.version} as listed), only if it is still at that version: resolves
   * `false` and deletes nothing when it changed since.
   */
  remove(podUid: string, options?: { readonly ifVersion?: string | undefined }): Promise<boolean>;
}

/**
 * Parses a stored launch entry. Total: anything that is not a valid entry gives `undefined`.
 */
export function decodeLaunch(text: unknown): LaunchEntry | undefined {
  if (typeof text !== "string") return undefined;
  try {
    const parsed = LaunchEntry.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

interface MemoryEntry {
  version: string;
  launch: LaunchEntry;
  record: string | undefined;
}

/**
 * An in-memory {@link PodLedger}: for tests, and for a single process that keeps no state across
 * restarts (it then loses every launch and teardown record on a restart).
 *
 * @example
 * ```ts
 * const ledger = new MemoryPodLedger();
 * await ledger.recordLaunch({ podUid: uid, namespace: "default", name: "web-0" }, { instanceId: "i-0123456789abcdef0" });
 * ```
 */
export class MemoryPodLedger implements PodLedger {
  readonly #entries = new Map<string, MemoryEntry>();
  #revision = 0;

  async ensure(launch: LaunchEntry): Promise<LedgerEntry> {
    const existing = this.#entries.get(launch.podUid);
    if (existing) return { launch: existing.launch, record: existing.record };
    const entry = { version: String(++this.#revision), launch: { ...launch }, record: undefined };
    this.#entries.set(launch.podUid, entry);
    return { launch: entry.launch, record: undefined };
  }

  async recordLaunch(base: LaunchEntry, fields: Partial<LaunchEntry>): Promise<LedgerEntry> {
    const existing = this.#entries.get(base.podUid);
    const launch = LaunchEntry.parse({ ...(existing?.launch ?? base), ...fields });
    const entry = { version: String(++this.#revision), launch, record: existing?.record };
    this.#entries.set(base.podUid, entry);
    return { launch, record: entry.record };
  }

  async get(podUid: string): Promise<LedgerEntry | undefined> {
    const entry = this.#entries.get(podUid);
    return entry
      ? { launch: entry.launch, record: entry.record, version: entry.version }
      : undefined;
  }

  async list(): Promise<LedgerEntry[]> {
    return [...this.#entries.values()].map((e) => ({
      launch: e.launch,
      record: e.record,
      version: e.version,
    }));
  }

  async remove(podUid: string, options: { readonly ifVersion?: string | undefined } = {}) {
    const entry = this.#entries.get(podUid);
    if (
      entry !== undefined &&
      options.ifVersion !== undefined &&
      entry.version !== options.ifVersion
    ) {
      return false;
    }
    this.#entries.delete(podUid);
    return true;
  }

  async read(key: string): Promise<StoreSnapshot> {
    const entry = this.#entries.get(key);
    if (!entry) return { found: false };
    return {
      found: true,
      version: entry.version,
      uid: entry.launch.podUid,
      record: entry.record,
      subject: { launch: entry.launch as unknown as JsonValue },
    };
  }

  async write(
    key: string,
    change: StoreWrite,
    expectedVersion: string,
    expectedUid?: string,
  ): Promise<WriteOutcome> {
    const entry = this.#entries.get(key);
    if (!entry) return { status: "gone" };
    if (expectedUid !== undefined && entry.launch.podUid !== expectedUid) return { status: "gone" };
    if (entry.version !== expectedVersion) return { status: "conflict" };
    entry.version = String(++this.#revision);
    entry.record = change.record ?? undefined;
    return { status: "written", version: entry.version };
  }
}
