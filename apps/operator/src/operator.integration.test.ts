/**
 * The operator, run in-process against a real kube-apiserver: Pods with the statuses
 * `@nebula/state-mapping` writes (and Instance objects written as another provider would) roll
 * up into WorkloadDeployment and Workload status, `kubectl get` shows the reason, an unchanged
 * world writes nothing (counted from a watch, not from the operator).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  type KubeConfig,
  Watch,
} from "@kubernetes/client-node";
import { GROUP, VERSION } from "@nebula/api";
import type { Condition } from "@nebula/rollup";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createOperator, type Operator } from "./operator.js";
import {
  createNamespace,
  createObject,
  eventually,
  getObject,
  installCrds,
  PLURALS,
  patchStatus,
} from "./testing/cluster.js";
import { kstatus } from "./testing/kstatus.js";
import { argoHealth } from "./testing/lua.js";
import { type PodScenario, podStatus, podStatusAt, podTemplate } from "./testing/pods.js";

let kc: KubeConfig;
let core: CoreV1Api;
let ns: string;
let operator: Operator;
const stop = new AbortController();
let running: Promise<unknown>;
const kubectlDir = mkdtempSync(join(tmpdir(), "operator-kubectl-"));

beforeAll(async () => {
  const peers = useTestPeers();
  kc = peers.controlPlane.kubeConfig();
  core = kc.makeApiClient(CoreV1Api);
  writeFileSync(join(kubectlDir, "kubeconfig"), peers.controlPlane.kubeconfig);
  await installCrds(kc);
  ns = await createNamespace(kc, "operator");
  operator = createOperator({ kubeConfig: kc, namespace: ns, handleSignals: false, workers: 4 });
  running = operator.manager.run(stop.signal);
});

afterAll(async () => {
  stop.abort();
  await running;
  await operator?.close();
  rmSync(kubectlDir, { recursive: true, force: true });
});

/** Creates a Pod and writes the status the virtual node writes for `scenario`. */
async function pod(name: string, labels: Record<string, string>, scenario: PodScenario) {
  const created = await core.createNamespacedPod({
    namespace: ns,
    body: podTemplate(name, ns, labels),
  });
  await setPod(name, scenario, created);
}

async function setPod(
  name: string,
  scenario: PodScenario,
  current?: Awaited<ReturnType<CoreV1Api["readNamespacedPod"]>>,
) {
  const latest = current ?? (await core.readNamespacedPod({ name, namespace: ns }));
  await core.replaceNamespacedPodStatus({
    name,
    namespace: ns,
    body: { ...latest, status: podStatus(latest, scenario) },
  });
}

async function workload(name: string, placements: { name: string; replicas: number }[]) {
  await createObject(kc, ns, "Workload", name, { spec: { placements } });
}

async function deployment(
  workloadName: string,
  placement: string,
  replicas: number,
  kind = "pods",
) {
  await createObject(kc, ns, "WorkloadDeployment", `${workloadName}-${placement}`, {
    spec: {
      workloadRef: { name: workloadName },
      placement,
      replicas,
      selector: { matchLabels: { app: workloadName, placement, kind } },
    },
  });
}

type Status = { observedGeneration?: number; readyReplicas?: number; conditions?: Condition[] };

async function statusOf(kind: keyof typeof PLURALS, name: string): Promise<Status> {
  const object = await getObject(kc, ns, kind, name);
  return (object.status ?? {}) as Status;
}

const condition = (status: Status, type: string) => status.conditions?.find((c) => c.type === type);

/**
 * Waits until `kind/name`'s condition `type` has `status` and `reason` (and, when given, a
 * message that `message` accepts: counts pass through intermediate values while objects are
 * created one by one); returns the condition.
 */
function conditionOf(
  kind: keyof typeof PLURALS,
  name: string,
  type: string,
  s: string,
  reason: string,
  message?: (text: string) => boolean,
) {
  return eventually(`${kind} ${name} ${type}=${s} ${reason}`, async () => {
    const c = condition(await statusOf(kind, name), type);
    return c?.status === s && c.reason === reason && (message?.(c.message) ?? true) ? c : undefined;
  });
}

