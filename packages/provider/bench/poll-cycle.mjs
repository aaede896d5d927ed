// Benchmark: EC2 API calls and provider CPU time per poll cycle, against a real moto server.
// Run with `npm run bench` in packages/provider (it builds the package first).
//
// For each N it launches N instances tagged for one virtual node (one RunInstances each, as the
// provider does), lets a provider adopt the N Pods, and measures poll
// cycles: API calls by operation (counted in the SDK middleware stack), CPU time of this process
// (process.cpuUsage: SDK, XML parsing, state mapping, status computation) and wall time (which
// includes moto's own work in its process). Beside each poll, in the same round, it times the
// floor: the same DescribeInstances pages through the same SDK and nothing else (the request and
// the response's XML parsed into objects), so "CPU per instance" reads against what any reader of
// the same response pays. The ratio is the median of the rounds' ratios; "own CPU per instance"
// is the median of the rounds' differences (poll less floor) per instance: what the provider adds
// to the SDK's read (state mapping, status composition, zod). Profiled at 1,000 instances the
// SDK's own XML parser (@aws-sdk/xml-builder) is most of the floor.
//
// NEBULA_BENCH_PROFILE=<dir> writes a V8 CPU profile of each size's measured rounds there.
//
// With NEBULA_BENCH_OUT=<file> set (the root `npm run bench` sets it) each figure is also appended
// to that file as a JSON line {package, figure, value, unit, baseline, baselineLabel, ratio, goal}.

import { mkdirSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { join } from "node:path";
import { DescribeInstancesCommand } from "@aws-sdk/client-ec2";
import { Ec2PodProvider } from "@nebula/provider";
import { MOTO_CREDENTIALS, startMoto } from "@nebula/test-peers";
import { inParallel, launchTagged, median, prepareNetwork, record } from "./common.mjs";

const SIZES = (process.env.NEBULA_BENCH_SIZES ?? "10,100,1000,5000").split(",").map(Number);
const CYCLES = Number(process.env.NEBULA_BENCH_CYCLES ?? 5);

function uid(n, size) {
  return `${size.toString(16).padStart(8, "0")}-0000-4000-8000-${n.toString().padStart(12, "0")}`;
}

function pod(name, podUid) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: "bench",
      uid: podUid,
      finalizers: ["nebula.dev/instance-reclaim"],
    },
    spec: { restartPolicy: "Never", containers: [{ name: "app", image: "busybox" }] },
  };
}

function countCalls(client) {
  const counts = new Map();
  client.middlewareStack.add(
    (next, context) => async (args) => {
      counts.set(context.commandName, (counts.get(context.commandName) ?? 0) + 1);
      return next(args);
    },
    { step: "initialize", name: "benchCallCounter" },
  );
  return counts;
}

const moto = await startMoto();
process.env.AWS_ACCESS_KEY_ID = MOTO_CREDENTIALS.accessKeyId;
process.env.AWS_SECRET_ACCESS_KEY = MOTO_CREDENTIALS.secretAccessKey;
const ec2 = moto.ec2();
const rows = [];
const progress = (message) => process.stderr.write(`[bench] ${message}\n`);

/**
 * With NEBULA_BENCH_PROFILE=<dir>, a V8 CPU profile of the measured cycles only (not the launch),
 * written to <dir>/<name>.cpuprofile (open it in Chrome's DevTools or speedscope).
 */
async function startProfile() {
  const dir = process.env.NEBULA_BENCH_PROFILE;
  if (!dir) return undefined;
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.start");
  return {
    async save(name) {
      const { profile } = await session.post("Profiler.stop");
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `${name}.cpuprofile`), JSON.stringify(profile));
      session.disconnect();
      progress(`CPU profile of the cycles: ${join(dir, `${name}.cpuprofile`)}`);
    },
  };
}

/**
 * The floor of a poll: the same tag-filtered, paginated DescribeInstances sequence through the
 * same SDK (the request, the response's XML parsed into objects), and nothing else. Returns the
 * CPU time it took (µs); fails when it does not see `size` instances.
 */
