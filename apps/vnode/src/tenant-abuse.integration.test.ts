/**
 * The tenant-abuse suite (issue #29, "Done when"): what a hostile tenant does with its own Pods,
 * against the real `nebula-vnode` bundle under its shipped RBAC (deploy/vnode/rbac.yaml, as its
 * ServiceAccount), the real control plane, the real `kubectl`, moto and the instance-host simulator.
 *
 * - **A year-long grace.** A Pod with `terminationGracePeriodSeconds: 31536001` whose container
 *   ignores SIGTERM, deleted: Stop is sent at once, the grace is capped (`maxGracePeriodSeconds`),
 *   and the Pod and its instance are gone within the cap; the teardown never refuses its own
 *   parameters (it once did: "parameters are invalid", and no Stop was ever sent).
 * - **A large log read.** `kubectl logs` of a stream of 200 MB in CI (500 MB with
 *   `NEBULA_E2E_LOG_MB=500`, which `npm run test:full` sets), through the API server and the
 *   kubelet API: all of it arrives, in order, while the virtual node's memory grows by a small
 *   fraction of it and its health endpoint keeps answering (it once read the whole stream into
 *   memory: 150 MB cost 242 MiB of heap, 400 MB crashed it).
 *
 * The other two parts of the suite live where their peers are:
 * - **An SSM reader role** reading another tenant's Secret from Parameter Store:
 *   `packages/provider/src/pod-parameters-key.simulate.test.ts` (IAM and KMS key policies
 *   evaluated; moto enforces neither).
 * - **A stolen vnode token** patching a `kube-system` Pod and a real Node:
 *   `deploy/helm/vnode-fence.integration.test.ts` (the real API server with the shipped admission
 *   policies and RBAC, as the vnode's ServiceAccount).
 */
import { spawn } from "node:child_process";
import {
  CloudWatchLogsClient,
  CreateLogStreamCommand,
  DeleteLogGroupCommand,
  PutLogEventsCommand,
} from "@aws-sdk/client-cloudwatch-logs";
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { type InstanceHosts, kubectlPath, MOTO_CREDENTIALS } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  nodeInstances,
  podWhen as podWhenIn,
  readPod,
  scrape,
  startKubeletApiWorld,
  until,
  VNODE_GROUPS,
  VNODE_USER,
  type VnodeProcess,
} from "./testing/e2e.js";

const { controlPlane, moto } = useTestPeers();
const admin = controlPlane.kubeConfig();
const core = admin.makeApiClient(CoreV1Api);
const ec2 = moto.ec2();
const NODE = "vnode-abuse";
const NS = "vnode-abuse";
const GROUP = "/nebula/vnode-abuse/containers";
/** The virtual node's grace cap in this world (the default is 3,600 s). */
const MAX_GRACE_SECONDS = 20;
/**
 * The log stream's size in MB. 200 in CI: a stream held whole would still add 100 MB in the read's
 * second half, above the 64 MiB the test allows; writing and reading 500 MB took 3 to 8 minutes.
 */
const LOG_MB = Number(process.env.NEBULA_E2E_LOG_MB ?? "200");

let hosts: InstanceHosts;
let vnode: VnodeProcess;
const logs = new CloudWatchLogsClient({
  endpoint: moto.endpoint,
  region: moto.region,
  credentials: MOTO_CREDENTIALS,
});

beforeAll(async () => {
  ({ hosts, vnode } = await startKubeletApiWorld({
    admin,
    ec2,
    moto,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    node: NODE,
    namespace: NS,
    group: GROUP,
    provider: { maxGracePeriodSeconds: MAX_GRACE_SECONDS },
  }));
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  // The stream lives in moto's memory until its group is gone.
  await logs.send(new DeleteLogGroupCommand({ logGroupName: GROUP })).catch(() => undefined);
  logs.destroy();
  ec2.destroy();
  expect(code).toBe(0);
});

const podWhen = (name: string, test: (pod: V1Pod) => boolean, ms?: number) =>
  podWhenIn(core, NS, name, test, ms);

/** The EC2 states of the Pod's instances (the simulator's, as EC2 reports them). */
async function instanceStates(uid: string): Promise<string[]> {
  return (await nodeInstances(ec2, NODE))
    .filter((i) => i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid))
    .map((i) => i.State?.Name ?? "");
}