describe("scenario 1: every instance of one placement crashes on start-up", () => {
  it("its WorkloadDeployment and the Workload say Available=False InstanceCrashing, with the count and the last exit code", async () => {
    await workload("web", [
      { name: "eu", replicas: 2 },
      { name: "us", replicas: 1 },
    ]);
    await deployment("web", "eu", 2);
    await deployment("web", "us", 1);
    await pod("web-eu-0", { app: "web", placement: "eu", kind: "pods" }, "crashing");
    await pod("web-eu-1", { app: "web", placement: "eu", kind: "pods" }, "crashing");
    await pod("web-us-0", { app: "web", placement: "us", kind: "pods" }, "provisioning");

    const wd = await conditionOf(
      "WorkloadDeployment",
      "web-eu",
      "Available",
      "False",
      "InstanceCrashing",
      (m) => m.startsWith("2 of 2"),
    );
    expect(wd.message).toBe(
      '2 of 2 instances are repeatedly exiting and restarting: container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.',
    );
    const wl = await conditionOf("Workload", "web", "Available", "False", "InstanceCrashing", (m) =>
      m.includes("2 of 3 instances are repeatedly"),
    );
    expect(wl.message).toContain("2 of 3 instances are repeatedly exiting and restarting");
    expect(wl.message).toContain("Its last exit was with code 1.");
    const stalled = await conditionOf("Workload", "web", "Stalled", "True", "InstanceCrashing");
    expect(stalled.observedGeneration).toBe(1);
    expect((await statusOf("Workload", "web")).observedGeneration).toBe(1);
  });

  it("kubectl get shows ready/desired, Available and the reason", async () => {
    const kubectl = (...args: string[]) =>
      execFileSync(join(process.env.HOME ?? "", ".cache/nebula/control-plane/v1.35.4/kubectl"), [
        `--kubeconfig=${join(kubectlDir, "kubeconfig")}`,
        "-n",
        ns,
        ...args,
      ]).toString();
    const workloads = kubectl("get", "workloads");
    expect(workloads.split("\n")[0]).toMatch(/^NAME\s+READY\s+DESIRED\s+AVAILABLE\s+REASON\s+AGE$/);
    expect(workloads).toMatch(/\nweb\s+0\s+3\s+False\s+InstanceCrashing\s+/);
    expect(kubectl("get", "workloaddeployments", "web-eu")).toMatch(
      /\nweb-eu\s+0\s+2\s+False\s+InstanceCrashing\s+/,
    );
  });

  it("records an Event when the Workload's Available flips, and measures the reason → Workload latency", async () => {
    const started = performance.now();
    await setPod("web-us-0", "ready");
    await conditionOf("Workload", "web", "Available", "True", "AvailablePlacementFound");
    const latencyMs = performance.now() - started;
    console.log(`figure: pod reason change → Workload condition in ${latencyMs.toFixed(0)} ms`);
    const events = kc.makeApiClient(EventsV1Api);
    const event = await eventually("the Available event", async () => {
      const list = await events.listNamespacedEvent({ namespace: ns });
      return list.items.find((e) => e.regarding?.kind === "Workload" && e.regarding.name === "web");
    });
    expect(event).toMatchObject({
      type: "Normal",
      reason: "AvailablePlacementFound",
      action: "RollUp",
    });
    expect(event.note).toMatch(/^Available changed from False to True: /);
  });
});

describe("scenario 2: image and memory", () => {
  it("an image that cannot be pulled reads ImageUnavailable, not provisioning", async () => {
    await workload("img", [{ name: "eu", replicas: 1 }]);
    await deployment("img", "eu", 1);
    await pod("img-eu-0", { app: "img", placement: "eu", kind: "pods" }, "image");
    const c = await conditionOf("Workload", "img", "Available", "False", "ImageUnavailable");
    expect(c.message).toMatch(/^1 of 1 instances could not pull its image/);
  });

  it("an OOM reads OutOfMemory", async () => {
    await workload("mem", [{ name: "eu", replicas: 1 }]);
    await deployment("mem", "eu", 1);
    await pod("mem-eu-0", { app: "mem", placement: "eu", kind: "pods" }, "oom");
    await conditionOf("WorkloadDeployment", "mem-eu", "Available", "False", "OutOfMemory");
    await conditionOf("Workload", "mem", "Available", "False", "OutOfMemory");
  });
});

