/** Reads the world once: Pods, instances, Workloads, the vnode's EC2 call counts. */
import { DescribeInstancesCommand, type Instance } from "@aws-sdk/client-ec2";
import { ec2CallsByAction, parseMetrics, pollsDone } from "./metrics.js";
import {
  type InstanceView,
  type PodView,
  podView,
  type Snapshot,
  type StartupEventView,
  type WorkloadView,
  workloadView,
} from "./model.js";
import { CLUSTER, DEMO_NAMESPACE, type World } from "./world.js";

const GROUP = "compute.nebula.dev";
const VERSION = "v1alpha1";

async function listInstances(world: World): Promise<InstanceView[]> {
  const out: InstanceView[] = [];
  let token: string | undefined;
  do {
    const page = await world.ec2.send(
      new DescribeInstancesCommand({
        Filters: [{ Name: "tag:nebula:cluster", Values: [CLUSTER] }],
        MaxResults: 1000,
        ...(token ? { NextToken: token } : {}),
      }),
      { abortSignal: AbortSignal.timeout(10_000) },
    );
    for (const reservation of page.Reservations ?? []) {
      for (const instance of reservation.Instances ?? []) out.push(instanceView(instance));
    }
    token = page.NextToken || undefined;
  } while (token);
  return out;
}

function instanceView(instance: Instance): InstanceView {
  return {
    id: instance.InstanceId ?? "",
    state: instance.State?.Name ?? "unknown",
    podUid: instance.Tags?.find((t) => t.Key === "nebula:pod-uid")?.Value,
    stateReason: instance.StateReason?.Code,
    tags: Object.fromEntries(
      (instance.Tags ?? []).flatMap((t) =>
        t.Key === undefined || t.Value === undefined ? [] : [[t.Key, t.Value]],
      ),
    ),
  };
}

async function listWorkloads(world: World): Promise<WorkloadView[]> {
  const out: WorkloadView[] = [];
  for (const [kind, plural] of [
    ["Workload", "workloads"],
    ["WorkloadDeployment", "workloaddeployments"],
  ] as const) {
    const list = (await world.custom.listNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: DEMO_NAMESPACE,
      plural,
    })) as { items?: unknown[] };
    for (const item of list.items ?? []) out.push(workloadView(kind, item));
  }
  return out.sort((a, b) => a.kind.localeCompare(b.kind) || a.name.localeCompare(b.name));
}

/** The `StartupTimes` Events of the demo's Pods (nebula-vnode writes one when a Pod is first Ready). */
async function listStartupEvents(world: World): Promise<StartupEventView[]> {
  const list = await world.core.listNamespacedEvent({
    namespace: DEMO_NAMESPACE,
    fieldSelector: "reason=StartupTimes",
  });
  return list.items.map((e) => ({
    podUid: e.involvedObject.uid ?? "",
    podName: e.involvedObject.name ?? "",
    message: e.message ?? "",
  }));
}

/** The vnode's `/metrics`, parsed; `undefined` when it cannot be read. */
export async function scrapeVnode(
  world: World,
  app: "nebula-vnode" | "nebula-vnode-polled" = "nebula-vnode",
): Promise<Map<string, number> | undefined> {
  const vnode = world.apps.get(app);
  if (vnode === undefined) return undefined;
  try {
    const response = await fetch(`${vnode.url}/metrics`, { signal: AbortSignal.timeout(5_000) });
    return parseMetrics(await response.text());
  } catch {
    return undefined;
  }
}

/**
 * One snapshot. A part that cannot be read this time (a transient error) keeps its value from
 * `previous`.
 */
export async function observe(
  world: World,
  startedAt: number,
  previous: Snapshot,
): Promise<Snapshot> {
  const [pods, instances, workloads, metrics, startupEvents] = await Promise.all([
    world.core
      .listNamespacedPod({ namespace: DEMO_NAMESPACE })
      .then((list): PodView[] => list.items.map(podView))
      .catch(() => previous.pods),
    listInstances(world).catch(() => previous.instances),
    listWorkloads(world).catch(() => previous.workloads),
    scrapeVnode(world),
    listStartupEvents(world).catch(() => previous.startupEvents),
  ]);
  const at = Date.now();
  return {
    elapsedMs: at - startedAt,
    at,
    pods,
    instances,
    workloads,
    ec2Calls: metrics === undefined ? previous.ec2Calls : ec2CallsByAction(metrics),
    vnodePolls: metrics === undefined ? previous.vnodePolls : pollsDone(metrics),
    startupEvents,
  };
}
