/**
 * CloudWatchUsage against moto through the real AWS SDK: samples are published as the host
 * supervisor publishes them (PutMetricData, namespace Nebula, dimensions PodUID and Container,
 * one datum per sample with its own timestamp) and read back with GetMetricData: a 3-container
 * Pod (rate, a single sample, a restart, a container without data), Pods kept apart, the window,
 * and more containers than one GetMetricData call takes.
 */
import {
  CloudWatchClient,
  type MetricDatum,
  PutMetricDataCommand,
} from "@aws-sdk/client-cloudwatch";
import { MOTO_CREDENTIALS, type Moto, startMoto } from "@nebula/test-peers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CloudWatchUsage, CPU_METRIC, MEMORY_METRIC } from "./cloudwatch-usage.js";

let moto: Moto;
let client: CloudWatchClient;

beforeAll(async () => {
  moto = await startMoto();
  client = new CloudWatchClient({
    region: moto.region,
    endpoint: moto.endpoint,
    credentials: MOTO_CREDENTIALS,
  });
});

afterAll(async () => {
  client?.destroy();
  await moto?.stop();
});

const MIB = 1024 * 1024;
/** The start of the last full minute: every sample below is in the past. */
const MINUTE = Math.floor(Date.now() / 60_000) * 60_000 - 60_000;
const at = (seconds: number) => new Date(MINUTE + seconds * 1000);
const uid = (n: number) => `44444444-0000-4000-8000-${n.toString().padStart(12, "0")}`;

/**
 * One sample of one container: its CPU counter and working set, as the supervisor publishes them
 * (high resolution, so each keeps its second).
 */
function sample(
  podUid: string,
  container: string,
  time: Date,
  cpu: number,
  memory: number,
): MetricDatum[] {
  const Dimensions = [
    { Name: "PodUID", Value: podUid },
    { Name: "Container", Value: container },
  ];
  return [
    {
      MetricName: CPU_METRIC,
      Dimensions,
      Timestamp: time,
      Value: cpu,
      Unit: "Seconds",
      StorageResolution: 1,
    },
    {
      MetricName: MEMORY_METRIC,
      Dimensions,
      Timestamp: time,
      Value: memory,
      Unit: "Bytes",
      StorageResolution: 1,
    },
  ];
}

/** One PutMetricData call per Pod and publish interval, as the supervisor does. */
async function publish(data: MetricDatum[], namespace = "Nebula"): Promise<void> {
  for (let i = 0; i < data.length; i += 1000) {
    await client.send(
      new PutMetricDataCommand({ Namespace: namespace, MetricData: data.slice(i, i + 1000) }),
    );
  }
}

describe("CloudWatchUsage.podUsage", () => {
  it("gives each container of a 3-container Pod its latest CPU counter, CPU rate and working set", async () => {
    const pod = uid(1);
    const other = uid(2);
    await publish([
      // app: three minutes of a steady half core.
      ...sample(pod, "app", at(-110), 30, 100 * MIB),
      ...sample(pod, "app", at(-50), 60, 120 * MIB),
      ...sample(pod, "app", at(10), 90, 110 * MIB),
      // sidecar: one sample so far.
      ...sample(pod, "sidecar", at(10), 1.5, 8 * MIB),
      // restarter: its counter began again at 0 (a new run) between the two samples.
      ...sample(pod, "restarter", at(-50), 100, 50 * MIB),
      ...sample(pod, "restarter", at(10), 2, 20 * MIB),
      // Another Pod with a container of the same name: kept apart by the PodUID dimension.
      ...sample(other, "app", at(10), 7, 1 * MIB),
    ]);
    const usage = new CloudWatchUsage({ client });
    const result = await usage.podUsage(
      [
        { uid: pod, containers: ["app", "sidecar", "restarter", "quiet"] },
        { uid: other, containers: ["app"] },
        { uid: uid(3), containers: ["app"] },
      ],
      at(30),
    );
    expect([...result.keys()].sort()).toEqual([pod, other].sort());
    const containers = result.get(pod);
    expect([...(containers?.keys() ?? [])].sort()).toEqual(["app", "restarter", "sidecar"]);
    expect(containers?.get("app")).toEqual({
      cpuCoreSeconds: 90,
      cpuCores: 0.5,
      memoryWorkingSetBytes: 110 * MIB,
      // The sample's own second, not its minute: a rate over two points needs the true times.
      timestamp: at(10),
    });
    expect(containers?.get("sidecar")).toEqual({
      cpuCoreSeconds: 1.5,
      cpuCores: undefined,
      memoryWorkingSetBytes: 8 * MIB,
      timestamp: at(10),
    });
    expect(containers?.get("restarter")).toMatchObject({ cpuCoreSeconds: 2, cpuCores: undefined });
    expect(result.get(other)?.get("app")).toMatchObject({
      cpuCoreSeconds: 7,
      memoryWorkingSetBytes: 1 * MIB,
    });
  });

  it("looks back only its window, and reads the configured namespace", async () => {
    const pod = uid(10);
    await publish([...sample(pod, "app", at(-600), 5, MIB)]);
    const pods = [{ uid: pod, containers: ["app"] }];
    expect(await new CloudWatchUsage({ client }).podUsage(pods, at(30))).toEqual(new Map());
    const wide = await new CloudWatchUsage({ client, window: 900 }).podUsage(pods, at(30));
    expect(wide.get(pod)?.get("app")).toMatchObject({ cpuCoreSeconds: 5, timestamp: at(-600) });
    // (moto 5.2.5 ignores a query's namespace once it has dimensions, so that a namespace keeps
    // other namespaces' data out is CloudWatch's to prove, not this test's.)
    const other = uid(11);
    await publish([...sample(other, "app", at(10), 9, MIB)], "NotNebula");
    const configured = await new CloudWatchUsage({ client, namespace: "NotNebula" }).podUsage(
      [{ uid: other, containers: ["app"] }],
      at(30),
    );
    expect(configured.get(other)?.get("app")).toMatchObject({ cpuCoreSeconds: 9 });
  });

  it("reads more containers than one GetMetricData call takes (500 queries), every one", async () => {
    const pods = Array.from({ length: 70 }, (_, p) => ({
      uid: uid(100 + p),
      containers: ["a", "b", "c", "d"],
    }));
    // 280 containers: 560 queries, two calls.
    for (const pod of pods) {
      await publish(
        pod.containers.flatMap((c, i) => [
          ...sample(pod.uid, c, at(-50), i, MIB * (i + 1)),
          ...sample(pod.uid, c, at(10), i + 60, MIB * (i + 1)),
        ]),
      );
    }
    const result = await new CloudWatchUsage({ client }).podUsage(pods, at(30));
    expect(result.size).toBe(70);
    for (const pod of pods) {
      const containers = result.get(pod.uid);
      expect(containers?.size).toBe(4);
      pod.containers.forEach((c, i) => {
        expect(containers?.get(c)).toEqual({
          cpuCoreSeconds: i + 60,
          cpuCores: 1,
          memoryWorkingSetBytes: MIB * (i + 1),
          timestamp: at(10),
        });
      });
    }
  });
});