describe("scenario 3: partial failure, 2 of 3 ready", () => {
  it("Available=True with the degraded detail, ReplicasReady=False", async () => {
    await workload("part", [{ name: "eu", replicas: 3 }]);
    await deployment("part", "eu", 3);
    await pod("part-eu-0", { app: "part", placement: "eu", kind: "pods" }, "ready");
    await pod("part-eu-1", { app: "part", placement: "eu", kind: "pods" }, "ready");
    await pod("part-eu-2", { app: "part", placement: "eu", kind: "pods" }, "crashing");
    const available = await conditionOf(
      "WorkloadDeployment",
      "part-eu",
      "Available",
      "True",
      "ReadyInstanceFound",
      (m) => m.includes("repeatedly"),
    );
    expect(available.message).toBe(
      "2/3 instances are ready; 1 is repeatedly exiting and restarting",
    );
    await conditionOf(
      "WorkloadDeployment",
      "part-eu",
      "ReplicasReady",
      "False",
      "InstanceCrashing",
    );
    const wl = await conditionOf(
      "Workload",
      "part",
      "Available",
      "True",
      "AvailablePlacementFound",
      (m) => m.includes("repeatedly"),
    );
    expect(wl.message).toContain("2/3 instances are ready; 1 is repeatedly exiting and restarting");
  });
});

describe("scenario 4: the same states through Instance objects", () => {
  async function instance(
    name: string,
    placement: string,
    ready: boolean,
    reason: string,
    message: string,
  ) {
    await createObject(kc, ns, "Instance", name, {
      metadata: { name, namespace: ns, labels: { app: "inst", placement, kind: "instances" } },
      spec: { providerID: `test:///${name}` },
    });
    await patchStatus(kc, ns, "Instance", name, {
      state: ready ? "Running" : "Failed",
      conditions: [
        {
          type: "Ready",
          status: ready ? "True" : "False",
          reason,
          message,
          lastTransitionTime: "2026-11-30T05:00:00Z",
        },
      ],
    });
  }

  it("crash loop, image, OOM and partial failure read as they do from Pods", async () => {
    await workload("inst", [
      { name: "crash", replicas: 1 },
      { name: "image", replicas: 1 },
      { name: "oom", replicas: 1 },
      { name: "part", replicas: 3 },
    ]);
    for (const [placement, replicas] of [
      ["crash", 1],
      ["image", 1],
      ["oom", 1],
      ["part", 3],
    ] as const) {
      await deployment("inst", placement, replicas, "instances");
    }
    const crash =
      'container "app" has exited and restarted 3 times without staying up for 10 minutes. Its last exit was with code 1.';
    await instance("inst-crash-0", "crash", false, "InstanceCrashing", crash);
    await instance("inst-image-0", "image", false, "ImageUnavailable", "could not pull its image");
    await instance("inst-oom-0", "oom", false, "OutOfMemory", "ran out of memory");
    await instance("inst-part-0", "part", true, "Ready", "");
    await instance("inst-part-1", "part", true, "Ready", "");
    await instance("inst-part-2", "part", false, "InstanceCrashing", crash);

    const c = await conditionOf(
      "WorkloadDeployment",
      "inst-crash",
      "Available",
      "False",
      "InstanceCrashing",
    );
    expect(c.message).toBe(`1 of 1 instances is repeatedly exiting and restarting: ${crash}`);
    await conditionOf("WorkloadDeployment", "inst-image", "Available", "False", "ImageUnavailable");
    await conditionOf("WorkloadDeployment", "inst-oom", "Available", "False", "OutOfMemory");
    const part = await conditionOf(
      "WorkloadDeployment",
      "inst-part",
      "Available",
      "True",
      "ReadyInstanceFound",
      (m) => m.includes("repeatedly"),
    );
    expect(part.message).toBe("2/3 instances are ready; 1 is repeatedly exiting and restarting");
    await conditionOf("Workload", "inst", "Available", "True", "AvailablePlacementFound");
    // The Instance itself gets kstatus' Stalled beside its provider's Ready.
    const stalled = await conditionOf(
      "Instance",
      "inst-crash-0",
      "Stalled",
      "True",
      "InstanceCrashing",
    );
    expect(stalled.message).toBe(crash);
    expect(condition(await statusOf("Instance", "inst-crash-0"), "Ready")?.reason).toBe(
      "InstanceCrashing",
    );
  });
});

