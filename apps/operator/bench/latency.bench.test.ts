/**
 * Time from an instance's reason changing (its Pod status written) to the Workload's `Available`
 * condition showing the new reason, measured on a watch of the Workload: `BENCH_FLIPS` flips
 * (default 20) of one Pod between crashing and an image pull failure.
 *
 *   npm run bench -w @nebula/operator-app
 *
 * With NEBULA_BENCH_OUT=<file> set (the root `npm run bench` sets it) each figure is also appended
 * to that file as a JSON line {package, figure, value, unit, baseline, baselineLabel, ratio, goal}.
 */
import { appendFileSync } from "node:fs";
import { CoreV1Api, type KubeConfig, Watch } from "@kubernetes/client-node";
import { GROUP, VERSION } from "@nebula/api";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { expect, it } from "vitest";
import { createOperator } from "../src/operator.js";
import { createNamespace, createWeb, installCrds } from "../src/testing/cluster.js";
import { podStatus } from "../src/testing/pods.js";

const flips = Number(process.env.BENCH_FLIPS ?? 20);

type Stored = { status?: { conditions?: { type: string; reason: string }[] } };

it(`measures ${flips} reason changes from Pod to Workload`, async () => {
  const kc: KubeConfig = useTestPeers().controlPlane.kubeConfig();
  await installCrds(kc);
  const ns = await createNamespace(kc, "latency");
  await createWeb(kc, ns);
  const core = kc.makeApiClient(CoreV1Api);
  const operator = createOperator({ kubeConfig: kc, namespace: ns, handleSignals: false });
  const stop = new AbortController();
  const running = operator.manager.run(stop.signal);

  let waiting: { reason: string; resolve: (at: number) => void } | undefined;
  const watch = await new Watch(kc).watch(
    `/apis/${GROUP}/${VERSION}/namespaces/${ns}/workloads`,
    {},
    (_type, object: Stored) => {
      const reason = object.status?.conditions?.find((c) => c.type === "Available")?.reason;
      if (waiting !== undefined && reason === waiting.reason) {
        waiting.resolve(performance.now());
        waiting = undefined;
      }
    },
    () => undefined,
  );
  const samples: number[] = [];
  try {
    for (let i = 0; i < flips + 1; i++) {
      const scenario = i % 2 === 0 ? "crashing" : "image";
      const reason = scenario === "crashing" ? "InstanceCrashing" : "ImageUnavailable";
      const seen = new Promise<number>((resolve) => {
        waiting = { reason, resolve };
      });
      const latest = await core.readNamespacedPod({ name: "web-0", namespace: ns });
      const sent = performance.now();
      await core.replaceNamespacedPodStatus({
        name: "web-0",
        namespace: ns,
        body: { ...latest, status: podStatus(latest, scenario) },
      });
      const at = await Promise.race([
        seen,
        new Promise<number>((_, reject) =>
          setTimeout(() => reject(new Error("no change within 60 s")), 60_000),
        ),
      ]);
      if (i > 0) samples.push(at - sent); // the first one includes the caches' start
    }
  } finally {
    watch.abort();
    stop.abort();
    await running;
    await operator.close();
  }
  samples.sort((a, b) => a - b);
  const pct = (p: number) =>
    samples[Math.min(samples.length - 1, Math.floor((p / 100) * samples.length))] ?? 0;
  console.log(
    `figure: Pod reason change → Workload Available reason, ${samples.length} changes: median ${pct(50).toFixed(0)} ms, p90 ${pct(90).toFixed(0)} ms, max ${pct(100).toFixed(0)} ms`,
  );
  const out = process.env.NEBULA_BENCH_OUT;
  if (out) {
    const rows = (["50", "90"] as const).map((p) => ({
      package: "@nebula/operator-app",
      figure: `Pod reason change → Workload Available reason, p${p} of ${samples.length} (no baseline, no goal)`,
      value: Math.round(pct(Number(p))),
      unit: "ms",
      baseline: null,
      baselineLabel: null,
      ratio: null,
      goal: null,
    }));
    appendFileSync(out, rows.map((r) => `${JSON.stringify(r)}\n`).join(""));
  }
  expect(samples).toHaveLength(flips);
});
