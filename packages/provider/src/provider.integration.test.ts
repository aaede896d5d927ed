import { Buffer } from "node:buffer";
import { gunzipSync } from "node:zlib";
import {
  DescribeInstanceAttributeCommand,
  type EC2Client,
  RunInstancesCommand,
  StopInstancesCommand,
} from "@aws-sdk/client-ec2";
import type { V1Pod } from "@kubernetes/client-node";
import type { ExitReport } from "@nebula/state-mapping";
import { MemoryPodLedger, type TeardownEvent } from "@nebula/teardown";
import { type Moto, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseProviderConfig } from "./config.js";
import { buildRunInstancesInput } from "./launch.js";
import { podFacts } from "./pod.js";
import { Ec2PodProvider } from "./provider.js";
import { countCalls } from "./testing/calls.js";
import { testPod } from "./testing/fixtures.js";
import {
  fakeClock,
  type MotoNetwork,
  motoConfig,
  nodeInstances,
  prepareMoto,
  statusLog,
  writeReport,
} from "./testing/moto-env.js";
import { testTeardown } from "./testing/teardown.js";

const USER_DATA = "#!/bin/bash\necho nebula\n";

let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
});

afterAll(async () => {
  ec2?.destroy();
  await moto?.stop();
});

function uid(n: number, prefix = "00000000"): string {
  return `${prefix}-0000-4000-8000-${n.toString().padStart(12, "0")}`;
}

function deleting(pod: V1Pod): V1Pod {
  return {
    ...pod,
    metadata: { ...pod.metadata, deletionTimestamp: new Date(), deletionGracePeriodSeconds: 30 },
  };
}

function live(instances: Awaited<ReturnType<typeof nodeInstances>>) {
  return instances.filter(
    (i) => i.State?.Name !== "terminated" && i.State?.Name !== "shutting-down",
  );
}

async function reportTags(instanceId: string, report: ExitReport): Promise<void> {
  await writeReport(ec2, instanceId, report);
}

const completed = (seq: number, exitCode: number): ExitReport => ({
  v: 1,
  seq,
  time: "2026-11-30T05:00:00Z",
  final: true,
  containers: [
    {
      name: "app",
      init: false,
      state: "terminated",
      restarts: 0,
      exitCode,
      reason: exitCode === 0 ? "Completed" : "Error",
      startedAt: "2026-11-30T04:59:00Z",
      finishedAt: "2026-11-30T05:00:00Z",
    },
  ],
});

