/**
 * The event channel against moto through the SDK (issue #30): a host's doorbell on a real SQS
 * queue brings its report into the Pod's status without waiting for the poll (here: a poll every
 * 10 minutes, so only the channel can deliver), and nothing in a message is trusted. EC2's own
 * state changes reach the queue as in AWS: the test peers play EC2's events (moto sends none) on
 * moto's EventBridge, whose rule (the operator's) delivers them.
 */
import { createHash } from "node:crypto";
import {
  type EC2Client,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import type { ExitReport } from "@nebula/state-mapping";
import { MemoryPodLedger } from "@nebula/teardown";
import {
  createEc2EventRule,
  MOTO_CREDENTIALS,
  type Moto,
  startEc2Events,
  startMoto,
} from "@nebula/test-peers";
import type { PodStatusChange } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Doorbell, parseDoorbell } from "./doorbell-message.js";
import { Ec2PodProvider } from "./provider.js";
import { startFaultProxy } from "./testing/fault-proxy.js";
import { testPod } from "./testing/fixtures.js";
import { type MotoNetwork, motoConfig, prepareMoto, writeReport } from "./testing/moto-env.js";

let moto: Moto;
let network: MotoNetwork;
let ec2: EC2Client;
let sqs: SQSClient;

beforeAll(async () => {
  moto = await startMoto();
  network = await prepareMoto(moto);
  ec2 = moto.ec2();
  sqs = new SQSClient({
    endpoint: moto.endpoint,
    region: moto.region,
    credentials: MOTO_CREDENTIALS,
  });
});

afterAll(async () => {
  sqs?.destroy();
  ec2?.destroy();
  await moto?.stop();
});

const report = (seq: number, final: boolean, exitCode = 0): ExitReport =>
  ({
    v: 1,
    seq,
    time: new Date().toISOString(),
    final,
    containers: [
      final
        ? {
            name: "app",
            init: false,
            state: "terminated",
            restarts: 0,
            exitCode,
            startedAt: new Date(Date.now() - 5000).toISOString(),
            finishedAt: new Date().toISOString(),
          }
        : {
            name: "app",
            init: false,
            state: "running",
            restarts: 0,
            ready: true,
            startedAt: new Date(Date.now() - 5000).toISOString(),
          },
    ],
  }) as ExitReport;

async function until<T>(what: string, probe: () => T | undefined, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("the event channel (SQS in moto)", () => {
  it("a doorbell delivers the exit at once; forged, foreign and unreadable messages change nothing", async () => {
    const queueUrl =
      (await sqs.send(new CreateQueueCommand({ QueueName: "nebula-doorbell-it" }))).QueueUrl ?? "";
    const node = "doorbell-node";
    const uid = "33333333-0000-4000-8000-000000000001";
    const pod = testPod("rung", uid);
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, node, {
        // Only the channel can deliver within this test: the poll runs at start, then in 10 min.
        pollIntervalSeconds: 600,
        maxPollIntervalSeconds: 600,
        events: { queueUrl, windowMs: 100, waitSeconds: 1, pollIntervalSeconds: 600 },
      }),
      renderUserData: () => "#!/bin/bash\necho nebula\n",
      livePodUids: () => [uid],
      ledger,
    });
    const changes: PodStatusChange[] = [];
    provider.notifyPods((change) => void changes.push(change));
    const batches: { messages: number; ignored: number; unreadable: number }[] = [];
    provider.onDoorbells((b) => void batches.push(b));
    await provider.createPod(pod);
    const instanceId = (await ledger.get(uid))?.launch.instanceId ?? "";
    expect(instanceId).toMatch(/^i-/);
    await writeReport(ec2, instanceId, report(1, false));
    const abort = new AbortController();
    const running = provider.run(abort.signal);
    try {
      await until("Running from the first poll", () =>
        changes.find((c) => c.status.phase === "Running"),
      );
      const seen = changes.length;

      // Forged and foreign messages first: a doorbell naming an unknown instance, another
      // node's or no instance at all, and one of no known shape.
      const send = (body: string) =>
        sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body }));
      await send('{"v":1,"instance":"i-0fffffffffffffff0","seq":99}');
      await send("rm -rf /");
      await until("the forged messages handled", () =>
        batches.some((b) => b.ignored > 0) && batches.some((b) => b.unreadable > 0)
          ? true
          : undefined,
      );
      expect(changes.length).toBe(seen);

      // The host writes its final report, then rings.
      await writeReport(ec2, instanceId, report(2, true, 7));
      const rungAt = Date.now();
      await send(JSON.stringify({ v: 1, instance: instanceId, seq: 2 }));
      const failed = await until("Failed through the doorbell", () =>
        changes.find((c) => c.status.phase === "Failed"),
      );
      console.log(`doorbell → status published: ${Date.now() - rungAt} ms (moto, window 100 ms)`);
      expect(failed.status.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(7);
      // The readable messages are deleted (after the status is published: wait, bounded); the
      // unreadable one waits for a dead-letter queue.
      const queued = async () => {
        const attributes = await sqs.send(
          new GetQueueAttributesCommand({
            QueueUrl: queueUrl,
            AttributeNames: [
              "ApproximateNumberOfMessages",
              "ApproximateNumberOfMessagesNotVisible",
            ],
          }),
        );
        return (
          Number(attributes.Attributes?.ApproximateNumberOfMessages ?? 0) +
          Number(attributes.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
        );
      };
      let left = await queued();
      for (const deadline = Date.now() + 10_000; left > 1 && Date.now() < deadline; ) {
        await new Promise((r) => setTimeout(r, 100));
        left = await queued();
      }
      expect(left).toBe(1);
    } finally {
      abort.abort();
      await running;
    }
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
  }, 120_000);
});

