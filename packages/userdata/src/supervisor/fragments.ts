/**
 * The host supervisor's source: the bash files of this directory, one concern each, in the order
 * the embed step (`npm run embed`, `scripts/embed-supervisor.mjs`) joins them into the one script
 * the user-data installs as `/usr/local/lib/nebula/supervisor.sh`. Bash reads a function's body
 * only when it runs, so a fragment may call functions of any other; the top-level statements
 * (constants, globals, and `main "$@"` at the very end) run in this order.
 *
 * No imports: the embed script loads this file with Node's type stripping.
 */
export const SUPERVISOR_FRAGMENTS: readonly string[] = [
  // Constants (the report format's, filled in at render time), global state, pod.ref, logging,
  // time, background waits, IMDS identity. Starts with the shebang.
  "common.sh",
  // The exit report: its JSON, the shared message budget, the tag channel, CreateTags (aws CLI or
  // curl + SigV4, sigv4_post also serving the metrics and SSM calls), report().
  "report.sh",
  // Startup, liveness and readiness probes; postStart and preStop hooks.
  "probes.sh",
  // Native sidecars: their start order, and stopped after the regular containers.
  "sidecars.sh",
  // The container runtime: pulls, the image's command, exit capture, OOM kills, the exit watcher.
  "containers.sh",
  // Container logs (awslogs) and usage metrics (docker stats, PutMetricData).
  "usage.sh",
  // The Pod sandbox (the network namespace the containers share) and the IMDS block.
  "sandbox.sh",
  // Starting a container (runAsNonRoot, create, start), the init order, the restart policy.
  "restart.sh",
  // Stopping: the grace, the final report and power-off, the Spot interruption notice.
  "stop.sh",
  // The Pod's data: pod.sh (next to the supervisor, or read by parameters.sh), and its files.
  "pod-data.sh",
  // The Parameter Store delivery only (PARAMETERS_ONLY_FRAGMENTS): pod.sh from the Pod's SSM
  // parameters, and its service-account tokens. Functions only.
  "parameters.sh",
  // The Parameter Store delivery only: the service proxy (kube-proxy in the Pod's network
  // namespace). Functions only.
  "proxy.sh",
  // The Parameter Store delivery only: the host agent (kubectl exec, attach, port-forward for the
  // virtual node). Functions only.
  "host-agent.sh",
  // The main loop, and the call of main.
  "main.sh",
];

/**
 * The fragments only the Parameter Store delivery installs (the supervisor of its shared
 * parameters): the user-data delivery's supervisor is the others joined, since there their bytes
 * would count against EC2's 16 KiB for nothing. Functions only, each called under a guard that
 * only this delivery's pod.ref or pod.sh sets (`POD_PARAMETERS`, `TOKEN_POLL`, `PROXY_SERVER`,
 * `AGENT_PORT`), so the script without them runs.
 */
export const PARAMETERS_ONLY_FRAGMENTS: readonly string[] = [
  "parameters.sh",
  "proxy.sh",
  "host-agent.sh",
];

/**
 * Joins shell fragments into one script. Each fragment opens with a header, its lines before the
 * first blank line, all comments: what shellcheck needs to check the fragment as a file of its own
 * (`# shellcheck shell=bash`, or the shebang in the first fragment, and the `disable`s its
 * cross-fragment names need). The headers are dropped, except the first fragment's shebang, which
 * starts the script; the rest of each fragment follows in order, a blank line between two.
 *
 * @param fragments - the fragments' texts, in order; the first starts with a shebang, no other does.
 * @returns the script.
 * @throws Error when a fragment has no header, a header holds a line that is not a comment, or the
 *   shebang is missing from the first fragment or present in another.
 */
export function assembleShell(fragments: readonly string[]): string {
  const bodies = fragments.map((text, k) => {
    const lines = text.split("\n");
    // The last "line" is what follows the final newline: no blank line.
    const end = lines.slice(0, -1).findIndex((line) => line.trim() === "");
    if (end < 0) throw new Error(`fragment ${k + 1} has no header (no blank line)`);
    const header = lines.slice(0, end);
    const code = header.find((line) => !line.startsWith("#"));
    if (code !== undefined) throw new Error(`fragment ${k + 1}: code in its header: ${code}`);
    if ((k === 0) !== header[0]?.startsWith("#!")) {
      throw new Error(`fragment ${k + 1}: only the first fragment starts with a shebang`);
    }
    return lines.slice(end + 1).join("\n");
  });
  const shebang = fragments[0]?.split("\n")[0] ?? "";
  return `${shebang}\n${bodies.join("\n")}`;
}
