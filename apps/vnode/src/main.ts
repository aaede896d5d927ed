import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import { connect } from "@nebula/kube";
import { runCli } from "@nebula/kube/cli";
import { Manager } from "@nebula/kube/controller";
import { createLogger } from "@nebula/kube/observability";
import { createVnode } from "./app.js";
import { cli } from "./cli.js";
import { loadAppConfig } from "./config.js";

/** How long in-flight reconciles may run after SIGTERM: 10 s less than the Deployment's grace. */
const DRAIN_TIMEOUT_MS = 20_000;
/**
 * A shutdown still running this long after SIGTERM or SIGINT is logged and the process exits 1:
 * 2 s before the Deployment's grace (30 s) ends in a SIGKILL that would say nothing.
 */
const SHUTDOWN_DEADLINE_MS = 28_000;

const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));

process.exitCode = await runCli(
  cli,
  process.argv.slice(2),
  { version: String(pkg.version) },
  async (flags) => {
    const logger = createLogger({ level: flags["log-level"], name: cli.name });
    // The command line's parse already refused a run without --config (exit code 2).
    if (flags.config === undefined) throw new Error("--config: is required");
    const config = loadAppConfig(flags.config, {
      nodeName: flags["node-name"],
      cluster: flags.cluster,
      podIP: process.env.POD_IP,
    });
    const connection = connect(
      flags.kubeconfig === undefined ? {} : { kubeconfig: flags.kubeconfig },
    );
    const namespace = flags.namespace ?? connection.namespace ?? "nebula-system";
    const identity = process.env.POD_NAME ?? hostname();
    const kubeConfig = connection.kubeConfig;
    // The last shutdown step reached, for the watchdog's line.
    let phase = "stop requested";
    const manager = new Manager({
      name: cli.name,
      onShutdownPhase: (step) => {
        phase = step;
      },
      kubeConfig,
      logger,
      // In-flight reconciles get 20 s after SIGTERM (an EC2 call under throttling can back off
      // for longer), so the ordered shutdown (lease released, servers closed, exit 0) ends within
      // the Deployment's terminationGracePeriodSeconds (30) instead of being killed at it.
      drainTimeoutMs: DRAIN_TIMEOUT_MS,
      metricsBindAddress: flags["metrics-bind-address"],
      healthProbeBindAddress: flags["health-probe-bind-address"],
      ...(flags["leader-elect"]
        ? {
            leaderElection: {
              namespace: flags["leader-election-namespace"] ?? namespace,
              name: `${cli.name}-${flags["node-name"]}`,
              identity,
            },
          }
        : {}),
    });
    const vnode = createVnode({ kubeConfig, config, manager, namespace, identity, logger });
    const watchdog = () => {
      setTimeout(() => {
        logger.error(
          { lastPhase: phase, deadlineMs: SHUTDOWN_DEADLINE_MS },
          "shutdown did not finish in time; exiting (teardowns in progress resume on the next start)",
        );
        process.exit(1);
      }, SHUTDOWN_DEADLINE_MS).unref();
    };
    process.once("SIGTERM", watchdog);
    process.once("SIGINT", watchdog);
    logger.info({ source: connection.source, node: flags["node-name"], namespace }, "starting");
    const exit = await manager.run();
    await vnode.close();
    logger.info({ reason: exit.reason, exitCode: exit.exitCode }, "stopped");
    return exit.exitCode;
  },
);
// The shutdown was ordered (leadership released, reconciles drained, servers closed): leave now
// rather than wait for idle keep-alive sockets.
process.exit();
