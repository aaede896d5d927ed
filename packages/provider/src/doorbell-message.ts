/**
 * What a message of the event channel's queue says, parsed at the boundary: a host's doorbell
 * (`{"v":1,"instance":"i-…","seq":N}`, sent after it wrote a report to its tags) or one of EC2's
 * own events as EventBridge delivers them (state change, Spot interruption warning, rebalance
 * recommendation). Nothing in a message is trusted: it names an instance to read now, and the
 * read (filtered by this node's tags) decides everything. Total: any text gets an answer.
 */
import { z } from "zod";

/** What one queue message asks for. */
export type Doorbell =
  /** A host wrote report `seq` to its tags: read the instance now. */
  | { readonly kind: "report"; readonly instanceId: string; readonly seq: number }
  /** EC2 changed the instance's state (`pending`, `running`, `stopping`, `stopped`, ...). */
  | { readonly kind: "state"; readonly instanceId: string; readonly state: string }
  /** EC2 will interrupt the Spot instance (`instance-action`: `terminate`, `stop`, `hibernate`). */
  | { readonly kind: "interruption"; readonly instanceId: string; readonly action: string }
  /** EC2 recommends moving off the Spot instance. */
  | { readonly kind: "rebalance"; readonly instanceId: string }
  /** A message of no known shape (left on the queue for its dead-letter queue). */
  | { readonly kind: "unreadable"; readonly problem: string };

/** An EC2 instance ID. */
const InstanceId = z.string().regex(/^i-[0-9a-f]{8,17}$/);

/** A host's doorbell: the instance and the report's `seq`; nothing else. */
const HostDoorbell = z.strictObject({
  v: z.literal(1),
  instance: InstanceId,
  seq: z.number().int().min(0).max(2_147_483_647),
});

/** The envelope of an EventBridge event from EC2 (only the fields read here). */
const Ec2Event = z.discriminatedUnion("detail-type", [
  z.object({
    source: z.literal("aws.ec2"),
    "detail-type": z.literal("EC2 Instance State-change Notification"),
    detail: z.object({ "instance-id": InstanceId, state: z.string().max(32) }),
  }),
  z.object({
    source: z.literal("aws.ec2"),
    "detail-type": z.literal("EC2 Spot Instance Interruption Warning"),
    detail: z.object({ "instance-id": InstanceId, "instance-action": z.string().max(32) }),
  }),
  z.object({
    source: z.literal("aws.ec2"),
    "detail-type": z.literal("EC2 Instance Rebalance Recommendation"),
    detail: z.object({ "instance-id": InstanceId }),
  }),
]);

/** The longest body read (SQS allows 256 KiB; a doorbell or an EC2 event is well under 4 KiB). */
const MAX_BODY = 16_384;

/**
 * Reads one message body.
 *
 * @param body - the message's `Body` as SQS returns it (anything: it is not trusted).
 * @returns what it asks for, or `unreadable` with why.
 */
export function parseDoorbell(body: unknown): Doorbell {
  if (typeof body !== "string") return { kind: "unreadable", problem: "no body" };
  if (body.length > MAX_BODY)
    return { kind: "unreadable", problem: `a body of ${body.length} characters` };
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { kind: "unreadable", problem: "not JSON" };
  }
  const host = HostDoorbell.safeParse(json);
  if (host.success) return { kind: "report", instanceId: host.data.instance, seq: host.data.seq };
  const event = Ec2Event.safeParse(json);
  if (!event.success) return { kind: "unreadable", problem: "neither a doorbell nor an EC2 event" };
  const e = event.data;
  switch (e["detail-type"]) {
    case "EC2 Instance State-change Notification":
      return { kind: "state", instanceId: e.detail["instance-id"], state: e.detail.state };
    case "EC2 Spot Instance Interruption Warning":
      return {
        kind: "interruption",
        instanceId: e.detail["instance-id"],
        action: e.detail["instance-action"],
      };
    default:
      return { kind: "rebalance", instanceId: e.detail["instance-id"] };
  }
}
