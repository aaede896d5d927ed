/**
 * A restart never touches a healthy Pod. Long-lived Pods (`sleep 3600`, Running past every grace an
 * unlisted instance gets) on the real `nebula-vnode` bundle, restarted every way it can be: SIGTERM
 * and down a while, SIGKILL and back at once, SIGKILL in the middle of a (slow) poll, SIGKILL
 * before the first poll, back with EC2 slow, back with EC2 failing. After each: the same phase, the
 * same instance, the same stored object (its `resourceVersion`: no status write, no patch), and no
 * `RunInstances`, `StopInstances` or `TerminateInstances` from the vnode (counted at the EC2 proxy
 * in front of moto). Then the HA pair: the leader killed while the same Pods run; the standby takes
 * over and writes, stops and terminates nothing.
 */
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { type Ec2ProxyHandle, type InstanceHosts, startEc2Proxy } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  nodeInstances,
  readPod,
  startVnode,
  startWorld,
  stopCleanly,
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
const NODE = "vnode-restart";
const NS = "vnode-restart";
const PODS = Number(process.env.NEBULA_RESTART_PODS ?? "4");
/** Past the 60 s an instance launched by an earlier process was once allowed to be unlisted. */
const LONG_LIVED_MS = 65_000;
const POLL_SECONDS = 2;
const ACTIONS = ["RunInstances", "StopInstances", "TerminateInstances"] as const;

let hosts: InstanceHosts;
let proxy: Ec2ProxyHandle;
let config: object;
let vnode: VnodeProcess | undefined;
const names = Array.from({ length: PODS }, (_, i) => `long-${i}`);
const kubeconfig = () => controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS);

interface Snapshot {
  /** Who wrote the Pod last and when (for the failure message; not compared). */
  readonly writers?: string;
  readonly resourceVersion: string | undefined;
  readonly phase: string | undefined;
  readonly instanceId: string | undefined;
  readonly restarts: number | undefined;
}

async function snapshot(): Promise<Map<string, Snapshot>> {
  const out = new Map<string, Snapshot>();
  for (const name of names) {
    const pod = (await readPod(core, NS, name)) as V1Pod;
    out.set(name, {
      writers: JSON.stringify({
        managedFields: (pod.metadata?.managedFields ?? []).map((f) => [
          f.manager,
          f.operation,
          f.subresource,
          f.time,
        ]),
        status: pod.status,
      }),
      resourceVersion: pod.metadata?.resourceVersion,
      phase: pod.status?.phase,
      instanceId: pod.metadata?.annotations?.["nebula.dev/instance-id"],
      restarts: pod.status?.containerStatuses?.[0]?.restartCount,
    });
  }
  return out;
}

function mutations(): Record<string, number> {
  const calls = proxy.counts().calls;
  return Object.fromEntries(ACTIONS.map((a) => [a, calls[a] ?? 0]));
}

async function start(extra: { env?: Record<string, string>; args?: string[] } = {}) {
  return startVnode({
    nodeName: NODE,
    kubeconfig: kubeconfig(),
    moto,
    config,
    ...(extra.args ? { extraArgs: extra.args } : {}),
    ...(extra.env ? { env: extra.env } : {}),
  });
}

/** Polls the vnode's log until it has listed EC2 `n` more times. */
async function polls(process: VnodeProcess, n: number): Promise<void> {
  const scrapeOk = async () => {
    let text: string;
    try {
      text = await (await fetch(`${process.url}/metrics`)).text();
    } catch (error) {
      // Unreachable: say whether the process is gone, and what it last logged.
      const exit = process.child.exitCode ?? process.child.signalCode;
      throw new Error(
        `${process.url}/metrics: ${String(error)}; vnode ${exit === null ? "still running" : `exited (${exit})`}; last log lines: ${JSON.stringify(process.lines.slice(-8))}`,
        { cause: error },
      );
    }
    const line = text
      .split("\n")
      .find((l) => l.startsWith('nebula_vnode_poll_duration_seconds_count{outcome="ok"}'));
    return Number(line?.split(" ").at(-1) ?? "0");
  };
  const target = (await scrapeOk()) + n;
  await until(
    `${n} successful polls`,
    async () => ((await scrapeOk()) >= target ? true : undefined),
    120_000,
    200,
  );
}

/** Every Pod as it was: the same object version (nothing written), Running, the same instance. */
/** The Node's Ready condition: kube-controller-manager turns it Unknown when the vnode is away too long. */
async function nodeReady(): Promise<string> {
  const node = await core.readNode({ name: NODE });
  const ready = node.status?.conditions?.find((c) => c.type === "Ready");
  return `${ready?.status}/${ready?.reason} since ${String(ready?.lastTransitionTime)}`;
}

async function expectUntouched(
  before: Map<string, Snapshot>,
  calls: Record<string, number>,
  how: string,
) {
  const after = await snapshot();
  for (const name of names) {
    const { writers, ...now } = after.get(name) ?? ({} as Snapshot);
    const { writers: was, ...then } = before.get(name) ?? ({} as Snapshot);
    expect(
      now,
      `${name} after ${how} (Node Ready ${await nodeReady()}): now ${writers}; before ${was}`,
    ).toEqual(then);
    expect(after.get(name)?.phase, `${name} after ${how}`).toBe("Running");
  }
  expect(mutations(), `EC2 mutations by the vnode during ${how}`).toEqual(calls);
  const live = (await nodeInstances(ec2, NODE)).filter((i) => i.State?.Name === "running");
  expect(live.map((i) => i.InstanceId).sort(), how).toEqual(
    [...before.values()].map((s) => s.instanceId).sort(),
  );
}

