import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import type { V1Pod } from "@kubernetes/client-node";
import {
  CONSOLE_REPORT_MARKER,
  LOG_FALLBACK_MAX_BYTES,
  LOG_FALLBACK_MAX_LINES,
  MAX_TERMINATION_MESSAGE_BYTES,
  REPORT_CHUNK_SIZE,
  REPORT_CHUNK_TAG_PREFIX,
  REPORT_MAX_CHUNKS,
  REPORT_TAG_KEY,
  REPORT_VERSION,
  TAG_BUDGET_STEPS,
} from "@nebula/state-mapping";
import { bootstrapScript } from "./bootstrap.js";
import { UserDataError } from "./errors.js";
import {
  MAX_USER_DATA_BYTES,
  RenderOptions,
  type RenderOptionsInput,
  type ResolvedRenderOptions,
} from "./options.js";
import {
  MAX_POD_PARAMETERS,
  type PARAMETER_INSTANCE_TAG,
  POD_PARAMETER_VALUE_CHARS,
  type PodParameter,
  type PodSources,
  podParameterPrefix,
  type RenderNotice,
  supervisorParameterPrefix,
} from "./parameters.js";
import {
  type ContainerPlan,
  type PlannedFile,
  type PodPlan,
  resolvePodPlan,
  SERVICE_PROXY_TOKEN_PATH,
} from "./pod.js";
import { bashQuote, shQuote } from "./quote.js";
import { PARAMETERS_ONLY_PART, SUPERVISOR_TEMPLATE } from "./supervisor.sh.js";
import { podTokenParameterName } from "./tokens.js";

/** Where the user-data installs the supervisor and its data (the guest contract). */
const SUPERVISOR_PATH = "/usr/local/lib/nebula/supervisor.sh";
/** The systemd unit the user-data installs and starts. */
const SUPERVISOR_UNIT = "nebula-supervisor.service";

/**
 * The CloudWatch metrics the supervisor publishes per container (with `metrics` on), in the
 * options' namespace (default `Nebula`), with the dimensions `PodUID` (the Pod's UID) and
 * `Container` (the container's name); one datum per sample, each with its own timestamp.
 */
export const USAGE_METRICS = {
  /**
   * Cumulative CPU time of the container's current run, in core-seconds (unit `Seconds`): `docker
   * stats`' CPU percentage integrated over the time between samples; from 0 at each restart.
   */
  cpu: "CPUUsageCoreSeconds",
  /** The container's working set (`docker stats`' memory usage, page cache excluded), unit `Bytes`. */
  memory: "MemoryWorkingSetBytes",
} as const;

/**
 * The CloudWatch log stream of one container run (with `logs` on):
 * `<namespace>/<pod>/<pod-uid>/<container>/<restart>`, `restart` being 0 for the first run and the
 * container's restart count after that.
 *
 * @param run - the Pod's namespace, name and UID, the container's name and its restart count.
 * @returns the stream name, as the supervisor passes it to Docker's `awslogs-stream`.
 * @example
 * ```ts
 * containerLogStream({ namespace: "shop", pod: "web-1", uid: "8f3a", container: "app", restart: 0 });
 * // "shop/web-1/8f3a/app/0"
 * ```
 */
export function containerLogStream(run: {
  readonly namespace: string;
  readonly pod: string;
  readonly uid: string;
  readonly container: string;
  readonly restart: number;
}): string {
  return `${run.namespace}/${run.pod}/${run.uid}/${run.container}/${run.restart}`;
}