describe("launch", () => {
  it("createPod never waits for a listener, so a listener may wait for createPod's caller", async () => {
    // A controller's listener resolves once its reconcile has written the status, and that
    // reconcile is the one calling createPod: createPod must return without waiting for it.
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "reentrant"),
      livePodUids: () => [],
    });
    let callerReturned = false;
    let release = (): void => undefined;
    const callerDone = new Promise<void>((resolve) => {
      release = resolve;
    });
    const delivered: Array<{ callerReturned: boolean; phase: string | undefined }> = [];
    provider.notifyPods(async (change) => {
      await callerDone;
      delivered.push({ callerReturned, phase: change.status.phase });
    });
    const blocked = new Promise<string>((resolve) => setTimeout(() => resolve("blocked"), 20_000));
    const outcome = await Promise.race([
      provider.createPod(testPod("reentrant-0", uid(900))).then(() => "returned"),
      blocked,
    ]);
    expect(outcome).toBe("returned");
    callerReturned = true;
    release();
    for (let i = 0; i < 100 && delivered.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(delivered[0]).toEqual({ callerReturned: true, phase: "Pending" });
  });

  it("launches one instance with the launch settings of docs/contracts.md and reports the Pod", async () => {
    const log = statusLog();
    // The real user-data from @nebula/userdata (no renderUserData override).
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "launch", { tags: { team: "ml" } }),
      livePodUids: () => [],
    });
    provider.notifyPods(log.listener);
    const calls = countCalls(provider.client);
    const pod = testPod("web-0", uid(1));
    await provider.createPod(pod);
    await provider.createPod(pod);
    expect(calls.get("RunInstancesCommand")).toBe(1);

    const [instance, ...others] = await nodeInstances(ec2, "launch");
    expect(others).toEqual([]);
    const tags = Object.fromEntries((instance?.Tags ?? []).map((t) => [t.Key, t.Value]));
    expect(tags).toMatchObject({
      "nebula:cluster": "it",
      "nebula:node": "launch",
      "nebula:pod-uid": uid(1),
      "nebula:pod": "default/web-0",
      Name: "launch/default/web-0",
      team: "ml",
    });
    expect(instance?.MetadataOptions).toMatchObject({
      HttpTokens: "required",
      HttpPutResponseHopLimit: 1,
    });
    expect(instance?.IamInstanceProfile?.Arn).toMatch(/instance-profile\/nebula-host$/);
    const id = instance?.InstanceId ?? "";
    const shutdown = await ec2.send(
      new DescribeInstanceAttributeCommand({
        InstanceId: id,
        Attribute: "instanceInitiatedShutdownBehavior",
      }),
    );
    expect(shutdown.InstanceInitiatedShutdownBehavior?.Value).toBe("stop");
    const userData = await ec2.send(
      new DescribeInstanceAttributeCommand({ InstanceId: id, Attribute: "userData" }),
    );
    const bytes = Buffer.from(userData.UserData?.Value ?? "", "base64");
    expect(bytes.length).toBeLessThanOrEqual(16 * 1024);
    // @nebula/userdata gzips when the script is over 16 KiB (cloud-init gunzips it).
    const script = (bytes[0] === 0x1f && bytes[1] === 0x8b ? gunzipSync(bytes) : bytes).toString();
    expect(script).toMatch(/^#!\/bin\/bash/);
    expect(script).toContain("nebula");

    const result = await provider.pollOnce();
    expect(result).toMatchObject({ ok: true, instances: 1, describeCalls: 1, consoleCalls: 0 });
    const status = provider.getPodStatus(uid(1));
    expect(status?.phase).toBe("Pending");
    expect(log.last("web-0")).toEqual(status);
    expect(provider.listPods().map((p) => p.metadata?.name)).toEqual(["web-0"]);
    await provider.stop();
  });

  it("after a restart, adopts the instance instead of launching again", async () => {
    const config = motoConfig(moto, network, "adopt");
    const first = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const pod = testPod("job", uid(2));
    await first.createPod(pod);
    await first.stop();

    const second = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const calls = countCalls(second.client);
    await second.pollOnce();
    await second.createPod(pod);
    expect(calls.get("RunInstancesCommand")).toBeUndefined();
    expect(live(await nodeInstances(ec2, "adopt"))).toHaveLength(1);
    await second.stop();
  });

  it("relaunching with the same token leaves one instance (moto ignores ClientToken: the poll terminates the copy)", async () => {
    const config = motoConfig(moto, network, "token");
    const provider = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const pod = testPod("twice", uid(4));
    await provider.createPod(pod);
    const [recorded] = await nodeInstances(ec2, "token");
    const again = buildRunInstancesInput({
      pod: podFacts(pod),
      config: parseProviderConfig(config),
      instanceType: "t3.micro",
      userData: USER_DATA,
    });
    expect(again.ClientToken).toBe(uid(4));
    const copy = await ec2.send(new RunInstancesCommand(again));
    // Real EC2 would answer with the recorded instance here; moto starts another.
    expect(copy.Instances?.[0]?.InstanceId).not.toBe(recorded?.InstanceId);
    await provider.pollOnce();
    await provider.stop();
    const after = live(await nodeInstances(ec2, "token"));
    expect(after.map((i) => i.InstanceId)).toEqual([recorded?.InstanceId]);
  });

  it("refuses a Pod it cannot place: Failed at once with the reason and a Warning, no launch", async () => {
    const log = statusLog();
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "refuse"),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const events: string[] = [];
    provider.notifyPods((change) => {
      log.listener(change);
      for (const e of change.events ?? []) events.push(`${e.type} ${e.reason}`);
    });
    const gpu = testPod("gpu", uid(3), { resources: { limits: { "nvidia.com/gpu": "1" } } });
    await provider.createPod(gpu);
    expect(log.last("gpu")).toMatchObject({ phase: "Failed", reason: "InvalidPodSpec" });
    expect(log.last("gpu")?.message).toMatch(/GPU/);
    expect(events).toEqual(["Warning InvalidPodSpec"]);
    expect(await nodeInstances(ec2, "refuse")).toEqual([]);
    // Deleting it needs no reclaim: nothing was launched.
    expect(await testTeardown(provider).step(deleting(gpu))).toMatchObject({ status: "complete" });
    await provider.stop();
  });
});

