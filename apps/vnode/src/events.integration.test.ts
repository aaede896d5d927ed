/**
 * The event channel end to end (issue #30): two virtual nodes side by side in one run, one with
 * the channel on (an SQS queue in moto its hosts ring after every report, and which the
 * operator's EventBridge rule fills with EC2's state changes, played on moto by the test peers as
 * EC2 would send them), one without (the poll every 10 s). The real supervisor in the
 * instance-host simulator runs each Pod, whose container exits at a known time; the test watches
 * the Pods through the API server and measures, per Pod, the container's exit (`finishedAt`, the
 * host's clock) to the API server showing it. Printed, not asserted: what is asserted is that
 * every exit arrives, that on the "on" node it arrived through the channel (the vnode's own
 * counters), and that EC2's events reached it.
 */
import { CreateQueueCommand, SQSClient } from "@aws-sdk/client-sqs";
import { CoreV1Api } from "@kubernetes/client-node";
import {
  createEc2EventRule,
  type Ec2EventRule,
  type Ec2Events,
  type InstanceHosts,
  MOTO_CREDENTIALS,
  startEc2Events,
} from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  scrape,
  startVnode,
  startWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
  vnodeConfig,
} from "./testing/e2e.js";

const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
/**
 * Pods per node, exiting 4 s apart. `NEBULA_E2E_EVENT_PODS=15` runs the issue's 30 Pods (15 a
 * node); more runs more hosts side by side (the host stage under a fuller machine).
 */
const PODS = Number(process.env.NEBULA_E2E_EVENT_PODS ?? "8");
/**
 * When the first exit is due, in seconds after the Pods are created: every host should be up by
 * then (here, 48 simulated hosts booting at once on two CPUs took about 75 s, and an exit during
 * that storm measures the CPU the storm leaves, not the channel: the summary says how many Pods
 * were running when the first exit was due). `NEBULA_E2E_EVENT_FIRST_EXIT` overrides it.
 */
const FIRST_EXIT_SECONDS = Number(
  process.env.NEBULA_E2E_EVENT_FIRST_EXIT ?? String(30 + 3 * 2 * PODS),
);
/** The test's own deadline: the exits, then the teardown and the checks after them. */
const TEST_MS = (FIRST_EXIT_SECONDS + 4 * PODS + 600) * 1000;

interface Side {
  readonly node: string;
  readonly hosts: InstanceHosts;
  readonly vnode: VnodeProcess;
}
const sides: Side[] = [];
/** The operator's rule: EC2's events to the channel's queue. */
let rule: Ec2EventRule | undefined;
/** EC2's events, played for the whole account (every node's instances, as in AWS). */
let ec2Events: Ec2Events | undefined;

async function side(node: string, events: boolean): Promise<Side> {
  const world = await startWorld({ admin, ec2, moto, cluster: node, namespace: node });
  const config = vnodeConfig({
    cluster: node,
    region: moto.region,
    world,
    endpoint: world.hosts.ec2Endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "50" },
    pollIntervalSeconds: 10,
    batchWindowMs: 50,
  }) as { provider: Record<string, unknown> };
  if (events) {
    const sqs = new SQSClient({
      endpoint: moto.endpoint,
      region: moto.region,
      credentials: MOTO_CREDENTIALS,
    });
    const queue = await sqs.send(new CreateQueueCommand({ QueueName: `${node}-events` }));
    sqs.destroy();
    rule = await createEc2EventRule(moto, queue.QueueUrl ?? "");
    // The vnode and the hosts both reach it through the simulator's endpoint (forwarded to moto).
    config.provider.events = { queueUrl: queue.QueueUrl };
  }
  const vnode = await startVnode({
    nodeName: node,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    moto,
    config,
  });
  const made = { node, hosts: world.hosts, vnode };
  sides.push(made);
  return made;
}

let on: Side;
let off: Side;

beforeAll(async () => {
  [on, off] = await Promise.all([side("vnode-events-on", true), side("vnode-events-off", false)]);
  // Read through the "on" node's simulator: it shows pending, stopping and shutting-down while
  // its guests really boot and shut down (moto alone jumps; the emitter fills those in).
  ec2Events = await startEc2Events({ moto, ec2Endpoint: on.hosts.ec2Endpoint });
}, 300_000);

afterAll(async () => {
  await ec2Events?.stop();
  await rule?.remove();
  const codes = await Promise.all(sides.map((s) => s.vnode.stop()));
  for (const s of sides) {
    await deleteNode(admin, s.node);
    await s.hosts.close();
  }
  ec2.destroy();
  expect(codes).toEqual(sides.map(() => 0));
});

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? Number.NaN;

