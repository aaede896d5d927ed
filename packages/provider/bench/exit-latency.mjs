// Benchmark: exit → Pod status published, with the event channel on and off, side by side in one
// run against a real moto server (EC2 and SQS). Run with `node bench/exit-latency.mjs` after a
// build (the root `npm run bench` does both).
//
// Two providers, two virtual nodes, N Pods each (NEBULA_BENCH_EXITS, default 30). Each Pod's
// instance runs and has reported `running`; then, at staggered known times over
// NEBULA_BENCH_SPREAD_S seconds (default 30), its final report is written to its tags, as its host
// does, and, on the "on" node only, its doorbell is sent to the node's queue, as its host does
// right after. The figure is the time from the tag write to the provider publishing the Pod's
// terminal status: the channel's path (SQS long poll, the 200 ms window, one DescribeInstances)
// against the poll's (the default 10 s interval). The host's own path (the container's exit to
// the tag write) is not in it. Also counted, first: DescribeInstances calls per hour of a quiet
// node (no exit for NEBULA_BENCH_QUIET_S seconds, default 130: the safety-net poll every 60 s
// against the poll every 10 s), and then over the exits (one read per doorbell unless they
// arrive within one window).
//
// With NEBULA_BENCH_OUT=<file> each figure is appended as a JSON line (see scripts/bench.mjs).

import { CreateTagsCommand } from "@aws-sdk/client-ec2";
import { CreateQueueCommand, SendMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { Ec2PodProvider } from "@nebula/provider";
import { encodeReportTags } from "@nebula/state-mapping";
import { MemoryPodLedger } from "@nebula/teardown";
import { MOTO_CREDENTIALS, startMoto } from "@nebula/test-peers";
import { prepareNetwork, record } from "./common.mjs";

const EXITS = Number(process.env.NEBULA_BENCH_EXITS ?? 30);
const SPREAD_MS = Number(process.env.NEBULA_BENCH_SPREAD_S ?? 30) * 1000;
const QUIET_MS = Number(process.env.NEBULA_BENCH_QUIET_S ?? 130) * 1000;
const progress = (message) => process.stderr.write(`[bench] ${message}\n`);

const report = (seq, final) => {
  const now = new Date().toISOString();
  return {
    v: 1,
    seq,
    time: now,
    final,
    containers: [
      final
        ? {
            name: "app",
            init: false,
            state: "terminated",
            restarts: 0,
            exitCode: 0,
            startedAt: now,
            finishedAt: now,
          }
        : { name: "app", init: false, state: "running", restarts: 0, ready: true, startedAt: now },
    ],
  };
};
const tags = (r) => Object.entries(encodeReportTags(r)).map(([Key, Value]) => ({ Key, Value }));
const quantile = (sorted, q) =>
  sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];