describe("poll", () => {
  it("reads more than one page, one sequence per cycle, no per-instance call", async () => {
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "pages", { pageSize: 5 }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    for (let i = 0; i < 12; i++) await provider.createPod(testPod(`p-${i}`, uid(100 + i)));
    const calls = countCalls(provider.client);
    const result = await provider.pollOnce();
    expect(result).toMatchObject({ ok: true, instances: 12, describeCalls: 3 });
    expect([...calls]).toEqual([["DescribeInstancesCommand", 3]]);
    expect(provider.listPods().every((p) => p.status?.phase === "Pending")).toBe(true);
    await provider.stop();
  });

  it("maps a final exit report in the tags to the Pod status; the teardown then reclaims the instance", async () => {
    const log = statusLog();
    const provider = new Ec2PodProvider({
      // The two terminates come from two reconciles (see "batches the stops" below).
      config: motoConfig(moto, network, "report", { batchWindowMs: 1000 }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    provider.notifyPods(log.listener);
    await provider.createPod(testPod("ok", uid(200)));
    await provider.createPod(testPod("bad", uid(201)));
    const [a, b] = await nodeInstances(ec2, "report");
    const byUid = (i: typeof a) => i?.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value;
    const ok = byUid(a) === uid(200) ? a : b;
    const bad = ok === a ? b : a;
    await reportTags(ok?.InstanceId ?? "", completed(3, 0));
    await reportTags(bad?.InstanceId ?? "", completed(3, 1));
    // The host powers off after its final report.
    await ec2.send(
      new StopInstancesCommand({ InstanceIds: [ok?.InstanceId ?? "", bad?.InstanceId ?? ""] }),
    );

    const calls = countCalls(provider.client);
    await provider.pollOnce();
    expect(log.last("ok")?.phase).toBe("Succeeded");
    expect(log.last("bad")?.phase).toBe("Failed");
    expect(log.last("bad")?.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(1);
    expect(calls.get("GetConsoleOutputCommand")).toBeUndefined();
    // Status written → the Pod controller tears both finished Pods down (the one driver,
    // `deleting: false`): the stopped instances are terminated together, and never stopped again.
    const driver = testTeardown(provider);
    const reclaimed = await Promise.all(
      [testPod("ok", uid(200)), testPod("bad", uid(201))].map((pod) =>
        driver.reclaim(pod, { deleting: false, rounds: 10, ms: 50 }),
      ),
    );
    expect(reclaimed.map((r) => r.complete)).toEqual([true, true]);
    expect(calls.get("TerminateInstancesCommand")).toBe(1);
    expect(calls.get("StopInstancesCommand")).toBeUndefined();
    expect(live(await nodeInstances(ec2, "report"))).toEqual([]);
    // The statuses stay what the reports said.
    expect(provider.getPodStatus(uid(200))?.phase).toBe("Succeeded");
    expect(provider.getPodStatus(uid(201))?.phase).toBe("Failed");
    await provider.stop();
  });
});

describe("console fallback", () => {
  it("reads the console once, only for a stopped instance without report tags, after the settle window", async () => {
    const clock = fakeClock();
    const log = statusLog();
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "console", { consoleSettleSeconds: 30 }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      now: clock.now,
    });
    provider.notifyPods(log.listener);
    await provider.createPod(testPod("silent", uid(300)));
    await provider.createPod(testPod("tagged", uid(301)));
    const instances = await nodeInstances(ec2, "console");
    const idOf = (u: string) =>
      instances.find((i) => i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === u))
        ?.InstanceId ?? "";
    await reportTags(idOf(uid(301)), completed(1, 0));
    await ec2.send(new StopInstancesCommand({ InstanceIds: [idOf(uid(300)), idOf(uid(301))] }));

    const calls = countCalls(provider.client);
    expect((await provider.pollOnce()).consoleCalls).toBe(0);
    clock.advance(10_000);
    expect((await provider.pollOnce()).consoleCalls).toBe(0);
    clock.advance(25_000);
    expect((await provider.pollOnce()).consoleCalls).toBe(1);
    expect((await provider.pollOnce()).consoleCalls).toBe(0);
    expect(calls.get("GetConsoleOutputCommand")).toBe(1);
    // moto's console holds a boot log and no report: the Pod failed, its fate unknown, never Succeeded.
    const silent = log.last("silent");
    expect(silent?.phase).toBe("Failed");
    expect(silent?.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 137,
      reason: "ContainerStatusUnknown",
    });
    expect(log.all("silent").some((s) => s.phase === "Succeeded")).toBe(false);
    expect(log.last("tagged")?.phase).toBe("Succeeded");
    await provider.stop();
  });
});