describe("the event channel on a real host supervisor", () => {
  it("every exit arrives on both nodes; on the channel's node through the channel", {
    timeout: TEST_MS,
  }, async () => {
    // The same Pods on both nodes: container i exits at the same wall-clock second on both,
    // FIRST_EXIT_SECONDS after the Pods are created and 4 s after container i - 1.
    const firstExit = Math.ceil(Date.now() / 1000) + FIRST_EXIT_SECONDS;
    for (const s of [on, off]) {
      for (let i = 0; i < PODS; i++) {
        await core.createNamespacedPod({
          namespace: s.node,
          body: barePod(`exit-${i}`, s.node, {
            command: ["sh", "-c", `sleep $((${firstExit + 4 * i} - $(date +%s))); exit 0`],
          }),
        });
      }
    }
    // Watch: when the API server first shows each Pod Succeeded (one list per node, not a read
    // per Pod: the watch must not load the API server it measures), and how many Pods were
    // running when the first exit was due.
    const shownAt = new Map<string, number>();
    const finishedAt = new Map<string, number>();
    let runningAtFirstExit: number | undefined;
    await until(
      "every Pod Succeeded on both nodes",
      async () => {
        let running = 0;
        for (const s of [on, off]) {
          for (const pod of (await core.listNamespacedPod({ namespace: s.node })).items) {
            const key = `${s.node}/${pod.metadata?.name}`;
            const state = pod.status?.containerStatuses?.[0]?.state;
            if (state?.running !== undefined || state?.terminated !== undefined) running++;
            if (shownAt.has(key)) continue;
            if (pod.status?.phase === "Succeeded" && state?.terminated?.finishedAt) {
              shownAt.set(key, Date.now());
              finishedAt.set(key, new Date(state.terminated.finishedAt).getTime());
            }
          }
        }
        if (runningAtFirstExit === undefined && Date.now() >= firstExit * 1000) {
          runningAtFirstExit = running;
        }
        return shownAt.size === 2 * PODS ? true : undefined;
      },
      (FIRST_EXIT_SECONDS + 4 * PODS + 240) * 1000,
      200,
    );
    const latencies = (s: Side) =>
      [...shownAt.keys()]
        .filter((k) => k.startsWith(`${s.node}/`))
        .map((k) => ((shownAt.get(k) ?? 0) - (finishedAt.get(k) ?? 0)) / 1000)
        .sort((a, b) => a - b);
    const figures = [on, off].map((s) => {
      const l = latencies(s);
      return `${s.node}: exit → shown p50 ${quantile(l, 0.5).toFixed(1)} s, max ${quantile(l, 1).toFixed(1)} s (n = ${l.length})`;
    });
    console.log(
      `${figures.join("\n")}\n(finishedAt has one-second resolution; the watch reads every 200 ms)\nrunning when the first exit was due (${FIRST_EXIT_SECONDS} s after creation): ${runningAtFirstExit ?? 0}/${2 * PODS} Pods`,
    );

    // On the channel's node the exits came through the channel: the hosts rang, the vnode read.
    const metrics = await scrape(on.vnode.url);
    const offMetrics = await scrape(off.vnode.url);
    const mean = (m: Map<string, number>, name: string) =>
      ((m.get(`${name}_sum`) ?? 0) / (m.get(`${name}_count`) ?? 1)).toFixed(2);
    console.log(
      `vnode histograms: exit → status written, mean ${mean(metrics, "nebula_vnode_exit_to_status_seconds")} s (on), ${mean(offMetrics, "nebula_vnode_exit_to_status_seconds")} s (off); queue receipt → status published, mean ${mean(metrics, "nebula_vnode_event_to_status_seconds")} s (on); Pod terminal → instance seen terminated, mean ${mean(metrics, "nebula_vnode_terminal_to_terminated_seconds")} s (on), ${mean(offMetrics, "nebula_vnode_terminal_to_terminated_seconds")} s (off); terminal status written → TerminateInstances sent, mean ${mean(metrics, "nebula_vnode_terminal_to_terminate_seconds")} s (on), ${mean(offMetrics, "nebula_vnode_terminal_to_terminate_seconds")} s (off)`,
    );
    const within = (m: Map<string, number>, le: string) =>
      `${m.get(`nebula_vnode_exit_to_status_seconds_bucket{le="${le}"}`) ?? 0}/${m.get("nebula_vnode_exit_to_status_seconds_count") ?? 0}`;
    console.log(
      `exit → status written within 1 s: ${within(metrics, "1")} (on), ${within(offMetrics, "1")} (off); within 2 s: ${within(metrics, "2")} (on), ${within(offMetrics, "2")} (off); within 10 s and 15 s (the poll's 10 s around the goal's 12): ${within(offMetrics, "10")}, ${within(offMetrics, "15")} (off)`,
    );
    const terminateWithin = (m: Map<string, number>, le: string) =>
      `${m.get(`nebula_vnode_terminal_to_terminate_seconds_bucket{le="${le}"}`) ?? 0}/${m.get("nebula_vnode_terminal_to_terminate_seconds_count") ?? 0}`;
    console.log(
      `terminal status written → TerminateInstances sent within 1 s: ${terminateWithin(metrics, "1")} (on), ${terminateWithin(offMetrics, "1")} (off); within 2 s: ${terminateWithin(metrics, "2")} (on), ${terminateWithin(offMetrics, "2")} (off)`,
    );
    console.log(
      `the channel's stages, means (on): ${["host", "delivery", "wait", "read", "publish"]
        .map((s) => {
          const sum = metrics.get(`nebula_vnode_event_stage_seconds_sum{stage="${s}"}`) ?? 0;
          const count = metrics.get(`nebula_vnode_event_stage_seconds_count{stage="${s}"}`) ?? 1;
          return `${s} ${(sum / count).toFixed(3)} s`;
        })
        .join(", ")}`,
    );
    expect(
      metrics.get('nebula_vnode_event_messages_total{outcome="read"}') ?? 0,
    ).toBeGreaterThanOrEqual(PODS);
    expect(metrics.get("nebula_vnode_event_to_status_seconds_count") ?? 0).toBeGreaterThanOrEqual(
      PODS,
    );
    expect(metrics.get('nebula_vnode_event_messages_total{outcome="unreadable"}') ?? 0).toBe(0);
    // EC2's events came too: every instance of the "on" node said pending, running, then the
    // states of its stop or terminate, in EC2's order; the "off" node's instances' events, on the
    // same account's rule, were ignored (no call). The Pods show their exit before the instance
    // has stopped: wait for it.
    const onInstances = on.hosts.guests().map((g) => g.instanceId);
    expect(onInstances.length).toBe(PODS);
    const statesOf = (id: string) =>
      (ec2Events?.sent() ?? []).flatMap(({ event }) =>
        event.kind === "state" && event.instanceId === id ? [event.state] : [],
      );
    await until(
      "every instance of the on node two states past running",
      async () => (onInstances.every((id) => statesOf(id).length >= 4) ? true : undefined),
      60_000,
      250,
    );
    for (const id of onInstances) {
      // After running: the guest's power-off (stopping, then stopped, or shutting-down when the
      // terminate came first), or straight to shutting-down when the controller's terminate
      // came before the emitter's look saw stopping (then terminated).
      const states = statesOf(id);
      expect(states.slice(0, 2)).toEqual(["pending", "running"]);
      if (states[2] === "stopping") expect(["stopped", "shutting-down"]).toContain(states[3]);
      else expect(states.slice(2, 4)).toEqual(["shutting-down", "terminated"]);
    }
    const sent = ec2Events?.sent() ?? [];
    expect(
      metrics.get('nebula_vnode_event_messages_total{outcome="ignored"}') ?? 0,
    ).toBeGreaterThanOrEqual(2 * PODS);
    console.log(
      `EC2's events sent: ${sent.length}; on node's messages: read ${metrics.get('nebula_vnode_event_messages_total{outcome="read"}')}, coalesced ${metrics.get('nebula_vnode_event_messages_total{outcome="coalesced"}') ?? 0}, ignored ${metrics.get('nebula_vnode_event_messages_total{outcome="ignored"}') ?? 0}`,
    );
    // The node without the channel has none of it.
    expect(offMetrics.get('nebula_vnode_event_messages_total{outcome="read"}') ?? 0).toBe(0);
    for (const s of [on, off]) {
      for (let i = 0; i < PODS; i++)
        await core.deleteNamespacedPod({ name: `exit-${i}`, namespace: s.node });
    }
    await until(
      "the Pods gone",
      async () => {
        for (const s of [on, off]) {
          const list = await core.listNamespacedPod({ namespace: s.node });
          if (list.items.length > 0) return undefined;
        }
        return true;
      },
      180_000,
      1000,
    );
  });
});
