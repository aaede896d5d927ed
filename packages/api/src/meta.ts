/**
 * The pieces the three kinds share: object metadata, label selectors, references and the
 * conditions list.
 *
 * @packageDocumentation
 */
import { Condition } from "@nebula/rollup";
import { z } from "zod";

/** The API group of every kind in this package. */
export const GROUP = "compute.nebula.dev";

/** The served and stored version. */
export const VERSION = "v1alpha1";

/** `apiVersion` of every object in this package. */
export const API_VERSION = `${GROUP}/${VERSION}`;

/** An RFC 1123 label: lowercase alphanumerics and `-`, at most 63 characters. */
export const DNS_LABEL_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/** An RFC 1123 subdomain: dot-separated labels, at most 253 characters. */
const DNS_SUBDOMAIN_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/**
 * A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters
 * (alphanumerics, `-`, `_`, `.`, beginning and ending with an alphanumeric).
 */
const LABEL_KEY_PATTERN =
  "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/** A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, beginning and ending with an alphanumeric. */
const LABEL_VALUE_PATTERN = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

const labelKey = new RegExp(LABEL_KEY_PATTERN);
const labelValue = new RegExp(LABEL_VALUE_PATTERN);

/** Whether a string is a valid label key (prefix at most 253 characters, name at most 63). */
export function isLabelKey(key: string): boolean {
  if (!labelKey.test(key)) return false;
  const slash = key.indexOf("/");
  return slash < 0 || slash <= 253;
}

/** Whether a string is a valid label value. */
export function isLabelValue(value: string): boolean {
  return value.length <= 63 && labelValue.test(value);
}

/** The name of an object in the same namespace (RFC 1123 subdomain). */
const ObjectName = z.string().min(1).max(253).regex(new RegExp(DNS_SUBDOMAIN_PATTERN));

/** A reference to an object in the same namespace, by name. */
export const LocalObjectReference = z.strictObject({
  /** The referenced object's name. */
  name: ObjectName,
});

/** A reference to an object in the same namespace, by name. */
export type LocalObjectReference = z.infer<typeof LocalObjectReference>;

/** The operators of a label selector requirement, as Kubernetes defines them. */
const SelectorOperator = z.enum(["In", "NotIn", "Exists", "DoesNotExist"]);

/**
 * One requirement of a label selector. `In` and `NotIn` need at least one value; `Exists` and
 * `DoesNotExist` take none. The API server checks the same rule (a CEL validation rule).
 */
const LabelSelectorRequirement = z
  .strictObject({
    /** The label key. */
    key: z.string().min(1).max(317).regex(labelKey),
    /** How the label's value is compared. */
    operator: SelectorOperator,
    /** The values for `In` / `NotIn`. */
    values: z.array(z.string().max(63).regex(labelValue)).max(64).optional(),
  })
  .refine(
    (r) =>
      r.operator === "In" || r.operator === "NotIn"
        ? (r.values?.length ?? 0) > 0
        : (r.values?.length ?? 0) === 0,
    { message: "In and NotIn need at least one value; Exists and DoesNotExist take none" },
  )
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",
        message: "In and NotIn need at least one value; Exists and DoesNotExist take none",
      },
    ],
  });

const LABEL_KEY_CEL = LABEL_KEY_PATTERN.replaceAll("\\", "\\\\");
const LABEL_VALUE_CEL = LABEL_VALUE_PATTERN.replaceAll("\\", "\\\\");

/** `matchLabels`: label keys to exact values (at most 64 labels). */
const MatchLabels = z
  .record(z.string().max(317), z.string().max(63))
  .refine((m) => Object.entries(m).every(([k, v]) => isLabelKey(k) && isLabelValue(v)), {
    message: "every key must be a label key and every value a label value",
  })
  .meta({ maxProperties: 64 });

/**
 * A Kubernetes label selector (`metav1.LabelSelector`). The requirements are ANDed; an empty
 * selector matches every object (the roll-up then reports the selector in a condition).
 */
export const LabelSelector = z
  .strictObject({
    /** Labels that must be present with exactly these values. */
    matchLabels: MatchLabels.optional(),
    /** Further requirements (at most 32). */
    matchExpressions: z.array(LabelSelectorRequirement).max(32).optional(),
  })
  .meta({
    // The API server checks matchLabels' keys and values with CEL: a structural schema cannot
    // constrain a map's keys by pattern.
    "x-kubernetes-validations": [
      {
        rule: `!has(self.matchLabels) || self.matchLabels.all(k, k.matches('${LABEL_KEY_CEL}') && self.matchLabels[k].matches('${LABEL_VALUE_CEL}'))`,
        message: "every matchLabels key must be a label key and every value a label value",
      },
    ],
  });

/** A Kubernetes label selector. */
export type LabelSelector = z.infer<typeof LabelSelector>;

/**
 * Whether `labels` satisfy `selector`, with Kubernetes' semantics (`NotIn` and `DoesNotExist`
 * match an object without the key). Total: reads only what it understands, never throws.
 */
export function matchesSelector(
  selector: LabelSelector | undefined,
  labels: Readonly<Record<string, string>> | undefined,
): boolean {
  const have = labels ?? {};
  for (const [key, value] of Object.entries(selector?.matchLabels ?? {})) {
    if (have[key] !== value) return false;
  }
  for (const requirement of selector?.matchExpressions ?? []) {
    const present = Object.hasOwn(have, requirement.key);
    const value = have[requirement.key];
    const values = requirement.values ?? [];
    switch (requirement.operator) {
      case "In":
        if (!present || !values.includes(value as string)) return false;
        break;
      case "NotIn":
        if (present && values.includes(value as string)) return false;
        break;
      case "Exists":
        if (!present) return false;
        break;
      case "DoesNotExist":
        if (present) return false;
        break;
    }
  }
  return true;
}

/**
 * Converts a selector into the `labelSelector` query string of a list or watch
 * (`app=web,tier in (a,b),!legacy`).
 */
export function selectorToString(selector: LabelSelector | undefined): string {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(selector?.matchLabels ?? {}))
    parts.push(`${key}=${value}`);
  for (const r of selector?.matchExpressions ?? []) {
    const values = [...(r.values ?? [])].join(",");
    if (r.operator === "In") parts.push(`${r.key} in (${values})`);
    else if (r.operator === "NotIn") parts.push(`${r.key} notin (${values})`);
    else if (r.operator === "Exists") parts.push(r.key);
    else parts.push(`!${r.key}`);
  }
  return parts.join(",");
}

/** Whether a selector has no requirement at all (it would match every object). */
export function isEmptySelector(selector: LabelSelector | undefined): boolean {
  return (
    Object.keys(selector?.matchLabels ?? {}).length === 0 &&
    (selector?.matchExpressions ?? []).length === 0
  );
}

/** The object metadata the schemas read; every other field is kept as it is. */
export const ObjectMeta = z.looseObject({
  name: z.string().optional(),
  namespace: z.string().optional(),
  uid: z.string().optional(),
  generation: z.number().int().min(0).optional(),
  resourceVersion: z.string().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  creationTimestamp: z.union([z.string(), z.date()]).optional(),
  deletionTimestamp: z.union([z.string(), z.date()]).optional(),
});

/** Object metadata. */
export type ObjectMeta = z.infer<typeof ObjectMeta>;

/**
 * A list of `metav1.Condition`s, keyed by `type` (the API server keeps at most one per type).
 */
export const Conditions = z.array(Condition).meta({
  "x-kubernetes-list-type": "map",
  "x-kubernetes-list-map-keys": ["type"],
});