describe("EC2's own events on the channel (the test peers play EC2 on moto's EventBridge)", () => {
  it("each state change arrives as the state event parseDoorbell reads, in order; a stop whose doorbell was lost still delivers the exit", async () => {
    const create = async (name: string) =>
      (await sqs.send(new CreateQueueCommand({ QueueName: name }))).QueueUrl ?? "";
    // The node's queue, and a second one the test reads itself (the same events, by its own rule).
    const queueUrl = await create("nebula-ec2-events-it");
    const watchUrl = await create("nebula-ec2-events-watch");
    const rules = [
      await createEc2EventRule(moto, queueUrl),
      await createEc2EventRule(moto, watchUrl),
    ];
    const uid = "44444444-0000-4000-8000-000000000001";
    const ledger = new MemoryPodLedger();
    const provider = new Ec2PodProvider({
      config: motoConfig(moto, network, "ec2-events-node", {
        pollIntervalSeconds: 600,
        maxPollIntervalSeconds: 600,
        events: { queueUrl, windowMs: 100, waitSeconds: 1, pollIntervalSeconds: 600 },
      }),
      renderUserData: () => "#!/bin/bash\necho nebula\n",
      livePodUids: () => [uid],
      ledger,
    });
    const changes: PodStatusChange[] = [];
    provider.notifyPods((change) => void changes.push(change));
    const batches: { messages: number; instances: number }[] = [];
    provider.onDoorbells((b) => void batches.push(b));
    const events = await startEc2Events({ moto, pollIntervalMs: 100 });
    const abort = new AbortController();
    let running: Promise<void> | undefined;
    let instanceId = "";
    try {
      await provider.createPod(testPod("ec2-events", uid));
      instanceId = (await ledger.get(uid))?.launch.instanceId ?? "";
      await writeReport(ec2, instanceId, report(1, false));
      running = provider.run(abort.signal);
      await until("Running from the first poll", () =>
        changes.find((c) => c.status.phase === "Running"),
      );
      // The host writes its final report, its doorbell is lost, the instance powers off: only
      // EC2's "stopping"/"stopped" can bring the exit before the poll (in 10 minutes).
      await writeReport(ec2, instanceId, report(2, true, 3));
      const stoppedAt = Date.now();
      await ec2.send(new StopInstancesCommand({ InstanceIds: [instanceId] }));
      const failed = await until("Failed through EC2's state event", () =>
        changes.find((c) => c.status.phase === "Failed"),
      );
      console.log(
        `StopInstances → status published: ${Date.now() - stoppedAt} ms (moto, emitter every 100 ms)`,
      );
      expect(failed.status.containerStatuses?.[0]?.state?.terminated?.exitCode).toBe(3);
      // It came through the channel: a batch read the instance (notified after the publication).
      await until("the batch that read it", () =>
        batches.some((b) => b.instances > 0) ? true : undefined,
      );
      // The emitter has seen the stop before the terminate: under load its look can take longer
      // than the Pod took to turn Failed (the node may read it on the launch's own events), and a
      // look that first sees the instance terminated cannot know it was ever stopped.
      await events.look();
      await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
      await events.look();

      // What the queue held, as the node reads it.
      const read: Doorbell[] = [];
      const deadline = Date.now() + 20_000;
      while (read.length < 6 && Date.now() < deadline) {
        const answer = await sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: watchUrl,
            MaxNumberOfMessages: 10,
            WaitTimeSeconds: 1,
          }),
        );
        const messages = answer.Messages ?? [];
        for (const m of messages) read.push(parseDoorbell(m.Body));
        if (messages.length > 0) {
          await sqs.send(
            new DeleteMessageBatchCommand({
              QueueUrl: watchUrl,
              Entries: messages.map((m, i) => ({
                Id: String(i),
                ReceiptHandle: m.ReceiptHandle ?? "",
              })),
            }),
          );
        }
      }
      expect(read).toEqual(
        ["pending", "running", "stopping", "stopped", "shutting-down", "terminated"].map(
          (state) => ({ kind: "state", instanceId, state }),
        ),
      );
    } finally {
      abort.abort();
      await running;
      await events.stop();
      for (const rule of rules) await rule.remove();
    }
  }, 120_000);
});