async function floorRead(client, nodeName, size) {
  const cpu = process.cpuUsage();
  let seen = 0;
  let NextToken;
  do {
    const page = await client.send(
      new DescribeInstancesCommand({
        Filters: [
          { Name: "tag:nebula:cluster", Values: ["bench"] },
          { Name: "tag:nebula:node", Values: [nodeName] },
          {
            Name: "instance-state-name",
            Values: ["pending", "running", "stopping", "stopped", "shutting-down"],
          },
        ],
        MaxResults: 1000,
        NextToken,
      }),
    );
    for (const reservation of page.Reservations ?? []) seen += reservation.Instances?.length ?? 0;
    NextToken = page.NextToken || undefined;
  } while (NextToken);
  const used = process.cpuUsage(cpu);
  if (seen !== size) throw new Error(`the floor read saw ${seen} of ${size}`);
  return used.user + used.system;
}

/** CPU this process burns while only waiting (GC and runtime threads), in ms per second of wall time. */
async function idleCpuRate(ms) {
  const cpu = process.cpuUsage();
  const start = performance.now();
  await new Promise((resolve) => setTimeout(resolve, ms));
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / 1000 / ((performance.now() - start) / 1000);
}

try {
  for (const size of SIZES) {
    // A fresh moto state per size, so each measurement sees only its own instances.
    await moto.reset();
    const { subnetId, securityGroupId } = await prepareNetwork(ec2);
    const nodeName = `bench-${size}`;
    progress(`${size}: launching`);
    await inParallel([...Array(size).keys()], 8, (i) =>
      launchTagged(ec2, subnetId, { node: nodeName, podUid: uid(i, size), pod: `bench/p-${i}` }),
    );
    progress(`${size}: measuring`);
    const provider = new Ec2PodProvider({
      config: {
        clusterName: "bench",
        nodeName,
        region: moto.region,
        subnetIds: [subnetId],
        securityGroupIds: [securityGroupId],
        imageId: "ami-0a1b2c3d",
        instanceProfile: "nebula-host",
        instanceTypes: { default: "t3.micro" },
        endpoint: moto.endpoint,
        // moto does not report ClientToken; ownership is proven by tags and instance profile.
        ownership: { clientToken: false },
      },
      livePodUids: () => [],
    });
    const calls = countCalls(provider.client);
    const floorClient = moto.ec2();
    await provider.pollOnce();
    for (let i = 0; i < size; i++) await provider.createPod(pod(`p-${i}`, uid(i, size)));
    if (calls.get("RunInstancesCommand"))
      throw new Error("the provider launched instead of adopting");
    calls.clear();
    let cpuUs = 0;
    let wallMs = 0;
    let floorUs = 0;
    const ratios = [];
    // Per round: the poll's CPU less the floor's, what the provider spends beyond the SDK's read.
    const owns = [];
    const profiler = await startProfile();
    // Rounds of one provider poll and one floor read back to back (the order alternating), so a
    // change in the machine's load hits both alike.
    for (let c = 0; c < CYCLES; c++) {
      const floorFirst = c % 2 === 1;
      const floorCpu = floorFirst ? await floorRead(floorClient, nodeName, size) : 0;
      const cpu = process.cpuUsage();
      const start = performance.now();
      const result = await provider.pollOnce();
      wallMs += performance.now() - start;
      const used = process.cpuUsage(cpu);
      const pollCpu = used.user + used.system;
      cpuUs += pollCpu;
      if (!result.ok || result.instances !== size)
        throw new Error(`poll saw ${result.instances} of ${size}`);
      const floor = floorFirst ? floorCpu : await floorRead(floorClient, nodeName, size);
      floorUs += floor;
      ratios.push(pollCpu / floor);
      owns.push(pollCpu - floor);
    }
    await profiler?.save(`poll-${size}`);
    // Idle baseline with this size's state in memory: a cycle waits on moto most of its wall time.
    const idle = await idleCpuRate(5000);
    const perCycle = (name) => (calls.get(name) ?? 0) / CYCLES;
    const total = [...calls.values()].reduce((a, b) => a + b, 0) / CYCLES;
    rows.push({
      instances: size,
      "DescribeInstances/cycle": perCycle("DescribeInstancesCommand"),
      "target ⌈N/1000⌉": Math.ceil(size / 1000),
      "other calls/cycle": total - perCycle("DescribeInstancesCommand"),
      "provider CPU ms/cycle": Math.round(cpuUs / CYCLES / 100) / 10,
      "wall ms/cycle (incl. moto)": Math.round(wallMs / CYCLES),
      "idle CPU ms/s": Math.round(idle * 10) / 10,
      "CPU ms/cycle net of idle": Math.round((cpuUs / 1000 - (idle * wallMs) / 1000) / CYCLES),
      "floor CPU ms/cycle": Math.round(floorUs / CYCLES / 100) / 10,
      "CPU µs/instance": Math.round(cpuUs / CYCLES / size),
      "floor µs/instance": Math.round(floorUs / CYCLES / size),
      "ratio to floor (median)": Math.round(median(ratios) * 100) / 100,
      "own µs/instance": Math.round(median(owns) / size),
    });
    progress(`${size}: ${JSON.stringify(rows.at(-1))}`);
    const row = rows.at(-1);
    record(
      `DescribeInstances calls per poll, ${size} instances (exact count; no baseline)`,
      row["DescribeInstances/cycle"],
      "calls",
      null,
      null,
      `= ⌈N/1000⌉ = ${row["target ⌈N/1000⌉"]}`,
    );
    record(
      `other EC2 calls per poll, ${size} instances (exact count; no baseline)`,
      row["other calls/cycle"],
      "calls",
      null,
      null,
      "= 0",
    );
    record(
      `provider CPU per poll, ${size} instances (no goal)`,
      row["provider CPU ms/cycle"],
      "ms",
      Math.round(((idle * wallMs) / 1000 / CYCLES) * 100) / 100,
      "idle process, same wall time",
    );
    record(
      `provider CPU per poll per instance, ${size} instances`,
      row["CPU µs/instance"] / 1000,
      "ms",
      row["floor µs/instance"] / 1000,
      "the SDK's DescribeInstances alone (same pages, request + XML parse)",
      "≤ 2× the floor",
      row["ratio to floor (median)"],
    );
    record(
      `provider's own CPU per poll per instance beyond the SDK's read, ${size} instances (median of the rounds' differences; no baseline)`,
      row["own µs/instance"] / 1000,
      "ms",
      null,
      null,
      size === 1000 ? "≤ 0.1 ms" : null,
    );
    record(
      `wall time per poll incl. moto, ${size} instances (no baseline, no goal)`,
      row["wall ms/cycle (incl. moto)"],
      "ms",
    );
    await provider.stop();
    provider.client.destroy();
    floorClient.destroy();
  }
} finally {
  ec2.destroy();
  await moto.stop();
}
console.table(rows);
const at = (n) => rows.find((r) => r.instances === n);
if (at(1000) && at(5000)) {
  const ratio = at(5000)["provider CPU ms/cycle"] / at(1000)["provider CPU ms/cycle"];
  const net = at(5000)["CPU ms/cycle net of idle"] / at(1000)["CPU ms/cycle net of idle"];
  console.log(
    `CPU per cycle, 5000 vs 1000 instances (same run): ${ratio.toFixed(2)}x, net of idle ${net.toFixed(2)}x, for 5x the instances`,
  );
}
// CPU growth from the next-to-largest size to the largest, net of idle, against the linear
// extrapolation from the smaller size (the baseline): a ratio above 1 means worse than linear.
const from = rows.at(-2);
const to = rows.at(-1);
if (from && to && to.instances > from.instances) {
  const scale = to.instances / from.instances;
  record(
    `provider CPU per poll net of idle, ${to.instances} instances, vs linear (no goal)`,
    to["CPU ms/cycle net of idle"],
    "ms",
    Math.round(from["CPU ms/cycle net of idle"] * scale),
    `${scale}× the ${from.instances}-instance figure`,
  );
}
