/**
 * The virtual node's Prometheus metrics (`nebula_vnode_*` by default): Pods by phase, the Pod
 * controller's status writes and latencies, the kubelet API's requests.
 *
 * @packageDocumentation
 */
import type { V1Pod } from "@kubernetes/client-node";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import type { PodControllerMetrics } from "./pod-controller.js";

/** What {@link virtualNodeMetrics} returns: where the Pod controller and the kubelet API report. */
interface VirtualNodeMetrics {
  /** The Pod controller's `metrics` option. */
  readonly pods: PodControllerMetrics;
  /** The kubelet API's `onRequest` option. */
  readonly kubeletRequest: (route: string, status: number) => void;
}

/**
 * Registers the virtual node's metrics on `registry` (a `prom-client` registry, e.g. `@nebula/kube`'s
 * `Manager.registry`): `<prefix>pods` (the Pods bound to the Node by phase, read at scrape time),
 * `<prefix>pod_status_writes_total`, `<prefix>exit_to_status_seconds`,
 * `<prefix>terminal_to_terminated_seconds`, `<prefix>terminal_to_terminate_seconds` and
 * `<prefix>kubelet_api_requests_total`.
 *
 * @example
 * ```ts
 * const metrics = virtualNodeMetrics(manager.registry, informer);
 * new PodController({ ...options, metrics: metrics.pods });
 * ```
 */
export function virtualNodeMetrics(
  registry: Registry,
  pods: { list(): readonly V1Pod[] },
  prefix = "nebula_vnode_",
): VirtualNodeMetrics {
  const registers = [registry];
  const histogram = (name: string, help: string, buckets: number[]) =>
    new Histogram({ name: `${prefix}${name}`, help, buckets, registers });
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
  const terminalToTerminate = histogram(
    "terminal_to_terminate_seconds",
    "From a Pod's terminal status written to TerminateInstances sent for its instance",
    [0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120],
  );
  const statusWrites = new Counter({
    name: `${prefix}pod_status_writes_total`,
    help: "Pod status writes by outcome",
    labelNames: ["outcome"],
    registers,
  });
  new Gauge({
    name: `${prefix}pods`,
    help: "Pods bound to this virtual node, by phase",
    labelNames: ["phase"],
    registers,
    collect() {
      this.reset();
      const phases: Record<string, number> = {};
      for (const pod of pods.list()) {
        const phase = pod.status?.phase ?? "Unknown";
        phases[phase] = (phases[phase] ?? 0) + 1;
      }
      for (const [phase, count] of Object.entries(phases)) this.set({ phase }, count);
    },
  });
  const kubeletRequests = new Counter({
    name: `${prefix}kubelet_api_requests_total`,
    help: "Kubelet API requests by route and HTTP status",
    labelNames: ["route", "status"],
    registers,
  });
  return {
    pods: {
      statusWrite: (outcome) => statusWrites.inc({ outcome }),
      exitToStatus: (s) => exitToStatus.observe(s),
      terminalToTerminated: (s) => terminalToTerminated.observe(s),
      terminalToTerminate: (s) => terminalToTerminate.observe(s),
    },
    kubeletRequest: (route, status) => kubeletRequests.inc({ route, status: String(status) }),
  };
}
