/** The app's Prometheus metrics (`nebula_vnode_*`, listed in the README), from one helper. */
import type { V1Pod } from "@kubernetes/client-node";
import type { Ec2PodProvider } from "@nebula/provider";
import type { PodControllerMetrics } from "@nebula/virtual-node";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

type Observed = Pick<Ec2PodProvider, "gateway" | "instanceCounts" | "onLeakCollected" | "onPoll">;

/**
 * Registers the virtual node's metrics on `registry` and binds them: the provider's EC2 calls (counted
 * by its gateway), polls and collected leaks, the Pods by phase and instances by state (read
 * at scrape time). Returns what the Pod controller and the kubelet API report into.
 */
export function vnodeMetrics(
  registry: Registry,
  pods: { list(): readonly V1Pod[] },
  provider: Observed,
): { readonly pods: PodControllerMetrics; kubeletRequest(route: string, status: number): void } {
  const registers = [registry];
  const counter = <L extends string>(name: string, help: string, labelNames: L[] = []) =>
    new Counter<L>({ name: `nebula_vnode_${name}`, help, labelNames, registers });
  const histogram = <L extends string>(name: string, help: string, b: number[], l: L[] = []) =>
    new Histogram<L>({ name: `nebula_vnode_${name}`, help, buckets: b, labelNames: l, registers });
  const gauge = (name: string, help: string, label: string, read: () => Record<string, number>) =>
    new Gauge({
      name: `nebula_vnode_${name}`,
      help,
      labelNames: [label],
      registers,
      collect() {
        this.reset();
        for (const [value, count] of Object.entries(read())) this.set({ [label]: value }, count);
      },
    });

  const ec2Calls = counter("ec2_calls_total", "EC2 API calls by action and outcome", [
    "action",
    "outcome",
  ]);
  provider.gateway.onCall(({ service, action, outcome }) => {
    if (service === "ec2") ec2Calls.inc({ action, outcome });
  });
  const exitToStatus = histogram(
    "exit_to_status_seconds",
    "From a container's exit to the Pod status that says so being written",
    [0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300],
  );
  const terminalToTerminated = histogram(
    "terminal_to_terminated_seconds",
    "From a Pod turning terminal to its instance confirmed terminated",
    [1, 5, 10, 20, 30, 60, 120, 300, 600],
  );
  const statusWrites = counter("pod_status_writes_total", "Pod status writes by outcome", [
    "outcome",
  ]);
  gauge("pods", "Pods bound to this virtual node, by phase", "phase", () => {
    const phases: Record<string, number> = {};
    for (const pod of pods.list()) {
      const phase = pod.status?.phase ?? "Unknown";
      phases[phase] = (phases[phase] ?? 0) + 1;
    }
    return phases;
  });
  gauge("instances", "This node's EC2 instances by state, from the latest poll", "state", () =>
    provider.instanceCounts(),
  );
  const leaks = counter(
    "leaks_collected_total",
    "Instances the leak collector terminated (running with no live Pod)",
  );
  provider.onLeakCollected(() => leaks.inc());
  const polls = histogram(
    "poll_duration_seconds",
    "One poll cycle: DescribeInstances, statuses published, reclaims advanced",
    [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    ["outcome"],
  );
  provider.onPoll((result, s) => polls.observe({ outcome: result.ok ? "ok" : "error" }, s));
  const kubeletRequests = counter(
    "kubelet_api_requests_total",
    "Kubelet API requests by route and HTTP status",
    ["route", "status"],
  );
  return {
    pods: {
      statusWrite: (outcome) => statusWrites.inc({ outcome }),
      exitToStatus: (s) => exitToStatus.observe(s),
      terminalToTerminated: (s) => terminalToTerminated.observe(s),
    },
    kubeletRequest: (route, status) => kubeletRequests.inc({ route, status: String(status) }),
  };
}