/** User-data ready for `RunInstances`, with what went into it. */
export interface RenderedUserData {
  /** Base64 of the user-data bytes, as `RunInstances` takes it (`UserData`). */
  readonly userData: string;
  /** Size of the user-data in bytes before base64 (what EC2's 16 KiB limit counts). */
  readonly bytes: number;
  /** True when the script was gzipped to fit (cloud-init gunzips it). */
  readonly gzipped: boolean;
  /** The user-data script in clear (bash), for logs and review. */
  readonly script: string;
  /**
   * With `delivery: "parameters"`: the SSM `SecureString` parameters to write (and tag with the
   * instance's ARN, {@link PARAMETER_INSTANCE_TAG}) before the instance can start the Pod; they
   * hold the Pod's spec and its ConfigMap and Secret values. Empty with `delivery: "user-data"`.
   */
  readonly parameters: readonly PodParameter[];
  /**
   * With `delivery: "parameters"`: the host supervisor's own parameters (type `String`: it is not
   * secret), which the user-data reads at boot. Named after the supervisor's SHA-256, so the same
   * for every Pod of the cluster rendered by this version: write them once (create, and take
   * "already exists" as done); they are not the Pod's, so its teardown leaves them. Empty with
   * `delivery: "user-data"`.
   */
  readonly sharedParameters: readonly PodParameter[];
  /**
   * Things the caller should tell the user as Events (Kubernetes reasons such as
   * `OptionalSecretNotFound`): the Pod renders, but not everything it references was there.
   */
  readonly notices: readonly RenderNotice[];
}

/** The result of {@link renderUserData}: user-data, or a typed error. Never both, never a partial script. */
export type RenderResult =
  | { readonly ok: true; readonly value: RenderedUserData }
  | { readonly ok: false; readonly error: UserDataError };

const PLACEHOLDERS: Record<string, string> = {
  REPORT_VERSION: String(REPORT_VERSION),
  REPORT_TAG_KEY,
  REPORT_CHUNK_TAG_PREFIX,
  REPORT_CHUNK_SIZE: String(REPORT_CHUNK_SIZE),
  REPORT_MAX_CHUNKS: String(REPORT_MAX_CHUNKS),
  TAG_BUDGET_STEPS: TAG_BUDGET_STEPS.join(" "),
  MAX_TERMINATION_MESSAGE_BYTES: String(MAX_TERMINATION_MESSAGE_BYTES),
  LOG_FALLBACK_MAX_BYTES: String(LOG_FALLBACK_MAX_BYTES),
  LOG_FALLBACK_MAX_LINES: String(LOG_FALLBACK_MAX_LINES),
  CONSOLE_REPORT_MARKER,
};

/**
 * The host supervisor script exactly as the user-data installs it: the bash source with the
 * exit-report constants of `@nebula/state-mapping` embedded, so writer and reader cannot drift.
 *
 * @param options - `delivery`: the variant that delivery installs. `"parameters"` (the default):
 *   the whole script, as the shared supervisor parameters hold it. `"user-data"`: the script
 *   without what only the Parameter Store delivery runs (reading pod.sh and the service-account
 *   tokens from SSM), as the user-data delivery embeds it, since there every byte counts against
 *   EC2's 16 KiB.
 * @returns the script.
 */
export function supervisorScript(
  options: { readonly delivery?: "user-data" | "parameters" } = {},
): string {
  const template =
    options.delivery === "user-data"
      ? SUPERVISOR_TEMPLATE.replace(PARAMETERS_ONLY_PART, "")
      : SUPERVISOR_TEMPLATE;
  return template.replace(/@@([A-Z_]+)@@/g, (whole, name: string) => PLACEHOLDERS[name] ?? whole);
}

/**
 * Builds the EC2 user-data for one Pod: a bash script that installs the Nebula host supervisor as a
 * systemd unit, with the Pod's containers rendered into a data file, and starts it. Pure: no clock,
 * no environment, no file system; the same Pod and options always give the same bytes.
 *
 * Returns `{ ok: false, error }` with a {@link UserDataError} for an invalid Pod, a Secret- or
 * ConfigMap-sourced value, an unsupported volume or field, or user-data that does not fit 16 KiB even
 * gzipped. Never throws on data it is handed.
 *
 * @param pod - the Pod (a `V1Pod`, or any object of that shape; it is validated).
 * @param options - cluster name, agents, back-off, image-pull attempts, default restart cap, report
 *   retries, compression (see {@link RenderOptions}); all optional.
 * @example
 * ```ts
 * const result = renderUserData(pod, { cluster: "prod" });
 * if (!result.ok) throw result.error;
 * await ec2.send(new RunInstancesCommand({ UserData: result.value.userData, ... }));
 * ```
 */
