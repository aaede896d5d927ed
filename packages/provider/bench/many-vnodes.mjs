// Benchmark: several virtual nodes polling one account's EC2, against a real moto server, with and
// without their `ec2Budget` shares, side by side in one run.
//
// EC2 throttles each API per account and Region with a token bucket; moto throttles nothing. So
// the vnodes reach moto through a small proxy that plays the account's bucket for
// DescribeInstances as EC2 documents it (a bucket of `ACCOUNT_BURST` calls refilled at
// `ACCOUNT_RATE` per second; past it, HTTP 503 with EC2's `RequestLimitExceeded` document). The
// account is scaled down from EC2's published 100 calls and 20 per second so that moto, one Python
// process serving 10 vnodes, can serve enough calls to exhaust it (here about 2.5 polls per second).
//
// V vnodes of P instances each poll as fast as their pacing lets them (poll interval 1 s, the
// SDK's retries off so that every throttled call is seen) for SECONDS, twice:
//   1. unshared: each vnode's read budget far above the account's (as before `ec2Budget`);
//   2. shared: each vnode given 1/V of the account (rate × 0.9 / V, burst ⌊burst / V⌋).
// Printed per phase: DescribeInstances calls per second reaching the account, throttled calls,
// successful polls per vnode (fewest, most: how fairly the account is shared), each vnode's mean
// poll wall time (fastest and slowest vnode; with shares it includes the wait for the budget) and
// the process's CPU per polled instance.
//
// Options (environment): NEBULA_BENCH_VNODES (10), NEBULA_BENCH_PER_VNODE (20; the 500
// takes about 10 minutes to launch in moto), NEBULA_BENCH_SECONDS (30), NEBULA_BENCH_ACCOUNT_RATE
// (1), NEBULA_BENCH_ACCOUNT_BURST (10). With NEBULA_BENCH_OUT=<file> (the root `npm run bench` sets
// it) each figure is appended to that file as a JSON line.

import { createServer, request } from "node:http";
import { Ec2PodProvider } from "@nebula/provider";
import { MOTO_CREDENTIALS, startMoto } from "@nebula/test-peers";
import { inParallel, launchTagged, prepareNetwork, record } from "./common.mjs";

const VNODES = Number(process.env.NEBULA_BENCH_VNODES ?? 10);
const PER_VNODE = Number(process.env.NEBULA_BENCH_PER_VNODE ?? 20);
const SECONDS = Number(process.env.NEBULA_BENCH_SECONDS ?? 30);
const ACCOUNT_RATE = Number(process.env.NEBULA_BENCH_ACCOUNT_RATE ?? 1);
const ACCOUNT_BURST = Number(process.env.NEBULA_BENCH_ACCOUNT_BURST ?? 10);

const progress = (message) => process.stderr.write(`[bench] ${message}\n`);

/**
 * A proxy in front of moto that plays the account's DescribeInstances bucket (EC2's token bucket:
 * `burst` tokens, `rate` added per second, one per call; an empty bucket answers
 * RequestLimitExceeded). Counts what it forwards and what it throttles.
 */
