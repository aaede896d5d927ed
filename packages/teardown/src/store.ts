/**
 * Where teardown records live: a store with compare-and-swap on a version, and an in-memory
 * implementation for tests and single-process use.
 *
 * @packageDocumentation
 */
import type { JsonValue, SubjectPatch } from "./machine.js";

/** What a store read found. */
export type StoreSnapshot =
  /** The subject does not exist (never did, or was deleted). */
  | { readonly found: false }
  | {
      readonly found: true;
      /** Opaque version to hand back to {@link TeardownStore.write} (a Kubernetes `resourceVersion`). */
      readonly version: string;
      /** The subject's UID, when it has one. */
      readonly uid?: string;
      /** The stored record string, or `undefined` when the subject carries none. */
      readonly record: string | undefined;
      /** The subject as stored, for observation callbacks. */
      readonly subject: unknown;
    };

/** One compare-and-swap write. */
export interface StoreWrite {
  /** The new record string, or `null` to remove the record (the teardown completed). */
  readonly record: string | null;
  /** A JSON merge patch applied to the subject in the same atomic write. */
  readonly subject?: SubjectPatch;
}

/** The result of a write. */
export type WriteOutcome =
  /** Written; the subject's new version. */
  | { readonly status: "written"; readonly version: string }
  /** The subject changed since it was read (another writer won): re-read next tick. */
  | { readonly status: "conflict" }
  /** The subject no longer exists (or was replaced by another object with the same name). */
  | { readonly status: "gone" };

/**
 * Persistence for teardown records, one per subject key, with compare-and-swap.
 *
 * Implementations must make `write` atomic and conditional: it succeeds only when the subject's
 * current version equals `expectedVersion` (and, when given, its UID equals `expectedUid`), and
 * then applies the record and the subject patch together. Reads and writes may throw on transport
 * failures; the executor reports those and retries on its next tick.
 */
export interface TeardownStore {
  /** Reads the subject and its record. */
  read(key: string): Promise<StoreSnapshot>;
  /** Writes the record (and subject patch) if the subject is still at `expectedVersion`. */
  write(
    key: string,
    change: StoreWrite,
    expectedVersion: string,
    expectedUid?: string,
  ): Promise<WriteOutcome>;
}

/** A subject held by {@link MemoryStore}. */
export interface MemorySubject {
  /** Unique per incarnation: recreating a subject under the same key gives a new UID. */
  readonly uid: string;
  /** Version, from one counter shared by all subjects (like etcd's revision). */
  readonly version: string;
  /** The stored record string, if any. */
  readonly record: string | undefined;
  /** The subject's body (a JSON object that subject patches apply to). */
  readonly body: { [key: string]: JsonValue };
}

/**
 * An in-memory {@link TeardownStore} with the semantics of a Kubernetes object store: versions
 * from one global counter, a new UID when a subject is recreated, conflicts on a stale version,
 * `gone` for a missing subject.
 *
 * Use it in unit tests, and as the store of a single-process program that keeps no state across
 * restarts. It also records every successful write in {@link MemoryStore.history}.
 *
 * @example
 * ```ts
 * const store = new MemoryStore();
 * store.put("default/web-0", { spec: { replicas: 1 } });
 * const snapshot = await store.read("default/web-0");
 * ```
 */
export class MemoryStore implements TeardownStore {
  readonly #subjects = new Map<string, MemorySubject>();
  #revision = 0;
  #uids = 0;
  /** Every successful write, in order: the key, the record written (or `null`) and the version. */
  readonly history: { key: string; record: string | null; version: string }[] = [];

  /**
   * Creates (or replaces, with a new UID) the subject under `key`, without a record.
   * @returns the created subject.
   */
  put(key: string, body: { [key: string]: JsonValue } = {}, uid?: string): MemorySubject {
    const subject: MemorySubject = {
      uid: uid ?? `uid-${++this.#uids}`,
      version: String(++this.#revision),
      record: undefined,
      body: structuredClone(body),
    };
    this.#subjects.set(key, subject);
    return subject;
  }

  /** Removes the subject under `key` (as deleting the Kubernetes object would). */
  remove(key: string): boolean {
    return this.#subjects.delete(key);
  }

  /** The subject under `key`, synchronously (a copy), for assertions. */
  get(key: string): MemorySubject | undefined {
    const subject = this.#subjects.get(key);
    return subject ? structuredClone(subject) : undefined;
  }

  /** Reads the subject and its record. */
  async read(key: string): Promise<StoreSnapshot> {
    const subject = this.#subjects.get(key);
    if (!subject) return { found: false };
    return {
      found: true,
      version: subject.version,
      uid: subject.uid,
      record: subject.record,
      subject: structuredClone(subject.body),
    };
  }

  /** Compare-and-swap write; see {@link TeardownStore.write}. */
  async write(
    key: string,
    change: StoreWrite,
    expectedVersion: string,
    expectedUid?: string,
  ): Promise<WriteOutcome> {
    const subject = this.#subjects.get(key);
    if (!subject) return { status: "gone" };
    if (expectedUid !== undefined && subject.uid !== expectedUid) return { status: "gone" };
    if (subject.version !== expectedVersion) return { status: "conflict" };
    const next: MemorySubject = {
      uid: subject.uid,
      version: String(++this.#revision),
      record: change.record ?? undefined,
      body: change.subject
        ? (applyMergePatch(subject.body, change.subject) as MemorySubject["body"])
        : subject.body,
    };
    this.#subjects.set(key, next);
    this.history.push({ key, record: change.record, version: next.version });
    return { status: "written", version: next.version };
  }
}

/**
 * Applies a JSON merge patch (RFC 7386): objects merge recursively, `null` deletes a key, anything
 * else replaces. Returns a new value; the inputs are not changed.
 *
 * @example
 * ```ts
 * applyMergePatch({ spec: { replicas: 1, paused: true } }, { spec: { replicas: 0, paused: null } });
 * // → { spec: { replicas: 0 } }
 * ```
 */
export function applyMergePatch(target: JsonValue | undefined, patch: JsonValue): JsonValue {
  if (!isObject(patch)) return structuredClone(patch);
  const out: { [key: string]: JsonValue } = isObject(target) ? structuredClone(target) : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = applyMergePatch(out[key], value);
  }
  return out;
}

function isObject(value: JsonValue | undefined): value is { [key: string]: JsonValue } {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
