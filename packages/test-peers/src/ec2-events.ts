/**
 * EC2's own events in the local world. In AWS, EC2 sends an "EC2 Instance State-change
 * Notification" to EventBridge on every state change of an instance (and, for Spot, interruption
 * warnings and rebalance recommendations); rules then deliver them, for Nebula to the event
 * channel's SQS queue. moto's EC2 sends nothing, but moto's EventBridge takes `PutEvents` with
 * `Source: "aws.ec2"` and delivers what matches a rule to its SQS targets. So
 * {@link startEc2Events} plays EC2's part: it watches the instances' states and puts, for every
 * transition, the event EC2 would; {@link createEc2EventRule} plays the operator's part: the rule
 * that sends them to a queue.
 *
 * @packageDocumentation
 */
import { DescribeInstancesCommand, EC2Client } from "@aws-sdk/client-ec2";
import {
  DeleteRuleCommand,
  EventBridgeClient,
  PutEventsCommand,
  type PutEventsRequestEntry,
  PutRuleCommand,
  PutTargetsCommand,
  RemoveTargetsCommand,
} from "@aws-sdk/client-eventbridge";
import { z } from "zod";
import { TestPeerError } from "./errors.js";
import { listInstanceStates } from "./instance-states.js";
import { MOTO_CREDENTIALS } from "./moto.js";

/** The detail-types of EC2's events that Nebula's event channel reads, as EC2 names them. */
const DETAIL_TYPES = {
  state: "EC2 Instance State-change Notification",
  interruption: "EC2 Spot Instance Interruption Warning",
  rebalance: "EC2 Instance Rebalance Recommendation",
} as const;

/**
 * The EventBridge event pattern of the event channel's rule (docs/operating.md, "The event
 * channel"): EC2's state changes, Spot interruption warnings and rebalance recommendations.
 */
export const EC2_EVENT_PATTERN = {
  source: ["aws.ec2"],
  "detail-type": [DETAIL_TYPES.state, DETAIL_TYPES.interruption, DETAIL_TYPES.rebalance],
} as const;

/** An EC2 instance state, as `DescribeInstances` and the state-change events name it. */
export type Ec2InstanceState =
  | "pending"
  | "running"
  | "stopping"
  | "stopped"
  | "shutting-down"
  | "terminated";

/** One of EC2's events about an instance, as {@link putEc2Events} sends it. */
export type Ec2Event =
  /** "EC2 Instance State-change Notification": the instance entered `state`. */
  | { readonly kind: "state"; readonly instanceId: string; readonly state: Ec2InstanceState }
  /**
   * "EC2 Spot Instance Interruption Warning": EC2 will interrupt the Spot instance in two minutes
   * (`action`, EC2's `instance-action`: `terminate`, the default, `stop` or `hibernate`).
   */
  | {
      readonly kind: "interruption";
      readonly instanceId: string;
      readonly action?: "terminate" | "stop" | "hibernate";
    }
  /** "EC2 Instance Rebalance Recommendation": the Spot instance is at elevated risk. */
  | { readonly kind: "rebalance"; readonly instanceId: string };

/** Where EventBridge is: a moto (`startMoto()`, `useTestPeers().moto`) or any endpoint and region. */
export interface EventBridgeTarget {
  /** The endpoint URL (moto serves EventBridge, SQS and EC2 on one). */
  readonly endpoint: string;
  /** The region the events and the rule live in. */
  readonly region: string;
}

/** moto's default account, which owns everything in it unless `MOTO_ACCOUNT_ID` says otherwise. */
const MOTO_ACCOUNT = "123456789012";

const partitionOf = (region: string): string =>
  region.startsWith("cn-") ? "aws-cn" : region.startsWith("us-gov-") ? "aws-us-gov" : "aws";