describe("reclaim", () => {
  it("batches the stops and terminates of many deleted Pods", async () => {
    const provider = new Ec2PodProvider({
      // Through the one driver each stop and terminate is preceded by its own lookup (and the
      // stop by its grace tag), so the twelve reach the batcher over a longer span than the
      // provider's own poll-driven teardown took: a window wide enough for all of them.
      config: motoConfig(moto, network, "batch", { batchWindowMs: 1000 }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    const pods = Array.from({ length: 12 }, (_, i) => testPod(`d-${i}`, uid(400 + i)));
    for (const pod of pods) await provider.createPod(pod);
    await provider.pollOnce();
    const driver = testTeardown(provider);
    const calls = countCalls(provider.client);
    const step = () => Promise.all(pods.map((pod) => driver.step(deleting(pod))));
    let results = await step();
    expect(calls.get("StopInstancesCommand")).toBe(1);
    // moto stops instantly: after the next poll the teardowns see them stopped and terminate all
    // in one call.
    for (let i = 0; i < 10 && results.some((r) => r.status !== "complete"); i++) {
      await provider.pollOnce();
      results = await step();
    }
    expect(results.map((r) => r.status)).toEqual(pods.map(() => "complete"));
    expect(calls.get("StopInstancesCommand")).toBe(1);
    expect(calls.get("TerminateInstancesCommand")).toBe(1);
    expect(live(await nodeInstances(ec2, "batch"))).toEqual([]);
    // The Pod controller forgets each Pod once its teardown completed.
    for (const pod of pods) await provider.forgetPod(pod.metadata?.uid ?? "");
    expect(provider.listPods()).toEqual([]);
    // Deleting again is harmless.
    expect(await driver.step(deleting(pods[0] ?? testPod("x", uid(499))))).toMatchObject({
      status: "complete",
    });
    await provider.stop();
  });
});

describe("leak collection", () => {
  it("marks, then terminates, an instance launched before a crash whose Pod is gone; spares live ones", async () => {
    const config = motoConfig(moto, network, "leaks", {
      leakCollection: { graceSeconds: 0, intervalSeconds: 10 },
    });
    // A provider that "crashed" right after RunInstances: the instance exists, nobody recorded it.
    const parsed = parseProviderConfig(config);
    const orphanPod = testPod("orphan", uid(500));
    await ec2.send(
      new RunInstancesCommand(
        buildRunInstancesInput({
          pod: podFacts(orphanPod),
          config: parsed,
          instanceType: "t3.micro",
          userData: USER_DATA,
        }),
      ),
    );
    const clock = fakeClock(Date.now() + 60_000);
    const liveUids = new Set([uid(501), uid(502)]);
    const provider = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => liveUids,
      now: clock.now,
    });
    await provider.createPod(testPod("alive", uid(501)));
    // The crashed launch of a Pod that still exists: the restarted provider adopts it.
    await ec2.send(
      new RunInstancesCommand(
        buildRunInstancesInput({
          pod: podFacts(testPod("survivor", uid(502))),
          config: parsed,
          instanceType: "t3.micro",
          userData: USER_DATA,
        }),
      ),
    );
    await provider.pollOnce();
    const calls = countCalls(provider.client);
    await provider.createPod(testPod("survivor", uid(502)));
    expect(calls.get("RunInstancesCommand")).toBeUndefined();

    const collected: Array<{ instanceId: string; podUid: string | undefined }> = [];
    provider.onLeakCollected(({ instanceId, podUid }) => collected.push({ instanceId, podUid }));
    const first = await provider.collectLeaks();
    expect(first.mark).toHaveLength(1);
    expect(collected).toEqual([]);
    expect(first.terminate).toEqual([]);
    const orphanId = first.mark[0] ?? "";
    const marked = (await nodeInstances(ec2, "leaks")).find((i) => i.InstanceId === orphanId);
    expect(marked?.Tags?.some((t) => t.Key === "nebula:orphaned-at")).toBe(true);

    // Next pass, still orphaned: terminated. The live Pods' instances are untouched.
    clock.advance(10_000);
    await provider.pollOnce();
    expect(provider.instanceCounts()).toEqual({ running: 3 });
    const polls: Array<{ ok: boolean; instances: number; seconds: number }> = [];
    const off = provider.onPoll((r, seconds) =>
      polls.push({ ok: r.ok, instances: r.instances, seconds }),
    );
    await provider.pollOnce();
    off();
    await provider.pollOnce();
    expect(polls).toHaveLength(1);
    expect(polls[0]).toMatchObject({ ok: true, instances: 3 });
    expect(polls[0]?.seconds).toBeGreaterThan(0);
    const second = await provider.collectLeaks();
    expect(second.terminate).toEqual([orphanId]);
    const orphanUid = marked?.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value;
    expect(collected).toEqual([{ instanceId: orphanId, podUid: orphanUid }]);
    const after = await nodeInstances(ec2, "leaks");
    expect(
      live(after)
        .map((i) => i.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value)
        .sort(),
    ).toEqual([uid(501), uid(502)]);
    await provider.stop();
  });

  it("removes the mark when the Pod turns out to be live (one stale read kills nothing)", async () => {
    const config = motoConfig(moto, network, "unmark", {
      leakCollection: { graceSeconds: 0, intervalSeconds: 10 },
    });
    const clock = fakeClock(Date.now() + 60_000);
    let liveUids = new Set<string>();
    const owner = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
    });
    await owner.createPod(testPod("flaky", uid(600)));
    await owner.stop();
    const provider = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => liveUids,
      now: clock.now,
    });
    const stale = await provider.collectLeaks();
    expect(stale.mark).toHaveLength(1);
    liveUids = new Set([uid(600)]);
    clock.advance(60_000);
    await provider.pollOnce();
    const fresh = await provider.collectLeaks();
    expect(fresh).toEqual({
      mark: [],
      terminate: [],
      unmark: stale.mark,
      unproven: [],
      // The user-data delivery lists no parameters.
      parameters: { delete: [], podUids: [] },
    });
    const instance = (await nodeInstances(ec2, "unmark"))[0];
    expect(instance?.State?.Name).toBe("running");
    expect(instance?.Tags?.some((t) => t.Key === "nebula:orphaned-at")).toBe(false);
    await provider.stop();
  });
});