/**
 * A node with the channel on: `pods` Pods launched in moto, each reported running on its tags,
 * the provider running (its first poll done, every Pod `Running`). The SQS client goes through
 * `sqsEndpoint` when given (a fault proxy).
 */
async function channelNode(
  name: string,
  pods: number,
  options: { pollIntervalSeconds: number; sqsEndpoint?: string },
) {
  const queueUrl =
    (await sqs.send(new CreateQueueCommand({ QueueName: `nebula-${name}` }))).QueueUrl ?? "";
  const ledger = new MemoryPodLedger();
  const prefix = createHash("sha256").update(name).digest("hex").slice(0, 8);
  const uids = Array.from(
    { length: pods },
    (_, i) => `${prefix}-0000-4000-8000-${String(i).padStart(12, "0")}`,
  );
  const provider = new Ec2PodProvider({
    config: motoConfig(moto, network, name, {
      pollIntervalSeconds: options.pollIntervalSeconds,
      maxPollIntervalSeconds: 600,
      events: { queueUrl, windowMs: 200, waitSeconds: 1, pollIntervalSeconds: 600 },
    }),
    renderUserData: () => "#!/bin/bash\necho nebula\n",
    livePodUids: () => uids,
    ledger,
    ...(options.sqsEndpoint
      ? {
          sqsClient: new SQSClient({
            endpoint: options.sqsEndpoint,
            region: moto.region,
            credentials: MOTO_CREDENTIALS,
            maxAttempts: 1,
          }),
        }
      : {}),
  });
  const changes: PodStatusChange[] = [];
  provider.notifyPods((change) => void changes.push(change));
  let describes = 0;
  provider.client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "DescribeInstancesCommand") describes++;
      return next(args);
    },
    { step: "initialize", name: "testDescribes" },
  );
  const instances: string[] = [];
  for (const [i, uid] of uids.entries()) {
    await provider.createPod(testPod(`p-${i}`, uid));
    const instanceId = (await ledger.get(uid))?.launch.instanceId ?? "";
    await writeReport(ec2, instanceId, report(1, false));
    instances.push(instanceId);
  }
  const abort = new AbortController();
  const running = provider.run(abort.signal);
  const phaseOf = (uid: string) =>
    changes.filter((c) => c.pod.metadata?.uid === uid).at(-1)?.status.phase;
  await until(
    "every Pod Running",
    () => (uids.every((u) => phaseOf(u) === "Running") ? true : undefined),
    60_000,
  );
  const ring = (instanceId: string, seq: number) =>
    sqs.send(
      new SendMessageCommand({
        QueueUrl: queueUrl,
        MessageBody: JSON.stringify({ v: 1, instance: instanceId, seq }),
      }),
    );
  return {
    provider,
    queueUrl,
    uids,
    instances,
    changes,
    phaseOf,
    ring,
    describes: () => describes,
    /** Publications of one Pod's status. */
    writesOf: (uid: string) => changes.filter((c) => c.pod.metadata?.uid === uid).length,
    async stop() {
      abort.abort();
      await running;
      await ec2.send(new TerminateInstancesCommand({ InstanceIds: instances }));
    },
  };
}

