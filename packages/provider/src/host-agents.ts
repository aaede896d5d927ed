/**
 * Where a Pod's host agent listens, for the virtual node's relay of `kubectl exec`, `attach` and
 * `port-forward`: the Pod's proven instance (launched by this node for this Pod), running, its
 * private address, and the agent's certificate fingerprint from the `nebula:agent` tag the host
 * writes with its reports.
 */
import type { ObservedInstance } from "./poll.js";
import type { Reclaimer } from "./reclaimer.js";
import { disprove, type ProviderContext } from "./record.js";
import { HOST_AGENT_TAG } from "./tags.js";

/**
 * Where a Pod's host agent listens, or why no session can start: `@nebula/virtual-node/host`'s
 * `HostAgentLocation`, written out here so the provider's declarations need no other entry of that
 * package (the app checks the two agree: `satisfies HostAgents`).
 */
export type HostAgentLocation =
  | {
      readonly kind: "found";
      readonly address: string;
      readonly port: number;
      readonly fingerprint: string;
    }
  | { readonly kind: "unavailable"; readonly status: 404 | 409 | 503; readonly message: string };

const AGENT_TAG_VALUE = /^v1 port=(\d{1,5}) sha256=([0-9a-f]{64})$/;

/**
 * The agent the host `instance` reports (`nebula:agent`), or why it reports none usable. Total:
 * any tag value gets an answer.
 */
export function agentOfInstance(
  instance: Pick<ObservedInstance, "tags" | "privateIp" | "instanceId">,
  port: number,
): HostAgentLocation {
  const value = instance.tags.get(HOST_AGENT_TAG);
  if (value === undefined)
    return {
      kind: "unavailable",
      status: 503,
      message: `the host ${instance.instanceId} reports no agent yet (it starts with the Pod's sandbox; without one, check that the host image has nebula-agent: the host's journal says why)`,
    };
  const match = AGENT_TAG_VALUE.exec(value);
  if (match === null)
    return {
      kind: "unavailable",
      status: 503,
      message: `the host ${instance.instanceId} reports its agent in a form this virtual node does not read (${HOST_AGENT_TAG}: ${JSON.stringify(value.slice(0, 120))})`,
    };
  if (Number(match[1]) !== port)
    return {
      kind: "unavailable",
      status: 503,
      message: `the host ${instance.instanceId} reports its agent on port ${match[1]}, not the configured ${port}: it was launched with another hostAgent.port`,
    };
  if (instance.privateIp === undefined)
    return {
      kind: "unavailable",
      status: 503,
      message: `the host ${instance.instanceId} has no private address`,
    };
  return { kind: "found", address: instance.privateIp, port, fingerprint: match[2] ?? "" };
}

/**
 * Locates Pod `podUid`'s host agent: its instance proven to be this node's and the Pod's (the
 * latest read of it, else EC2's answer), `running`, with the agent tag; read from EC2 again once
 * when the latest read has no tag yet (the report that carried the Pod's Running status carries
 * it too, so this is rare).
 */
export async function locateHostAgent(
  ctx: ProviderContext,
  reclaimer: Reclaimer,
  pod: { readonly namespace: string; readonly name: string; readonly uid: string },
): Promise<HostAgentLocation> {
  const agent = ctx.config.hostAgent;
  const key = `${pod.namespace}/${pod.name}`;
  if (agent === undefined)
    return {
      kind: "unavailable",
      status: 404,
      message: `this virtual node does not serve exec, attach or port-forward (provider.hostAgent is not configured)`,
    };
  const record = ctx.records.get(pod.uid);
  let instance = await reclaimer.provenInstance(pod.uid, record?.instanceId);
  if (instance === undefined)
    return {
      kind: "unavailable",
      status: 409,
      message: `pod ${key} has no instance yet: its containers are not running`,
    };
  if (instance.state !== "running")
    return {
      kind: "unavailable",
      status: 409,
      message: `pod ${key}'s instance ${instance.instanceId} is ${instance.state}: its containers are not running`,
    };
  let found = agentOfInstance(instance, agent.port);
  if (found.kind !== "found" && instance.tags.get(HOST_AGENT_TAG) === undefined) {
    const fresh = await ctx.gateway.describeInstance(instance.instanceId);
    if (fresh !== undefined && disprove(ctx, fresh, pod.uid) === undefined) {
      instance = fresh;
      found =
        fresh.state === "running"
          ? agentOfInstance(fresh, agent.port)
          : {
              kind: "unavailable",
              status: 409,
              message: `pod ${key}'s instance ${fresh.instanceId} is ${fresh.state}: its containers are not running`,
            };
    }
  }
  return found;
}