describe("durable teardown", () => {
  it("records the teardown in the ledger and resumes it after a crash, in teardown order; a stale request never restarts it", async () => {
    const ledger = new MemoryPodLedger();
    const events: string[] = [];
    const config = motoConfig(moto, network, "durable");
    const onTeardownEvent = (event: TeardownEvent) => {
      if (event.type === "issuing") events.push(event.effects.map((e) => e.kind).join(","));
    };
    const pod = deleting(testPod("durable", uid(700)));

    const first = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(700)],
      ledger,
    });
    await first.createPod(testPod("durable", uid(700)));
    expect((await ledger.get(uid(700)))?.launch.instanceId).toMatch(/^i-/);
    await first.pollOnce();
    // The first process's teardown driver: one reconcile of the deletion.
    await testTeardown(first, { onTeardownEvent }).step(pod);
    // The intent is in the ledger before anything else, and the stop went out.
    expect((await ledger.get(uid(700)))?.record).toContain('"phase":"stopping"');
    await first.stop(); // the process "crashes" here

    // What a restarted virtual node resumes from: the ledger's unfinished teardown.
    const unfinished = (await ledger.list()).filter(
      (e) => e.record !== undefined && !e.record.includes('"phase":"complete"'),
    );
    expect(unfinished.map((e) => e.launch.podUid)).toEqual([uid(700)]);
    // A fresh provider and a fresh PodTeardown on the same ledger finish it.
    const second = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(700)],
      ledger,
    });
    const state = await testTeardown(second, { onTeardownEvent }).reclaim(pod, {
      rounds: 20,
      ms: 50,
    });
    expect(state.complete).toBe(true);
    expect(state.phases.at(-1)).toBe("complete");
    // The teardown of a deleted Pod ends by removing the Pod (grace 0, UID precondition): the
    // provider's own teardown ended by clearing and left that to its caller.
    expect(events).toEqual(["StopInstance", "TerminateInstance", "DeletePod"]);
    expect(live(await nodeInstances(ec2, "durable"))).toEqual([]);
    expect((await ledger.get(uid(700)))?.record).toContain('"phase":"complete"');

    // A stale request in a third process: complete, no EC2 call.
    const third = new Ec2PodProvider({
      config,
      renderUserData: () => USER_DATA,
      livePodUids: () => [],
      ledger,
    });
    const calls = countCalls(third.client);
    expect(await testTeardown(third, { onTeardownEvent }).step(pod)).toMatchObject({
      status: "complete",
    });
    expect([...calls.keys()].filter((k) => k !== "DescribeInstancesCommand")).toEqual([]);
    expect(events).toEqual(["StopInstance", "TerminateInstance", "DeletePod"]);
    await third.forgetPod(uid(700));
    expect(await ledger.get(uid(700))).toBeUndefined();
    await second.stop();
    await third.stop();
  });
});

