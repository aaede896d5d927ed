/**
 * Pure status arithmetic behind the status writer: server-precision times, semantic equality,
 * condition merging that keeps conditions owned by others, and RFC 7386 merge patches.
 * Total functions: no clock, no I/O, no throw on data.
 *
 * @packageDocumentation
 */

/** A JSON object as read from or sent to the API server. */
export type JsonObject = { [key: string]: unknown };

/**
 * How precisely times are stored: `seconds` (every `metav1.Time`, i.e. every time in built-in
 * status such as a Pod's) or `exact` (times are kept as sent, e.g. a MicroTime field in a custom
 * resource).
 */
export type TimePrecision = "seconds" | "exact";

/** One condition as found in `status.conditions` (Pod conditions and `metav1.Condition` alike). */
export interface StatusCondition {
  /** The condition's type, unique in the list (e.g. `Ready`). */
  readonly type: string;
  /** `True`, `False` or `Unknown`. */
  readonly status?: string;
  /** When `status` last changed. */
  readonly lastTransitionTime?: string | Date | null;
  /** Other fields (`reason`, `message`, `observedGeneration`, `lastProbeTime`, …). */
  readonly [field: string]: unknown;
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * A time at the precision the API server stores a `metav1.Time`: RFC 3339 in UTC, whole
 * seconds (truncated, never rounded up). Writing milliseconds to a Pod's status makes every later
 * comparison with the stored value differ, and the writer loops forever; this prevents that.
 * Returns a string that is not a valid time unchanged.
 *
 * @example
 * ```ts
 * serverTime(new Date("2026-11-30T15:25:52.987Z")); // "2026-11-30T15:25:52Z"
 * serverTime("2026-11-30T16:25:52.5+01:00");        // "2026-11-30T15:25:52Z"
 * ```
 */
export function serverTime(time: Date | string): string {
  const ms =
    typeof time === "string"
      ? RFC3339.test(time)
        ? Date.parse(time)
        : Number.NaN
      : time.getTime();
  if (Number.isNaN(ms)) return typeof time === "string" ? time : "";
  return `${new Date(ms - (((ms % 1000) + 1000) % 1000)).toISOString().slice(0, 19)}Z`;
}

function isPlainObject(value: unknown): value is JsonObject {
  return (
    typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)
  );
}

/**
 * A JSON copy of a status value as the API server would store it: `Date`s and RFC 3339 strings
 * become {@link serverTime} (with `precision: "seconds"`; `exact` turns `Date`s into ISO strings
 * and leaves strings alone), `undefined` fields are dropped, functions and symbols are dropped.
 * `null` is kept (in a merge patch it removes a field).
 *
 * @example
 * ```ts
 * normalizeTimes({ startTime: new Date("2026-11-30T15:25:52.987Z"), x: undefined });
 * // { startTime: "2026-11-30T15:25:52Z" }
 * ```
 */
export function normalizeTimes(value: unknown, precision: TimePrecision = "seconds"): unknown {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) return null;
    return precision === "seconds" ? serverTime(value) : value.toISOString();
  }
  if (typeof value === "string") {
    return precision === "seconds" && RFC3339.test(value) ? serverTime(value) : value;
  }
  if (Array.isArray(value)) {
    return value.map((item) => {
      const normalized = normalizeTimes(item, precision);
      return normalized === undefined ? null : normalized;
    });
  }
  if (isPlainObject(value)) {
    const out: JsonObject = {};
    for (const [key, field] of Object.entries(value)) {
      const normalized = normalizeTimes(field, precision);
      if (normalized !== undefined) out[key] = normalized;
    }
    return out;
  }
  if (typeof value === "number" || typeof value === "boolean" || value === null) return value;
  return undefined; // functions, symbols, bigints, undefined
}

function canonical(value: unknown, precision: TimePrecision): unknown {
  const normalized = normalizeTimes(value, precision);
  const strip = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(strip);
    if (isPlainObject(v)) {
      const out: JsonObject = {};
      for (const key of Object.keys(v).sort()) {
        const field = v[key];
        if (field !== null && field !== undefined) out[key] = strip(field);
      }
      return out;
    }
    return v;
  };
  return strip(normalized);
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((item, i) => deepEqual(item, b[i]));
  }
  if (isPlainObject(a) && isPlainObject(b)) {
    const keys = Object.keys(a);
    return (
      keys.length === Object.keys(b).length && keys.every((k) => k in b && deepEqual(a[k], b[k]))
    );
  }
  return false;
}

/**
 * The status writer's default equality: semantic, not textual. Key order is ignored, a `null`
 * field equals an absent one, `Date`s equal their strings, and times compare at `precision`
 * (default whole seconds, as the API server stores them). Arrays compare in order.
 *
 * @example
 * ```ts
 * statusEquals({ phase: "Running", startTime: "2026-11-30T15:25:52Z" },
 *   { startTime: new Date("2026-11-30T15:25:52.400Z"), phase: "Running", message: null }); // true
 * ```
 */
export function statusEquals(
  a: unknown,
  b: unknown,
  precision: TimePrecision = "seconds",
): boolean {
  return deepEqual(canonical(a, precision), canonical(b, precision));
}

function conditionType(value: unknown): string | undefined {
  return isPlainObject(value) && typeof value.type === "string" ? value.type : undefined;
}

