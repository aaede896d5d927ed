/**
 * `npm run serve` (in this package, after its build): starts a whole set (control plane + moto) for a person (a demo, a debugging
 * session), writes the admin kubeconfig to a file, prints the variables that point tools at the
 * peers, and stops everything on Ctrl-C.
 *
 *   npx nx run @nebula/test-peers:build && node packages/test-peers/dist/serve.js [--kubeconfig <path>] [--controllers] [--scheduler] [--ec2-events]
 *   # then, in another shell, paste the printed `export` lines: kubectl get ns; aws ec2 describe-instances
 */
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { kubectlPath } from "./control-plane.js";
import { startTestPeers } from "./peers.js";

const Args = z.object({
  kubeconfig: z.string().min(1).optional(),
  controllers: z.boolean().optional(),
  scheduler: z.boolean().optional(),
  "ec2-events": z.boolean().optional(),
});

const { values } = parseArgs({
  options: {
    kubeconfig: { type: "string" },
    // Also run kube-controller-manager (Deployments → Pods, GC, node leases) and kube-scheduler.
    controllers: { type: "boolean" },
    scheduler: { type: "boolean" },
    // Play EC2's own events on moto's EventBridge (startEc2Events); rules deliver them.
    "ec2-events": { type: "boolean" },
  },
  strict: true,
});
const args = Args.parse(values);
const peers = await startTestPeers({
  controlPlane: { controllers: args.controllers ?? false, scheduler: args.scheduler ?? false },
  ec2Events: args["ec2-events"] ?? false,
});
const info = peers.info();
const kubeconfigPath = args.kubeconfig ?? join(process.cwd(), "nebula-test-peers.kubeconfig");
writeFileSync(kubeconfigPath, info.controlPlane?.kubeconfig ?? "", { mode: 0o600 });
const env: Record<string, string> = { KUBECONFIG: kubeconfigPath, ...peers.moto?.env };
process.stdout.write(
  [
    `# kube-apiserver ${info.controlPlane?.version} at ${info.controlPlane?.server}`,
    `# controllers: ${info.controlPlane?.controllers?.join(",") || "none"}; scheduler: ${info.controlPlane?.scheduler ? "yes" : "no"}`,
    `# moto at ${info.moto?.endpoint} (instance profile ${info.moto?.instanceProfiles[0]?.name})${info.ec2Events ? "; EC2's events go to its EventBridge" : ""}`,
    `# kubectl: ${kubectlPath()}`,
    ...Object.entries(env).map(([key, value]) => `export ${key}=${JSON.stringify(value)}`),
    "# Ctrl-C stops both and deletes their temporary files and this kubeconfig.",
    "",
  ].join("\n"),
);
const stop = (): void => {
  void peers.stop().then(() => {
    rmSync(kubeconfigPath, { force: true });
    process.exit(0);
  });
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
setInterval(() => {}, 60_000);
