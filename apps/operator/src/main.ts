import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { connect } from "@nebula/kube";
import { runCli } from "@nebula/kube/cli";
import { createLogger } from "@nebula/kube/observability";
import { cli } from "./cli.js";
import { createOperator } from "./operator.js";

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return pkg.version;
}

process.exitCode = await runCli(
  cli,
  process.argv.slice(2),
  { version: version() },
  async (flags) => {
    const logger = createLogger({ level: flags["log-level"], name: cli.name });
    const connection = connect(
      flags.kubeconfig === undefined ? {} : { kubeconfig: flags.kubeconfig },
    );
    const leaseNamespace = flags["leader-election-namespace"] ?? connection.namespace ?? "default";
    const operator = createOperator({
      kubeConfig: connection.kubeConfig,
      namespace: flags.namespace,
      stabilityWindowSeconds: flags["stability-window-seconds"],
      logger,
      metricsBindAddress: flags["metrics-bind-address"],
      healthProbeBindAddress: flags["health-probe-bind-address"],
      identity: process.env.POD_NAME ?? hostname(),
      ...(flags["leader-elect"]
        ? {
            leaderElection: {
              namespace: leaseNamespace,
              name: "nebula-operator",
              // Unique per replica: the Pod's name in a cluster, else hostname plus a random suffix.
              ...(process.env.POD_NAME ? { identity: process.env.POD_NAME } : {}),
            },
          }
        : {}),
    });
    logger.info({ source: connection.source, namespace: flags.namespace ?? "(all)" }, "starting");
    const exit = await operator.manager.run();
    await operator.close();
    return exit.exitCode;
  },
);
