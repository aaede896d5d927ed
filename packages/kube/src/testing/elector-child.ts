/**
 * A leader-election contender in a process of its own, for tests that kill it outright
 * (SIGKILL): it campaigns on the Lease named in `NEBULA_ELECTOR` (JSON: kubeconfig path,
 * namespace, name, identity, timings) and prints `leading` when it leads.
 */
import { KubeConfig } from "@kubernetes/client-node";
import { LeaderElector } from "../leader/leader-elector.js";

const options = JSON.parse(process.env.NEBULA_ELECTOR ?? "{}") as {
  kubeconfig: string;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
};
const kubeConfig = new KubeConfig();
kubeConfig.loadFromFile(options.kubeconfig);
const { kubeconfig: _path, ...election } = options;
const elector = new LeaderElector(kubeConfig, election);
const stop = new AbortController();
process.once("SIGTERM", () => stop.abort());
const reason = await elector.run(stop.signal, {
  onStartedLeading: () => {
    process.stdout.write("leading\n");
  },
});
process.stdout.write(`stopped ${reason}\n`);