describe("the event channel's faults", () => {
  // 500, not 10,000: moto's SQS slows with depth (measured: 110 ms per SendMessageBatch, 500 ms
  // per receive and delete at 1,000 messages deep), so 10,000 would take hours here. The
  // 10,000-message burst runs against the queue in memory (doorbells.test.ts).
  it("500 doorbells in a burst for 20 Pods: a few reads, every exit delivered, each status written once", async () => {
    const node = await channelNode("burst-node", 20, { pollIntervalSeconds: 600 });
    try {
      for (const id of node.instances) await writeReport(ec2, id, report(2, true));
      const before = node.describes();
      const writes = node.uids.map((u) => node.writesOf(u));
      // 500 messages, 10 per SendMessageBatch call, every Pod's doorbell 25 times, interleaved.
      const bodies = Array.from({ length: 500 }, (_, k) =>
        JSON.stringify({ v: 1, instance: node.instances[k % 20], seq: 2 }),
      );
      for (let k = 0; k < bodies.length; k += 10) {
        await sqs.send(
          new SendMessageBatchCommand({
            QueueUrl: node.queueUrl,
            Entries: bodies.slice(k, k + 10).map((body, j) => ({ Id: `m${j}`, MessageBody: body })),
          }),
        );
      }
      await until(
        "every exit delivered",
        () => (node.uids.every((u) => node.phaseOf(u) === "Succeeded") ? true : undefined),
        120_000,
      );
      // The queue drains: every message handled and deleted.
      const drained = async () => {
        const a = await sqs.send(
          new GetQueueAttributesCommand({
            QueueUrl: node.queueUrl,
            AttributeNames: [
              "ApproximateNumberOfMessages",
              "ApproximateNumberOfMessagesNotVisible",
            ],
          }),
        );
        return (
          Number(a.Attributes?.ApproximateNumberOfMessages ?? 0) +
          Number(a.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
        );
      };
      const deadline = Date.now() + 120_000;
      while ((await drained()) > 0 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 500));
      expect(await drained()).toBe(0);
      const reads = node.describes() - before;
      console.log(`500 doorbells for 20 Pods: ${reads} DescribeInstances`);
      // Gathered per window: moto hands out 10 messages per receive, slowly, so a window holds
      // a few dozen here; still far fewer reads than messages.
      expect(reads).toBeLessThanOrEqual(50);
      // Each Pod's status written once more (its exit), never again for the other 24 doorbells.
      expect(node.uids.map((u, i) => node.writesOf(u) - (writes[i] ?? 0))).toEqual(
        node.uids.map(() => 1),
      );
    } finally {
      await node.stop();
    }
  }, 300_000);

  it("duplicate and out-of-order doorbells write nothing twice and never go back", async () => {
    const node = await channelNode("order-node", 1, { pollIntervalSeconds: 600 });
    try {
      const [uid = "", id = ""] = [node.uids[0], node.instances[0]];
      await writeReport(ec2, id, report(3, true, 4));
      const before = node.writesOf(uid);
      for (const seq of [3, 3, 1, 2, 3]) await node.ring(id, seq);
      await until("Failed", () => (node.phaseOf(uid) === "Failed" ? true : undefined));
      // Let every doorbell be handled (and any read again) before counting.
      await new Promise((r) => setTimeout(r, 5000));
      expect(node.writesOf(uid) - before).toBe(1);
      expect(node.phaseOf(uid)).toBe("Failed");
    } finally {
      await node.stop();
    }
  }, 120_000);

  it("the queue unreachable for 20 s: the poll speeds back up and delivers; the queued doorbells are then handled, nothing twice", async () => {
    const proxy = await startFaultProxy(moto.endpoint);
    const node = await channelNode("outage-node", 2, {
      pollIntervalSeconds: 2,
      sqsEndpoint: proxy.endpoint,
    });
    try {
      // Healthy: the safety-net pace.
      await until("the channel healthy", () =>
        node.provider.pollIntervalMs >= 600_000 ? true : undefined,
      );
      proxy.inject({ kind: "drop", times: 1_000_000 });
      await until(
        "the poll back to its own pace",
        () => (node.provider.pollIntervalMs < 10_000 ? true : undefined),
        30_000,
      );
      // An exit during the outage: its doorbell waits in the queue, the poll delivers it.
      const [uid = "", id = ""] = [node.uids[0], node.instances[0]];
      await writeReport(ec2, id, report(2, true));
      await node.ring(id, 2);
      await until("Succeeded through the poll", () =>
        node.phaseOf(uid) === "Succeeded" ? true : undefined,
      );
      const writes = node.writesOf(uid);
      await new Promise((r) => setTimeout(r, 20_000 - 5_000));
      proxy.clear();
      // Back: the safety-net pace again, the doorbell handled (deleted), the status not rewritten.
      await until(
        "the channel healthy again",
        () => (node.provider.pollIntervalMs >= 600_000 ? true : undefined),
        60_000,
      );
      const [uid2 = "", id2 = ""] = [node.uids[1], node.instances[1]];
      await writeReport(ec2, id2, report(2, true, 1));
      await node.ring(id2, 2);
      await until("Failed through the doorbell", () =>
        node.phaseOf(uid2) === "Failed" ? true : undefined,
      );
      expect(node.writesOf(uid)).toBe(writes);
    } finally {
      await node.stop();
      await proxy.close();
    }
  }, 180_000);
});
