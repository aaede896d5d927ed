/**
 * Every deleted Pod goes (issue #28): Pods in each phase — never launched, launched and pending,
 * running, succeeded, failed — are deleted, the finished ones at each step of the teardown their
 * terminal status started (before it, after the stop, after the terminate, at its end), and each
 * must end removed, with its instance terminated and its ledger record complete, within a bound
 * of reconciles. The real pieces: the provider against moto through the AWS SDK (behind
 * test-peers' EC2 proxy) and the virtual node's `PodTeardown` on the same ledger.
 */
import {
  DescribeInstancesCommand,
  type EC2Client,
  StopInstancesCommand,
} from "@aws-sdk/client-ec2";
import type { V1Pod } from "@kubernetes/client-node";
import type { ExitReport } from "@nebula/state-mapping";
import { MemoryPodLedger } from "@nebula/teardown";
import { type Ec2ProxyHandle, type Moto, startEc2Proxy, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider } from "./provider.js";
import { testPod } from "./testing/fixtures.js";
import { type MotoNetwork, motoConfig, prepareMoto, writeReport } from "./testing/moto-env.js";
import { testTeardown } from "./testing/teardown.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";
/** Reconciles a deleted Pod may take to be removed (each waits at most a poll; grace is 1 s). */
const DEADLINE_ROUNDS = 40;

let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;
let proxy: Ec2ProxyHandle;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
  proxy = await startEc2Proxy({ upstream: moto, clientToken: true });
});

afterAll(async () => {
  await proxy?.close();
  ec2?.destroy();
  await moto?.stop();
});

function report(state: "running" | 0 | 1): ExitReport {
  const base = { name: "app", init: false, restarts: 0, startedAt: "2026-11-30T04:59:00Z" };
  return {
    v: 1,
    seq: state === "running" ? 1 : 2,
    time: "2026-11-30T05:00:00Z",
    final: state !== "running",
    containers: [
      state === "running"
        ? { ...base, state: "running", ready: true }
        : {
            ...base,
            state: "terminated",
            exitCode: state,
            reason: state === 0 ? "Completed" : "Error",
            finishedAt: "2026-11-30T05:00:00Z",
          },
    ],
  };
}

async function stateOf(instanceId: string): Promise<string | undefined> {
  const page = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
  return page.Reservations?.[0]?.Instances?.[0]?.State?.Name;
}

function deleting(pod: V1Pod): V1Pod {
  return {
    ...pod,
    metadata: { ...pod.metadata, deletionTimestamp: new Date(), deletionGracePeriodSeconds: 1 },
  };
}

type Phase = "NeverLaunched" | "Pending" | "Running" | "Succeeded" | "Failed";

/** The cases: every phase deleted at once; each finished phase also at each teardown step. */
const CASES: { phase: Phase; after: number }[] = [
  ...(["NeverLaunched", "Pending", "Running", "Succeeded", "Failed"] as const).map((phase) => ({
    phase,
    after: 0,
  })),
  ...(["Succeeded", "Failed"] as const).flatMap((phase) =>
    [1, 2, 3, 4].map((after) => ({ phase, after })),
  ),
];

/** The teardown phase each case's deletion arrived in. */
const reached: { phase: Phase; after: number; at: string }[] = [];

describe("every deleted Pod goes", () => {
  it.each(CASES)(
    "a $phase Pod deleted after $after step(s) of its teardown is removed, its instance terminated",
    async ({ phase, after }) => {
      const node = `del-${phase.toLowerCase()}-${after}`;
      const ledger = new MemoryPodLedger();
      const provider = new Ec2PodProvider({
        config: { ...motoConfig(moto, network, node), endpoint: proxy.endpoint },
        renderUserData: () => USER_DATA,
        livePodUids: () => [],
        ledger,
      });
      const teardown = testTeardown(provider);
      const uid = `33333333-0000-4000-8000-${node}`;
      const pod = testPod(node, uid);
      if (pod.spec) pod.spec.terminationGracePeriodSeconds = 1;
      let instanceId: string | undefined;
      let stored: V1Pod = pod;
      if (phase !== "NeverLaunched") {
        await provider.createPod(pod);
        instanceId = (await ledger.get(uid))?.launch.instanceId;
        expect(instanceId).toMatch(/^i-/);
      }
      if (instanceId !== undefined && phase !== "Pending") {
        await writeReport(
          ec2,
          instanceId,
          report(phase === "Running" ? "running" : phase === "Succeeded" ? 0 : 1),
        );
        if (phase !== "Running") {
          await ec2.send(new StopInstancesCommand({ InstanceIds: [instanceId] }));
        }
        for (let i = 0; i < 20 && provider.getPodStatus(uid)?.phase !== phase; i++) {
          await provider.pollOnce();
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
        expect(provider.getPodStatus(uid)?.phase).toBe(phase);
        stored = { ...pod, status: provider.getPodStatus(uid) ?? {} };
      }
      // A finished Pod's teardown starts from its terminal status (the Pod controller's
      // `deleting: false`) and runs `after` steps before the deletion arrives.
      for (let i = 0; i < after; i++) {
        const step = await teardown.step(stored, { deleting: false });
        if (step.status === "complete") break;
        await provider.pollOnce();
      }
      reached.push({ phase, after, at: (await teardown.phase(uid)) ?? "none" });
      const result = await teardown.reclaim(deleting(stored), { rounds: DEADLINE_ROUNDS, ms: 100 });
      expect(result.complete, JSON.stringify(result.seen.slice(-3))).toBe(true);
      expect(teardown.removed.map((r) => r.uid)).toEqual([uid]);
      if (instanceId !== undefined) expect(await stateOf(instanceId)).toBe("terminated");
      const record = await teardown.phase(uid);
      expect(record === undefined || record === "complete").toBe(true);
      await provider.forgetPod(uid);
      expect(await ledger.get(uid)).toBeUndefined();
      await provider.stop();
      provider.client.destroy();
    },
  );

  it("the deletions above arrived at every step of a finished Pod's teardown", () => {
    for (const phase of ["Succeeded", "Failed"] as const) {
      const at = new Set(reached.filter((r) => r.phase === phase).map((r) => r.at));
      // Before it started, while stopping, while terminating, and once it completed.
      expect([...at].sort(), JSON.stringify(reached)).toEqual(
        ["complete", "none", "stopping", "terminating"].sort(),
      );
    }
  });
});