async function startAccount(target, rate, burst) {
  const upstream = new URL(target);
  let tokens = burst;
  let at = performance.now();
  const stats = { forwarded: 0, throttled: 0, launches: 0 };
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const action = new URLSearchParams(body.toString("utf8")).get("Action");
      if (action === "RunInstances") stats.launches++;
      if (action === "DescribeInstances") {
        const now = performance.now();
        tokens = Math.min(burst, tokens + ((now - at) / 1000) * rate);
        at = now;
        if (tokens < 1) {
          stats.throttled++;
          res.writeHead(503, { "content-type": "text/xml" });
          res.end(
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>bench</RequestID></Response>',
          );
          return;
        }
        tokens -= 1;
        stats.forwarded++;
      }
      const forward = request(
        {
          hostname: upstream.hostname,
          port: upstream.port,
          path: req.url,
          method: req.method,
          headers: { ...req.headers, host: upstream.host },
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      forward.on("error", () => {
        res.writeHead(502);
        res.end();
      });
      forward.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    endpoint: `http://127.0.0.1:${server.address().port}`,
    stats,
    reset() {
      tokens = burst;
      at = performance.now();
      stats.forwarded = 0;
      stats.throttled = 0;
      stats.launches = 0;
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}

function uid(v, i) {
  return `${v.toString(16).padStart(8, "0")}-0000-4000-8000-${i.toString().padStart(12, "0")}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const moto = await startMoto();
process.env.AWS_ACCESS_KEY_ID = MOTO_CREDENTIALS.accessKeyId;
process.env.AWS_SECRET_ACCESS_KEY = MOTO_CREDENTIALS.secretAccessKey;
const ec2 = moto.ec2();
const account = await startAccount(moto.endpoint, ACCOUNT_RATE, ACCOUNT_BURST);
const rows = [];
try {
  const { subnetId, securityGroupId } = await prepareNetwork(ec2);
  progress(`launching ${VNODES} × ${PER_VNODE} instances`);
  const launches = [];
  for (let v = 0; v < VNODES; v++) for (let i = 0; i < PER_VNODE; i++) launches.push([v, i]);
  await inParallel(launches, 8, ([v, i]) =>
    launchTagged(ec2, subnetId, {
      node: `vnode-${v}`,
      podUid: uid(v, i),
      pod: `bench/v${v}-p${i}`,
    }),
  );

  /** One phase: V vnodes with the given read budget, polling for SECONDS. */
  async function phase(label, reads) {
    const providers = [];
    for (let v = 0; v < VNODES; v++) {
      const provider = new Ec2PodProvider({
        config: {
          clusterName: "bench",
          nodeName: `vnode-${v}`,
          region: moto.region,
          subnetIds: [subnetId],
          securityGroupIds: [securityGroupId],
          imageId: "ami-0a1b2c3d",
          instanceProfile: "nebula-host",
          instanceTypes: { default: "t3.micro" },
          endpoint: account.endpoint,
          ownership: { clientToken: false },
          pollIntervalSeconds: 1,
          maxPollIntervalSeconds: 16,
          maxAttempts: 1,
          ec2Budget: { reads, maxWaitSeconds: 30 },
        },
        livePodUids: () => [],
      });
      // Listed first, so that each Pod adopts its instance instead of launching one.
      await provider.pollOnce();
      for (let i = 0; i < PER_VNODE; i++) {
        await provider.createPod({
          apiVersion: "v1",
          kind: "Pod",
          metadata: {
            name: `v${v}-p${i}`,
            namespace: "bench",
            uid: uid(v, i),
            finalizers: ["nebula.dev/instance-reclaim"],
          },
          spec: { restartPolicy: "Never", containers: [{ name: "app", image: "busybox" }] },
        });
      }
      providers.push(provider);
    }
    await sleep((ACCOUNT_BURST / ACCOUNT_RATE) * 1000); // the account's bucket full again
    account.reset();
    const stats = providers.map(() => ({ polls: 0, ok: 0, wallMs: 0 }));
    const started = performance.now();
    const cpu = process.cpuUsage();
    const end = started + SECONDS * 1000;
    await Promise.all(
      providers.map(async (provider, v) => {
        while (performance.now() < end) {
          const t = performance.now();
          const result = await provider.pollOnce();
          stats[v].polls++;
          if (result.ok) {
            stats[v].ok++;
            stats[v].wallMs += performance.now() - t;
          }
          await sleep(Math.min(provider.pollIntervalMs, Math.max(0, end - performance.now())));
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    if (account.stats.launches > 0) throw new Error("a vnode launched instead of adopting");
    const used = process.cpuUsage(cpu);
    const okPolls = stats.reduce((s, x) => s + x.ok, 0);
    const means = stats.filter((s) => s.ok > 0).map((s) => s.wallMs / s.ok);
    const row = {
      phase: label,
      "reads/s per vnode": reads.perSecond,
      "DescribeInstances/s at the account":
        Math.round((account.stats.forwarded / seconds) * 100) / 100,
      "account refill/s": ACCOUNT_RATE,
      throttled: account.stats.throttled,
      "ok polls (fewest vnode)": Math.min(...stats.map((s) => s.ok)),
      "ok polls (most)": Math.max(...stats.map((s) => s.ok)),
      "poll ms (fastest vnode)": Math.round(Math.min(...means)),
      "poll ms (slowest vnode)": Math.round(Math.max(...means)),
      "CPU µs per polled instance": Math.round(
        (used.user + used.system) / Math.max(1, okPolls) / PER_VNODE,
      ),
    };
    rows.push(row);
    progress(JSON.stringify(row));
    for (const provider of providers) {
      await provider.stop();
      provider.client.destroy();
    }
    return row;
  }

  const unshared = await phase("unshared", { perSecond: 1000, burst: 1000 });
  const share = {
    perSecond: Math.round(((ACCOUNT_RATE * 0.9) / VNODES) * 1000) / 1000,
    burst: Math.max(1, Math.floor(ACCOUNT_BURST / VNODES)),
  };
  const shared = await phase("shared 1/V", share);
  console.table(rows);
  const what = `${VNODES} vnodes × ${PER_VNODE} instances, account ${ACCOUNT_BURST} calls + ${ACCOUNT_RATE}/s`;
  record(
    `throttled DescribeInstances in ${SECONDS} s, ${what}, 1/V shares`,
    shared.throttled,
    "calls",
    unshared.throttled,
    "the same vnodes without shares",
    "0",
  );
  record(
    `DescribeInstances per second at the account, ${what}, 1/V shares`,
    shared["DescribeInstances/s at the account"],
    "calls/s",
    ACCOUNT_RATE,
    "the account's refill rate",
    "≤ the refill rate",
  );
  const fairness = (row) =>
    Math.round((row["ok polls (fewest vnode)"] / Math.max(1, row["ok polls (most)"])) * 100) / 100;
  record(
    `fairness: the fewest polls of a vnode over the most, ${what}, 1/V shares`,
    fairness(shared),
    "×",
    fairness(unshared),
    "the same vnodes without shares",
    "near 1",
  );
} finally {
  await account.close();
  ec2.destroy();
  await moto.stop();
}