export function renderUserData(
  pod: V1Pod,
  options: RenderOptionsInput = {},
  sources?: PodSources,
): RenderResult {
  const parsedOptions = RenderOptions.safeParse(options);
  if (!parsedOptions.success) {
    const issue = parsedOptions.error.issues[0];
    const path = issue?.path.map(String).join(".") || "options";
    return {
      ok: false,
      error: new UserDataError(
        "InvalidOptions",
        path,
        `invalid options at ${path}: ${issue?.message ?? "invalid"}`,
        parsedOptions.error,
      ),
    };
  }
  const resolved = parsedOptions.data;
  const plan = resolvePodPlan(pod, resolved, sources);
  if (plan instanceof UserDataError) return { ok: false, error: plan };
  if ((resolved.logs || resolved.metrics) && (plan.uid === "" || plan.name === "")) {
    const field = plan.uid === "" ? "metadata.uid" : "metadata.name";
    return {
      ok: false,
      error: new UserDataError(
        "InvalidPod",
        field,
        `the Pod has no ${field}: its log streams and metrics are named after it`,
      ),
    };
  }
  if (resolved.delivery === "parameters") return renderWithParameters(plan, resolved);

  return finish(
    plan,
    resolved,
    userDataScript(plan, resolved, podFile(podData(plan, resolved, []))),
    [],
    [],
  );
}

/** Compresses the script when it must, checks EC2's 16 KiB, and returns the rendered result. */
function finish(
  plan: PodPlan,
  options: ResolvedRenderOptions,
  script: string,
  parameters: readonly PodParameter[],
  sharedParameters: readonly PodParameter[],
): RenderResult {
  const clear = Buffer.from(script, "utf8");
  const mustZip =
    options.compression === "always" ||
    (options.compression === "auto" && clear.length > MAX_USER_DATA_BYTES);
  const bytes = mustZip ? gzipSync(clear, { level: 9 }) : clear;
  if (bytes.length > MAX_USER_DATA_BYTES) {
    return { ok: false, error: tooLarge(plan, clear.length, bytes.length, mustZip) };
  }
  return {
    ok: true,
    value: {
      userData: bytes.toString("base64"),
      bytes: bytes.length,
      gzipped: mustZip,
      script,
      parameters,
      sharedParameters,
      notices: plan.notices,
    },
  };
}

/** Base64 text in values of {@link POD_PARAMETER_VALUE_CHARS}, named `<prefix>0`, `<prefix>1`, ... */
function chunked(prefix: string, payload: string): PodParameter[] {
  const count = Math.ceil(payload.length / POD_PARAMETER_VALUE_CHARS);
  return Array.from({ length: count }, (_, i) => ({
    name: `${prefix}${i}`,
    value: payload.slice(i * POD_PARAMETER_VALUE_CHARS, (i + 1) * POD_PARAMETER_VALUE_CHARS),
  }));
}

/** The three largest of `extra` and each container's env and argv, for a size error. */
function largestParts(plan: PodPlan, extra: readonly (readonly [string, number])[]): string {
  const parts: (readonly [string, number])[] = [...extra];
  for (const c of plan.containers) {
    parts.push([`env of container ${c.name}`, c.weight.env]);
    parts.push([`command and args of container ${c.name}`, c.weight.argv]);
  }
  return [...parts]
    .sort((a, b) => b[1] - a[1])
    .filter(([, n]) => n > 0)
    .slice(0, 3)
    .map(([what, n]) => `${what} (${n} bytes)`)
    .join(", ");
}

/**
 * The parameters delivery: pod.sh (with the ConfigMap and Secret values and the agent shims) goes
 * gzipped and base64 into at most {@link MAX_POD_PARAMETERS} parameters; the user-data holds the
 * supervisor, their names and the SHA-256 of what they hold.
 */
