/**
 * The EC2 instance as `DescribeInstances` returns it, read at the boundary with zod. Only the
 * fields the mapping needs are named; everything else is kept but ignored. This package does not
 * depend on `@aws-sdk/client-ec2`: the SDK's `Instance` objects (with `LaunchTime` as a `Date`)
 * and their JSON form (with `LaunchTime` as an ISO string) are both accepted.
 *
 * @packageDocumentation
 */
import { z } from "zod";
import { StateMappingError } from "./errors.js";

const optionalString = z
  .string()
  .nullish()
  .transform((value) => value ?? undefined);

const fields = {
  InstanceId: z.string().min(1),
  State: z.object({
    /** Kept as a string: a state name EC2 adds later becomes an `Unknown` state, not a parse error. */
    Name: z.string().min(1),
  }),
  StateReason: z
    .object({ Code: optionalString, Message: optionalString })
    .nullish()
    .transform((value) => value ?? undefined),
  StateTransitionReason: optionalString,
  LaunchTime: z
    .union([z.date(), z.iso.datetime({ offset: true })])
    .nullish()
    .transform((value) => {
      if (value === null || value === undefined) return undefined;
      const date = typeof value === "string" ? new Date(value) : value;
      return Number.isNaN(date.getTime()) ? undefined : date;
    }),
  PrivateIpAddress: optionalString,
  PublicIpAddress: optionalString,
  Tags: z
    .array(z.object({ Key: optionalString, Value: optionalString }))
    .nullish()
    .transform((value) => value ?? []),
};

/**
 * The zod schema of the fields of an EC2 `Instance` that the mapping reads: `InstanceId`,
 * `State.Name`, `StateReason.Code`/`Message`, `StateTransitionReason`, `LaunchTime`,
 * `PrivateIpAddress`, `PublicIpAddress` and `Tags`. Unknown fields are allowed and kept (in the
 * instance, its `State`, its `StateReason` and each tag).
 *
 * Use {@link parseEc2Instance} rather than this schema directly: it never throws, and it is faster.
 */
export const Ec2Instance = z.looseObject({
  ...fields,
  State: fields.State.loose(),
  StateReason: z
    .looseObject({ Code: optionalString, Message: optionalString })
    .nullish()
    .transform((value) => value ?? undefined),
  Tags: z
    .array(z.looseObject({ Key: optionalString, Value: optionalString }))
    .nullish()
    .transform((value) => value ?? []),
});

/**
 * The same fields as strip objects: zod validates only the named keys, and {@link keepUnknown}
 * copies the rest natively. A loose object validates every unknown key of an SDK instance (about 35)
 * one by one, which made this parse the largest part of the provider's own CPU per polled instance.
 */
const Ec2InstanceFields = z.object(fields);

/** An EC2 instance after {@link parseEc2Instance}: `LaunchTime` is a valid `Date` or absent. */
export type Ec2Instance = z.output<typeof Ec2Instance>;

/**
 * Instances this module produced, so that one already read (by {@link parseDescribeInstancesPage}
 * or {@link parseEc2Instance}) is not validated again when it is passed to `toInstanceState`. Only a
 * cache: the output is the same without it. Do not mutate a parsed instance.
 */
const parsedInstances = new WeakSet<object>();

/** The result of {@link parseEc2Instance}: the instance, or a typed error. Never an exception. */
export type InstanceParseResult =
  | { readonly ok: true; readonly instance: Ec2Instance }
  | { readonly ok: false; readonly error: StateMappingError };

/**
 * Reads one EC2 instance (an element of `Reservations[].Instances[]`). Total: any input gives a
 * result, and a bad one gives `ok: false` with a `StateMappingError` of code `InstanceUnreadable`.
 *
 * @example
 * ```ts
 * const parsed = parseEc2Instance({ InstanceId: "i-1", State: { Name: "running" } });
 * if (parsed.ok) parsed.instance.State.Name; // "running"
 * ```
 */
export function parseEc2Instance(value: unknown): InstanceParseResult {
  if (typeof value === "object" && value !== null && parsedInstances.has(value)) {
    return { ok: true, instance: value as Ec2Instance };
  }
  const fast = Ec2InstanceFields.safeParse(value);
  if (fast.success) {
    const instance = keepUnknown(value as Record<string, unknown>, fast.data);
    parsedInstances.add(instance);
    return { ok: true, instance };
  }
  // The strip and loose schemas fail alike; the loose one gives the error its usual words.
  const parsed = Ec2Instance.safeParse(value);
  if (parsed.success) {
    parsedInstances.add(parsed.data);
    return { ok: true, instance: parsed.data };
  }
  const issue = parsed.error.issues[0];
  const where = issue?.path.length ? issue.path.join(".") : "instance";
  return {
    ok: false,
    error: new StateMappingError(
      "InstanceUnreadable",
      `EC2 instance field ${where}: ${issue?.message ?? "invalid"}`,
      { cause: parsed.error },
    ),
  };
}

/** What {@link Ec2Instance} gives: the parsed fields over the unknown keys of the input, at each level. */
function keepUnknown(
  input: Record<string, unknown>,
  data: z.output<typeof Ec2InstanceFields>,
): Ec2Instance {
  const state = input.State as Record<string, unknown>;
  const reason = input.StateReason as Record<string, unknown> | null | undefined;
  const tags = input.Tags as readonly Record<string, unknown>[] | null | undefined;
  return {
    ...input,
    ...data,
    State: { ...state, ...data.State },
    StateReason: data.StateReason === undefined ? undefined : { ...reason, ...data.StateReason },
    Tags: data.Tags.map((tag, i) => ({ ...tags?.[i], ...tag })),
  };
}