describe("the loops", () => {
  it("start(): the poll loop drives a finished instance to a terminal Pod, which the teardown then reclaims (an exited container never leaves its instance running)", async () => {
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "loop", { pollIntervalSeconds: 1 }),
      renderUserData: () => USER_DATA,
      livePodUids: () => [uid(800)],
    });
    const terminal = new Promise<string | undefined>((resolve) => {
      provider.notifyPods(({ status, terminal: done }) => {
        if (done) resolve(status.phase);
      });
    });
    await provider.createPod(testPod("done", uid(800)));
    provider.start();
    const [instance] = await nodeInstances(ec2, "loop");
    await reportTags(instance?.InstanceId ?? "", completed(2, 0));
    await ec2.send(new StopInstancesCommand({ InstanceIds: [instance?.InstanceId ?? ""] }));
    expect(await terminal).toBe("Succeeded");
    // The terminal status is written: the Pod controller tears the finished Pod down (the one
    // driver, `deleting: false`) while the loops run.
    const reclaimed = await testTeardown(provider).reclaim(testPod("done", uid(800)), {
      deleting: false,
      rounds: 30,
      ms: 500,
    });
    expect(reclaimed.complete).toBe(true);
    const state = (await nodeInstances(ec2, "loop"))[0]?.State?.Name;
    await provider.stop();
    expect(state).toBe("terminated");
    expect(provider.getPodStatus(uid(800))?.phase).toBe("Succeeded");
  });
});