function renderWithParameters(plan: PodPlan, options: ResolvedRenderOptions): RenderResult {
  if (plan.uid === "")
    return {
      ok: false,
      error: new UserDataError(
        "InvalidPod",
        "metadata.uid",
        "the Pod has no metadata.uid: its parameters are named after it",
      ),
    };
  const shims: PlannedFile[] = plan.containers.flatMap((c, i) =>
    c.agents.length > 0
      ? [{ path: `${LIB}/shim-${i}.sh`, mode: 0o755, data: Buffer.from(shim(c.agents), "utf8") }]
      : [],
  );
  const data = Buffer.from(podData(plan, options, shims), "utf8");
  const payload = gzipSync(data, { level: 9 }).toString("base64");
  if (Math.ceil(payload.length / POD_PARAMETER_VALUE_CHARS) > MAX_POD_PARAMETERS) {
    const top = largestParts(plan, plan.sourceWeights);
    return {
      ok: false,
      error: new UserDataError(
        "SourceTooLarge",
        "spec",
        `the Pod's spec with its ConfigMap and Secret values is ${payload.length} characters gzipped and base64, over the ${MAX_POD_PARAMETERS * POD_PARAMETER_VALUE_CHARS} that ${MAX_POD_PARAMETERS} parameters of ${POD_PARAMETER_VALUE_CHARS} carry; the largest parts before compression: ${top}`,
      ),
    };
  }
  const parameters = chunked(podParameterPrefix(options.cluster, plan.uid), payload);
  const ref = [
    "# shellcheck shell=bash disable=SC2034",
    "# Where the Pod's spec is: SSM parameters only this instance may read (@nebula/userdata).",
    array(
      "POD_PARAMETERS",
      parameters.map((p) => p.name),
    ),
    `POD_SHA256=${createHash("sha256").update(data).digest("hex")}`,
    `PARAMETER_WAIT_SECONDS=${options.parameterWaitSeconds}`,
    "",
  ].join("\n");
  const shared = {
    ...supervisorParameters(options.cluster),
    waitSeconds: options.parameterWaitSeconds,
  };
  const script = userDataScript(
    plan,
    options,
    `cat >${LIB}/pod.ref <<'NEBULA_POD'\n${ref}NEBULA_POD\n`,
    shared,
  );
  return finish(plan, options, script, parameters, shared.parameters);
}

function tooLarge(
  plan: PodPlan,
  clearBytes: number,
  finalBytes: number,
  gzipped: boolean,
): UserDataError {
  const top = largestParts(plan, [
    ["the supervisor script", Buffer.byteLength(supervisorScript({ delivery: "user-data" }))],
  ]);
  return new UserDataError(
    "TooLarge",
    "spec.containers",
    `user-data is ${finalBytes} bytes${gzipped ? ` gzipped (${clearBytes} in clear)` : ""}, over EC2's limit of ${MAX_USER_DATA_BYTES}; the largest parts before compression: ${top}`,
  );
}

function array(name: string, values: readonly string[]): string {
  return `${name}=(${values.map(bashQuote).join(" ")})`;
}

const LIB = "/usr/local/lib/nebula";

/** The user-data lines that write pod.sh in clear (the user-data delivery). */
function podFile(data: string): string {
  return `cat >${LIB}/pod.sh <<'NEBULA_POD'\n${data}NEBULA_POD\n`;
}

/**
 * The data file the supervisor sources: every value from the Pod in bash ANSI-C quoting, and the
 * files to write before the containers start (`extra`: the agent shims of the parameters delivery).
 */
