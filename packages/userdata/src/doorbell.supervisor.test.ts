/**
 * The SQS doorbell (issue #30), in the real generated user-data on the test host: after each report
 * whose tags were written, one signed SendMessage (SQS's JSON protocol) of
 * `{"v":1,"instance":"<id>","seq":<seq>}`; never a condition of the report. Against moto's SQS
 * through the instance-host simulator: userdata.integration.test.ts.
 */
import { readFileSync, statSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterEach, describe, expect, it } from "vitest";
import { type RenderOptionsInput, renderUserData } from "./index.js";
import { CREDS, type FakeImage, type HostOptions, INSTANCE_ID, TestHost } from "./testing/host.js";

const QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/nebula-prod-doorbell";
const FAST: RenderOptionsInput = {
  backoff: { initialSeconds: 1, maxSeconds: 2, resetAfterSeconds: 600 },
  report: { retryAttempts: 8, retryBaseMs: 50 },
};
const IMAGES: Record<string, FakeImage> = { "fake/job:1": { script: "sleep 0.5; exit 1" } };
const POD: V1Pod = {
  metadata: { name: "job-1", namespace: "batch", uid: "uid-1" },
  spec: {
    restartPolicy: "Never",
    terminationGracePeriodSeconds: 5,
    containers: [{ name: "app", image: "fake/job:1" }],
  },
};

/** The message body the controller reads: exactly this JSON text. */
const bell = (seq: number) => `{"v":1,"instance":"${INSTANCE_ID}","seq":${seq}}`;

const hosts: TestHost[] = [];
const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(hosts.splice(0).map((h) => h.close()));
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((r) => s.close(() => r()))));
});

async function run(options: RenderOptionsInput, host: Partial<HostOptions> = {}) {
  const rendered = renderUserData(POD, { ...FAST, ...options });
  if (!rendered.ok) throw rendered.error;
  const h = new TestHost({ images: IMAGES, ...host });
  hosts.push(h);
  expect(await h.boot(rendered.value)).toBe(0);
  return h;
}