describe("invalid references become conditions", () => {
  it("a WorkloadDeployment whose Workload does not exist", async () => {
    await deployment("ghost", "eu", 1);
    const c = await conditionOf(
      "WorkloadDeployment",
      "ghost-eu",
      "ReferencesResolved",
      "False",
      "WorkloadNotFound",
    );
    expect(c.message).toBe(`Workload "ghost" does not exist in namespace "${ns}".`);
    await conditionOf("WorkloadDeployment", "ghost-eu", "Stalled", "True", "WorkloadNotFound");
  });

  it("a Workload with no placements", async () => {
    await workload("empty", []);
    await conditionOf("Workload", "empty", "ReferencesResolved", "False", "NoPlacements");
  });
});

describe("Argo CD's health check on the objects as stored", () => {
  it.each([
    ["Workload", "img", "Degraded", "ImageUnavailable"],
    ["Workload", "mem", "Degraded", "OutOfMemory"],
    ["WorkloadDeployment", "part-eu", "Degraded", "InstanceCrashing"],
    ["WorkloadDeployment", "inst-crash", "Degraded", "InstanceCrashing"],
    ["Instance", "inst-part-0", "Healthy", ""],
    ["WorkloadDeployment", "ghost-eu", "Degraded", "WorkloadNotFound"],
  ] as const)("%s %s is %s", async (kind, name, status, reason) => {
    const health = argoHealth(await getObject(kc, ns, kind, name));
    expect(health.status).toBe(status);
    expect(health.message.startsWith(reason)).toBe(true);
  });
});

describe("kstatus itself on the objects as stored (the truth table)", () => {
  it("reads crash loop, OOM, image, quota and partial failure as Failed, provisioning as InProgress, healthy as Current", async () => {
    await workload("quota", [{ name: "eu", replicas: 1 }]);
    await deployment("quota", "eu", 1);
    await pod("quota-eu-0", { app: "quota", placement: "eu", kind: "pods" }, "quota");
    await workload("prov", [{ name: "eu", replicas: 1 }]);
    await deployment("prov", "eu", 1);
    await pod("prov-eu-0", { app: "prov", placement: "eu", kind: "pods" }, "provisioning");
    await workload("ok", [{ name: "eu", replicas: 1 }]);
    await deployment("ok", "eu", 1);
    await pod("ok-eu-0", { app: "ok", placement: "eu", kind: "pods" }, "ready");
    await conditionOf("Workload", "quota", "Stalled", "True", "QuotaExceeded");
    await conditionOf("Workload", "prov", "Reconciling", "True", "Provisioning");
    await conditionOf("Workload", "ok", "ReplicasReady", "True", "AllReplicasReady");

    const rows: [keyof typeof PLURALS, string, string, string][] = [
      ["WorkloadDeployment", "web-eu", "Failed", "InstanceCrashing"],
      ["WorkloadDeployment", "mem-eu", "Failed", "OutOfMemory"],
      ["Workload", "img", "Failed", "ImageUnavailable"],
      ["Workload", "quota", "Failed", "QuotaExceeded"],
      ["WorkloadDeployment", "quota-eu", "Failed", "QuotaExceeded"],
      ["Workload", "prov", "InProgress", "Provisioning"],
      ["WorkloadDeployment", "part-eu", "Failed", "InstanceCrashing"],
      ["Workload", "part", "Failed", "InstanceCrashing"],
      ["Instance", "inst-crash-0", "Failed", "InstanceCrashing"],
      ["Workload", "ok", "Current", ""],
      ["WorkloadDeployment", "ok-eu", "Current", ""],
      ["Instance", "inst-part-0", "Current", ""],
    ];
    const objects = await Promise.all(rows.map(([kind, name]) => getObject(kc, ns, kind, name)));
    const verdicts = kstatus(objects);
    expect(verdicts.map((v) => v.status)).toEqual(rows.map((r) => r[2]));
    for (const [i, row] of rows.entries()) {
      const verdict = verdicts[i];
      if (row[2] === "Current") expect(verdict?.message).toMatch(/^Resource is (current|Ready)$/);
      else {
        const c = condition(
          (objects[i]?.status ?? {}) as Status,
          row[2] === "Failed" ? "Stalled" : "Reconciling",
        );
        expect(c?.reason).toBe(row[3]);
        expect(verdict?.message).toBe(c?.message);
      }
    }
  });
});