const isRunning = (pod: V1Pod) => pod.status?.containerStatuses?.[0]?.state?.running !== undefined;

describe("a hostile tenant's own Pods cannot hold an instance, or take the virtual node down", () => {
  it("a Pod with a year-long grace whose container ignores SIGTERM, deleted: Stop at once, gone within the cap", async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod(
        "forever-grace",
        NODE,
        { command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"] },
        { terminationGracePeriodSeconds: 31_536_001 },
      ),
    });
    const pod = await podWhen("forever-grace", isRunning);
    const uid = pod.metadata?.uid ?? "";
    expect(await instanceStates(uid)).toEqual(["running"]);

    await core.deleteNamespacedPod({ name: "forever-grace", namespace: NS });
    // The API server keeps the year: the Pod's own deletion grace is not what the vnode obeys.
    expect((await readPod(core, NS, "forever-grace"))?.metadata?.deletionGracePeriodSeconds).toBe(
      31_536_001,
    );
    // Stop is sent at once (the instance leaves `running`) ...
    await until(
      "Stop sent",
      async () => ((await instanceStates(uid))[0] !== "running" ? true : undefined),
      60_000,
    );
    // ... and within the cap (plus the teardown's own steps) the Pod and its instance are gone.
    // The deadline separates "capped" from "a year"; it is not a speed check.
    await until(
      "the Pod gone",
      async () => ((await readPod(core, NS, "forever-grace")) === undefined ? true : undefined),
      (MAX_GRACE_SECONDS + 120) * 1000,
      1000,
    );
    await until(
      "the instance terminated",
      async () => ((await instanceStates(uid)).every((s) => s === "terminated") ? true : undefined),
      120_000,
      1000,
    );
    expect(vnode.lines.filter((l) => /parameters are invalid/i.test(JSON.stringify(l)))).toEqual(
      [],
    );
  }, 400_000);

  it(`kubectl logs of a ${LOG_MB} MB stream arrives whole and in order, in a small fraction of that memory, and the node keeps answering`, async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("chatty", NODE, { command: ["sh", "-c", "while true; do sleep 1; done"] }),
    });
    const pod = await podWhen("chatty", isRunning);
    const stream = `${NS}/chatty/${pod.metadata?.uid}/app/0`;

    // What a chatty container leaves in its stream, written straight into it (the awslogs driver
    // would take hours): 1,000-byte numbered lines, 1,000 per PutLogEvents call (1 MB, the API's
    // limit), one call per MB. The silent container wrote nothing itself.
    const LINE = 999;
    const PER_CALL = 1000;
    const CALLS = LOG_MB;
    const total = CALLS * PER_CALL * (LINE + 1);
    await logs
      .send(new CreateLogStreamCommand({ logGroupName: GROUP, logStreamName: stream }))
      .catch((error: { name?: string }) => {
        if (error.name !== "ResourceAlreadyExistsException") throw error;
      });
    const start = Date.now() - 60_000;
    const line = (n: number) => `${String(n).padStart(10, "0")} ${"x".repeat(LINE - 11)}`;
    for (let call = 0; call < CALLS; call++) {
      await logs.send(
        new PutLogEventsCommand({
          logGroupName: GROUP,
          logStreamName: stream,
          logEvents: Array.from({ length: PER_CALL }, (_, i) => ({
            timestamp: start + call,
            message: line(call * PER_CALL + i),
          })),
        }),
      );
    }

    const memory = async () => {
      const metrics = await scrape(vnode.url);
      return {
        rss: metrics.get("process_resident_memory_bytes") ?? Number.NaN,
        heap: metrics.get("nodejs_heap_size_used_bytes") ?? Number.NaN,
      };
    };
    const before = await memory();
    expect(Number.isFinite(before.rss) && Number.isFinite(before.heap)).toBe(true);
    let peak = { ...before };
    /** Memory as the read goes on: bytes arrived so far, and the virtual node's RSS and heap. */
    const curve: Array<{ bytes: number; rss: number; heap: number }> = [];
    let healthFailures = 0;
    let samples = 0;
    let bytes = 0;
    let reading = true;
    const sampler = (async () => {
      while (reading) {
        const now = await memory().catch(() => undefined);
        const health = await fetch(`${vnode.url}/healthz`, { signal: AbortSignal.timeout(5_000) })
          .then((r) => r.status)
          .catch(() => 0);
        samples++;
        if (health !== 200) healthFailures++;
        if (now !== undefined) {
          peak = { rss: Math.max(peak.rss, now.rss), heap: Math.max(peak.heap, now.heap) };
          curve.push({ bytes, ...now });
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    })();

    // The real kubectl, through the API server's node proxy, counting what arrives and checking
    // every line's number in order (holding none of it).
    const kubectl = spawn(
      kubectlPath(),
      ["--kubeconfig", controlPlane.kubeconfigPath ?? "", "logs", "-n", NS, "chatty"],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let expectedLine = 0;
    let outOfOrder = 0;
    let partial = "";
    kubectl.stdout.setEncoding("utf8");
    kubectl.stdout.on("data", (chunk: string) => {
      bytes += Buffer.byteLength(chunk);
      const parts = (partial + chunk).split("\n");
      partial = parts.pop() ?? "";
      for (const part of parts) {
        if (Number(part.slice(0, 10)) !== expectedLine || part.length !== LINE) outOfOrder++;
        expectedLine++;
      }
    });
    let stderr = "";
    kubectl.stderr.on("data", (c: Buffer) => {
      stderr += c.toString();
    });
    const code = await new Promise<number | null>((r) => kubectl.once("exit", r));
    reading = false;
    await sampler;

    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    expect({ bytes, lines: expectedLine, outOfOrder, partial }).toEqual({
      bytes: total,
      lines: CALLS * PER_CALL,
      outOfOrder: 0,
      partial: "",
    });
    const growth = { rss: peak.rss - before.rss, heap: peak.heap - before.heap };
    const mib = (n: number) => (n / 2 ** 20).toFixed(1);
    console.log(
      `${LOG_MB} MB log read: ${samples} samples, before rss ${mib(before.rss)} MiB heap ${mib(before.heap)} MiB; peak growth rss ${mib(growth.rss)} MiB, heap ${mib(growth.heap)} MiB`,
    );
    for (let i = 0; i < curve.length; i += Math.ceil(curve.length / 12)) {
      const c = curve[i];
      if (c)
        console.log(
          `  at ${mib(c.bytes)} MiB read: rss ${mib(c.rss)} MiB, heap ${mib(c.heap)} MiB`,
        );
    }
    // Bounded by the page, not the stream. Measured in one run: memory rises with the first pages
    // (moto's pages are up to 10,000 events, here 10 MB; CloudWatch's are at most 1 MB) and then
    // stays flat, so the second half of the read must not raise the peak of the first half; had
    // the read held the stream, the second half would add another 250 MB. (A run on the
    // development machine: RSS 189 MiB before, ~340-400 MiB from 30 MB read to the end.)
    const half = (second: boolean, key: "rss" | "heap") =>
      Math.max(...curve.filter((c) => c.bytes >= total / 2 === second).map((c) => c[key]));
    expect(curve.filter((c) => c.bytes >= total / 2).length).toBeGreaterThan(4);
    expect(curve.filter((c) => c.bytes < total / 2).length).toBeGreaterThan(4);
    expect(half(true, "rss") - half(false, "rss")).toBeLessThan(64 * 2 ** 20);
    expect(half(true, "heap") - half(false, "heap")).toBeLessThan(64 * 2 ** 20);
    // And at no point near the stream's size (the old whole read grew the heap by more than the
    // bytes it read: 242 MiB for 150 MB). A page-bounded read grows it by about 60 MiB whatever
    // the stream's size (measured at 500 MB): the bound is a quarter of the stream, at least 128 MiB.
    expect(growth.heap).toBeLessThan(Math.max(total / 4, 128 * 2 ** 20));
    expect(healthFailures).toBe(0);
    // And the node is still the node: a bounded read of the same stream answers at once.
    const tail = await new Promise<string>((resolve, reject) => {
      const child = spawn(
        kubectlPath(),
        ["--kubeconfig", controlPlane.kubeconfigPath ?? "", "logs", "-n", NS, "chatty", "--tail=1"],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      let out = "";
      child.stdout.on("data", (c: Buffer) => {
        out += c.toString();
      });
      child.once("exit", (c) => (c === 0 ? resolve(out) : reject(new Error(`exit ${c}`))));
    });
    expect(tail).toBe(`${line(CALLS * PER_CALL - 1)}\n`);
    await core.deleteNamespacedPod({ name: "chatty", namespace: NS });
  }, 900_000);
});