function podData(
  plan: PodPlan,
  options: ResolvedRenderOptions,
  extra: readonly PlannedFile[],
): string {
  const files = [...plan.files, ...extra];
  const c = plan.containers;
  const lines = [
    "# shellcheck shell=bash disable=SC2034",
    "# Pod data for the Nebula host supervisor, generated by @nebula/userdata.",
    `POD_NAME=${bashQuote(plan.name)}`,
    `POD_NAMESPACE=${bashQuote(plan.namespace)}`,
    `POD_UID=${bashQuote(plan.uid)}`,
    `CLUSTER=${bashQuote(options.cluster)}`,
    `RESTART_POLICY=${plan.restartPolicy}`,
    `GRACE_SECONDS=${plan.graceSeconds}`,
    `RESTART_LIMIT=${plan.restartLimit}`,
    `BACKOFF_INITIAL=${options.backoff.initialSeconds}`,
    `BACKOFF_MAX=${options.backoff.maxSeconds}`,
    `BACKOFF_RESET=${options.backoff.resetAfterSeconds}`,
    `PULL_ATTEMPTS=${options.imagePull.maxAttempts}`,
    `REPORT_ATTEMPTS=${options.report.retryAttempts}`,
    `REPORT_BASE_MS=${options.report.retryBaseMs}`,
    `HOST_NETWORK=${plan.hostNetwork ? 1 : 0}`,
    `SANDBOX_IMAGE=${bashQuote(options.sandbox.image)}`,
    array("SANDBOX_CMD", options.sandbox.command),
    array("SANDBOX_FLAGS", plan.sandboxFlags),
    array("HOST_ALIASES", plan.hostAliases),
    `POD_FQDN=${bashQuote(plan.fqdn ?? "")}`,
    `N=${c.length}`,
    array(
      "NAMES",
      c.map((x) => x.name),
    ),
    array(
      "INIT",
      c.map((x) => (x.init ? "1" : "0")),
    ),
    array(
      "IMAGES",
      c.map((x) => x.image),
    ),
    array(
      "PULL_POLICY",
      c.map((x) => x.pullPolicy),
    ),
    array(
      "TM_PATH",
      c.map((x) => x.terminationMessagePath),
    ),
    array(
      "TM_POLICY",
      c.map((x) => x.terminationMessagePolicy),
    ),
    array(
      "HAS_CMD",
      c.map((x) => (x.command ? "1" : "0")),
    ),
    array(
      "HAS_ARGS",
      c.map((x) => (x.args ? "1" : "0")),
    ),
    array(
      "SIDECAR",
      c.map((x) => (x.sidecar ? "1" : "0")),
    ),
    array(
      "PROBED",
      c.map((x) =>
        x.probes.startup.length + x.probes.liveness.length + x.probes.readiness.length > 0
          ? "1"
          : "0",
      ),
    ),
    array(
      "NONROOT",
      c.map((x) => x.nonRoot),
    ),
    array(
      "SHIM",
      c.map((x) => (x.agents.length > 0 ? "1" : "0")),
    ),
    array("HOST_DIRS", plan.hostDirs),
    array(
      "FILE_PATH",
      files.map((f) => f.path),
    ),
    array(
      "FILE_MODE",
      files.map((f) => f.mode.toString(8).padStart(4, "0")),
    ),
    array(
      "FILE_DATA",
      files.map((f) => f.data.toString("base64")),
    ),
    `DOCKER_AUTH=${bashQuote(plan.dockerConfig === undefined ? "" : Buffer.from(plan.dockerConfig, "utf8").toString("base64"))}`,
    // Only when turned on, so a render without them stays byte for byte what it was.
    ...(options.logs ? [`LOG_GROUP=${bashQuote(options.logs.group)}`] : []),
    ...(options.metrics
      ? [
          `METRICS_NAMESPACE=${bashQuote(options.metrics.namespace)}`,
          `METRICS_SAMPLE=${options.metrics.sampleSeconds}`,
          `METRICS_PUBLISH=${options.metrics.publishSeconds}`,
        ]
      : []),
    ...(options.doorbell ? [`DOORBELL_QUEUE_URL=${bashQuote(options.doorbell.queueUrl)}`] : []),
    // Service-account token files (the parameters delivery only): where, which token, which mode;
    // the tokens themselves come from TOKEN_PARAMETER on the host, never from pod.sh.
    ...(plan.tokens.length > 0
      ? [
          array(
            "TOKEN_PATH",
            plan.tokens.map((t) => t.path),
          ),
          array(
            "TOKEN_KEY",
            plan.tokens.map((t) => t.key),
          ),
          array(
            "TOKEN_MODE",
            plan.tokens.map((t) => t.mode.toString(8).padStart(4, "0")),
          ),
          `TOKEN_PARAMETER=${bashQuote(podTokenParameterName(options.cluster, plan.uid))}`,
          `TOKEN_POLL=${plan.tokenPollSeconds}`,
        ]
      : []),
    // The service proxy (kube-proxy in the Pod's network namespace: proxy.sh): the API server, its
    // CA, the Node it proxies for, the binary, and its token's file (one of TOKEN_PATH).
    ...(plan.serviceProxy === undefined ? [] : proxyLines(plan.serviceProxy)),
    // The host agent (host-agent.sh): its binary, its port, the client certificates it accepts.
    ...(plan.hostAgent === undefined
      ? []
      : [
          `AGENT_BIN=${bashQuote(plan.hostAgent.binary)}`,
          `AGENT_PORT=${plan.hostAgent.port}`,
          `AGENT_CLIENT_FP=${bashQuote(plan.hostAgent.clientFingerprints.join(","))}`,
        ]),
  ];
  c.forEach((x: ContainerPlan, i) => {
    lines.push(array(`C${i}_FLAGS`, x.createFlags));
    lines.push(array(`C${i}_CMD`, x.command ?? []));
    lines.push(array(`C${i}_ARGS`, x.args ?? []));
    lines.push(array(`C${i}_HOSTIP`, x.hostIpEnv));
    const p = x.probes;
    if (p.startup.length > 0) lines.push(array(`C${i}_PROBE_S`, p.startup));
    if (p.liveness.length > 0) lines.push(array(`C${i}_PROBE_L`, p.liveness));
    if (p.readiness.length > 0) lines.push(array(`C${i}_PROBE_R`, p.readiness));
    if (p.postStart.length > 0) lines.push(array(`C${i}_POST`, p.postStart));
    if (p.preStop.length > 0) lines.push(array(`C${i}_PRE`, p.preStop));
  });
  return `${lines.join("\n")}\n`;
}