describe("scenario 6: a crash loop in time, judged by kstatus at every step (stability window)", () => {
  // A second operator, in a namespace of its own, with a short window so that real time can
  // pass it: the seed incident's Pod (exits 1 shortly after each start, restartPolicy Always)
  // written step by step as the virtual node writes it, between and during its back-offs.
  const WINDOW_S = 6;
  let loopNs: string;
  let loopOperator: Operator;
  const loopStop = new AbortController();
  let loopRunning: Promise<unknown>;

  beforeAll(async () => {
    loopNs = await createNamespace(kc, "crashloop");
    loopOperator = createOperator({
      kubeConfig: kc,
      namespace: loopNs,
      handleSignals: false,
      workers: 2,
      stabilityWindowSeconds: WINDOW_S,
    });
    loopRunning = loopOperator.manager.run(loopStop.signal);
  });

  afterAll(async () => {
    loopStop.abort();
    await loopRunning;
    await loopOperator?.close();
  });

  const get = async (kind: keyof typeof PLURALS, name: string) => getObject(kc, loopNs, kind, name);
  const available = async (kind: keyof typeof PLURALS, name: string) =>
    condition(((await get(kind, name)).status ?? {}) as Status, "Available");
  const idle = () =>
    eventually("the crash-loop operator's queues idle", async () => {
      const c = loopOperator.controllers;
      const busy = [c.workloadDeployments, c.workloads].some(
        (k) => k.queue.len() + k.queue.inFlight() > 0,
      );
      return busy ? undefined : true;
    });
  /** Writes the Pod's status for one container state at the current time. */
  async function step(container: Parameters<typeof podStatusAt>[1]) {
    const latest = await core.readNamespacedPod({ name: "loop-eu-0", namespace: loopNs });
    await core.replaceNamespacedPodStatus({
      name: "loop-eu-0",
      namespace: loopNs,
      body: { ...latest, status: podStatusAt(latest, container, new Date()) },
    });
  }
  const second = () => new Date(Math.floor(Date.now() / 1000) * 1000).toISOString();
  const exit = () => ({ exitCode: 1, reason: "Error", startedAt: second(), finishedAt: second() });
  const running = (restarts: number, last?: ReturnType<typeof exit>) => ({
    name: "app",
    init: false as const,
    state: "running" as const,
    restarts,
    startedAt: second(),
    ...(last ? { last } : {}),
  });
  const backingOff = (restarts: number, last: ReturnType<typeof exit>) => ({
    name: "app",
    init: false as const,
    state: "waiting" as const,
    reason: "CrashLoopBackOff",
    restarts,
    last,
  });
  /** kstatus itself on the WorkloadDeployment and the Workload as stored now. */
  const verdicts = async () =>
    kstatus([await get("WorkloadDeployment", "loop-eu"), await get("Workload", "loop")]).map(
      (v) => v.status,
    );

  it("never reads Available=True or Current while the container restarts, and turns available when the window ends with no other event", async () => {
    await createObject(kc, loopNs, "Workload", "loop", {
      spec: { placements: [{ name: "eu", replicas: 1 }] },
    });
    await createObject(kc, loopNs, "WorkloadDeployment", "loop-eu", {
      spec: {
        workloadRef: { name: "loop" },
        placement: "eu",
        replicas: 1,
        selector: { matchLabels: { app: "loop" } },
      },
    });
    await core.createNamespacedPod({
      namespace: loopNs,
      body: podTemplate("loop-eu-0", loopNs, { app: "loop" }),
    });

    // Its first start: up and ready, nothing has crashed yet.
    await step(running(0));
    await eventually("first start available", async () =>
      (await available("Workload", "loop"))?.status === "True" ? true : undefined,
    );
    expect(await verdicts()).toEqual(["Current", "Current"]);

    // Exit, back-off, run again (Ready for the kubelet), exit, back-off, run again.
    const seen: string[][] = [];
    const messages: string[] = [];
    let last = exit();
    const sequence = [
      () => backingOff(1, last),
      () => running(1, last),
      () => {
        last = exit();
        return backingOff(2, last);
      },
      () => running(2, last),
    ];
    let lastStart = 0;
    for (const next of sequence) {
      const container = next();
      await step(container);
      if (container.state === "running") lastStart = Date.parse(container.startedAt);
      await eventually("the crash reaches the Workload", async () =>
        (await available("Workload", "loop"))?.reason === "InstanceCrashing" ? true : undefined,
      );
      // Give the watch event time to arrive, then let the queues drain.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      await idle();
      const wd = await available("WorkloadDeployment", "loop-eu");
      expect([wd?.status, wd?.reason]).toEqual(["False", "InstanceCrashing"]);
      messages.push(wd?.message ?? "");
      const v = await verdicts();
      seen.push(v);
      for (const verdict of v) expect(["InProgress", "Failed"]).toContain(verdict);
    }
    expect(Date.now()).toBeLessThan(lastStart + WINDOW_S * 1000);
    // One sentence for the back-off and the run after it: restart count and last exit, no age.
    for (const message of messages) {
      expect(message).toMatch(
        /^1 of 1 instances is repeatedly exiting and restarting: container "app" has exited and restarted [12] times? without staying up for 6 seconds\. Its last exit was with code 1\.$/,
      );
    }
    expect(new Set(messages).size).toBe(2);

    // No other event: the requeue at the window's end turns it available.
    const wd = await eventually(
      "Available=True after the window",
      async () => {
        const c = await available("WorkloadDeployment", "loop-eu");
        return c?.status === "True" ? c : undefined;
      },
      WINDOW_S * 1000 + 30_000,
    );
    const lateMs = Date.now() - (lastStart + WINDOW_S * 1000);
    const flippedAfterMs = Date.parse(wd.lastTransitionTime) - lastStart;
    console.log(
      `figure: kstatus over the crash loop ${JSON.stringify(seen)}; Available=True ${flippedAfterMs} ms after the last start by its lastTransitionTime (window ${WINDOW_S * 1000} ms), seen ${lateMs} ms after the window's end`,
    );
    expect(flippedAfterMs).toBeGreaterThanOrEqual(WINDOW_S * 1000);
    expect(wd.reason).toBe("ReadyInstanceFound");
    await eventually("the Workload available", async () =>
      (await available("Workload", "loop"))?.status === "True" ? true : undefined,
    );
    await idle();
    expect(await verdicts()).toEqual(["Current", "Current"]);
  });
});

