/**
 * Kubernetes conditions (`metav1.Condition`) and how to maintain them: set a condition so that
 * `lastTransitionTime` moves only when the status flips, and tell whether a new status differs
 * from the stored one in anything but time.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { CONDITION_REASON_PATTERN, MAX_REASON_LENGTH } from "./catalog.js";
import { MAX_CONDITION_MESSAGE_LENGTH, sanitize, truncate } from "./text.js";

/** A condition's status, as in `metav1.ConditionStatus`. */
export const ConditionStatus = z.enum(["True", "False", "Unknown"]);

/** `"True"`, `"False"` or `"Unknown"`. */
export type ConditionStatus = z.infer<typeof ConditionStatus>;

/**
 * The `metav1.Condition` shape, with Kubernetes' own validation (CamelCase reason, bounded
 * lengths). Use it to parse conditions read from an object's status.
 */
export const Condition = z.object({
  /** The condition's type, PascalCase: `Available`. */
  type: z.string().min(1).max(316),
  /** True, False or Unknown. */
  status: ConditionStatus,
  /** The `.metadata.generation` the condition was computed from. */
  observedGeneration: z.number().int().min(0).optional(),
  /** When the status last changed, RFC 3339 in whole seconds: `2026-11-30T05:14:09Z`. */
  lastTransitionTime: z.string(),
  /** One CamelCase word for the cause: `InstanceCrashing`. */
  reason: z.string().min(1).max(MAX_REASON_LENGTH).regex(CONDITION_REASON_PATTERN),
  /** Details for people; may be empty. */
  message: z.string().max(MAX_CONDITION_MESSAGE_LENGTH),
});

/** A Kubernetes condition (`metav1.Condition`). */
export type Condition = z.infer<typeof Condition>;

/** A condition to set: everything but `lastTransitionTime`, which {@link setCondition} decides. */
export type ConditionUpdate = Omit<Condition, "lastTransitionTime">;

/** 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the range RFC 3339 can write. */
const MIN_RFC3339_MS = -62167219200000;
const MAX_RFC3339_MS = 253402300799000;

/**
 * Formats `now` the way Kubernetes stores `lastTransitionTime`: RFC 3339, UTC, whole seconds
 * (sub-second parts would not survive a round trip through the API server). Total: an invalid
 * date, or one outside the years 0000–9999 that RFC 3339 can write, formats as the Unix epoch,
 * `1970-01-01T00:00:00Z`.
 *
 * @example
 * ```ts
 * formatTime(new Date("2026-11-30T05:14:09.512Z")); // "2026-11-30T05:14:09Z"
 * ```
 */
export function formatTime(now: Date): string {
  const ms = now instanceof Date ? now.getTime() : Number.NaN;
  const safe = Number.isFinite(ms) && ms >= MIN_RFC3339_MS && ms <= MAX_RFC3339_MS ? ms : 0;
  return `${new Date(safe).toISOString().slice(0, 19)}Z`;
}

/**
 * Returns `conditions` with `update` set, the Kubernetes way (as `meta.SetStatusCondition`):
 * - a new type is appended with `lastTransitionTime = now`;
 * - an existing type keeps its position and its `lastTransitionTime` unless its status changes;
 *   reason, message and `observedGeneration` are replaced;
 * - further conditions of the same type (a malformed stored list) are dropped;
 * - stored entries that are not valid conditions ({@link Condition}: `null`, `{ type: 5 }`, a
 *   string, a bad reason, ...) are dropped; valid conditions of other types are kept as they are.
 *
 * Pure: the input array is not modified. A status other than True/False/Unknown becomes
 * `Unknown`, an invalid reason becomes `Unknown`, an `observedGeneration` that is not a
 * non-negative integer is left out, and the message is cut to Kubernetes' limit, so that a
 * condition with a valid `type` always passes the API server's validation.
 *
 * @param conditions - the stored conditions (`undefined` means none).
 * @param update - the condition to set.
 * @param now - the time to record if the status flips.
 *
 * @example
 * ```ts
 * const next = setCondition(stored, {
 *   type: "Available", status: "False", reason: "InstanceCrashing",
 *   message: "1 of 1 instances is repeatedly exiting and restarting.", observedGeneration: 3,
 * }, new Date());
 * ```
 */