/** pod.sh's lines of the service proxy (`PROXY_*`). */
function proxyLines(proxy: NonNullable<PodPlan["serviceProxy"]>): string[] {
  const { host, port } = proxy.apiServer;
  const server = `https://${host.includes(":") ? `[${host}]` : host}:${port}`;
  return [
    `PROXY_SERVER=${bashQuote(server)}`,
    `PROXY_CA=${bashQuote(Buffer.from(proxy.caCert, "utf8").toString("base64"))}`,
    `PROXY_NODE=${bashQuote(proxy.nodeName)}`,
    `PROXY_BIN=${bashQuote(proxy.binary)}`,
    `PROXY_TOKEN=${bashQuote(SERVICE_PROXY_TOKEN_PATH)}`,
  ];
}

/** The in-container agent shim (POSIX sh): agents in the background, then the workload as PID 1. */
function shim(agents: readonly (readonly string[])[]): string {
  return [
    "#!/bin/sh",
    "# shellcheck disable=SC2016 # agent arguments are literal strings",
    "# Nebula agent shim: starts the agents in the background, then execs the workload as PID 1,",
    "# so no agent outlives its workload.",
    ...agents.map((argv) => `${argv.map(shQuote).join(" ")} &`),
    'exec "$@"',
    "",
  ].join("\n");
}

function base64Lines(text: string): string {
  return (
    Buffer.from(text, "utf8")
      .toString("base64")
      .match(/.{1,76}/g) ?? []
  ).join("\n");
}

/** The supervisor gzipped in base64, and its SHA-256: computed on first use. */
let supervisorPayload: { readonly sha256: string; readonly base64: string } | undefined;