describe("the doorbell on a host", () => {
  it("after each written report: one signed SendMessage of its seq to the queue, the final one before power-off", async () => {
    const h = await run({ doorbell: { queueUrl: QUEUE } });
    expect(await h.finished()).toBe(0);
    const reports = h.tagReports();
    expect(reports.at(-1)).toMatchObject({ final: true });
    // The non-final ones ring in the background: wait for them.
    await h.until(() => h.doorbells.length >= reports.length, 10_000);
    expect(h.badSignatures()).toBe(0);
    expect(h.doorbells.map((d) => d.queueUrl)).toEqual(reports.map(() => QUEUE));
    expect(h.doorbells.map((d) => d.body).sort()).toEqual(reports.map((r) => bell(r.seq)).sort());
    // Each rang after its own report's tags were written.
    for (const d of h.doorbells) {
      const seq = (JSON.parse(d.body) as { seq: number }).seq;
      expect(d.afterTagWrites).toBeGreaterThanOrEqual(reports.findIndex((r) => r.seq === seq) + 1);
    }
    // The final report's: after its tags, before the power-off.
    const final = h.doorbells.find((d) => d.body === bell(reports.at(-1)?.seq ?? -1));
    expect(final).toMatchObject({ afterTagWrites: h.tagWrites.length, afterPowerOff: false });
    expect(h.poweredOff()).toBe(true);
    const unit = readFileSync(join(h.dir, "unit"), "utf8");
    expect(unit).toMatch(/^Environment=AWS_ENDPOINT_URL_SQS=http:\/\/127\.0\.0\.1:\d+$/m);
    expect(h.supervisorLog()).not.toContain("doorbell");
  });

  it("curl signs CreateTags and SendMessage (--aws-sigv4, checked by the AWS SDK's signer); the role's secret and token are in no process's arguments", async () => {
    const h = await run({ doorbell: { queueUrl: QUEUE } });
    expect(await h.finished()).toBe(0);
    await h.until(() => h.doorbells.length >= h.tagReports().length, 10_000);
    expect(h.tagWrites.length).toBeGreaterThan(0);
    expect(h.badSignatures()).toBe(0);
    const argv = h.argv();
    expect(argv.filter((a) => a.startsWith("curl ") && a.includes("--aws-sigv4")).length).toBe(
      h.tagWrites.length + h.doorbells.length,
    );
    for (const line of argv) {
      expect(line).not.toContain(CREDS.SecretAccessKey);
      expect(line).not.toContain(CREDS.Token);
    }
  });

  it("the signed calls share the role's credentials: one IMDS read for every report and doorbell of the run", async () => {
    const h = await run({ doorbell: { queueUrl: QUEUE } });
    expect(await h.finished()).toBe(0);
    await h.until(() => h.doorbells.length >= h.tagReports().length, 10_000);
    // Three reports (pending, running, exited), each CreateTags and its doorbell: six signed
    // calls within the credentials' minute, one read of them.
    expect(h.tagWrites.length + h.doorbells.length).toBeGreaterThanOrEqual(6);
    expect(h.credentialReads).toBe(1);
    expect(h.badSignatures()).toBe(0);
  });

  it("rings after a report written by the background retries too", async () => {
    // The second report (the container started) is throttled twice: its background retries write
    // it while the container runs, and then it rings.
    const h = await run(
      { doorbell: { queueUrl: QUEUE } },
      {
        failReport: { seq: 2, times: 2 },
        images: { "fake/job:1": { script: "sleep 3; exit 1" } },
      },
    );
    expect(await h.finished()).toBe(0);
    const reports = h.tagReports();
    expect(reports.map((r) => r.seq)).toEqual([1, 2, 3]);
    await h.until(() => h.doorbells.length >= reports.length, 10_000);
    expect(h.doorbells.map((d) => d.body)).toEqual(reports.map((r) => bell(r.seq)));
    expect(h.badSignatures()).toBe(0);
  });

  it("retries replaced by a newer report ring only if they wrote the tags; every report seen written rings", async () => {
    // The first two CreateTags are throttled, and the next report comes at once (the container
    // starts): a newer report may replace retries whose CreateTags is in flight, and that one need
    // not ring (the newer one does). Nothing rings that was not written.
    const h = await run({ doorbell: { queueUrl: QUEUE } }, { failCreateTags: 2 });
    expect(await h.finished()).toBe(0);
    const written = h.tagReports().map((r) => r.seq);
    const logged = [...h.supervisorLog().matchAll(/report seq=(\d+) final=\w+ written/g)].map((m) =>
      Number(m[1]),
    );
    const rang = () => h.doorbells.map((d) => (JSON.parse(d.body) as { seq: number }).seq);
    await h.until(() => logged.every((seq) => rang().includes(seq)), 10_000);
    expect(logged.at(-1)).toBe(written.at(-1));
    for (const seq of rang()) expect(written).toContain(seq);
    expect(h.badSignatures()).toBe(0);
  });

  it("off (the default): no SendMessage, and the unit passes no SQS endpoint", async () => {
    const h = await run({});
    expect(await h.finished()).toBe(0);
    expect(h.tagReports().at(-1)).toMatchObject({ final: true });
    expect(h.poweredOff()).toBe(true);
    await new Promise((r) => setTimeout(r, 500));
    expect(h.doorbells).toEqual([]);
    const unit = readFileSync(join(h.dir, "unit"), "utf8");
    expect(unit).not.toContain("AWS_ENDPOINT_URL_SQS");
  });

  it("a refused doorbell is logged in one line and forgotten: every report written, the Pod's exit reported, powered off", async () => {
    const h = await run({ doorbell: { queueUrl: QUEUE } }, { failDoorbell: true });
    expect(await h.finished()).toBe(0);
    const reports = h.tagReports();
    expect(reports.at(-1)?.final).toBe(true);
    expect(reports.at(-1)?.containers[0]).toMatchObject({
      state: "terminated",
      exitCode: 1,
      reason: "Error",
    });
    expect(h.poweredOff()).toBe(true);
    await h.until(() => h.doorbells.length >= reports.length, 10_000);
    // One try per report, no retry.
    await new Promise((r) => setTimeout(r, 500));
    expect(h.doorbells).toHaveLength(reports.length);
    const failures = h.supervisorLog().match(/^.*doorbell.*$/gm) ?? [];
    expect(failures.sort()).toEqual(
      reports
        .map((r) => `nebula-supervisor: report seq=${r.seq}: doorbell failed (HTTP 400)`)
        .sort(),
    );
  });

  it("a queue endpoint that never answers holds the final report's power-off about 3 s, no more", async () => {
    // Accepts connections and never answers.
    const rings: number[] = [];
    const sockets: Socket[] = [];
    const server = createServer((socket) => {
      rings.push(Date.now());
      sockets.push(socket);
      socket.on("error", () => {});
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    const h = await run(
      { doorbell: { queueUrl: QUEUE } },
      { env: { AWS_ENDPOINT_URL_SQS: `http://127.0.0.1:${port}/` } },
    );
    expect(await h.finished(60_000)).toBe(0);
    for (const s of sockets) s.destroy();
    const reports = h.tagReports();
    expect(reports.at(-1)).toMatchObject({ final: true });
    expect(h.poweredOff()).toBe(true);
    expect(rings.length).toBe(reports.length);
    // The final doorbell is the last to connect; the power-off came after its bounded wait.
    const waited = statSync(join(h.dir, "powered-off")).mtimeMs - Math.max(...rings);
    expect(waited).toBeGreaterThan(1_000);
    expect(waited).toBeLessThan(5_000);
    expect(h.supervisorLog()).toContain(
      `report seq=${reports.at(-1)?.seq}: doorbell failed (HTTP 000)`,
    );
  });
});
