/**
 * The SQS doorbell (issue #30) end to end: the instance-host simulator boots the real generated
 * user-data of an instance launched in moto, the supervisor writes its reports to the instance's
 * tags in moto and rings a queue of moto's SQS (JSON protocol, SigV4 through `sigv4_post`) after
 * each; the test reads the queue with the AWS SDK.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { DescribeInstancesCommand, EC2Client, RunInstancesCommand } from "@aws-sdk/client-ec2";
import {
  CreateQueueCommand,
  type Message,
  ReceiveMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import type { V1Pod } from "@kubernetes/client-node";
import {
  decodeConsoleOutput,
  decodeReportTags,
  toInstanceState,
  toPodStatus,
} from "@nebula/state-mapping";
import {
  type InstanceHosts,
  MOTO_CREDENTIALS,
  type Moto,
  NEBULA_INSTANCE_PROFILE,
  startInstanceHosts,
  startMoto,
} from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderUserData } from "./index.js";

describe("the doorbell against moto's SQS: the instance-host simulator runs the user-data", () => {
  const RUN = randomBytes(4).toString("hex");
  const CLUSTER = `bell-${RUN}`;
  let moto: Moto;
  let sim: InstanceHosts;
  let sqs: SQSClient;
  let ec2: EC2Client;
  const client = () => ({
    endpoint: moto.endpoint,
    region: moto.region,
    credentials: { ...MOTO_CREDENTIALS },
  });
  beforeAll(async () => {
    moto = await startMoto();
    sim = await startInstanceHosts({
      ec2Endpoint: moto.endpoint,
      region: moto.region,
      cluster: CLUSTER,
      bootDelayMs: 200,
    });
    sqs = new SQSClient(client());
    ec2 = new EC2Client({ ...client(), endpoint: sim.ec2Endpoint });
  }, 180_000);
  afterAll(async () => {
    sqs?.destroy();
    ec2?.destroy();
    await sim?.close();
    await moto?.stop();
  });

  /** A Pod whose one container runs a second, then fails with exit code 3. */
  const pod = (uid: string): V1Pod => ({
    metadata: { name: "job", namespace: "test", uid },
    spec: {
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: "app",
          image: "busybox",
          imagePullPolicy: "IfNotPresent",
          command: ["sh", "-c", "sleep 1; exit 3"],
        },
      ],
    },
  });

  /**
   * Launches the Pod with the doorbell on `queueUrl` and waits for the host to power off; returns
   * the instance's ID, the supervisor's journal, the seq of every report on the console, and the
   * instance as moto describes it.
   */
  async function launch(p: V1Pod, queueUrl: string) {
    const rendered = renderUserData(p, {
      cluster: CLUSTER,
      report: { retryAttempts: 8, retryBaseMs: 50 },
      doorbell: { queueUrl },
    });
    if (!rendered.ok) throw rendered.error;
    const launched = await ec2.send(
      new RunInstancesCommand({
        ImageId: "ami-12345678",
        MinCount: 1,
        MaxCount: 1,
        UserData: rendered.value.userData,
        IamInstanceProfile: { Name: NEBULA_INSTANCE_PROFILE },
        MetadataOptions: { HttpTokens: "required" },
        TagSpecifications: [
          {
            ResourceType: "instance",
            Tags: [
              { Key: "nebula:cluster", Value: CLUSTER },
              { Key: "nebula:pod-uid", Value: p.metadata?.uid ?? "" },
            ],
          },
        ],
      }),
    );
    const id = launched.Instances?.[0]?.InstanceId ?? "";
    const guest = await sim.waitForPhase(id, "off", 180_000);
    const journal = readFileSync(guest.unitLogPath("nebula-supervisor.service"), "utf8");
    const seqs = guest
      .console()
      .split("\n")
      .filter((l) => l.startsWith("NEBULA-REPORT "))
      .map((line) => {
        const read = decodeConsoleOutput(line);
        if (read.kind !== "report") throw new Error(`unreadable console line: ${line}`);
        return read.report.seq;
      });
    const described = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    const instance = described.Reservations?.[0]?.Instances?.[0];
    return { id, journal, seqs, instance };
  }

  /** Every message of the queue, received until it stays empty. */
  async function drain(queueUrl: string): Promise<Message[]> {
    const got: Message[] = [];
    for (let empty = 0; empty < 2; ) {
      const r = await sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 1,
          VisibilityTimeout: 300,
        }),
      );
      const batch = r.Messages ?? [];
      got.push(...batch);
      empty = batch.length === 0 ? empty + 1 : 0;
    }
    return got;
  }

  it("rings the queue once per written report with exactly {v, instance, seq}; the last seq is the tags' report", async () => {
    const queue = await sqs.send(new CreateQueueCommand({ QueueName: `nebula-${RUN}-doorbell` }));
    const queueUrl = queue.QueueUrl ?? "";
    const { id, journal, seqs, instance } = await launch(pod(`uid-bell-${RUN}`), queueUrl);
    const report = decodeReportTags(
      Object.fromEntries((instance?.Tags ?? []).map((t) => [t.Key ?? "", t.Value ?? ""])),
    );
    if (report.kind !== "report")
      throw new Error(`no report: ${JSON.stringify(report)}\n${journal}`);
    expect(report.report).toMatchObject({ final: true });
    expect(report.report.containers[0]).toMatchObject({
      state: "terminated",
      exitCode: 3,
      reason: "Error",
    });
    expect(journal).not.toContain("doorbell");
    // Every report reached the tags (moto never throttles) and rang once, the final one included.
    expect(seqs.length).toBeGreaterThanOrEqual(2);
    expect(seqs.at(-1)).toBe(report.report.seq);
    const bodies = (await drain(queueUrl)).map((m) => m.Body ?? "");
    const seqOf = (body: string) => (JSON.parse(body) as { seq: number }).seq;
    expect([...bodies].sort((a, b) => seqOf(a) - seqOf(b))).toEqual(
      seqs.map((seq) => `{"v":1,"instance":"${id}","seq":${seq}}`),
    );
  });

  it("a queue that does not exist: the failure is logged, the report written, the Pod's exit reported", async () => {
    const queue = await sqs.send(new CreateQueueCommand({ QueueName: `nebula-${RUN}-other` }));
    const absent = (queue.QueueUrl ?? "").replace(
      /nebula-[0-9a-f]+-other$/,
      `nebula-${RUN}-absent`,
    );
    expect(absent).toMatch(/nebula-[0-9a-f]+-absent$/);
    const p = pod(`uid-nobell-${RUN}`);
    const { journal, seqs, instance } = await launch(p, absent);
    // One short line per report, each tried once.
    const failures = journal.match(/^.*doorbell.*$/gm) ?? [];
    expect(failures).toHaveLength(seqs.length);
    for (const line of failures)
      expect(line).toMatch(/^nebula-supervisor: report seq=\d+: doorbell failed \(HTTP 400\)$/);
    // The instance stopped with its report: the Pod failed with the container's exit.
    expect(instance?.State?.Name).toBe("stopped");
    const now = new Date();
    const status = toPodStatus(p, toInstanceState(instance, { now }), { now });
    expect(status.phase).toBe("Failed");
    expect(status.containerStatuses?.[0]?.state?.terminated).toMatchObject({
      exitCode: 3,
      reason: "Error",
    });
    // Nothing reached the other queue either.
    expect(await drain(queue.QueueUrl ?? "")).toEqual([]);
  });
});
