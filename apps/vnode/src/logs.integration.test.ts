/**
 * The kubelet API end to end (issue #18, docs/contracts.md "The kubelet API"): the real `kubectl` asks the real
 * kube-apiserver, which calls the virtual node's kubelet API with its kubelet client certificate;
 * the virtual node reads CloudWatch Logs and metrics (moto) that the instance's containers wrote
 * through the host simulator's `awslogs` driver and the supervisor's usage loop. A crashing
 * container's runs, `--previous`, `-f` on a running one, 1 MiB complete and in order, all of it
 * still after the instance is terminated; `/stats/summary` and `/metrics/resource` for a
 * three-container Pod, and `kubectl top` on it through the real metrics-server; requests not from
 * the API server refused.
 */
import { spawn } from "node:child_process";
import { request } from "node:https";
import { CoreV1Api, type V1Pod } from "@kubernetes/client-node";
import { type InstanceHosts, kubectlPath, startMetricsServer } from "@nebula/test-peers";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  barePod,
  deleteNode,
  hostAddress,
  kubectlWith,
  nodeInstances,
  podWhen as podWhenIn,
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
const NODE = "vnode-logs";
const NS = "vnode-logs";
const GROUP = "/nebula/vnode-logs/containers";

let hosts: InstanceHosts;
let vnode: VnodeProcess;

/** The real kubectl as the cluster admin; resolves with stdout, rejects with stderr. */
const kubectl = kubectlWith(controlPlane.kubeconfigPath ?? "");

/** kubectl's error text for a command that must fail. */
async function kubectlError(...args: string[]): Promise<string> {
  try {
    await kubectl(...args);
  } catch (error) {
    return String((error as { stderr?: string }).stderr ?? error);
  }
  throw new Error(`kubectl ${args.join(" ")} succeeded`);
}

beforeAll(async () => {
  ({ hosts, vnode } = await startKubeletApiWorld({
    admin,
    ec2,
    moto,
    kubeconfig: controlPlane.kubeconfigFor(VNODE_USER, VNODE_GROUPS),
    node: NODE,
    namespace: NS,
    group: GROUP,
  }));
}, 300_000);

afterAll(async () => {
  const code = await vnode?.stop();
  await deleteNode(admin, NODE);
  await hosts?.close();
  ec2.destroy();
  expect(code).toBe(0);
});

const podWhen = (name: string, test: (pod: V1Pod) => boolean, ms?: number) =>
  podWhenIn(core, NS, name, test, ms);

async function instanceTerminated(uid: string): Promise<void> {
  await until(
    "the instance terminated",
    async () => {
      const all = await nodeInstances(ec2, NODE);
      const mine = all.filter((i) =>
        i.Tags?.some((t) => t.Key === "nebula:pod-uid" && t.Value === uid),
      );
      return mine.length > 0 && mine.every((i) => i.State?.Name === "terminated")
        ? true
        : undefined;
    },
    180_000,
  );
}

/** GET on the kubelet API directly (not through the API server), with an optional client identity. */
function kubeletGet(
  path: string,
  identity?: { cert: string; key: string },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port: vnode.kubeletPort,
        path,
        rejectUnauthorized: false,
        ...(identity ?? {}),
        timeout: 10_000,
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          body += c;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.end();
  });
}

/** The client certificate and key of a kubeconfig made by `kubeconfigFor`. */
function identityOf(kubeconfigYaml: string): { cert: string; key: string } {
  const field = (name: string) => {
    const match = new RegExp(`${name}: (\\S+)`).exec(kubeconfigYaml);
    if (!match?.[1]) throw new Error(`no ${name} in the kubeconfig`);
    return Buffer.from(match[1], "base64").toString("utf8");
  };
  return { cert: field("client-certificate-data"), key: field("client-key-data") };
}