/**
 * The `conditions` list to write so that a merge patch (which replaces the whole list) keeps
 * every condition this writer does not own exactly as stored.
 *
 * - Owned types are `owned` plus every type in `desired`. A stored condition of a type not owned
 *   (e.g. `PodScheduled`, `DisruptionTarget`, a readiness gate) is kept as stored, in place.
 * - A stored owned condition is replaced by the desired one of its type, in place; an owned type
 *   missing from `desired` is removed; new types are appended in `desired` order.
 * - When a desired condition keeps the stored `status`, the stored `lastTransitionTime` is kept
 *   (the time records a transition, not the last write); otherwise the desired one is used.
 *
 * Returns `undefined` when there is nothing to say about conditions (`desired` absent and no
 * owned types), so that the patch leaves the list alone.
 *
 * @example
 * ```ts
 * mergeConditions(
 *   [{ type: "PodScheduled", status: "True" }, { type: "Ready", status: "False" }],
 *   [{ type: "Ready", status: "True", lastTransitionTime: "2026-11-30T15:25:52Z" }],
 * ); // [PodScheduled as stored, the new Ready]
 * ```
 */
export function mergeConditions(
  stored: readonly unknown[] | undefined,
  desired: readonly unknown[] | undefined,
  owned: readonly string[] = [],
): unknown[] | undefined {
  if (desired === undefined && owned.length === 0) return undefined;
  const wanted = new Map<string, JsonObject>();
  for (const condition of desired ?? []) {
    const type = conditionType(condition);
    if (type !== undefined && isPlainObject(condition)) wanted.set(type, condition);
  }
  const ownedTypes = new Set([...owned, ...wanted.keys()]);
  const out: unknown[] = [];
  const placed = new Set<string>();
  const withTransition = (next: JsonObject, previous: unknown): JsonObject => {
    if (!isPlainObject(previous) || previous.status !== next.status) return next;
    if (previous.lastTransitionTime === undefined) return next;
    return { ...next, lastTransitionTime: previous.lastTransitionTime };
  };
  for (const condition of stored ?? []) {
    const type = conditionType(condition);
    if (type === undefined || !ownedTypes.has(type)) {
      out.push(condition);
      continue;
    }
    const next = wanted.get(type);
    if (next !== undefined && !placed.has(type)) {
      out.push(withTransition(next, condition));
      placed.add(type);
    }
  }
  for (const [type, next] of wanted) if (!placed.has(type)) out.push(next);
  return out;
}

/**
 * Applies a JSON merge patch (RFC 7386) to a value: objects merge recursively, `null` removes a
 * field, anything else (arrays included) replaces. Pure: neither argument is modified.
 *
 * @example
 * ```ts
 * applyMergePatch({ a: 1, b: { c: 2 } }, { b: { c: null, d: 3 } }); // { a: 1, b: { d: 3 } }
 * ```
 */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (!isPlainObject(patch)) return patch;
  const out: JsonObject = isPlainObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else if (value !== undefined) out[key] = applyMergePatch(out[key], value);
  }
  return out;
}

/** Input of {@link planStatus}. */
export interface StatusPlanInput<S> {
  /** The stored status (`undefined` when the object has none yet). */
  readonly stored: NoInfer<S> | JsonObject | undefined;
  /** The status this writer wants; fields it leaves out are left as stored. */
  readonly desired: S;
  /** Condition types this writer owns even when `desired` omits them (they are then removed). */
  readonly ownedConditions?: readonly string[];
  /** Time precision of the stored object (default `seconds`). */
  readonly precision?: TimePrecision;
  /** Equality of the stored and the resulting status (default {@link statusEquals}). */
  readonly equal?: (stored: S | JsonObject | undefined, next: S) => boolean;
}

/** What {@link planStatus} decided. */
export interface StatusPlan<S> {
  /** Whether a write is needed (the resulting status differs from the stored one). */
  readonly changed: boolean;
  /** The `status` body of a merge patch: the desired status at server precision, with the merged `conditions`. */
  readonly patch: JsonObject;
  /** The status the object will have after the patch. */
  readonly next: S;
}

/**
 * Plans one status write: the merge-patch body (times at server precision, conditions merged
 * with {@link mergeConditions}) and whether it changes anything, judged by `equal` on the
 * stored status and the status after the patch.
 *
 * @example
 * ```ts
 * const plan = planStatus({ stored: pod.status, desired: { phase: "Running" } });
 * if (plan.changed) await patchStatus({ status: plan.patch });
 * ```
 */
export function planStatus<S>(input: StatusPlanInput<S>): StatusPlan<S> {
  const precision = input.precision ?? "seconds";
  const desired = normalizeTimes(input.desired, precision);
  const patch: JsonObject = isPlainObject(desired) ? { ...desired } : {};
  const stored = isPlainObject(input.stored) ? input.stored : undefined;
  const storedConditions = Array.isArray(stored?.conditions) ? stored.conditions : undefined;
  const desiredConditions = Array.isArray(patch.conditions) ? patch.conditions : undefined;
  const conditions = mergeConditions(storedConditions, desiredConditions, input.ownedConditions);
  // Stored conditions may come from a typed client (Dates): the patch carries JSON either way.
  if (conditions !== undefined) patch.conditions = normalizeTimes(conditions, precision);
  const next = applyMergePatch(normalizeTimes(stored ?? {}, "exact"), patch) as S;
  const equal =
    input.equal ??
    ((a: S | JsonObject | undefined, b: S): boolean => statusEquals(a ?? {}, b, precision));
  return { changed: !equal(input.stored, next), patch, next };
}