describe("scenario 5: an unchanged world", () => {
  /** How long the world stays unchanged (default 15 s; the figure of the README used 10 minutes). */
  const windowMs = Number(process.env.STEADY_WINDOW_MS ?? 15_000);
  it(
    "writes no status while every object is reconciled again and again (counted from a watch)",
    async () => {
      // Let the scenarios above settle: nothing pending in any queue.
      await eventually("idle queues", async () => {
        const depths = Object.values(operator.controllers).map(
          (c) => c.queue.len() + c.queue.inFlight(),
        );
        return depths.every((d) => d === 0) ? true : undefined;
      });
      const watch = new Watch(kc);
      const modified: string[] = [];
      const aborts: AbortController[] = [];
      for (const plural of Object.values(PLURALS)) {
        const list = (await kc.makeApiClient(CustomObjectsApi).listNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ns,
          plural,
        })) as {
          metadata: { resourceVersion: string };
        };
        aborts.push(
          await watch.watch(
            `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${plural}`,
            { resourceVersion: list.metadata.resourceVersion, allowWatchBookmarks: false },
            (type, object: { metadata?: { name?: string } }) => {
              if (type === "MODIFIED") modified.push(`${plural}/${object.metadata?.name}`);
            },
            () => undefined,
          ),
        );
      }
      // Reconcile every object again, repeatedly, for the window (a forced resync every second).
      const deadline = Date.now() + windowMs;
      let rounds = 0;
      while (Date.now() < deadline) {
        for (const [kind, controller] of [
          ["Workload", operator.controllers.workloads],
          ["WorkloadDeployment", operator.controllers.workloadDeployments],
          ["Instance", operator.controllers.instances],
        ] as const) {
          const list = (await kc.makeApiClient(CustomObjectsApi).listNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            namespace: ns,
            plural: PLURALS[kind],
          })) as {
            items: { metadata: { name: string } }[];
          };
          for (const item of list.items) controller.enqueue(`${ns}/${item.metadata.name}`);
        }
        rounds++;
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
      for (const abort of aborts) abort.abort();
      console.log(
        `figure: ${modified.length} status writes in ${windowMs} ms over ${rounds} forced reconcile rounds`,
      );
      expect(rounds).toBeGreaterThan(1);
      expect(modified).toEqual([]);
    },
    windowMs + 60_000,
  );
});