export function setCondition(
  conditions: readonly Condition[] | undefined,
  update: ConditionUpdate,
  now: Date,
): Condition[] {
  const list = validConditions(conditions);
  if (typeof update !== "object" || update === null) return list;
  if (!Condition.shape.type.safeParse(update.type).success) return list;
  const index = list.findIndex((c) => c?.type === update.type);
  const existing = index >= 0 ? list[index] : undefined;
  const status = ConditionStatus.safeParse(update.status).data ?? "Unknown";
  const keepTime =
    existing !== undefined &&
    existing.status === status &&
    typeof existing.lastTransitionTime === "string" &&
    existing.lastTransitionTime !== "";
  const generation = update.observedGeneration;
  const next: Condition = {
    type: update.type,
    status,
    ...(typeof generation === "number" && Number.isSafeInteger(generation) && generation >= 0
      ? { observedGeneration: generation }
      : {}),
    lastTransitionTime: keepTime ? existing.lastTransitionTime : formatTime(now),
    reason:
      typeof update.reason === "string" &&
      update.reason.length <= MAX_REASON_LENGTH &&
      CONDITION_REASON_PATTERN.test(update.reason)
        ? update.reason
        : "Unknown",
    message: truncate(
      typeof update.message === "string" ? sanitize(update.message) : "",
      MAX_CONDITION_MESSAGE_LENGTH,
    ),
  };
  if (index < 0) return [...list, next];
  const result: Condition[] = [];
  list.forEach((condition, i) => {
    if (i === index) result.push(next);
    else if (condition?.type !== update.type) result.push(condition);
  });
  return result;
}

/**
 * {@link setCondition} for several updates in order. Valid conditions not named in `updates` are
 * kept as they are; stored entries that are not valid conditions are dropped, so that a malformed
 * stored status is never written back.
 */
export function setConditions(
  conditions: readonly Condition[] | undefined,
  updates: readonly ConditionUpdate[],
  now: Date,
): Condition[] {
  let result = validConditions(conditions);
  for (const update of Array.isArray(updates) ? updates : []) {
    result = setCondition(result, update, now);
  }
  return result;
}

/** The entries of a stored list that are valid {@link Condition}s, in order (a new array). */
function validConditions(conditions: readonly Condition[] | undefined): Condition[] {
  if (!Array.isArray(conditions)) return [];
  return conditions.filter((c) => Condition.safeParse(c).success);
}

/** The condition of type `type`, or `undefined`. */
export function findCondition(
  conditions: readonly Condition[] | undefined,
  type: string,
): Condition | undefined {
  return Array.isArray(conditions) ? conditions.find((c) => c?.type === type) : undefined;
}

/**
 * Whether `next` differs from `previous` in anything but time: `lastTransitionTime` is ignored
 * wherever it appears, `conditions` arrays are compared by condition type (their order does not
 * matter), and a property set to `undefined` equals a missing one. Use it to skip the status
 * write when nothing changed, so that an unchanged world writes nothing.
 *
 * Total: any two values can be compared. Structures nested deeper than 64 levels (or cyclic)
 * count as changed.
 *
 * @example
 * ```ts
 * const status = rollupWorkloadDeployment(input, { now, previous: stored.status?.conditions });
 * if (statusChanged(stored.status, status)) await writeStatus(status);
 * ```
 */
export function statusChanged(previous: unknown, next: unknown): boolean {
  return !equalIgnoringTime(previous, next, undefined, 0);
}

const MAX_DEPTH = 64;

function equalIgnoringTime(
  a: unknown,
  b: unknown,
  key: string | undefined,
  depth: number,
): boolean {
  if (Object.is(a, b)) return true;
  if (depth > MAX_DEPTH) return false;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) return false;
    if (key === "conditions") {
      const byTypeA = conditionsByType(a);
      const byTypeB = conditionsByType(b);
      if (byTypeA !== undefined && byTypeB !== undefined) {
        if (byTypeA.size !== byTypeB.size) return false;
        for (const [type, condition] of byTypeA) {
          if (!byTypeB.has(type)) return false;
          if (!equalIgnoringTime(condition, byTypeB.get(type), undefined, depth + 1)) return false;
        }
        return true;
      }
    }
    return a.every((item, i) => equalIgnoringTime(item, b[i], undefined, depth + 1));
  }
  const recordA = a as Record<string, unknown>;
  const recordB = b as Record<string, unknown>;
  const keys = new Set([...Object.keys(recordA), ...Object.keys(recordB)]);
  for (const k of keys) {
    if (k === "lastTransitionTime") continue;
    if (!equalIgnoringTime(recordA[k], recordB[k], k, depth + 1)) return false;
  }
  return true;
}

function conditionsByType(list: readonly unknown[]): Map<string, unknown> | undefined {
  const map = new Map<string, unknown>();
  for (const item of list) {
    if (typeof item !== "object" || item === null) return undefined;
    const type = (item as { type?: unknown }).type;
    if (typeof type !== "string" || map.has(type)) return undefined;
    map.set(type, item);
  }
  return map;
}