const moto = await startMoto();
process.env.AWS_ACCESS_KEY_ID = MOTO_CREDENTIALS.accessKeyId;
process.env.AWS_SECRET_ACCESS_KEY = MOTO_CREDENTIALS.secretAccessKey;
const ec2 = moto.ec2();
const sqs = new SQSClient({
  endpoint: moto.endpoint,
  region: moto.region,
  credentials: MOTO_CREDENTIALS,
});
const running = [];
try {
  const network = await prepareNetwork(ec2);
  const queueUrl = (await sqs.send(new CreateQueueCommand({ QueueName: "bench-events" }))).QueueUrl;

  /** One node: its provider, its Pods' instances, and when each Pod's terminal status was published. */
  async function node(name, events) {
    const ledger = new MemoryPodLedger();
    const published = new Map();
    const provider = new Ec2PodProvider({
      config: {
        clusterName: "bench",
        nodeName: name,
        region: moto.region,
        subnetIds: [network.subnetId],
        securityGroupIds: [network.securityGroupId],
        imageId: "ami-0a1b2c3d",
        instanceProfile: "nebula-host",
        instanceTypes: { default: "t3.micro" },
        endpoint: moto.endpoint,
        ownership: { clientToken: false },
        podDelivery: "user-data",
        ...(events ? { events: { queueUrl } } : {}),
      },
      renderUserData: () => "#!/bin/bash\necho nebula\n",
      livePodUids: () => [],
      ledger,
    });
    let describes = 0;
    provider.client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "DescribeInstancesCommand") describes++;
        return next(args);
      },
      { step: "initialize", name: "benchDescribes" },
    );
    provider.notifyPods((change) => {
      if (change.terminal && !published.has(change.pod.metadata.uid))
        published.set(change.pod.metadata.uid, performance.now());
    });
    const pods = [];
    for (let i = 0; i < EXITS; i++) {
      const uid = `${events ? "0e" : "0f"}000000-0000-4000-8000-${String(i).padStart(12, "0")}`;
      await provider.createPod({
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: `p-${i}`, namespace: "bench", uid },
        spec: { restartPolicy: "Never", containers: [{ name: "app", image: "busybox" }] },
      });
      const instanceId = (await ledger.get(uid)).launch.instanceId;
      await ec2.send(
        new CreateTagsCommand({ Resources: [instanceId], Tags: tags(report(1, false)) }),
      );
      pods.push({ uid, instanceId });
    }
    const abort = new AbortController();
    running.push({ abort, done: provider.run(abort.signal) });
    return { name, provider, pods, published, describes: () => describes };
  }

  progress(`launching ${EXITS} Pods on each of two nodes`);
  const on = await node("bench-events-on", true);
  const off = await node("bench-events-off", false);
  // Both providers have polled once and see every Pod running.
  await new Promise((r) => setTimeout(r, 3000));
  progress(`quiet for ${QUIET_MS / 1000} s`);
  const quiet = { on: on.describes(), off: off.describes(), at: performance.now() };
  await new Promise((r) => setTimeout(r, QUIET_MS));
  const quietH = (performance.now() - quiet.at) / 3_600_000;
  const quietOn = Math.round((on.describes() - quiet.on) / quietH);
  const quietOff = Math.round((off.describes() - quiet.off) / quietH);
  record(
    `DescribeInstances per hour, quiet node (${EXITS} Pods, no exit), event channel on`,
    quietOn,
    "calls/h",
    quietOff,
    "channel off, same run",
    "lower than off",
  );
  const startDescribes = { on: on.describes(), off: off.describes() };
  progress(`${EXITS} exits per node over ${SPREAD_MS / 1000} s`);
  const written = { on: new Map(), off: new Map() };
  await Promise.all(
    Array.from({ length: EXITS }, async (_, i) => {
      await new Promise((r) => setTimeout(r, (SPREAD_MS * i) / EXITS));
      for (const [key, n] of [
        ["on", on],
        ["off", off],
      ]) {
        const { uid, instanceId } = n.pods[i];
        await ec2.send(
          new CreateTagsCommand({ Resources: [instanceId], Tags: tags(report(2, true)) }),
        );
        written[key].set(uid, performance.now());
        if (key === "on")
          await sqs.send(
            new SendMessageCommand({
              QueueUrl: queueUrl,
              MessageBody: JSON.stringify({ v: 1, instance: instanceId, seq: 2 }),
            }),
          );
      }
    }),
  );
  const deadline = performance.now() + 60_000;
  while ((on.published.size < EXITS || off.published.size < EXITS) && performance.now() < deadline)
    await new Promise((r) => setTimeout(r, 100));
  const latencies = (n, key) =>
    n.pods
      .map(({ uid }) => (n.published.get(uid) ?? Number.NaN) - written[key].get(uid))
      .filter(Number.isFinite)
      .sort((a, b) => a - b);
  const lOn = latencies(on, "on");
  const lOff = latencies(off, "off");
  if (lOn.length < EXITS || lOff.length < EXITS)
    throw new Error(`published ${lOn.length} (on) and ${lOff.length} (off) of ${EXITS}`);
  const s = (ms) => Math.round(ms) / 1000;
  const rows = [
    [
      "exit report tagged → status published, p50",
      s(quantile(lOn, 0.5)),
      s(quantile(lOff, 0.5)),
      "≤ 1 s",
    ],
    [
      "exit report tagged → status published, p99",
      s(quantile(lOn, 0.99)),
      s(quantile(lOff, 0.99)),
      "≤ 2 s",
    ],
  ];
  for (const [figure, valueOn, valueOff, goal] of rows) {
    record(
      `${figure}, event channel on (${EXITS} exits)`,
      valueOn,
      "s",
      valueOff,
      "channel off, 10 s poll, same run",
      goal,
    );
  }
  const describesOn = on.describes() - startDescribes.on;
  const describesOff = off.describes() - startDescribes.off;
  record(
    `DescribeInstances during the exits, event channel on (${EXITS} exits in ${SPREAD_MS / 1000} s; no goal)`,
    describesOn,
    "calls",
    describesOff,
    "channel off, same run",
  );
  console.table(
    rows
      .map(([figure, a, b]) => ({ figure, "channel on (s)": a, "channel off (s)": b }))
      .concat([
        {
          figure: "DescribeInstances during the exits",
          "channel on (s)": describesOn,
          "channel off (s)": describesOff,
        },
        {
          figure: "DescribeInstances per hour, quiet",
          "channel on (s)": quietOn,
          "channel off (s)": quietOff,
        },
      ]),
  );
} finally {
  for (const r of running) r.abort.abort();
  await Promise.all(running.map((r) => r.done));
  sqs.destroy();
  ec2.destroy();
  await moto.stop();
}