describe("the kubelet API (kubectl → kube-apiserver → nebula-vnode → CloudWatch in moto)", () => {
  it("kubectl logs reads a crashing container's runs and --previous, and still does after its instance is terminated", async () => {
    // Each run prints its number (kept in an emptyDir across runs) and fails; the restart limit
    // ends the Pod after the second run.
    const script = [
      "n=$(cat /data/n 2>/dev/null || echo 0)",
      // Docker, like the simulator, orders lines within a stream; lines written to stdout and
      // stderr at the same instant may be read in either order, so they are apart here.
      'echo "run $n starts"',
      "sleep 0.3",
      'echo "run $n to stderr" >&2',
      "sleep 0.3",
      'echo "run $n fails"',
      "echo $((n + 1)) >/data/n",
      "exit 3",
    ].join("\n");
    const pod = barePod(
      "crasher",
      NODE,
      { command: ["sh", "-c", script], volumeMounts: [{ name: "data", mountPath: "/data" }] },
      { restartPolicy: "OnFailure", volumes: [{ name: "data", emptyDir: {} }] },
    );
    pod.metadata = { ...pod.metadata, annotations: { "nebula.dev/restart-limit": "1" } };
    await core.createNamespacedPod({ namespace: NS, body: pod });
    const failed = await podWhen("crasher", (p) => p.status?.phase === "Failed");
    expect(failed.status?.containerStatuses?.[0]?.restartCount).toBe(1);

    const current = "run 1 starts\nrun 1 to stderr\nrun 1 fails\n";
    const previous = "run 0 starts\nrun 0 to stderr\nrun 0 fails\n";
    // The last lines may still be on their way to CloudWatch when the Pod turns Failed.
    await until(
      "the last run's logs",
      async () => ((await kubectl("logs", "-n", NS, "crasher")) === current ? true : undefined),
      60_000,
    );
    expect(await kubectl("logs", "-n", NS, "crasher", "--previous")).toBe(previous);
    expect(await kubectl("logs", "-n", NS, "crasher", "--tail=1")).toBe("run 1 fails\n");
    expect(await kubectl("logs", "-n", NS, "crasher", "--limit-bytes=9")).toBe("run 1 sta");
    expect(await kubectl("logs", "-n", NS, "crasher", "--since=1h")).toBe(current);
    const later = new Date(Date.now() + 3_600_000).toISOString();
    expect(await kubectl("logs", "-n", NS, "crasher", `--since-time=${later}`)).toBe("");
    const stamped = await kubectl("logs", "-n", NS, "crasher", "--timestamps");
    expect(stamped).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z run 1 starts\n/);

    await instanceTerminated(failed.metadata?.uid ?? "");
    expect(await kubectl("logs", "-n", NS, "crasher")).toBe(current);
    expect(await kubectl("logs", "-n", NS, "crasher", "-p")).toBe(previous);
    const root = identityOf(controlPlane.kubeconfig);
    expect(await kubeletGet(`/containerLogs/${NS}/crasher/nope`, root)).toEqual({
      status: 404,
      body: 'container "nope" not found in pod "crasher"',
    });
    await core.deleteNamespacedPod({ name: "crasher", namespace: NS });
  }, 400_000);

  it("kubectl logs -f follows a running container, and 1 MiB arrives complete and in order", async () => {
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("ticker", NODE, {
        command: ["sh", "-c", 'i=0; while true; do echo "tick $i"; i=$((i + 1)); sleep 0.5; done'],
      }),
    });
    // 16,384 numbered lines of 64 bytes, then exit 0.
    await core.createNamespacedPod({
      namespace: NS,
      body: barePod("megabyte", NODE, {
        command: [
          "sh",
          "-c",
          `i=0; while [ $i -lt 16384 ]; do printf '%05d %057d\\n' $i $i; i=$((i + 1)); done`,
        ],
      }),
    });
    await podWhen("ticker", (p) => p.status?.containerStatuses?.[0]?.state?.running !== undefined);

    // The kubelet's refusals reach kubectl through the API server, in its words.
    expect(await kubectlError("logs", "-n", NS, "ticker", "--previous")).toContain(
      'previous terminated container "app" in pod "ticker" not found',
    );
    // Follow with timestamps: each line's delay is when kubectl printed it minus when the host
    // read it from the container.
    const follower = spawn(
      kubectlPath(),
      [
        "--kubeconfig",
        controlPlane.kubeconfigPath ?? "",
        "logs",
        "-f",
        "--timestamps",
        "-n",
        NS,
        "ticker",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    const seen: Array<{ line: string; delayMs: number }> = [];
    let buffered = "";
    follower.stdout.setEncoding("utf8");
    follower.stdout.on("data", (chunk: string) => {
      const now = Date.now();
      buffered += chunk;
      const parts = buffered.split("\n");
      buffered = parts.pop() ?? "";
      for (const part of parts) {
        const space = part.indexOf(" ");
        seen.push({ line: part.slice(space + 1), delayMs: now - Date.parse(part.slice(0, space)) });
      }
    });
    const ended = new Promise<number | null>((r) => follower.once("exit", (code) => r(code)));
    await until("20 lines followed", () => (seen.length >= 20 ? true : undefined), 120_000);
    // In order, gap-free, from the first line.
    expect(seen.slice(0, 20).map((s) => s.line)).toEqual(
      Array.from({ length: 20 }, (_, i) => `tick ${i}`),
    );
    const delays = seen
      .slice(5)
      .map((s) => s.delayMs)
      .sort((a, b) => a - b);
    console.log(
      `kubectl logs -f delay over ${delays.length} lines: median ${delays[Math.floor(delays.length / 2)]} ms, max ${delays.at(-1)} ms`,
    );
    // Deleting the Pod stops the container; the stream then ends by itself.
    await core.deleteNamespacedPod({ name: "ticker", namespace: NS });
    expect(await ended).toBe(0);

    const done = await podWhen("megabyte", (p) => p.status?.phase === "Succeeded");
    const expected = Array.from(
      { length: 16384 },
      (_, i) => `${String(i).padStart(5, "0")} ${String(i).padStart(57, "0")}\n`,
    ).join("");
    expect(expected.length).toBe(1 << 20);
    await until(
      "1 MiB of logs",
      async () =>
        (await kubectl("logs", "-n", NS, "megabyte")).length >= expected.length ? true : undefined,
      60_000,
    );
    const text = await kubectl("logs", "-n", NS, "megabyte");
    expect(text.length).toBe(expected.length);
    expect(text === expected).toBe(true);
    await instanceTerminated(done.metadata?.uid ?? "");
    expect((await kubectl("logs", "-n", NS, "megabyte", "--tail=2")).split("\n")[0]).toBe(
      `16382 ${"16382".padStart(57, "0")}`,
    );
    await core.deleteNamespacedPod({ name: "megabyte", namespace: NS });
  }, 500_000);

  it("/stats/summary and /metrics/resource, through the API server, list a three-container Pod with all three", async () => {
    const busy = (name: string, script: string) => ({
      name,
      image: "busybox",
      command: ["sh", "-c", script],
    });
    const pod = barePod(
      "trio",
      NODE,
      {},
      {
        containers: [
          busy("spin", "while true; do :; done"),
          busy(
            "hold",
            "head -c 40000000 /dev/zero | tail -c 1 >/dev/null; x=$(head -c 20000000 /dev/zero | tr '\\0' a); sleep 3600",
          ),
          busy("idle", "sleep 3600"),
        ],
      },
    );
    await core.createNamespacedPod({ namespace: NS, body: pod });
    const running = await podWhen(
      "trio",
      (p) => (p.status?.containerStatuses ?? []).filter((c) => c.state?.running).length === 3,
    );
    const uid = running.metadata?.uid ?? "";
    type Summary = {
      node: { nodeName: string; cpu?: { usageCoreNanoSeconds: number } };
      pods: Array<{
        podRef: { name: string; uid: string };
        containers: Array<{
          name: string;
          cpu?: { usageCoreNanoSeconds: number; usageNanoCores?: number };
          memory?: { workingSetBytes: number };
        }>;
      }>;
    };
    const summary = await until(
      "usage of all three containers",
      async () => {
        const s = JSON.parse(
          await kubectl("get", "--raw", `/api/v1/nodes/${NODE}/proxy/stats/summary`),
        ) as Summary;
        const trio = s.pods.find((p) => p.podRef.uid === uid);
        return trio !== undefined &&
          trio.containers.length === 3 &&
          trio.containers.every((c) => c.cpu !== undefined && c.memory !== undefined)
          ? s
          : undefined;
      },
      120_000,
      2_000,
    );
    const trio = summary.pods.find((p) => p.podRef.uid === uid);
    expect(summary.node.nodeName).toBe(NODE);
    expect(trio?.containers.map((c) => c.name).sort()).toEqual(["hold", "idle", "spin"]);
    const spin = trio?.containers.find((c) => c.name === "spin");
    expect(spin?.cpu?.usageCoreNanoSeconds).toBeGreaterThan(0);
    for (const c of trio?.containers ?? []) expect(c.memory?.workingSetBytes).toBeGreaterThan(0);

    const metrics = await kubectl("get", "--raw", `/api/v1/nodes/${NODE}/proxy/metrics/resource`);
    for (const name of ["spin", "hold", "idle"]) {
      expect(metrics).toMatch(
        new RegExp(
          `^container_cpu_usage_seconds_total\\{container="${name}",namespace="${NS}",pod="trio"\\} [0-9.e+-]+ \\d+$`,
          "m",
        ),
      );
      expect(metrics).toMatch(
        new RegExp(
          `^container_memory_working_set_bytes\\{container="${name}",namespace="${NS}",pod="trio"\\} \\d+ \\d+$`,
          "m",
        ),
      );
    }
    expect(metrics).toMatch(/^pod_cpu_usage_seconds_total\{namespace="vnode-logs",pod="trio"\} /m);
    expect(metrics).toMatch(/^resource_scrape_error 0$/m);

    const runningPods = JSON.parse(
      await kubectl("get", "--raw", `/api/v1/nodes/${NODE}/proxy/runningpods/`),
    ) as {
      items: Array<{ metadata: { uid: string }; spec: { containers: Array<{ name: string }> } }>;
    };
    expect(
      runningPods.items
        .find((p) => p.metadata.uid === uid)
        ?.spec.containers.map((c) => c.name)
        .sort(),
    ).toEqual(["hold", "idle", "spin"]);
  }, 400_000);

  it("kubectl top, through the real metrics-server scraping /metrics/resource, shows the three containers and the Node", async () => {
    const metricsServer = await startMetricsServer({ controlPlane, address: hostAddress() });
    try {
      // metrics-server needs two scrapes of each container, at least one resolution (10 s) apart,
      // to compute a CPU rate; until then kubectl top answers "metrics not available yet".
      const rows = await until(
        "kubectl top for the three containers",
        async () => {
          const table = await kubectl(
            "top",
            "pod",
            "trio",
            "-n",
            NS,
            "--containers",
            "--no-headers",
          );
          const lines = table
            .trim()
            .split("\n")
            .filter((l) => l.trim() !== "");
          return lines.length === 3 ? lines.map((l) => l.trim().split(/\s+/)) : undefined;
        },
        120_000,
        3_000,
      ).catch((error: unknown) => {
        throw new Error(`${String(error)}\nmetrics-server said:\n${metricsServer.outputTail()}`);
      });
      // POD NAME CPU(cores) MEMORY(bytes), e.g. ["trio", "spin", "987m", "1Mi"].
      console.log(`kubectl top pod trio --containers: ${JSON.stringify(rows)}`);
      expect(rows.map((r) => r[1]).sort()).toEqual(["hold", "idle", "spin"]);
      const millicores = (v: string | undefined) =>
        v?.endsWith("m") ? Number(v.slice(0, -1)) : Number(v) * 1000;
      const mebibytes = (v: string | undefined) => Number(v?.replace(/Mi$/, ""));
      // Memory and CPU are what the kubelet API serves: the working set of the latest sample, and
      // a rate over two samples.
      const summary = JSON.parse(
        await kubectl("get", "--raw", `/api/v1/nodes/${NODE}/proxy/stats/summary`),
      ) as {
        pods: Array<{
          podRef: { name: string };
          containers: Array<{
            name: string;
            cpu?: { usageNanoCores?: number };
            memory?: { workingSetBytes: number };
          }>;
        }>;
      };
      const served = summary.pods.find((p) => p.podRef.name === "trio")?.containers ?? [];
      // metrics-server computes its own rate from the counter and its time; the busy loop's must be
      // of the order the samples show (it read a tenth while the counter was stamped with its
      // minute's start). Both windows are the last few seconds, and the load on the machine
      // varies between them, hence the loose bound.
      const spinTop = millicores(rows.find((r) => r[1] === "spin")?.[2]);
      const spinServed = (served.find((c) => c.name === "spin")?.cpu?.usageNanoCores ?? 0) / 1e6;
      console.log(
        `spin: kubectl top ${spinTop}m, the kubelet API's rate ${spinServed.toFixed(0)}m`,
      );
      expect(spinServed).toBeGreaterThan(0);
      expect(spinTop).toBeGreaterThan(spinServed * 0.3);
      for (const row of rows) {
        const bytes = served.find((c) => c.name === row[1])?.memory?.workingSetBytes ?? -1;
        expect(Math.abs(mebibytes(row[3]) - bytes / 2 ** 20)).toBeLessThan(2);
      }

      const node = await until(
        "kubectl top node",
        async () => {
          const line = await kubectl("top", "node", NODE, "--no-headers");
          return line.trim() === "" ? undefined : line.trim().split(/\s+/);
        },
        60_000,
        3_000,
      );
      // NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%): the node's usage is its Pods' sum, the
      // busy loop's included.
      expect(node[0]).toBe(NODE);
      expect(millicores(node[1])).toBeGreaterThan(0);
    } finally {
      await metricsServer.stop();
    }
    await core.deleteNamespacedPod({ name: "trio", namespace: NS });
  }, 300_000);

  it("refuses what is not the API server or not allowed by RBAC, as the kubelet does", async () => {
    expect(await kubeletGet("/stats/summary")).toEqual({ status: 401, body: "Unauthorized" });
    const stranger = identityOf(controlPlane.kubeconfigFor("stranger", ["tenants"]));
    expect(await kubeletGet("/containerLogs/vnode-logs/x/app", stranger)).toEqual({
      status: 403,
      body: "Forbidden (user=stranger, verb=get, resource=nodes, subresource(s)=[proxy])\n",
    });
    const root = identityOf(controlPlane.kubeconfig);
    expect(await kubeletGet("/healthz", root)).toEqual({ status: 200, body: "ok" });
    expect(await kubeletGet("/containerLogs/vnode-logs/nothere/app", root)).toEqual({
      status: 404,
      body: 'pod "nothere" does not exist',
    });
  }, 60_000);
});
