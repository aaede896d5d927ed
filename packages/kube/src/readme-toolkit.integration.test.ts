/**
 * The README's controller-toolkit example, run against a real kube-apiserver: the same code with
 * the kubeconfig, namespace and ports of the test, stopped through a signal instead of SIGTERM.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api } from "@kubernetes/client-node";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, expect, it } from "vitest";
import { podInformer } from "./cache/index.js";
import { Controller, Manager } from "./controller/index.js";
import { connect } from "./index.js";
import { createLogger } from "./observability/index.js";

const namespace = `readme-${randomBytes(4).toString("hex")}`;
const dir = mkdtempSync(join(tmpdir(), "nebula-readme-"));
const kubeconfigPath = join(dir, "kubeconfig");
let core: CoreV1Api;

beforeAll(async () => {
  const { controlPlane } = useTestPeers();
  writeFileSync(kubeconfigPath, controlPlane.kubeconfig);
  core = controlPlane.kubeConfig().makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});

afterAll(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

it("the README example reconciles the Pods bound to vnode-1 and stops with exit code 0", async () => {
  const stop = new AbortController();
  // --- the README example (kubeconfig path, namespace and ports from the test) ---
  const { kubeConfig } = connect({ kubeconfig: kubeconfigPath });
  const logger = createLogger({ level: "silent", name: "pod-watcher" });
  const manager = new Manager({
    name: "pod-watcher",
    kubeConfig,
    logger,
    metricsBindAddress: "127.0.0.1:0",
    healthProbeBindAddress: "127.0.0.1:0",
    leaderElection: { namespace },
  });
  const pods = podInformer(kubeConfig, {
    namespace,
    fieldSelector: "spec.nodeName=vnode-1",
    resyncPeriodMs: 60_000,
    metrics: manager.metrics,
  });
  const seen = new Map<string, string | undefined>();
  manager.addController(
    new Controller({
      name: "pods",
      workers: 4,
      logger,
      metrics: manager.metrics,
      reconcile: async (key, signal) => {
        const pod = pods.get(key);
        if (pod === undefined) {
          seen.delete(key);
          return;
        }
        seen.set(key, pod.status?.phase);
        logger.info({ key, phase: pod.status?.phase, aborted: signal.aborted }, "reconciled");
        return { requeueAfter: 30_000 };
      },
    }).watch(pods),
  );
  const exit = manager.run(stop.signal);
  // --- end of the example ---
  for (const [name, nodeName] of [
    ["web-0", "vnode-1"],
    ["web-1", "vnode-2"],
  ] as const) {
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name },
        spec: { nodeName, containers: [{ name: "c", image: "busybox" }] },
      },
    });
  }
  const deadline = Date.now() + 30_000;
  while (!seen.has(`${namespace}/web-0`) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  expect([...seen.keys()]).toEqual([`${namespace}/web-0`]);
  const scrape = await fetch(`${manager.urls().metrics}/metrics`, {
    signal: AbortSignal.timeout(5000),
  });
  expect(await scrape.text()).toMatch(
    /nebula_controller_reconcile_total\{controller="pods",result="requeue_after"\} [1-9]/,
  );
  stop.abort();
  expect(await exit).toEqual({ reason: "stopped", exitCode: 0 });
});