/** The supervisor as parameters: gzipped, base64, in values of 4096 characters, named by its SHA-256. */
function supervisorParameters(cluster: string): {
  readonly parameters: readonly PodParameter[];
  readonly sha256: string;
} {
  // The script is a constant: gzip and hash it once, not on every render (held Pods re-render
  // on every poll).
  supervisorPayload ??= (() => {
    const script = Buffer.from(supervisorScript(), "utf8");
    return {
      sha256: createHash("sha256").update(script).digest("hex"),
      base64: gzipSync(script, { level: 9 }).toString("base64"),
    };
  })();
  const { sha256, base64 } = supervisorPayload;
  return { sha256, parameters: chunked(supervisorParameterPrefix(cluster, sha256), base64) };
}

/**
 * The user-data script. `pod`: the lines that write pod.sh (user-data delivery) or pod.ref
 * (parameters delivery). With `shared` (parameters delivery) the supervisor is read from its
 * parameters by a bootstrap instead of being embedded, and the agent shims and host directories
 * are left to the supervisor (they travel in the Pod's parameters).
 */
function userDataScript(
  plan: PodPlan,
  options: ResolvedRenderOptions,
  pod: string,
  shared?: {
    readonly parameters: readonly PodParameter[];
    readonly sha256: string;
    readonly waitSeconds: number;
  },
): string {
  const inline = shared === undefined;
  // The endpoint overrides the unit passes on (tests, private endpoints): the logs',
  // CloudWatch's and SQS's (the doorbell) only when they are used.
  const endpoints = [
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_ENDPOINT_URL_EC2",
    "AWS_ENDPOINT_URL_SSM",
    ...(options.logs ? ["AWS_ENDPOINT_URL_LOGS"] : []),
    ...(options.metrics ? ["AWS_ENDPOINT_URL_CLOUDWATCH"] : []),
    ...(options.doorbell ? ["AWS_ENDPOINT_URL_SQS"] : []),
    "AWS_ENDPOINT_URL",
    "AWS_CA_BUNDLE",
  ].join(" ");
  const shims = (inline ? plan.containers : [])
    .map((c, i) =>
      c.agents.length > 0
        ? `base64 -d >/usr/local/lib/nebula/shim-${i}.sh <<'NEBULA_SHIM'\n${base64Lines(shim(c.agents))}\nNEBULA_SHIM\n`
        : "",
    )
    .join("");
  const dirs = ["/usr/local/lib/nebula", "/var/lib/nebula", ...(inline ? plan.hostDirs : [])]
    .map(bashQuote)
    .join(" ");
  const head = shared
    ? bootstrapScript(
        shared.parameters.map((p) => p.name),
        shared.sha256,
        SUPERVISOR_PATH,
        shared.waitSeconds,
      )
    : `#!/bin/bash
# Nebula user-data (@nebula/userdata): installs the host supervisor as a systemd unit and starts it.
set -euo pipefail
umask 022
mkdir -p ${dirs}
cat >${SUPERVISOR_PATH} <<'NEBULA_SUPERVISOR'
${supervisorScript({ delivery: "user-data" })}NEBULA_SUPERVISOR
`;
  return `${head}${pod}${shims}chmod 0755 ${SUPERVISOR_PATH}
{
  printf '%s\\n' '[Unit]' 'Description=Nebula host supervisor' 'After=network-online.target docker.service' \\
    'Wants=network-online.target docker.service' '' '[Service]' 'Type=simple' 'ExecStart=${SUPERVISOR_PATH}' \\
    'KillMode=mixed' 'TimeoutStopSec=${plan.graceSeconds + 30}' 'Restart=no'
  for name in ${endpoints}; do
    if [ -n "\${!name+set}" ]; then printf 'Environment=%s=%s\\n' "$name" "\${!name}"; fi
  done
  printf '%s\\n' '' '[Install]' 'WantedBy=multi-user.target'
} >/etc/systemd/system/${SUPERVISOR_UNIT}
systemctl daemon-reload
systemctl enable --now --no-block ${SUPERVISOR_UNIT}
`;
}
