import { readFileSync } from "node:fs";
import { connect, createLogger, Manager, runCli } from "@nebula/kube";
import { cli } from "./cli.js";

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
    const namespace = flags["leader-election-namespace"] ?? connection.namespace ?? "default";
    const manager = new Manager({
      name: cli.name,
      kubeConfig: connection.kubeConfig,
      logger,
      metricsBindAddress: flags["metrics-bind-address"],
      healthProbeBindAddress: flags["health-probe-bind-address"],
      ...(flags["leader-elect"] ? { leaderElection: { namespace } } : {}),
    });
    // The roll-up controllers join the manager here; until then it serves probes and metrics only.
    logger.info({ source: connection.source }, "starting");
    return (await manager.run()).exitCode;
  },
);