beforeAll(async () => {
  const world = await startWorld({ admin, ec2, moto, cluster: NODE, namespace: NS });
  hosts = world.hosts;
  proxy = await startEc2Proxy({
    upstream: hosts.ec2Endpoint,
    clientToken: true,
    refuseStops: true,
  });
  config = vnodeConfig({
    cluster: NODE,
    region: moto.region,
    world,
    endpoint: proxy.endpoint,
    capacity: { cpu: "100", memory: "400Gi", pods: "40" },
    pollIntervalSeconds: POLL_SECONDS,
    batchWindowMs: 50,
  });
  vnode = await start();
  for (const name of names) {
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod(name, NODE, { command: ["sleep", "3600"] }),
    });
  }
  await until(
    "every Pod Running with its instance recorded",
    async () => {
      const all = await snapshot();
      return [...all.values()].every((s) => s.phase === "Running" && s.instanceId !== undefined)
        ? true
        : undefined;
    },
    240_000,
    1_000,
  );
  const launched = Date.now();
  // Long-lived: past every grace, then one quiet poll so every write of the first life is done.
  await new Promise((resolve) => setTimeout(resolve, LONG_LIVED_MS - (Date.now() - launched)));
  await polls(vnode, 2);
}, 600_000);

afterAll(async () => {
  proxy?.configure({ faultRate: 0, delayMs: 0 });
  try {
    vnode ??= await start();
    for (const name of names) {
      await core.deleteNamespacedPod({ name, namespace: NS }).catch(() => undefined);
    }
    await until(
      "every Pod gone",
      async () => {
        for (const name of names)
          if ((await readPod(core, NS, name)) !== undefined) return undefined;
        return true;
      },
      240_000,
      1_000,
    );
    await stopCleanly(vnode);
    vnode = undefined;
    const left = (await nodeInstances(ec2, NODE)).filter((i) => i.State?.Name !== "terminated");
    expect(left).toEqual([]);
  } finally {
    if (vnode) await vnode.kill();
    await proxy?.close();
    await deleteNode(admin, NODE);
    await hosts?.close();
    ec2.destroy();
  }
}, 600_000);

describe(`a restart never touches a healthy Pod (${PODS} Pods Running > ${LONG_LIVED_MS / 1000} s)`, () => {
  it("SIGTERM, down 10 s, back: nothing written, stopped, terminated or launched", async () => {
    const before = await snapshot();
    const calls = mutations();
    await stopCleanly(vnode);
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    vnode = await start();
    await polls(vnode, 3);
    await expectUntouched(before, calls, "SIGTERM and 10 s down");
  });

  it("SIGKILL and back at once", async () => {
    const before = await snapshot();
    const calls = mutations();
    await vnode?.kill();
    vnode = await start();
    await polls(vnode, 3);
    await expectUntouched(before, calls, "SIGKILL and back");
  });

  it("SIGKILL in the middle of a slow poll", async () => {
    const before = await snapshot();
    const calls = mutations();
    proxy.configure({ delayMs: 1_500 });
    try {
      // Every call takes 1.5 s: most of a 2 s interval is spent inside a poll.
      await new Promise((resolve) => setTimeout(resolve, 2_700));
      await vnode?.kill();
    } finally {
      proxy.configure({ delayMs: 0 });
    }
    vnode = await start();
    await polls(vnode, 3);
    await expectUntouched(before, calls, "SIGKILL during a poll");
  });

  it("SIGKILL before the first poll, then back", async () => {
    const before = await snapshot();
    const calls = mutations();
    await vnode?.kill();
    // Listening, not yet polled (EC2 answers slowly, so the first poll is still under way).
    proxy.configure({ delayMs: 3_000 });
    try {
      const early = await start();
      await early.kill();
    } finally {
      proxy.configure({ delayMs: 0 });
    }
    vnode = await start();
    await polls(vnode, 3);
    await expectUntouched(before, calls, "SIGKILL before the first poll");
  });

  it("back with EC2 slow (every call 2 s)", async () => {
    const before = await snapshot();
    const calls = mutations();
    await vnode?.kill();
    proxy.configure({ delayMs: 2_000 });
    try {
      vnode = await start();
      await polls(vnode, 2);
      await expectUntouched(before, calls, "a restart with EC2 slow");
    } finally {
      proxy.configure({ delayMs: 0 });
    }
  });

  it("back with EC2 failing every call for 20 s, then answering", async () => {
    const before = await snapshot();
    const calls = mutations();
    await vnode?.kill();
    proxy.configure({ faultRate: 1 });
    try {
      vnode = await start();
      await new Promise((resolve) => setTimeout(resolve, 20_000));
      await expectUntouched(before, calls, "a restart with EC2 failing");
    } finally {
      proxy.configure({ faultRate: 0 });
    }
    await polls(vnode, 3);
    await expectUntouched(before, calls, "EC2 answering again after the restart");
  });

  it("the HA pair: the leader killed, the standby takes over, nothing written, stopped or terminated", async () => {
    await vnode?.stop();
    vnode = undefined;
    const before = await snapshot();
    const calls = mutations();
    const leader = await start({ args: ["--leader-elect"], env: { POD_NAME: "restart-a" } });
    await polls(leader, 2);
    const standby = await start({ args: ["--leader-elect"], env: { POD_NAME: "restart-b" } });
    try {
      await leader.kill();
      // The standby takes the Lease once it expires (15 s), then polls.
      await polls(standby, 3);
      await expectUntouched(before, calls, "a leader's death and the standby's takeover");
    } finally {
      await standby.stop();
    }
  });
});