/** The result of {@link parseDescribeInstancesPage}: readable instances, and what was skipped. */
export interface DescribeInstancesPageResult {
  /** Every instance that could be read, in page order. */
  readonly instances: readonly Ec2Instance[];
  /** One error per instance entry that could not be read (it is skipped, never fatal). */
  readonly errors: readonly StateMappingError[];
}

const Page = z.looseObject({
  Reservations: z
    .array(z.looseObject({ Instances: z.array(z.unknown()).nullish() }))
    .nullish()
    .transform((value) => value ?? []),
});

/**
 * Reads one `DescribeInstances` response page (`{ Reservations: [{ Instances: [...] }] }`) and
 * every instance in it. Total: an unreadable entry is reported in `errors` and skipped; an
 * unreadable page gives no instances and one `PageUnreadable` error.
 *
 * This is the floor the benchmark compares the mapping against.
 */
export function parseDescribeInstancesPage(page: unknown): DescribeInstancesPageResult {
  const parsed = Page.safeParse(page);
  if (!parsed.success) {
    return {
      instances: [],
      errors: [
        new StateMappingError("PageUnreadable", "DescribeInstances page has no Reservations list", {
          cause: parsed.error,
        }),
      ],
    };
  }
  const instances: Ec2Instance[] = [];
  const errors: StateMappingError[] = [];
  for (const reservation of parsed.data.Reservations) {
    for (const entry of reservation.Instances ?? []) {
      const one = parseEc2Instance(entry);
      if (one.ok) instances.push(one.instance);
      else errors.push(one.error);
    }
  }
  return { instances, errors };
}

/**
 * Why EC2 says an instance changed state, from `StateReason.Code` (falling back to
 * `StateTransitionReason`):
 * - `SpotInterruption`: `Server.SpotInstanceTermination` / `Server.SpotInstanceShutdown`.
 * - `InsufficientCapacity`: `Server.InsufficientInstanceCapacity`.
 * - `UserInitiatedShutdown`: `Client.UserInitiatedShutdown` (a `StopInstances`/`TerminateInstances` call).
 * - `InstanceInitiatedShutdown`: `Client.InstanceInitiatedShutdown` (the OS powered off).
 * - `InternalError`: `Server.InternalError` / `Client.InternalError`.
 * - `VolumeLimitExceeded`: `Client.VolumeLimitExceeded`.
 * - `ScheduledStop`: `Server.ScheduledStop` (scheduled retirement).
 * - `Other`: any other code; `None`: EC2 gave none.
 */
export type Ec2Cause =
  | "SpotInterruption"
  | "InsufficientCapacity"
  | "UserInitiatedShutdown"
  | "InstanceInitiatedShutdown"
  | "InternalError"
  | "VolumeLimitExceeded"
  | "ScheduledStop"
  | "Other"
  | "None";

const CAUSE_BY_CODE: Readonly<Record<string, Ec2Cause>> = {
  "Server.SpotInstanceTermination": "SpotInterruption",
  "Server.SpotInstanceShutdown": "SpotInterruption",
  "Server.InsufficientInstanceCapacity": "InsufficientCapacity",
  "Client.UserInitiatedShutdown": "UserInitiatedShutdown",
  "Client.InstanceInitiatedShutdown": "InstanceInitiatedShutdown",
  "Server.InternalError": "InternalError",
  "Client.InternalError": "InternalError",
  "Client.VolumeLimitExceeded": "VolumeLimitExceeded",
  "Server.ScheduledStop": "ScheduledStop",
};

/**
 * Classifies an instance's `StateReason.Code` (or, without one, its `StateTransitionReason`)
 * into an {@link Ec2Cause}. Total.
 */
export function ec2Cause(code: string | undefined, transitionReason?: string): Ec2Cause {
  if (typeof code === "string" && code !== "") {
    return Object.hasOwn(CAUSE_BY_CODE, code) ? (CAUSE_BY_CODE[code] as Ec2Cause) : "Other";
  }
  if (code !== undefined && code !== null && code !== "") return "Other";
  if (typeof transitionReason !== "string" || transitionReason === "") return "None";
  if (/^User initiated/i.test(transitionReason)) return "UserInitiatedShutdown";
  if (/^Service initiated/i.test(transitionReason)) return "Other";
  return "None";
}

/**
 * The instance's tags as a key→value map (entries without a string key or value are skipped).
 * Use it to read `nebula:*` tags after {@link parseEc2Instance}.
 */
export function instanceTags(instance: Ec2Instance): Map<string, string> {
  const map = new Map<string, string>();
  const tags: unknown = (instance as { Tags?: unknown } | null | undefined)?.Tags;
  if (!Array.isArray(tags)) return map;
  for (const tag of tags) {
    const { Key, Value } = (typeof tag === "object" && tag !== null ? tag : {}) as {
      Key?: unknown;
      Value?: unknown;
    };
    if (typeof Key === "string" && typeof Value === "string") map.set(Key, Value);
  }
  return map;
}
