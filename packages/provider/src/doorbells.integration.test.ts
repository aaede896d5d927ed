/**
 * The event channel against moto through the SDK (issue #30): a host's doorbell on a real SQS
 * queue brings its report into the Pod's status without waiting for the poll (here: a poll every
 * 10 minutes, so only the channel can deliver), and nothing in a message is trusted.
 */
import { type EC2Client, TerminateInstancesCommand } from "@aws-sdk/client-ec2";
import {
  CreateQueueCommand,
  GetQueueAttributesCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import type { ExitReport } from "@nebula/state-mapping";
import { MemoryPodLedger } from "@nebula/teardown";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "@nebula/test-peers";
import type { PodStatusChange } from "@nebula/virtual-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ec2PodProvider } from "./provider.js";
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
      // The readable messages were deleted; the unreadable one waits for a dead-letter queue.
      const attributes = await sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: queueUrl,
          AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        }),
      );
      const left =
        Number(attributes.Attributes?.ApproximateNumberOfMessages ?? 0) +
        Number(attributes.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0);
      expect(left).toBe(1);
    } finally {
      abort.abort();
      await running;
    }
    await ec2.send(new TerminateInstancesCommand({ InstanceIds: [instanceId] }));
  }, 120_000);
});
