/**
 * Reconcile throughput against the real kube-apiserver: `BENCH_DEPLOYMENTS` WorkloadDeployments
 * (default 100) of `BENCH_INSTANCES` Pods each (default 30; 60 % ready, the rest crashing, image,
 * OOM, provisioning), created first, then the operator starts with cold caches; measured: time
 * until every WorkloadDeployment and Workload carries the status of its current generation.
 *
 *   BENCH_DEPLOYMENTS=1000 BENCH_INSTANCES=30 npm run bench -w @nebula/operator-app
 *
 * With NEBULA_BENCH_OUT=<file> set (the root `npm run bench` sets it) each figure is also appended
 * to that file as a JSON line {package, figure, value, unit, baseline, baselineLabel, ratio, goal}.
 */
import { appendFileSync } from "node:fs";
import { CoreV1Api, CustomObjectsApi, type V1Pod } from "@kubernetes/client-node";
import { GROUP, VERSION } from "@nebula/api";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { expect, it } from "vitest";
import { createOperator } from "../src/operator.js";
import { createNamespace, createObject, installCrds } from "../src/testing/cluster.js";
import { type PodScenario, podStatus, podTemplate } from "../src/testing/pods.js";

const deployments = Number(process.env.BENCH_DEPLOYMENTS ?? 100);
const instances = Number(process.env.BENCH_INSTANCES ?? 30);
const concurrency = 24;

async function pool<T>(items: readonly T[], work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await work(items[next++] as T);
    }),
  );
}

const scenarioOf = (i: number): PodScenario =>
  i % 10 < 6
    ? "ready"
    : ((["crashing", "image", "oom", "provisioning"] as const)[i % 4] ?? "ready");

it(`rolls up ${deployments} WorkloadDeployments of ${instances} Pods each`, async () => {
  const kc = useTestPeers().controlPlane.kubeConfig();
  await installCrds(kc);
  const ns = await createNamespace(kc, "bench");
  const core = kc.makeApiClient(CoreV1Api);
  const setupStarted = performance.now();
  const indexes = Array.from({ length: deployments }, (_, i) => i);
  await pool(indexes, async (d) => {
    await createObject(kc, ns, "Workload", `w${d}`, {
      spec: { placements: [{ name: "eu", replicas: instances }] },
    });
    await createObject(kc, ns, "WorkloadDeployment", `w${d}-eu`, {
      spec: {
        workloadRef: { name: `w${d}` },
        placement: "eu",
        replicas: instances,
        selector: { matchLabels: { wd: `w${d}` } },
      },
    });
  });
  const pods = indexes.flatMap((d) => Array.from({ length: instances }, (_, i) => [d, i] as const));
  await pool(pods, async ([d, i]) => {
    const created: V1Pod = await core.createNamespacedPod({
      namespace: ns,
      body: podTemplate(`w${d}-${i}`, ns, { wd: `w${d}` }),
    });
    await core.replaceNamespacedPodStatus({
      name: `w${d}-${i}`,
      namespace: ns,
      body: { ...created, status: podStatus(created, scenarioOf(i)) },
    });
  });
  console.log(
    `setup: ${deployments} deployments, ${pods.length} pods in ${((performance.now() - setupStarted) / 1000).toFixed(1)} s`,
  );

  const operator = createOperator({
    kubeConfig: kc,
    namespace: ns,
    handleSignals: false,
    workers: 4,
  });
  const stop = new AbortController();
  const started = performance.now();
  const running = operator.manager.run(stop.signal);
  const api = kc.makeApiClient(CustomObjectsApi);
  const done = async (plural: string) => {
    const list = (await api.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural,
    })) as {
      items: {
        metadata: { generation: number };
        status?: { observedGeneration?: number; replicas?: number };
      }[];
    };
    return list.items.filter(
      (o) =>
        o.status?.observedGeneration === o.metadata.generation && o.status.replicas === instances,
    ).length;
  };
  let wdAt = 0;
  for (;;) {
    const [wds, wls] = [await done("workloaddeployments"), await done("workloads")];
    if (wds === deployments && wdAt === 0) wdAt = performance.now();
    if (wds === deployments && wls === deployments) break;
    if (performance.now() - started > 1_800_000)
      throw new Error(`not done: ${wds} deployments, ${wls} workloads`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  const all = performance.now();
  stop.abort();
  await running;
  await operator.close();
  const wdSeconds = (wdAt - started) / 1000;
  const allSeconds = (all - started) / 1000;
  console.log(
    `figure: ${deployments} WorkloadDeployments × ${instances} Pods from a cold start: deployments done in ${wdSeconds.toFixed(1)} s (${(deployments / wdSeconds).toFixed(0)}/s, ${((deployments * instances) / wdSeconds).toFixed(0)} instances/s), workloads too in ${allSeconds.toFixed(1)} s`,
  );
  const out = process.env.NEBULA_BENCH_OUT;
  if (out) {
    const row = (figure: string, value: number, unit: string) => ({
      package: "@nebula/operator-app",
      figure: `${figure}, ${deployments} WorkloadDeployments × ${instances} Pods, cold start, 4 workers (no baseline, no goal)`,
      value: Math.round(value * 10) / 10,
      unit,
      baseline: null,
      baselineLabel: null,
      ratio: null,
      goal: null,
    });
    const rows = [
      row("every WorkloadDeployment status written", wdSeconds, "s"),
      row("every Workload status written", allSeconds, "s"),
      row("roll-up throughput", (deployments * instances) / wdSeconds, "instances/s"),
    ];
    appendFileSync(out, rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
  }
  expect(wdAt).toBeGreaterThan(0);
});
