/**
 * EC2's own events in the local world, against a moto of this file's own: the emitter watches
 * the instances, moto's EventBridge delivers what it puts to the queue of the operator's rule,
 * and every message is the envelope AWS documents.
 */
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import {
  type EC2Client,
  RunInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import {
  createEc2EventRule,
  type Ec2EventRule,
  type Ec2Events,
  putEc2Events,
  startEc2Events,
} from "./ec2-events.js";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "./moto.js";
import { startTestPeers } from "./peers.js";

let moto: Moto;
let ec2: EC2Client;
let sqs: SQSClient;
let queueUrl: string;
let rule: Ec2EventRule;

beforeAll(async () => {
  moto = await startMoto();
  ec2 = moto.ec2();
  sqs = new SQSClient({
    endpoint: moto.endpoint,
    region: moto.region,
    credentials: MOTO_CREDENTIALS,
  });
  queueUrl =
    (await sqs.send(new CreateQueueCommand({ QueueName: "ec2-events-it" }))).QueueUrl ?? "";
  rule = await createEc2EventRule(moto, queueUrl);
});

afterAll(async () => {
  await rule?.remove();
  sqs?.destroy();
  ec2?.destroy();
  await moto?.stop();
});

/** An EventBridge envelope as the queue holds it. */
interface Envelope {
  version: string;
  id: string;
  "detail-type": string;
  source: string;
  time: string;
  region: string;
  resources: string[];
  detail: Record<string, unknown>;
}

/** Receives (and deletes) until `count` messages have come, or `ms` pass. */
async function receive(count: number, ms = 20_000): Promise<Envelope[]> {
  const got: Envelope[] = [];
  const deadline = Date.now() + ms;
  while (got.length < count && Date.now() < deadline) {
    const answer = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 1,
      }),
    );
    const messages = answer.Messages ?? [];
    for (const m of messages) got.push(JSON.parse(m.Body ?? "null") as Envelope);
    if (messages.length > 0) {
      await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: messages.map((m, i) => ({
            Id: String(i),
            ReceiptHandle: m.ReceiptHandle ?? "",
          })),
        }),
      );
    }
  }
  return got;
}

async function launch(): Promise<string> {
  const run = await ec2.send(
    new RunInstancesCommand({ ImageId: "ami-12345678", MinCount: 1, MaxCount: 1 }),
  );
  return run.Instances?.[0]?.InstanceId ?? "";
}

const arn = (id: string) => `arn:aws:ec2:${moto.region}:123456789012:instance/${id}`;
const statesOf = (envelopes: Envelope[], id: string) =>
  envelopes.filter((e) => e.detail["instance-id"] === id).map((e) => e.detail.state);