/** The event EC2 puts for `event`, as a `PutEvents` entry (the shape AWS documents). */
function entryOf(
  event: Ec2Event,
  region: string,
  account: string,
  time: Date,
  eventBusName: string,
): PutEventsRequestEntry {
  const detail =
    event.kind === "state"
      ? { "instance-id": event.instanceId, state: event.state }
      : event.kind === "interruption"
        ? { "instance-id": event.instanceId, "instance-action": event.action ?? "terminate" }
        : { "instance-id": event.instanceId };
  return {
    Source: "aws.ec2",
    DetailType: DETAIL_TYPES[event.kind],
    Detail: JSON.stringify(detail),
    Resources: [`arn:${partitionOf(region)}:ec2:${region}:${account}:instance/${event.instanceId}`],
    Time: time,
    EventBusName: eventBusName,
  };
}

function eventBridgeClient(target: EventBridgeTarget): EventBridgeClient {
  return new EventBridgeClient({
    endpoint: target.endpoint,
    region: target.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
}

/** Puts entries, 10 per call (EventBridge's limit), in order; throws if any is refused. */
async function putEntries(
  client: EventBridgeClient,
  entries: readonly PutEventsRequestEntry[],
  abortSignal?: AbortSignal,
): Promise<void> {
  for (let i = 0; i < entries.length; i += 10) {
    const answer = await client.send(
      new PutEventsCommand({ Entries: entries.slice(i, i + 10) }),
      abortSignal === undefined ? {} : { abortSignal },
    );
    if ((answer.FailedEntryCount ?? 0) > 0) {
      const failed = (answer.Entries ?? []).find((e) => e.ErrorCode !== undefined);
      throw new TestPeerError(
        "RequestFailed",
        `EventBridge PutEvents refused ${answer.FailedEntryCount} event(s): ${failed?.ErrorCode ?? "?"} ${failed?.ErrorMessage ?? ""}`,
      );
    }
  }
}

/**
 * Puts EC2 events on EventBridge now, in order, exactly as EC2 would send them (`Source:
 * "aws.ec2"`, EC2's detail-type and detail, the instance's ARN in `Resources`). For what the
 * emitter does not play: a Spot interruption warning or a rebalance recommendation on demand.
 *
 * @param target - EventBridge (a moto connection will do).
 * @param events - the events, sent in this order (10 per `PutEvents`).
 * @param options - `account`: the account in the instance ARNs (default moto's, `123456789012`);
 *   `eventBusName`: default `default`, the bus EC2 uses.
 *
 * @example
 * ```ts
 * await putEc2Events(moto, [{ kind: "interruption", instanceId, action: "terminate" }]);
 * ```
 */
export async function putEc2Events(
  target: EventBridgeTarget,
  events: readonly Ec2Event[],
  options: { readonly account?: string; readonly eventBusName?: string } = {},
): Promise<void> {
  const client = eventBridgeClient(target);
  try {
    const now = new Date();
    await putEntries(
      client,
      events.map((e) =>
        entryOf(
          e,
          target.region,
          options.account ?? MOTO_ACCOUNT,
          now,
          options.eventBusName ?? "default",
        ),
      ),
    );
  } finally {
    client.destroy();
  }
}

/**
 * EC2's instance lifecycle: the states each state can go to next. `launch` stands for "not
 * there yet". A launch or start passes through `pending`, a stop through `stopping`, a terminate
 * through `shutting-down`, whatever the state it leaves (EC2's user guide, "State change events").
 */
const NEXT: Readonly<Record<string, readonly Ec2InstanceState[]>> = {
  launch: ["pending"],
  pending: ["running", "shutting-down"],
  running: ["stopping", "shutting-down"],
  stopping: ["stopped", "shutting-down"],
  stopped: ["pending", "shutting-down"],
  "shutting-down": ["terminated"],
  terminated: [],
};

const STATES = new Set<string>(Object.keys(NEXT).filter((s) => s !== "launch"));

/**
 * The states EC2 passes through from `from` (`undefined`: a new instance) to `to`, `to`
 * included: the shortest path in EC2's lifecycle. moto jumps (`running` straight after
 * `RunInstances`, `stopped` straight after `StopInstances`), and a poll can miss a short state;
 * EC2 sends an event for each, so the emitter does too. A jump no lifecycle explains (moto
 * "stops" a terminated instance) gives just `[to]`; no change gives `[]`.
 */
export function statesBetween(from: string | undefined, to: string): Ec2InstanceState[] {
  if (from === to || !STATES.has(to)) return [];
  const start = from === undefined ? "launch" : from;
  const previous = new Map<string, string>([[start, ""]]);
  const queue = [start];
  while (queue.length > 0) {
    const state = queue.shift() as string;
    if (state === to) break;
    for (const next of NEXT[state] ?? []) {
      if (previous.has(next)) continue;
      previous.set(next, state);
      queue.push(next);
    }
  }
  if (!previous.has(to)) return [to as Ec2InstanceState];
  const path: Ec2InstanceState[] = [];
  for (let s = to; s !== start; s = previous.get(s) ?? start) path.unshift(s as Ec2InstanceState);
  return path;
}

const Ec2EventsOptionsSchema = z.strictObject({
  moto: z.object({ endpoint: z.url(), region: z.string().min(1) }),
  ec2Endpoint: z.url().optional(),
  pollIntervalMs: z.number().int().positive().optional(),
  eventBusName: z.string().min(1).optional(),
  onError: z.custom<(error: unknown) => void>((v) => typeof v === "function").optional(),
});

/** Options of {@link startEc2Events}. */
export interface Ec2EventsOptions {
  /** The moto to play EC2 for: its instances are watched, its EventBridge gets the events. */
  moto: EventBridgeTarget;
  /**
   * Where to read the instances' states (`DescribeInstanceStatus`). Default: moto itself, which knows
   * only `running`, `stopped` and `terminated` (the states in between are filled in). Give the
   * instance-host simulator's `ec2Endpoint` to send `pending`, `stopping` and `shutting-down`
   * when a guest really boots or shuts down. Never a fault-injecting proxy.
   */
  ec2Endpoint?: string;
  /** How often the states are read (default 250 ms). */
  pollIntervalMs?: number;
  /** The bus the events go to (default `default`, EC2's). */
  eventBusName?: string;
  /** Called with every failed read or `PutEvents` (default: ignored; the next look retries). */
  onError?: (error: unknown) => void;
}

/** An event the emitter sent, with when. */
export interface Ec2EventSent {
  /** The event. */
  readonly event: Ec2Event;
  /** When EC2 "sent" it (the look that saw the change, or the `send` call). */
  readonly at: Date;
}

/** A running emitter of EC2's events, from {@link startEc2Events}. */
export interface Ec2Events {
  /** Every event sent so far, in order. */
  sent(): readonly Ec2EventSent[];
  /** Sends events now, in order (e.g. a Spot interruption warning); see {@link putEc2Events}. */
  send(...events: Ec2Event[]): Promise<void>;
  /**
   * Reads the states now (after the look under way, if any) and sends what changed: a test that
   * just stopped an instance can await its events instead of waiting for the next poll.
   */
  look(): Promise<void>;
  /** Stops watching, waits for the look under way (aborted), and closes the clients. */
  stop(): Promise<void>;
  /** The same as `stop()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Starts playing EC2's events for a moto: every `pollIntervalMs` it reads every instance's state
 * (`DescribeInstanceStatus` with `IncludeAllInstances`, all pages; an instance's account once,
 * from `DescribeInstances`) and, for each transition since the last look, puts an "EC2
 * Instance State-change Notification" on moto's EventBridge (`Source: "aws.ec2"`, detail
 * `{"instance-id", "state"}`, the instance's ARN in `Resources`), the states moto skips filled in
 * (see {@link statesBetween}); a rule such as {@link createEc2EventRule}'s delivers them. The
 * instances there at the start send nothing until they change; instances that vanish (a moto
 * reset) are forgotten. Like EC2, it watches every instance of the account and region.
 *
 * Pure Node in the caller's process: its timer is unref'd, and `stop()` leaves nothing behind.
 *
 * @example
 * ```ts
 * const rule = await createEc2EventRule(moto, queueUrl);
 * const events = await startEc2Events({ moto });
 * await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
 * await events.look(); // "stopping", then "stopped", are on the queue
 * await events.stop();
 * await rule.remove();
 * ```
 */
export async function startEc2Events(options: Ec2EventsOptions): Promise<Ec2Events> {
  const parsed = Ec2EventsOptionsSchema.safeParse(options);
  if (!parsed.success) {
    throw new TestPeerError("InvalidOptions", `startEc2Events: ${z.prettifyError(parsed.error)}`, {
      cause: parsed.error,
    });
  }
  const { endpoint, region } = options.moto;
  const pollIntervalMs = options.pollIntervalMs ?? 250;
  const eventBusName = options.eventBusName ?? "default";
  const onError = options.onError ?? (() => undefined);
  const ec2 = new EC2Client({
    endpoint: options.ec2Endpoint ?? endpoint,
    region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  const events = eventBridgeClient(options.moto);
  const abort = new AbortController();
  const sent: Ec2EventSent[] = [];
  /** The state last sent (or found at the start) per instance, and its account. */
  const known = new Map<string, { state: string; account: string }>();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  /** The look under way (looks never overlap). */
  let busy: Promise<void> = Promise.resolve();

  /** Each instance's account, read once (`DescribeInstances` of the instances new to a look). */
  const accounts = new Map<string, string>();
  const accountsOf = async (ids: readonly string[]): Promise<void> => {
    for (let i = 0; i < ids.length; i += 100) {
      let token: string | undefined;
      do {
        const page = await ec2.send(
          new DescribeInstancesCommand({
            InstanceIds: ids.slice(i, i + 100),
            ...(token === undefined ? {} : { NextToken: token }),
          }),
          { abortSignal: abort.signal },
        );
        for (const reservation of page.Reservations ?? []) {
          for (const instance of reservation.Instances ?? []) {
            if (instance.InstanceId === undefined) continue;
            accounts.set(instance.InstanceId, reservation.OwnerId ?? MOTO_ACCOUNT);
          }
        }
        token = page.NextToken;
      } while (token !== undefined && token !== "");
    }
  };
  /** Every instance's state and account ({@link listInstanceStates}; accounts read once). */
  const read = async (): Promise<Map<string, { state: string; account: string }>> => {
    const states = await listInstanceStates(ec2, abort.signal);
    const fresh = [...states.keys()].filter((id) => !accounts.has(id));
    if (fresh.length > 0) await accountsOf(fresh);
    for (const id of accounts.keys()) if (!states.has(id)) accounts.delete(id);
    const seen = new Map<string, { state: string; account: string }>();
    for (const [id, state] of states)
      seen.set(id, { state, account: accounts.get(id) ?? MOTO_ACCOUNT });
    return seen;
  };

  const lookOnce = async (baseline: boolean): Promise<void> => {
    const seen = await read();
    const at = new Date();
    const changes: { event: Ec2Event; account: string }[] = [];
    for (const [instanceId, now] of baseline ? [] : seen) {
      for (const state of statesBetween(known.get(instanceId)?.state, now.state)) {
        changes.push({ event: { kind: "state", instanceId, state }, account: now.account });
      }
    }
    if (changes.length > 0) {
      await putEntries(
        events,
        changes.map((c) => entryOf(c.event, region, c.account, at, eventBusName)),
        abort.signal,
      );
      for (const c of changes) sent.push({ event: c.event, at });
    }
    // Only once sent: a failed put is retried by the next look.
    known.clear();
    for (const [instanceId, now] of seen) known.set(instanceId, now);
  };

  const look = (baseline = false): Promise<void> => {
    const next = busy.then(() => (stopped ? undefined : lookOnce(baseline)));
    busy = next.catch((error: unknown) => {
      if (!stopped) onError(error);
    });
    return next;
  };

  const loop = (): void => {
    timer = undefined;
    if (stopped) return;
    void look()
      .catch(() => undefined)
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, pollIntervalMs).unref();
      });
  };

  try {
    await look(true);
  } catch (error) {
    ec2.destroy();
    events.destroy();
    throw new TestPeerError(
      "RequestFailed",
      `startEc2Events: reading the instances failed: ${String(error)}`,
      { cause: error },
    );
  }
  timer = setTimeout(loop, pollIntervalMs).unref();

  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    abort.abort();
    await busy;
    ec2.destroy();
    events.destroy();
  };
  return {
    sent: () => [...sent],
    async send(...toSend) {
      if (stopped) throw new TestPeerError("Closed", "the EC2 event emitter is stopped");
      const at = new Date();
      await putEntries(
        events,
        toSend.map((e) =>
          entryOf(e, region, known.get(e.instanceId)?.account ?? MOTO_ACCOUNT, at, eventBusName),
        ),
      );
      for (const event of toSend) sent.push({ event, at });
    },
    look: () => {
      if (stopped)
        return Promise.reject(new TestPeerError("Closed", "the EC2 event emitter is stopped"));
      return look();
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** The rule {@link createEc2EventRule} made. */
export interface Ec2EventRule {
  /** The rule's name. */
  readonly name: string;
  /** The rule's ARN (the queue policy's `aws:SourceArn` in AWS). */
  readonly arn: string;
  /** The queue's ARN, the rule's one target (`Id` `queue`). */
  readonly queueArn: string;
  /** Removes the target and deletes the rule. */
  remove(): Promise<void>;
}

/** `arn:…:sqs:…` as is; a queue URL (`<endpoint>/<account>/<name>`, moto's and AWS's) to its ARN. */
function queueArnOf(queue: string, region: string): string {
  if (queue.startsWith("arn:")) return queue;
  const [account, name] = new URL(queue).pathname.split("/").filter((p) => p !== "");
  if (account === undefined || name === undefined || !/^\d{12}$/.test(account)) {
    throw new TestPeerError(
      "InvalidOptions",
      `createEc2EventRule: ${queue} is neither a queue ARN nor a queue URL`,
    );
  }
  return `arn:${partitionOf(region)}:sqs:${region}:${account}:${name}`;
}

/**
 * Creates what the operator creates for the event channel (docs/operating.md, "The event
 * channel"): an EventBridge rule on the default bus matching {@link EC2_EVENT_PATTERN}, with the
 * queue as its target. moto delivers to the queue without checking the queue's policy (AWS needs
 * the policy the guide shows).
 *
 * @param target - EventBridge (a moto connection will do).
 * @param queue - the event channel's queue: its URL (as `CreateQueue` answers it) or its ARN.
 * @param options - `name`: the rule's name (default the queue's name with `-ec2`).
 *
 * @example
 * ```ts
 * const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "node-1-events" }));
 * const rule = await createEc2EventRule(moto, QueueUrl ?? ""); // rule node-1-events-ec2
 * ```
 */
export async function createEc2EventRule(
  target: EventBridgeTarget,
  queue: string,
  options: { readonly name?: string } = {},
): Promise<Ec2EventRule> {
  const queueArn = queueArnOf(queue, target.region);
  const name = options.name ?? `${queueArn.split(":").at(-1)}-ec2`;
  const client = eventBridgeClient(target);
  try {
    const rule = await client.send(
      new PutRuleCommand({
        Name: name,
        EventPattern: JSON.stringify(EC2_EVENT_PATTERN),
        State: "ENABLED",
        Description: "EC2's own events to Nebula's event channel",
      }),
    );
    const targets = await client.send(
      new PutTargetsCommand({ Rule: name, Targets: [{ Id: "queue", Arn: queueArn }] }),
    );
    if ((targets.FailedEntryCount ?? 0) > 0) {
      throw new TestPeerError(
        "RequestFailed",
        `EventBridge PutTargets refused the queue ${queueArn}: ${targets.FailedEntries?.[0]?.ErrorMessage ?? "?"}`,
      );
    }
    return {
      name,
      arn: rule.RuleArn ?? "",
      queueArn,
      async remove() {
        const c = eventBridgeClient(target);
        try {
          await c.send(new RemoveTargetsCommand({ Rule: name, Ids: ["queue"] }));
          await c.send(new DeleteRuleCommand({ Name: name }));
        } finally {
          c.destroy();
        }
      },
    };
  } finally {
    client.destroy();
  }
}