async function until(probe: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("EC2's events through moto's EventBridge", () => {
  it("every state transition reaches the operator's queue in order, as EC2 sends it", async () => {
    const before = await launch(); // there before the emitter: silent until it changes
    const untouched = await launch();
    const events: Ec2Events = await startEc2Events({ moto, pollIntervalMs: 100 });
    let stopped = false;
    try {
      const fresh = await launch();
      await ec2.send(new StopInstancesCommand({ InstanceIds: [before] }));
      // The emitter's own loop (no look() here): both changes arrive.
      const first = await receive(4);
      expect(statesOf(first, fresh)).toEqual(["pending", "running"]);
      expect(statesOf(first, before)).toEqual(["stopping", "stopped"]);

      await ec2.send(new StartInstancesCommand({ InstanceIds: [before] }));
      await events.look();
      await ec2.send(new TerminateInstancesCommand({ InstanceIds: [before, fresh] }));
      await events.look();
      const second = await receive(6);
      expect(statesOf(second, before)).toEqual([
        "pending",
        "running",
        "shutting-down",
        "terminated",
      ]);
      expect(statesOf(second, fresh)).toEqual(["shutting-down", "terminated"]);
      expect(statesOf([...first, ...second], untouched)).toEqual([]);

      // The envelope AWS documents for "EC2 Instance State-change Notification".
      const one = first.find((e) => e.detail["instance-id"] === fresh);
      expect(one).toMatchObject({
        version: "0",
        "detail-type": "EC2 Instance State-change Notification",
        source: "aws.ec2",
        region: moto.region,
        resources: [arn(fresh)],
        detail: { "instance-id": fresh, state: "pending" },
      });
      expect(Object.keys(one?.detail ?? {}).sort()).toEqual(["instance-id", "state"]);
      expect(one?.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      expect(one?.id).toMatch(/^[0-9a-f-]{36}$/);
      // What the emitter says it sent is what came.
      expect(events.sent().map((s) => s.event)).toEqual(
        [...first, ...second].map((e) => ({
          kind: "state",
          instanceId: e.detail["instance-id"],
          state: e.detail.state,
        })),
      );

      // On demand: a Spot interruption warning and a rebalance recommendation.
      await events.send(
        { kind: "interruption", instanceId: untouched },
        { kind: "rebalance", instanceId: untouched },
      );
      await putEc2Events(moto, [{ kind: "interruption", instanceId: untouched, action: "stop" }]);
      const spot = await receive(3);
      expect(spot.map((e) => [e["detail-type"], e.detail, e.resources])).toEqual([
        [
          "EC2 Spot Instance Interruption Warning",
          { "instance-id": untouched, "instance-action": "terminate" },
          [arn(untouched)],
        ],
        ["EC2 Instance Rebalance Recommendation", { "instance-id": untouched }, [arn(untouched)]],
        [
          "EC2 Spot Instance Interruption Warning",
          { "instance-id": untouched, "instance-action": "stop" },
          [arn(untouched)],
        ],
      ]);

      // Stopped: no event for what changes afterwards.
      await events.stop();
      stopped = true;
      const sent = events.sent().length;
      await ec2.send(new TerminateInstancesCommand({ InstanceIds: [untouched] }));
      expect(await receive(1, 2_000)).toEqual([]);
      expect(events.sent().length).toBe(sent);
      await expect(events.look()).rejects.toMatchObject({ code: "Closed" });
    } finally {
      if (!stopped) await events.stop();
    }
  });

  it("a rule removed delivers nothing", async () => {
    const other = await createEc2EventRule(moto, queueUrl, { name: "ec2-events-it-other" });
    expect(other.arn).toBe(`arn:aws:events:${moto.region}:123456789012:rule/ec2-events-it-other`);
    expect(other.queueArn).toBe(`arn:aws:sqs:${moto.region}:123456789012:ec2-events-it`);
    const id = await launch();
    await putEc2Events(moto, [{ kind: "rebalance", instanceId: id }]);
    // Two rules on the queue: the event twice.
    expect((await receive(2)).length).toBe(2);
    await other.remove();
    await putEc2Events(moto, [{ kind: "rebalance", instanceId: id }]);
    expect((await receive(2, 3_000)).length).toBe(1);
  });

  it("stop() leaves no loop, request or socket behind, even in the middle of a look", async () => {
    // Every connection of the emitter (EC2 and EventBridge) goes through this counter to moto.
    const upstream = new URL(moto.endpoint);
    const open = new Set<Socket>();
    let connections = 0;
    const counter = createServer((client) => {
      connections++;
      open.add(client);
      const server = connect(Number(upstream.port), upstream.hostname);
      client.pipe(server).pipe(client);
      const close = () => {
        open.delete(client);
        client.destroy();
        server.destroy();
      };
      client.on("close", close).on("error", close);
      server.on("close", close).on("error", close);
    });
    await new Promise<void>((r) => counter.listen(0, "127.0.0.1", r));
    const endpoint = `http://127.0.0.1:${(counter.address() as AddressInfo).port}`;
    // The timers the emitter sets (called from its own module), until they fire or are cleared.
    const timers = new Set<unknown>();
    let everSet = 0;
    const realSet = globalThis.setTimeout;
    const realClear = globalThis.clearTimeout;
    const setSpy = vi.spyOn(globalThis, "setTimeout").mockImplementation(((
      fn: (...a: unknown[]) => void,
      ms?: number,
      ...args: unknown[]
    ) => {
      const timer = realSet(() => {
        timers.delete(timer);
        fn(...args);
      }, ms);
      if (/[/\\]ec2-events\.ts:/.test(new Error().stack ?? "")) {
        timers.add(timer);
        everSet++;
      }
      return timer;
    }) as typeof setTimeout);
    const clearSpy = vi.spyOn(globalThis, "clearTimeout").mockImplementation((timer) => {
      timers.delete(timer);
      realClear(timer);
    });
    try {
      for (const ms of [0, 5, 30, 120]) {
        const events = await startEc2Events({
          moto: { endpoint, region: moto.region },
          pollIntervalMs: 10,
        });
        await launch(); // something to send
        await new Promise((r) => realSet(r, ms));
        await events.stop();
        expect(timers.size).toBe(0);
        // A connection the emitter's aborted request began before stop() may still be accepted by
        // the counter after it (the kernel finished the handshake; the accept waits for this
        // loop): let those land first, then nothing may come.
        await new Promise((r) => realSet(r, 300));
        await until(() => open.size === 0);
        const after = connections;
        await new Promise((r) => realSet(r, 300));
        expect(connections).toBe(after);
        expect(timers.size).toBe(0);
      }
      expect(connections).toBeGreaterThan(0);
      expect(everSet).toBeGreaterThan(0);
    } finally {
      setSpy.mockRestore();
      clearSpy.mockRestore();
      await new Promise((r) => counter.close(r));
    }
  });

  it("startTestPeers({ ec2Events }) plays them on its moto and stops them with it", async () => {
    const peers = await startTestPeers({ controlPlane: false, ec2Events: { pollIntervalMs: 50 } });
    try {
      expect(peers.info().ec2Events).toBe(true);
      const own = peers.moto as Moto;
      const client = new SQSClient({
        endpoint: own.endpoint,
        region: own.region,
        credentials: MOTO_CREDENTIALS,
      });
      const url = (await client.send(new CreateQueueCommand({ QueueName: "q" }))).QueueUrl ?? "";
      await createEc2EventRule(own, url);
      const ownEc2 = own.ec2();
      const run = await ownEc2.send(
        new RunInstancesCommand({ ImageId: "ami-12345678", MinCount: 1, MaxCount: 1 }),
      );
      const id = run.Instances?.[0]?.InstanceId ?? "";
      const states: unknown[] = [];
      const deadline = Date.now() + 20_000;
      while (states.length < 2 && Date.now() < deadline) {
        const answer = await client.send(
          new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }),
        );
        for (const m of answer.Messages ?? [])
          states.push((JSON.parse(m.Body ?? "{}") as Envelope).detail);
      }
      expect(states).toEqual([
        { "instance-id": id, state: "pending" },
        { "instance-id": id, state: "running" },
      ]);
      ownEc2.destroy();
      client.destroy();
    } finally {
      await peers.stop();
    }
    await expect(peers.ec2Events?.look()).rejects.toMatchObject({ code: "Closed" });
  });
});
