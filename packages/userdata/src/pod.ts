import { z } from "zod";
import { dnsFlags, type PodDns, podDns } from "./dns.js";
import { formatDownwardMap } from "./downward.js";
import { UserDataError } from "./errors.js";
import type { ResolvedRenderOptions } from "./options.js";
import { HOST_NETWORK_ANNOTATION, RESTART_LIMIT_ANNOTATION } from "./options.js";
import type { PodSources, RenderNotice, SourceObject } from "./parameters.js";
import { ProbeFields, type ProbePlan, planProbes } from "./probes.js";
import { parseQuantity } from "./quantity.js";
import { serviceEnvironment } from "./service-env.js";
import {
  type PodTokenRequest,
  podTokenRequests,
  projectionRequest,
  tokenPollSeconds,
} from "./tokens.js";

// The subset of V1Pod the host honours, parsed loosely: unknown fields are kept and ignored.
const str = z.string();
const Profile = z.looseObject({ type: str, localhostProfile: str.optional() });
const KeyRef = z.looseObject({
  name: str.optional(),
  key: str.optional(),
  optional: z.boolean().optional(),
});
const EnvVar = z.looseObject({
  name: str,
  value: str.optional(),
  valueFrom: z
    .looseObject({
      secretKeyRef: KeyRef.optional(),
      configMapKeyRef: KeyRef.optional(),
      fieldRef: z.looseObject({ fieldPath: str }).optional(),
      resourceFieldRef: z.looseObject({ resource: str }).optional(),
    })
    .optional(),
});
const Container = z.looseObject({
  name: str,
  image: str.optional(),
  imagePullPolicy: z.enum(["Always", "IfNotPresent", "Never"]).optional(),
  command: z.array(str).optional(),
  args: z.array(str).optional(),
  workingDir: str.optional(),
  env: z.array(EnvVar).optional(),
  envFrom: z
    .array(
      z.looseObject({
        prefix: str.optional(),
        secretRef: z
          .looseObject({ name: str.optional(), optional: z.boolean().optional() })
          .optional(),
        configMapRef: z
          .looseObject({ name: str.optional(), optional: z.boolean().optional() })
          .optional(),
      }),
    )
    .optional(),
  resources: z
    .looseObject({
      limits: z.record(str, z.union([str, z.number()])).optional(),
      requests: z.record(str, z.union([str, z.number()])).optional(),
    })
    .optional(),
  securityContext: z
    .looseObject({
      runAsUser: z.number().int().min(0).optional(),
      runAsGroup: z.number().int().min(0).optional(),
      privileged: z.boolean().optional(),
      readOnlyRootFilesystem: z.boolean().optional(),
      allowPrivilegeEscalation: z.boolean().optional(),
      runAsNonRoot: z.boolean().optional(),
      seccompProfile: Profile.optional(),
      appArmorProfile: Profile.optional(),
      seLinuxOptions: z.looseObject({}).optional(),
      procMount: str.optional(),
      capabilities: z
        .looseObject({ add: z.array(str).optional(), drop: z.array(str).optional() })
        .optional(),
    })
    .optional(),
  volumeMounts: z
    .array(
      z.looseObject({
        name: str,
        mountPath: str,
        readOnly: z.boolean().optional(),
        subPath: str.optional(),
        subPathExpr: str.optional(),
      }),
    )
    .optional(),
  ...ProbeFields,
  ports: z
    .array(
      z.looseObject({
        containerPort: z.number().int().min(1).max(65535),
        name: str.optional(),
        hostPort: z.number().int().min(1).max(65535).optional(),
        hostIP: str.optional(),
        protocol: z.enum(["TCP", "UDP", "SCTP"]).optional(),
      }),
    )
    .optional(),
  terminationMessagePath: str.optional(),
  terminationMessagePolicy: z.enum(["File", "FallbackToLogsOnError"]).optional(),
  tty: z.boolean().optional(),
  restartPolicy: str.optional(),
});
const Items = z
  .array(
    z.looseObject({ key: str, path: str, mode: z.number().int().min(0).max(0o777).optional() }),
  )
  .optional();
/** What a `configMap` and a `secret` volume have in common (they differ in the name's key). */
const sourceVolume = {
  items: Items,
  defaultMode: z.number().int().min(0).max(0o777).optional(),
  optional: z.boolean().optional(),
};
const Mode = z.number().int().min(0).max(0o777);
/** `downwardAPI` items, of a volume or of a projection. */
const DownwardItems = z
  .array(
    z.looseObject({
      path: str,
      fieldRef: z.looseObject({ fieldPath: str }).optional(),
      resourceFieldRef: z.looseObject({ resource: str }).optional(),
      mode: Mode.optional(),
    }),
  )
  .optional();
/** A `configMap` or `secret` source of a projected volume: no `defaultMode` of its own. */
const projectedSource = { items: Items, optional: z.boolean().optional() };
const Projection = z.looseObject({
  configMap: z.looseObject({ name: str.optional(), ...projectedSource }).optional(),
  secret: z.looseObject({ name: str.optional(), ...projectedSource }).optional(),
  downwardAPI: z.looseObject({ items: DownwardItems }).optional(),
  serviceAccountToken: z
    .looseObject({
      path: str,
      audience: str.optional(),
      expirationSeconds: z.number().optional(),
    })
    .optional(),
});
const Volume = z.looseObject({
  name: str,
  emptyDir: z.looseObject({}).optional(),
  hostPath: z.looseObject({ path: str, type: str.optional() }).optional(),
  configMap: z.looseObject({ name: str.optional(), ...sourceVolume }).optional(),
  secret: z.looseObject({ secretName: str.optional(), ...sourceVolume }).optional(),
  downwardAPI: z.looseObject({ items: DownwardItems, defaultMode: Mode.optional() }).optional(),
  projected: z
    .looseObject({ sources: z.array(Projection).optional(), defaultMode: Mode.optional() })
    .optional(),
});
const Pod = z.looseObject({
  metadata: z
    .looseObject({
      name: str.optional(),
      namespace: str.optional(),
      uid: str.optional(),
      labels: z.record(str, str).optional(),
      annotations: z.record(str, str).optional(),
    })
    .optional(),
  spec: z.looseObject({
    containers: z.array(Container),
    initContainers: z.array(Container).optional(),
    volumes: z.array(Volume).optional(),
    restartPolicy: z.enum(["Always", "OnFailure", "Never"]).optional(),
    terminationGracePeriodSeconds: z.number().int().min(0).optional(),
    nodeName: str.optional(),
    serviceAccountName: str.optional(),
    imagePullSecrets: z.array(z.looseObject({ name: str.optional() })).optional(),
    hostNetwork: z.boolean().optional(),
    enableServiceLinks: z.boolean().optional(),
    hostAliases: z
      .array(z.looseObject({ ip: str.optional(), hostnames: z.array(str).optional() }))
      .optional(),
    hostname: str.optional(),
    hostnameOverride: str.optional(),
    subdomain: str.optional(),
    setHostnameAsFQDN: z.boolean().optional(),
    dnsPolicy: str.optional(),
    dnsConfig: z
      .looseObject({
        nameservers: z.array(str).optional(),
        searches: z.array(str).optional(),
        options: z.array(z.looseObject({ name: str.optional(), value: str.optional() })).optional(),
      })
      .optional(),
    hostPID: z.boolean().optional(),
    hostIPC: z.boolean().optional(),
    shareProcessNamespace: z.boolean().optional(),
    hostUsers: z.boolean().optional(),
    os: z.looseObject({ name: str }).optional(),
    runtimeClassName: str.optional(),
    securityContext: z
      .looseObject({
        runAsUser: z.number().int().min(0).optional(),
        runAsGroup: z.number().int().min(0).optional(),
        runAsNonRoot: z.boolean().optional(),
        seccompProfile: Profile.optional(),
        appArmorProfile: Profile.optional(),
        seLinuxOptions: z.looseObject({}).optional(),
        supplementalGroups: z.array(z.number().int().min(0)).optional(),
        supplementalGroupsPolicy: str.optional(),
        fsGroup: z.number().int().min(0).optional(),
        sysctls: z.array(z.looseObject({ name: str })).optional(),
      })
      .optional(),
  }),
});
type ContainerSpec = z.infer<typeof Container>;
type PodSpec = z.infer<typeof Pod>;
type Agent = ResolvedRenderOptions["agents"][number];

/** One container as the host supervisor will run it. */
export interface ContainerPlan {
  readonly name: string;
  readonly init: boolean;
  /** An init container with `restartPolicy: Always` (a native sidecar): runs beside the Pod's containers. */
  readonly sidecar: boolean;
  readonly image: string;
  readonly pullPolicy: "Always" | "IfNotPresent" | "Never";
  /** Entrypoint override (Kubernetes `command`), already `$(VAR)`-expanded; undefined keeps the image's. */
  readonly command: readonly string[] | undefined;
  /** Kubernetes `args`, expanded; undefined keeps the image's CMD (unless `command` is set). */
  readonly args: readonly string[] | undefined;
  /** `docker create` flags, each one argv element in `--flag=value` form. */
  readonly createFlags: readonly string[];
  /** Env names whose value is the host IP, filled in at boot (downward API `status.hostIP` / `status.podIP`). */
  readonly hostIpEnv: readonly string[];
  readonly terminationMessagePath: string;
  readonly terminationMessagePolicy: "File" | "FallbackToLogsOnError";
  /**
   * `runAsNonRoot` check at start: `""` none, `root` the container's user is 0 (refused), `image`
   * the image's user decides (refused when it is root or not numeric), as the kubelet checks.
   */
  readonly nonRoot: "" | "root" | "image";
  /** Agent commands for the in-container shim; empty: no shim. */
  readonly agents: readonly (readonly string[])[];
  /** Probes and lifecycle hooks, encoded for the supervisor. */
  readonly probes: ProbePlan;
  /** Bytes this container contributes (env, command and args), for the `TooLarge` message. */
  readonly weight: { readonly env: number; readonly argv: number };
}

/** The Pod, validated and resolved into what the host needs. */
export interface PodPlan {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  readonly restartPolicy: "Always" | "OnFailure" | "Never";
  readonly graceSeconds: number;
  /** Restart cap; -1 for unlimited. */
  readonly restartLimit: number;
  /** Host directories to create before the supervisor starts (emptyDir, hostPath DirectoryOrCreate). */
  readonly hostDirs: readonly string[];
  /** True when the Pod runs in the host's network namespace (`hostNetwork: true`, opted in). */
  readonly hostNetwork: boolean;
  /**
   * Flags of the Pod sandbox: its `--hostname=` (the Pod's host name, {@link podHostname}), then
   * every container port as `--publish=`, on its hostPort or the same port. None with hostNetwork.
   */
  readonly sandboxFlags: readonly string[];
  /** `spec.hostAliases` as `name:ip` entries for `/etc/hosts` (`docker --add-host`), in order. */
  readonly hostAliases: readonly string[];
  /**
   * The Pod's fully qualified name when it has a `subdomain` (`<hostname>.<subdomain>.<ns>.svc.<domain>`):
   * the host maps it to the Pod's IP (the instance's private address) in `/etc/hosts`, as the
   * kubelet does. Undefined without a subdomain, a host name or with hostNetwork.
   */
  readonly fqdn: string | undefined;
  readonly containers: readonly ContainerPlan[];
  /** Files to write before any container starts: ConfigMap, Secret, projected and downwardAPI volumes. */
  readonly files: readonly PlannedFile[];
  /**
   * Service-account token files (`serviceAccountToken` projections, parameters delivery only):
   * the host writes them from the Pod's token parameter at boot and again when it changes.
   */
  readonly tokens: readonly PlannedToken[];
  /** Seconds between two reads of the token parameter ({@link tokenPollSeconds}, or the option). */
  readonly tokenPollSeconds: number;
  /** The service proxy the host runs in the Pod's network namespace; undefined: none. */
  readonly serviceProxy: ResolvedRenderOptions["serviceProxy"];
  /** The host agent the supervisor runs for exec, attach and port-forward; undefined: none. */
  readonly hostAgent: ResolvedRenderOptions["hostAgent"];
  /** Docker `config.json` with the registry logins of `imagePullSecrets`; undefined: none. */
  readonly dockerConfig: string | undefined;
  /** Event-worthy facts (optional references missing, keys skipped). */
  readonly notices: readonly RenderNotice[];
  /** Bytes each ConfigMap or Secret value brings, by reference (for `SourceTooLarge`). */
  readonly sourceWeights: readonly (readonly [string, number])[];
}

/** A file the supervisor writes on the host before any container starts. */
export interface PlannedFile {
  readonly path: string;
  /** Permission bits, e.g. `0o644`. */
  readonly mode: number;
  readonly data: Buffer;
}

/** A service-account token file the host keeps up to date. */
interface PlannedToken {
  /** Absolute host path of the file (in its volume's directory). */
  readonly path: string;
  /** The {@link PodTokenRequest} key of its audience and lifetime, in the token parameter. */
  readonly key: string;
  /** Permission bits (the projected volume's `defaultMode`, 0644 by default). */
  readonly mode: number;
}

/** What planning needs to resolve ConfigMap and Secret references (the parameters delivery). */
interface SourceContext {
  readonly sources: PodSources | undefined;
  readonly namespace: string;
  /** The Service environment variables (the kubelet's), by name: set where a container does not. */
  readonly serviceEnv: ReadonlyMap<string, string>;
  readonly notices: RenderNotice[];
  readonly weights: [string, number][];
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** Kubernetes (1.30+) accepts any printable ASCII but `=` in an env name; so does `--env=NAME=VALUE`. */
const ENV_NAME = /^[\x21-\x3c\x3e-\x7e]+$/;
/** Host directory of an emptyDir volume. */
const EMPTYDIR_ROOT = "/var/lib/nebula/volumes";
/** Host directory of a ConfigMap or Secret volume: memory-backed `/run`, never on disk. */
const SOURCE_VOLUME_ROOT = "/run/nebula/volumes";
/** The service proxy's token on the host (tmpfs, root only): its kubeconfig's `tokenFile`. */
export const SERVICE_PROXY_TOKEN_PATH = "/run/nebula/service-proxy/token";

/**
 * Validates a Pod and resolves it into a {@link PodPlan}. Returns a {@link UserDataError} for any
 * problem (the first one found, with its path). Total.
 */
export function resolvePodPlan(
  input: unknown,
  options: ResolvedRenderOptions,
  sources?: PodSources,
): PodPlan | UserDataError {
  const parsed = Pod.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const path = issue?.path.map(String).join(".") || "pod";
    return new UserDataError(
      "InvalidPod",
      path,
      `the Pod is malformed at ${path}: ${issue?.message ?? "invalid"}`,
      parsed.error,
    );
  }
  try {
    return plan(parsed.data, options, sources);
  } catch (error) {
    if (error instanceof UserDataError) return error;
    return new UserDataError(
      "InvalidPod",
      "pod",
      `the Pod could not be rendered: ${String(error)}`,
      error,
    );
  }
}

function fail(code: UserDataError["code"], path: string, message: string): never {
  throw new UserDataError(code, path, message);
}

function checkText(text: string, path: string): string {
  if (text.includes("\0"))
    fail(
      "InvalidPod",
      path,
      `${path} contains a NUL byte, which no process argument or environment can carry`,
    );
  return text;
}

function plan(pod: PodSpec, options: ResolvedRenderOptions, given?: PodSources): PodPlan {
  const meta = pod.metadata ?? {};
  const spec = pod.spec;
  if (spec.containers.length === 0)
    fail("InvalidPod", "spec.containers", "the Pod has no containers");
  const ctx: SourceContext = {
    sources: options.delivery === "parameters" ? (given ?? EMPTY_SOURCES) : undefined,
    namespace: meta.namespace ?? "default",
    serviceEnv: new Map(
      serviceEnvironment(
        given?.services ?? [],
        meta.namespace ?? "default",
        spec.enableServiceLinks ?? true,
        options.kubernetesService,
      ),
    ),
    notices: [],
    weights: [],
  };
  if (ctx.serviceEnv.size > 0) {
    // Named when the spec is too large: a namespace with many Services is the kubelet's known case.
    const bytes = [...ctx.serviceEnv].reduce((n, [k, v]) => n + k.length + v.length, 0);
    ctx.weights.push([
      `the ${ctx.serviceEnv.size} Service variables in each container's env (enableServiceLinks: false leaves out the namespace's Services)`,
      bytes,
    ]);
  }
  let dockerConfig: string | undefined;
  if (spec.imagePullSecrets && spec.imagePullSecrets.length > 0) {
    if (ctx.sources === undefined)
      fail(
        "SecretInUserData",
        "spec.imagePullSecrets",
        'imagePullSecrets would put registry credentials into user-data in clear; render with delivery: "parameters", or give the instance role registry access instead',
      );
    dockerConfig = pullSecrets(
      spec.imagePullSecrets.map((r) => r.name ?? ""),
      ctx,
    );
  }
  const files: PlannedFile[] = [];
  const annotations = meta.annotations ?? {};
  const limitText = annotations[RESTART_LIMIT_ANNOTATION];
  let restartLimit: number;
  if (limitText === undefined) {
    restartLimit = options.defaultRestartLimit === "unlimited" ? -1 : options.defaultRestartLimit;
  } else if (limitText.trim() === "unlimited") {
    restartLimit = -1;
  } else if (/^\s*[0-9]{1,7}\s*$/.test(limitText)) {
    restartLimit = Number(limitText);
  } else {
    fail(
      "InvalidPod",
      `metadata.annotations[${RESTART_LIMIT_ANNOTATION}]`,
      `annotation ${RESTART_LIMIT_ANNOTATION}=${JSON.stringify(limitText)} must be a non-negative integer or "unlimited"`,
    );
  }

  if (spec.hostNetwork === true && annotations[HOST_NETWORK_ANNOTATION] !== "true") {
    fail(
      "HostNetworkNotAllowed",
      "spec.hostNetwork",
      `hostNetwork: true gives every container the instance's network, IMDS and the instance role's credentials; set annotation ${HOST_NETWORK_ANNOTATION}: "true" to allow it`,
    );
  }
  const hostNetwork = spec.hostNetwork === true;
  for (const field of ["hostPID", "hostIPC", "shareProcessNamespace"] as const) {
    if (spec[field] === true)
      fail("UnsupportedField", `spec.${field}`, `${field}: true is not supported on this host`);
  }
  // Asked-for isolation the host's container runtime cannot give is refused, never ignored.
  if (spec.hostUsers === false)
    fail(
      "UnsupportedField",
      "spec.hostUsers",
      "hostUsers: false (a user namespace per Pod) is not supported on this host; the Pod runs on an instance of its own, so leave it unset",
    );
  if (spec.runtimeClassName !== undefined && spec.runtimeClassName !== "")
    fail(
      "UnsupportedField",
      "spec.runtimeClassName",
      `runtimeClassName ${JSON.stringify(spec.runtimeClassName)} is not available on this host (it runs every container with its one runtime); remove the field`,
    );
  if (spec.os !== undefined && spec.os.name !== "linux")
    fail(
      "UnsupportedField",
      "spec.os.name",
      `os.name ${JSON.stringify(spec.os.name)} is not supported: Nebula's hosts run Linux`,
    );
  const podSecurity = spec.securityContext ?? {};
  if (podSecurity.supplementalGroupsPolicy === "Strict")
    fail(
      "UnsupportedField",
      "spec.securityContext.supplementalGroupsPolicy",
      "supplementalGroupsPolicy Strict is not supported on this host: the container runtime merges the image's groups (Merge); leave it unset",
    );
  if (podSecurity.seLinuxOptions)
    fail(
      "UnsupportedField",
      "spec.securityContext.seLinuxOptions",
      "seLinuxOptions is not supported on this host",
    );
  if (podSecurity.sysctls && podSecurity.sysctls.length > 0)
    fail(
      "UnsupportedField",
      "spec.securityContext.sysctls",
      "sysctls are not supported on this host",
    );
  if (podSecurity.fsGroup !== undefined)
    fail(
      "UnsupportedField",
      "spec.securityContext.fsGroup",
      "fsGroup is not supported on this host (volume ownership is not changed)",
    );

  const volumes = new Map<string, string>();
  const hostDirs: string[] = [];
  const tokens: PlannedToken[] = [];
  if (options.serviceProxy !== undefined && options.delivery !== "parameters")
    fail(
      "InvalidOptions",
      "serviceProxy",
      'the service proxy reads the API server with a token, which is never written into user-data: render with delivery: "parameters"',
    );
  if (options.hostAgent !== undefined && options.delivery !== "parameters")
    fail(
      "InvalidOptions",
      "hostAgent",
      "the host agent is given the virtual node's client fingerprints with the Pod's parameters: render with delivery: \"parameters\"",
    );
  const requests = podTokenRequests(pod, { serviceProxy: options.serviceProxy !== undefined });
  const proxyToken = requests.find((r) => r.subject === "serviceProxy");
  if (proxyToken !== undefined)
    tokens.push({ path: SERVICE_PROXY_TOKEN_PATH, key: proxyToken.key, mode: 0o600 });
  for (const volume of spec.volumes ?? []) {
    const where = `spec.volumes[${volume.name}]`;
    if (!DNS_LABEL.test(volume.name))
      fail("InvalidPod", where, `volume name ${JSON.stringify(volume.name)} is not a DNS label`);
    if (volume.emptyDir) {
      const dir = `${EMPTYDIR_ROOT}/${volume.name}`;
      volumes.set(volume.name, dir);
      hostDirs.push(dir);
    } else if (volume.hostPath) {
      const path = checkText(volume.hostPath.path, `${where}.hostPath.path`);
      if (!path.startsWith("/") || /[,\n"]/.test(path)) {
        fail(
          "UnsupportedVolume",
          `${where}.hostPath.path`,
          `hostPath ${JSON.stringify(path)} must be absolute and free of ',', '"' and newlines`,
        );
      }
      volumes.set(volume.name, path);
      if (volume.hostPath.type === "DirectoryOrCreate") hostDirs.push(path);
    } else if (ctx.sources === undefined && isServiceAccountProjection(volume)) {
      // The user-data delivery cannot carry a token: the volume and its mounts are left out.
      volumes.set(volume.name, "");
    } else if (volume.configMap || volume.secret) {
      const dir = `${SOURCE_VOLUME_ROOT}/${volume.name}`;
      volumes.set(volume.name, dir);
      hostDirs.push(dir);
      files.push(...volumeFiles(volume, dir, where, ctx));
    } else if (volume.projected || volume.downwardAPI) {
      const dir = `${SOURCE_VOLUME_ROOT}/${volume.name}`;
      volumes.set(volume.name, dir);
      hostDirs.push(dir);
      if (volume.downwardAPI) {
        const mode = volume.downwardAPI.defaultMode ?? 0o644;
        files.push(
          ...downwardFiles(volume.downwardAPI.items ?? [], mode, dir, `${where}.downwardAPI`, {
            meta,
            spec,
            ctx,
          }),
        );
      } else {
        files.push(...projectedFiles(volume, dir, where, { meta, spec, ctx, tokens, requests }));
      }
    } else {
      const kind = Object.keys(volume).find((k) => k !== "name") ?? "unknown";
      fail(
        "UnsupportedVolume",
        where,
        `volume ${JSON.stringify(volume.name)} is of kind ${kind}; the host supports emptyDir, hostPath, configMap, secret, projected and downwardAPI only`,
      );
    }
  }

  const names = new Set<string>();
  const initContainers = spec.initContainers ?? [];
  const all = [
    ...initContainers.map((c) => ({ c, init: true })),
    ...spec.containers.map((c) => ({ c, init: false })),
  ];
  const agentsFor = (name: string, init: boolean): Agent[] =>
    options.agents.filter((a) =>
      a.containers === undefined ? !init : a.containers.includes(name),
    );
  for (const agent of options.agents) {
    for (const target of agent.containers ?? []) {
      if (!all.some(({ c }) => c.name === target)) {
        fail(
          "InvalidOptions",
          `agents[${agent.name}].containers`,
          `agent ${agent.name} names container ${JSON.stringify(target)}, which the Pod does not have`,
        );
      }
    }
  }
  const containers = all.map(({ c, init }) => {
    const where = `spec.${init ? "initContainers" : "containers"}[${c.name}]`;
    if (!DNS_LABEL.test(c.name) || c.name.length > 63)
      fail("InvalidPod", where, `container name ${JSON.stringify(c.name)} is not a DNS label`);
    if (names.has(c.name)) fail("InvalidPod", where, `container name ${c.name} is used twice`);
    names.add(c.name);
    if (c.restartPolicy !== undefined && (!init || c.restartPolicy !== "Always")) {
      fail(
        "InvalidPod",
        `${where}.restartPolicy`,
        `container ${c.name} has restartPolicy ${c.restartPolicy}: only an init container may set one, and only Always (a native sidecar)`,
      );
    }
    return {
      ...planContainer(c, init, where, meta, spec, volumes, agentsFor(c.name, init), ctx),
      sidecar: init && c.restartPolicy === "Always",
    };
  });

  const short = podHostname(meta, spec);
  const fqdn = podFqdn(short, meta.namespace ?? "default", spec, hostNetwork, options.dns);
  const hostname = spec.setHostnameAsFQDN === true && fqdn !== undefined ? fqdn : short;
  return {
    namespace: meta.namespace ?? "default",
    name: meta.name ?? "",
    uid: meta.uid ?? "",
    restartPolicy: spec.restartPolicy ?? "Always",
    graceSeconds: Math.min(spec.terminationGracePeriodSeconds ?? 30, options.maxGracePeriodSeconds),
    restartLimit,
    hostDirs,
    hostNetwork,
    sandboxFlags: hostNetwork
      ? []
      : [
          ...(hostname === undefined ? [] : [`--hostname=${hostname}`]),
          ...publishFlags(all.map(({ c }) => c)),
          ...dnsFlags(planDns(meta.namespace ?? "default", spec, hostNetwork, options.dns, ctx)),
        ],
    hostAliases: planHostAliases(spec),
    fqdn,
    containers,
    files,
    tokens,
    tokenPollSeconds: options.tokenPollSeconds ?? tokenPollSeconds(requests),
    serviceProxy: proxyToken === undefined ? undefined : options.serviceProxy,
    hostAgent: options.hostAgent,
    dockerConfig,
    notices: ctx.notices,
    sourceWeights: ctx.weights,
  };
}

const EMPTY_SOURCES: PodSources = { configMaps: {}, secrets: {} };
type SourceKind = "ConfigMap" | "Secret";

function lookup(ctx: SourceContext, kind: SourceKind, name: string): SourceObject | undefined {
  const table = kind === "ConfigMap" ? ctx.sources?.configMaps : ctx.sources?.secrets;
  return table !== undefined && Object.hasOwn(table, name) ? table[name] : undefined;
}

/** A source's values as bytes: a ConfigMap's `data` (text) and `binaryData`, a Secret's `data` (base64). */
function sourceValues(
  kind: SourceKind,
  object: SourceObject,
  withBinary: boolean,
): Map<string, Buffer> {
  const values = new Map<string, Buffer>();
  for (const [key, value] of Object.entries(object.data ?? {})) {
    if (typeof value !== "string") continue;
    values.set(key, kind === "Secret" ? Buffer.from(value, "base64") : Buffer.from(value, "utf8"));
  }
  if (kind === "ConfigMap" && withBinary) {
    for (const [key, value] of Object.entries(object.binaryData ?? {})) {
      if (typeof value === "string") values.set(key, Buffer.from(value, "base64"));
    }
  }
  return values;
}

/** The kubelet's words for a missing object (`secret "db" not found`). */
function notFound(kind: SourceKind, name: string): string {
  return `${kind === "Secret" ? "secret" : "configmap"} ${JSON.stringify(name)} not found`;
}

/** A mandatory reference is missing: the container waits (`CreateContainerConfigError`). */
function missing(kind: SourceKind, path: string, message: string): never {
  throw new UserDataError(
    "CreateContainerConfigError",
    path,
    message,
    undefined,
    `Mandatory${kind}NotFound`,
  );
}

function weigh(ctx: SourceContext, kind: SourceKind, name: string, key: string, bytes: number) {
  ctx.weights.push([`${kind} ${ctx.namespace}/${name} key ${key}`, bytes]);
}

/** A value as environment text: bytes as UTF-8, refused when they hold a NUL. */
function envText(value: Buffer, path: string, what: string): string {
  if (value.includes(0))
    fail("InvalidPod", path, `${what} holds a NUL byte, which no environment variable can carry`);
  return value.toString("utf8");
}

/** A relative file path inside a volume: no `..`, not absolute, not empty. */
function relativePath(path: string, at: string): string {
  const parts = path.split("/");
  if (
    path === "" ||
    path.startsWith("/") ||
    path.includes("\0") ||
    parts.some((p) => p === ".." || p === "")
  )
    fail(
      "InvalidPod",
      at,
      `path ${JSON.stringify(path)} must be relative, without '..' or empty parts`,
    );
  return path;
}

/** The files of a ConfigMap or Secret volume (`items`, `defaultMode`, `optional`), as the kubelet writes them. */
function volumeFiles(
  volume: z.infer<typeof Volume>,
  dir: string,
  where: string,
  ctx: SourceContext,
): PlannedFile[] {
  const kind: SourceKind = volume.configMap ? "ConfigMap" : "Secret";
  const ref = volume.configMap ?? volume.secret ?? {};
  const name = volume.configMap?.name ?? volume.secret?.secretName ?? "";
  if (ctx.sources === undefined) {
    fail(
      kind === "Secret" ? "SecretInUserData" : "UnsupportedVolume",
      where,
      `volume ${JSON.stringify(volume.name)} is a ${kind}; render with delivery: "parameters" to deliver it through Parameter Store (user-data is readable by anyone who may describe the instance)`,
    );
  }
  return sourceFiles(kind, name, ref, ref.defaultMode ?? 0o644, dir, where, ctx);
}

/**
 * The files of one ConfigMap or Secret (a volume, or a source of a projected volume): every key,
 * or the `items` (each with its `mode`, else `mode`); a missing object or key is skipped when
 * `optional`, else the container waits (`CreateContainerConfigError`), as the kubelet does.
 */
function sourceFiles(
  kind: SourceKind,
  name: string,
  ref: {
    readonly items?: z.infer<typeof Items>;
    readonly optional?: boolean | undefined;
  },
  mode: number,
  dir: string,
  where: string,
  ctx: SourceContext,
): PlannedFile[] {
  const object = lookup(ctx, kind, name);
  if (object === undefined) {
    if (ref.optional === true) {
      ctx.notices.push({ reason: `Optional${kind}NotFound`, message: notFound(kind, name) });
      return [];
    }
    missing(kind, where, notFound(kind, name));
  }
  const values = sourceValues(kind, object, true);
  const entries: [string, Buffer, number][] = [];
  if (ref.items && ref.items.length > 0) {
    for (const item of ref.items) {
      const value = values.get(item.key);
      if (value === undefined) {
        if (ref.optional === true) continue;
        missing(
          kind,
          where,
          kind === "Secret"
            ? `references non-existent secret key: ${item.key}`
            : `configmap references non-existent config key: ${item.key}`,
        );
      }
      entries.push([item.path, value, item.mode ?? mode]);
    }
  } else {
    for (const [key, value] of values) entries.push([key, value, mode]);
  }
  return entries.map(([path, data, fileMode]) => {
    weigh(ctx, kind, name, path, data.length);
    return {
      path: `${dir}/${relativePath(path, `${where}.items[${path}]`)}`,
      mode: fileMode,
      data,
    };
  });
}

/** What the downwardAPI items and projections read besides the sources. */
interface PodFacts {
  readonly meta: NonNullable<PodSpec["metadata"]>;
  readonly spec: PodSpec["spec"];
  readonly ctx: SourceContext;
}

/**
 * The files of `downwardAPI` items (a volume's, or a projection's), as the kubelet writes them:
 * the field's value as of render time (labels and annotations do not change later on this host),
 * `metadata.labels` and `metadata.annotations` whole in the kubelet's format. `resourceFieldRef`
 * and the fields the host cannot know are refused.
 */
function downwardFiles(
  items: NonNullable<z.infer<typeof DownwardItems>>,
  mode: number,
  dir: string,
  where: string,
  { meta, spec, ctx }: PodFacts,
): PlannedFile[] {
  return items.map((item, k) => {
    const at = `${where}.items[${k}]`;
    const path = relativePath(item.path, `${at}.path`);
    let text: string | undefined;
    if (item.resourceFieldRef) {
      fail(
        "UnsupportedVolume",
        `${at}.resourceFieldRef`,
        `downwardAPI item ${JSON.stringify(item.path)} uses resourceFieldRef ${item.resourceFieldRef.resource}, which is not supported (as in env)`,
      );
    } else if (item.fieldRef) {
      const field = item.fieldRef.fieldPath;
      text =
        field === "metadata.labels"
          ? formatDownwardMap(meta.labels ?? {})
          : field === "metadata.annotations"
            ? formatDownwardMap(meta.annotations ?? {})
            : downward(field, meta, spec);
      if (text === undefined)
        fail(
          "UnsupportedVolume",
          `${at}.fieldRef`,
          `downwardAPI item ${JSON.stringify(item.path)} uses fieldRef ${field}, which is not supported in a volume (metadata.name, metadata.namespace, metadata.uid, metadata.labels, metadata.annotations, metadata.labels['<key>'], metadata.annotations['<key>'], spec.nodeName, spec.serviceAccountName are)`,
        );
    } else {
      fail(
        "InvalidPod",
        at,
        `downwardAPI item ${JSON.stringify(item.path)} has neither fieldRef nor resourceFieldRef`,
      );
    }
    const data = Buffer.from(text, "utf8");
    ctx.weights.push([`downwardAPI file ${path} of ${where}`, data.length]);
    return { path: `${dir}/${path}`, mode: item.mode ?? mode, data };
  });
}

/**
 * The files of a `projected` volume, source by source as the kubelet writes them: ConfigMap and
 * Secret keys, downwardAPI items, and service-account tokens, which go into `tokens` (their
 * contents come from the token parameter on the host, never from pod.sh). With the user-data
 * delivery a Secret or token source is `SecretInUserData` and a ConfigMap source
 * `UnsupportedVolume`, as the plain volumes.
 */
function projectedFiles(
  volume: z.infer<typeof Volume>,
  dir: string,
  where: string,
  facts: PodFacts & {
    readonly tokens: PlannedToken[];
    readonly requests: readonly PodTokenRequest[];
  },
): PlannedFile[] {
  const { ctx } = facts;
  const mode = volume.projected?.defaultMode ?? 0o644;
  const files: PlannedFile[] = [];
  const sources = volume.projected?.sources ?? [];
  const token = sources.findIndex((source) => source.serviceAccountToken != null);
  if (ctx.sources === undefined && token >= 0)
    fail(
      "SecretInUserData",
      `${where}.projected.sources[${token}]`,
      `projected volume ${JSON.stringify(volume.name)} takes a service-account token, which is never written into user-data: render with delivery: "parameters", which delivers and renews it through Parameter Store`,
    );
  sources.forEach((source, k) => {
    const at = `${where}.projected.sources[${k}]`;
    const kinds = Object.keys(source).filter((key) => source[key] != null);
    if (kinds.length !== 1)
      fail(
        "InvalidPod",
        at,
        `source ${k} of projected volume ${JSON.stringify(volume.name)} must name exactly one kind, not ${kinds.length === 0 ? "none" : kinds.join(", ")}`,
      );
    if (source.configMap || source.secret) {
      const kind: SourceKind = source.configMap ? "ConfigMap" : "Secret";
      const ref = source.configMap ?? source.secret ?? {};
      const name = ref.name ?? "";
      if (ctx.sources === undefined)
        fail(
          kind === "Secret" ? "SecretInUserData" : "UnsupportedVolume",
          at,
          `projected volume ${JSON.stringify(volume.name)} takes ${kind} ${name}; render with delivery: "parameters" to deliver it through Parameter Store (user-data is readable by anyone who may describe the instance)`,
        );
      files.push(...sourceFiles(kind, name, ref, mode, dir, at, ctx));
    } else if (source.downwardAPI) {
      files.push(
        ...downwardFiles(source.downwardAPI.items ?? [], mode, dir, `${at}.downwardAPI`, facts),
      );
    } else if (source.serviceAccountToken) {
      const projection = source.serviceAccountToken;
      const path = relativePath(projection.path, `${at}.serviceAccountToken.path`);
      const asked = projectionRequest(projection);
      const request = facts.requests.find(
        (r) =>
          r.subject === "pod" &&
          r.audience === asked.audience &&
          r.expirationSeconds === asked.expirationSeconds,
      );
      if (request === undefined)
        fail("InvalidPod", at, `no token request matches source ${k} of ${volume.name}`);
      facts.tokens.push({ path: `${dir}/${path}`, key: request.key, mode });
    } else {
      const kind = kinds[0] ?? "unknown";
      fail(
        "UnsupportedVolume",
        at,
        `projected volume ${JSON.stringify(volume.name)} has a ${kind} source, which the host does not support (configMap, secret, downwardAPI and serviceAccountToken are)`,
      );
    }
  });
  return files;
}

/** The registry logins of `imagePullSecrets` as one Docker `config.json` (first login per registry wins). */
function pullSecrets(names: readonly string[], ctx: SourceContext): string | undefined {
  const auths: Record<string, unknown> = {};
  for (const name of names) {
    const object = lookup(ctx, "Secret", name);
    const values = object ? sourceValues("Secret", object, false) : undefined;
    let found: Record<string, unknown> | undefined;
    try {
      const json = values?.get(".dockerconfigjson");
      const legacy = values?.get(".dockercfg");
      if (json) found = JSON.parse(json.toString("utf8"))?.auths;
      else if (legacy) found = JSON.parse(legacy.toString("utf8"));
    } catch {
      found = undefined;
    }
    if (object === undefined || typeof found !== "object" || found === null) {
      ctx.notices.push({
        reason: "FailedToRetrieveImagePullSecret",
        message:
          object === undefined
            ? `Unable to retrieve some image pull secrets (${name}); attempting to pull the image may not succeed.`
            : `Secret ${ctx.namespace}/${name} holds no .dockerconfigjson or .dockercfg login; attempting to pull the image may not succeed.`,
      });
      continue;
    }
    for (const [registry, login] of Object.entries(found)) {
      if (!Object.hasOwn(auths, registry)) auths[registry] = login;
    }
    weigh(ctx, "Secret", name, ".dockerconfigjson", JSON.stringify(found).length);
  }
  return Object.keys(auths).length > 0 ? JSON.stringify({ auths }) : undefined;
}

function isServiceAccountProjection(volume: z.infer<typeof Volume>): boolean {
  // The API server injects `kube-api-access-*` (service account token, CA, namespace) into every
  // Pod. The user-data delivery cannot carry the token, so there the volume is left out
  // (documented); the parameters delivery serves it as any projected volume.
  return volume.name.startsWith("kube-api-access-") && "projected" in volume;
}

function planContainer(
  c: ContainerSpec,
  init: boolean,
  where: string,
  meta: NonNullable<PodSpec["metadata"]>,
  spec: PodSpec["spec"],
  volumes: Map<string, string>,
  agents: readonly Agent[],
  ctx: SourceContext,
): Omit<ContainerPlan, "sidecar"> {
  const image = checkText(c.image ?? "", `${where}.image`);
  if (image.trim() === "" || /\s/.test(image)) {
    fail(
      "InvalidPod",
      `${where}.image`,
      `container ${c.name} has ${image === "" ? "no image" : `an invalid image ${JSON.stringify(image)}`}`,
    );
  }
  // An image reference never starts with "-"; one that does could be read as a docker option.
  if (image.startsWith("-")) {
    fail(
      "InvalidPod",
      `${where}.image`,
      `container ${c.name} has image ${JSON.stringify(image)}, which starts with "-": not an image reference`,
    );
  }
  const pullPolicy = c.imagePullPolicy ?? defaultPullPolicy(image);

  const flags: string[] = [];
  const env = new Map<string, string>();
  const hostIpEnv: string[] = [];
  let envBytes = 0;
  for (const from of c.envFrom ?? []) {
    const ref = from.configMapRef ?? from.secretRef;
    if (ref === undefined) continue;
    const kind: SourceKind = from.configMapRef ? "ConfigMap" : "Secret";
    const name = ref.name ?? "";
    if (ctx.sources === undefined) {
      if (kind === "Secret")
        fail(
          "SecretInUserData",
          `${where}.envFrom`,
          `container ${c.name} takes env from Secret ${name}; Secret values are never written into user-data (render with delivery: "parameters")`,
        );
      fail(
        "UnsupportedEnvSource",
        `${where}.envFrom`,
        `container ${c.name} takes env from ConfigMap ${name}; render with delivery: "parameters", or resolve ConfigMap values into literal env before rendering`,
      );
    }
    const object = lookup(ctx, kind, name);
    if (object === undefined) {
      if (ref.optional === true) {
        ctx.notices.push({ reason: `Optional${kind}NotFound`, message: notFound(kind, name) });
        continue;
      }
      missing(kind, `${where}.envFrom`, notFound(kind, name));
    }
    const skipped: string[] = [];
    for (const [key, value] of sourceValues(kind, object, false)) {
      const envName = `${from.prefix ?? ""}${key}`;
      if (!ENV_NAME.test(envName)) {
        skipped.push(key);
        continue;
      }
      env.set(
        envName,
        envText(value, `${where}.envFrom`, `${kind} ${ctx.namespace}/${name} key ${key}`),
      );
      weigh(ctx, kind, name, key, value.length);
    }
    if (skipped.length > 0)
      ctx.notices.push({
        reason: "InvalidEnvironmentVariableNames",
        message: `Keys [${skipped.sort().join(", ")}] from the EnvFrom ${kind === "Secret" ? "secret" : "configMap"} ${ctx.namespace}/${name} were skipped since they are considered invalid environment variable names.`,
      });
  }
  for (const variable of c.env ?? []) {
    const at = `${where}.env[${variable.name}]`;
    if (!ENV_NAME.test(variable.name))
      fail(
        "InvalidPod",
        at,
        `container ${c.name} has an invalid env name ${JSON.stringify(variable.name)}`,
      );
    const from = variable.valueFrom;
    let value: string | undefined;
    const keyRef = from?.secretKeyRef ?? from?.configMapKeyRef;
    if (keyRef !== undefined) {
      const kind: SourceKind = from?.secretKeyRef ? "Secret" : "ConfigMap";
      const name = keyRef.name ?? "";
      const key = keyRef.key ?? "";
      if (ctx.sources === undefined) {
        fail(
          kind === "Secret" ? "SecretInUserData" : "UnsupportedEnvSource",
          at,
          kind === "Secret"
            ? `container ${c.name} env ${variable.name} comes from Secret ${name}; Secret values are never written into user-data (render with delivery: "parameters")`
            : `container ${c.name} env ${variable.name} comes from ConfigMap ${name}; render with delivery: "parameters", or resolve it into a literal value before rendering`,
        );
      }
      const object = lookup(ctx, kind, name);
      const bytes = object ? sourceValues(kind, object, false).get(key) : undefined;
      if (bytes === undefined) {
        if (keyRef.optional === true) {
          if (object === undefined)
            ctx.notices.push({ reason: `Optional${kind}NotFound`, message: notFound(kind, name) });
          continue;
        }
        missing(
          kind,
          at,
          object === undefined
            ? notFound(kind, name)
            : `couldn't find key ${key} in ${kind} ${ctx.namespace}/${name}`,
        );
      }
      value = envText(bytes, at, `${kind} ${ctx.namespace}/${name} key ${key}`);
      weigh(ctx, kind, name, key, bytes.length);
    } else if (from?.resourceFieldRef) {
      fail(
        "UnsupportedEnvSource",
        at,
        `container ${c.name} env ${variable.name} uses resourceFieldRef, which is not supported`,
      );
    } else if (from?.fieldRef) {
      const field = from.fieldRef.fieldPath;
      if (field === "status.hostIP" || field === "status.podIP") {
        hostIpEnv.push(variable.name);
        env.delete(variable.name);
        continue;
      }
      value = downward(field, meta, spec);
      if (value === undefined)
        fail(
          "UnsupportedEnvSource",
          at,
          `container ${c.name} env ${variable.name} uses fieldRef ${field}, which is not supported`,
        );
    } else {
      value = expand(checkText(variable.value ?? "", at), env, ctx.serviceEnv);
    }
    env.set(variable.name, value);
    // A later definition wins, as in Kubernetes: drop an earlier boot-time one of the same name.
    const earlier = hostIpEnv.indexOf(variable.name);
    if (earlier >= 0) hostIpEnv.splice(earlier, 1);
  }
  // The Service variables go after the container's own, for the names it does not set (as the
  // kubelet appends them); command and args see them too.
  for (const [name, value] of ctx.serviceEnv) {
    if (!env.has(name) && !hostIpEnv.includes(name)) env.set(name, value);
  }
  for (const [name, value] of env) {
    flags.push(`--env=${name}=${value}`);
    envBytes += name.length + Buffer.byteLength(value);
  }
  const command =
    c.command && c.command.length > 0
      ? c.command.map((s, i) => expand(checkText(s, `${where}.command[${i}]`), env))
      : undefined;
  const args =
    c.args && c.args.length > 0
      ? c.args.map((s, i) => expand(checkText(s, `${where}.args[${i}]`), env))
      : undefined;
  if (command && command[0] === "")
    fail("InvalidPod", `${where}.command[0]`, `container ${c.name} has an empty command[0]`);
  const argvBytes = [...(command ?? []), ...(args ?? [])].reduce(
    (n, s) => n + Buffer.byteLength(s),
    0,
  );

  if (c.workingDir) flags.push(`--workdir=${checkText(c.workingDir, `${where}.workingDir`)}`);
  const security = c.securityContext ?? {};
  const user = security.runAsUser ?? spec.securityContext?.runAsUser;
  const group = security.runAsGroup ?? spec.securityContext?.runAsGroup;
  if (user !== undefined) flags.push(`--user=${user}${group !== undefined ? `:${group}` : ""}`);
  else if (group !== undefined)
    fail(
      "UnsupportedField",
      `${where}.securityContext.runAsGroup`,
      `container ${c.name} sets runAsGroup without runAsUser`,
    );
  flags.push(...securityFlags(c, where, meta, spec));
  const nonRoot = security.runAsNonRoot ?? spec.securityContext?.runAsNonRoot;
  if (security.privileged) flags.push("--privileged");
  if (security.readOnlyRootFilesystem) flags.push("--read-only");
  if (security.allowPrivilegeEscalation === false) flags.push("--security-opt=no-new-privileges");
  for (const cap of security.capabilities?.add ?? [])
    flags.push(`--cap-add=${capability(cap, `${where}.securityContext.capabilities.add`)}`);
  for (const cap of security.capabilities?.drop ?? [])
    flags.push(`--cap-drop=${capability(cap, `${where}.securityContext.capabilities.drop`)}`);

  const limits = c.resources?.limits ?? {};
  for (const [resource, quantity] of Object.entries(limits)) {
    const at = `${where}.resources.limits[${resource}]`;
    const amount = parseQuantity(quantity);
    if (amount === undefined)
      fail(
        "InvalidPod",
        at,
        `container ${c.name} has an invalid ${resource} limit ${JSON.stringify(quantity)}`,
      );
    if (resource === "memory") {
      // Docker reads 0 as "no limit", and a number past 2^53 prints as 1e+308: neither is the Pod's limit.
      const bytes = Math.ceil(amount);
      if (!Number.isSafeInteger(bytes) || bytes <= 0)
        fail(
          "InvalidPod",
          at,
          `container ${c.name} has a memory limit of ${JSON.stringify(quantity)}, which is not a whole number of bytes between 1 and 2^53-1`,
        );
      flags.push(`--memory=${bytes}b`);
    } else if (resource === "cpu") {
      const cpus = Number(amount.toFixed(3));
      if (!Number.isSafeInteger(Math.round(amount * 1000)) || cpus <= 0)
        fail(
          "InvalidPod",
          at,
          `container ${c.name} has a cpu limit of ${JSON.stringify(quantity)}, which is not between 1m and ${Number.MAX_SAFE_INTEGER}m`,
        );
      flags.push(`--cpus=${cpus}`);
    } else if (resource === "nvidia.com/gpu") {
      if (!Number.isInteger(amount) || amount < 0)
        fail("InvalidPod", at, `container ${c.name} asks for a fractional GPU count`);
      if (amount > 0) flags.push(`--gpus=${amount}`);
    }
  }

  for (const mount of c.volumeMounts ?? []) {
    const at = `${where}.volumeMounts[${mount.name}]`;
    const source = volumes.get(mount.name);
    if (source === undefined)
      fail(
        "InvalidPod",
        at,
        `container ${c.name} mounts volume ${mount.name}, which the Pod does not define`,
      );
    if (source === "") continue;
    const fromSource = source.startsWith(`${SOURCE_VOLUME_ROOT}/`);
    if (mount.subPathExpr || (mount.subPath && !fromSource))
      fail(
        "UnsupportedVolume",
        at,
        `container ${c.name} mounts ${mount.name} with ${mount.subPathExpr ? "subPathExpr" : "subPath"}, which is supported for configMap, secret, projected and downwardAPI volumes only`,
      );
    const from = mount.subPath
      ? `${source}/${relativePath(mount.subPath, `${at}.subPath`)}`
      : source;
    if (/[,\n"]/.test(from))
      fail(
        "UnsupportedVolume",
        `${at}.subPath`,
        `subPath ${JSON.stringify(mount.subPath)} must be free of ',', '"' and newlines`,
      );
    const target = checkText(mount.mountPath, `${at}.mountPath`);
    if (!target.startsWith("/") || /[,\n"]/.test(target))
      fail(
        "InvalidPod",
        `${at}.mountPath`,
        `mountPath ${JSON.stringify(target)} must be absolute and free of ',', '"' and newlines`,
      );
    // The kubelet mounts ConfigMap, Secret, projected and downwardAPI volumes read-only whatever
    // the mount says.
    flags.push(
      `--mount=type=bind,source=${from},target=${target}${mount.readOnly || fromSource ? ",readonly" : ""}`,
    );
  }
  for (const agent of agents) {
    for (const m of agent.mounts) {
      flags.push(
        `--mount=type=bind,source=${m.hostPath},target=${m.containerPath}${m.readOnly ? ",readonly" : ""}`,
      );
    }
  }
  if (c.tty) flags.push("--tty");
  // stdin: kept open for `kubectl attach -i` (the host agent attaches with the host's docker).
  if (c.stdin) flags.push("--interactive");

  const terminationMessagePath = checkText(
    c.terminationMessagePath ?? "/dev/termination-log",
    `${where}.terminationMessagePath`,
  );
  if (!terminationMessagePath.startsWith("/") || /[,\n"]/.test(terminationMessagePath)) {
    fail(
      "InvalidPod",
      `${where}.terminationMessagePath`,
      `terminationMessagePath ${JSON.stringify(terminationMessagePath)} must be absolute and free of ',', '"' and newlines`,
    );
  }
  return {
    name: c.name,
    init,
    image,
    pullPolicy,
    command,
    args,
    createFlags: flags,
    hostIpEnv,
    terminationMessagePath,
    terminationMessagePolicy: c.terminationMessagePolicy ?? "File",
    nonRoot: nonRoot !== true ? "" : user === undefined ? "image" : user === 0 ? "root" : "",
    agents: agents.map((a) => a.command),
    probes: planProbes(c, where),
    weight: { env: envBytes, argv: argvBytes },
  };
}

/** The container's seccomp and AppArmor profiles, supplementary groups and /proc mount as docker flags. */
function securityFlags(
  c: ContainerSpec,
  where: string,
  meta: NonNullable<PodSpec["metadata"]>,
  spec: PodSpec["spec"],
): string[] {
  const flags: string[] = [];
  const security = c.securityContext ?? {};
  const pod = spec.securityContext ?? {};
  const annotations = meta.annotations ?? {};
  if (security.seLinuxOptions)
    fail(
      "UnsupportedField",
      `${where}.securityContext.seLinuxOptions`,
      "seLinuxOptions is not supported on this host",
    );
  if (security.procMount !== undefined && security.procMount !== "Default")
    fail(
      "UnsupportedField",
      `${where}.securityContext.procMount`,
      `procMount ${security.procMount} is not supported on this host`,
    );
  // seccomp: the field (container, then Pod), else the annotations the API server still copies.
  const seccompAt = security.seccompProfile
    ? `${where}.securityContext.seccompProfile`
    : pod.seccompProfile
      ? "spec.securityContext.seccompProfile"
      : undefined;
  const seccomp = security.seccompProfile ?? pod.seccompProfile;
  const seccompKey = [
    `container.seccomp.security.alpha.kubernetes.io/${c.name}`,
    "seccomp.security.alpha.kubernetes.io/pod",
  ].find((k) => annotations[k] !== undefined);
  const seccompType =
    seccomp?.type ?? legacyProfile(seccompKey ? annotations[seccompKey] : undefined);
  const seccompPath = seccompAt ?? `metadata.annotations[${seccompKey}]`;
  // Unset: docker's default profile, as the kubelet's --seccomp-default (never wider than RuntimeDefault).
  if (seccompType === "Unconfined") flags.push("--security-opt=seccomp=unconfined");
  else if (seccompType !== undefined && seccompType !== "RuntimeDefault")
    fail(
      "UnsupportedField",
      seccompPath,
      `seccomp profile ${seccompType} is not supported on this host (RuntimeDefault and Unconfined are)`,
    );
  // AppArmor: the field (container, then Pod), else the beta annotation.
  const apparmorAt = security.appArmorProfile
    ? `${where}.securityContext.appArmorProfile`
    : pod.appArmorProfile
      ? "spec.securityContext.appArmorProfile"
      : `metadata.annotations[container.apparmor.security.beta.kubernetes.io/${c.name}]`;
  const apparmor =
    (security.appArmorProfile ?? pod.appArmorProfile)?.type ??
    legacyProfile(annotations[`container.apparmor.security.beta.kubernetes.io/${c.name}`]);
  if (apparmor === "Unconfined") flags.push("--security-opt=apparmor=unconfined");
  else if (apparmor !== undefined && apparmor !== "RuntimeDefault")
    fail(
      "UnsupportedField",
      apparmorAt,
      `AppArmor profile ${apparmor} is not supported on this host (RuntimeDefault and Unconfined are)`,
    );
  for (const group of pod.supplementalGroups ?? []) flags.push(`--group-add=${group}`);
  return flags;
}

/** A profile annotation's value as a profile type (`localhost/...` becomes `Localhost`). */
function legacyProfile(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (value === "runtime/default" || value === "docker/default") return "RuntimeDefault";
  if (value === "unconfined") return "Unconfined";
  if (value.startsWith("localhost/")) return "Localhost";
  return value;
}

/** {@link podDns} for the plan: a bad field is `InvalidPod`, a notice becomes an Event. */
function planDns(
  namespace: string,
  spec: PodSpec["spec"],
  hostNetwork: boolean,
  dns: ResolvedRenderOptions["dns"],
  ctx: SourceContext,
): PodDns | undefined {
  const out = podDns(namespace, spec, hostNetwork, dns);
  if ("error" in out) fail("InvalidPod", out.error.path, out.error.message);
  if (out.notice !== undefined) ctx.notices.push(out.notice);
  return out.resolver;
}

/** An IPv4 or IPv6 address, as the API server validates `hostAliases[].ip`. */
const IP_ADDRESS = z.union([z.ipv4(), z.ipv6()]);
/** A DNS name (case kept), as `/etc/hosts` holds it. */
const DNS_NAME =
  /^(?=.{1,253}$)[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?)*\.?$/;

/**
 * `spec.hostAliases` as `name:ip` entries, in order: each IP validated as an address and each
 * hostname as a DNS name, since they are written into the containers' `/etc/hosts` (a newline or
 * space there would add entries nobody asked for).
 */
function planHostAliases(spec: PodSpec["spec"]): string[] {
  return (spec.hostAliases ?? []).flatMap((alias, k) => {
    const where = `spec.hostAliases[${k}]`;
    if (!IP_ADDRESS.safeParse(alias.ip).success)
      fail(
        "InvalidPod",
        `${where}.ip`,
        `hostAliases[${k}].ip ${JSON.stringify(alias.ip)} is not an IP address`,
      );
    return (alias.hostnames ?? []).map((name, j) => {
      if (!DNS_NAME.test(name))
        fail(
          "InvalidPod",
          `${where}.hostnames[${j}]`,
          `hostname ${JSON.stringify(name)} is not a DNS name`,
        );
      return `${name}:${alias.ip}`;
    });
  });
}

/**
 * The host name the kubelet gives a Pod's containers: `spec.hostnameOverride`, else
 * `spec.hostname`, else the Pod's name; cut to 63 characters without a trailing `-` or `.`, as the
 * kubelet cuts it (a Pod named by a StatefulSet, `web-0`, sees `web-0`). The API server has
 * validated each as a DNS name; one that is not (or cuts to nothing) is `InvalidPod`. A Pod with
 * none of them (rendered outside a cluster) keeps the runtime's name: `undefined`.
 */
function podHostname(
  meta: { readonly name?: string | undefined },
  spec: { readonly hostname?: string | undefined; readonly hostnameOverride?: string | undefined },
): string | undefined {
  const [field, name] =
    spec.hostnameOverride !== undefined && spec.hostnameOverride !== ""
      ? ["spec.hostnameOverride", spec.hostnameOverride]
      : spec.hostname !== undefined && spec.hostname !== ""
        ? ["spec.hostname", spec.hostname]
        : ["metadata.name", meta.name ?? ""];
  if (name === "") return undefined;
  const cut = name.length <= 63 ? name : name.slice(0, 63).replace(/[-.]+$/, "");
  if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(cut)) {
    fail("InvalidPod", field, `the Pod's host name ${JSON.stringify(name)} is not a DNS name`);
  }
  return cut;
}

/**
 * The Pod's fully qualified domain name, as the kubelet builds it: `<hostname>.<subdomain>.<ns>.svc.<clusterDomain>`
 * when it has a `subdomain` (a headless Service of that name gives peers its A record); undefined
 * without one, without a host name, or with hostNetwork (the host's own name). With
 * `setHostnameAsFQDN` it is also the containers' host name, which Linux caps at 64 characters:
 * a longer one is `InvalidPod` with the kubelet's words.
 */
function podFqdn(
  hostname: string | undefined,
  namespace: string,
  spec: {
    readonly subdomain?: string | undefined;
    readonly setHostnameAsFQDN?: boolean | undefined;
  },
  hostNetwork: boolean,
  dns: ResolvedRenderOptions["dns"],
): string | undefined {
  if (hostNetwork || hostname === undefined) return undefined;
  const sub = spec.subdomain ?? "";
  if (sub === "") return undefined;
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(sub) || sub.length > 63) {
    fail(
      "InvalidPod",
      "spec.subdomain",
      `the Pod's subdomain ${JSON.stringify(sub)} is not a DNS label`,
    );
  }
  const fqdn = `${hostname}.${sub}.${namespace}.svc.${dns.clusterDomain}`;
  if (spec.setHostnameAsFQDN === true && fqdn.length > 64) {
    fail(
      "InvalidPod",
      "spec.setHostnameAsFQDN",
      `failed to construct FQDN from pod hostname and cluster domain, FQDN ${fqdn} is too long (64 characters is the max, ${fqdn.length} characters requested)`,
    );
  }
  return fqdn;
}

/** The Pod sandbox's `--publish=` flags: each container port on its hostPort, else on the same port. */
function publishFlags(containers: readonly ContainerSpec[]): string[] {
  const flags: string[] = [];
  for (const c of containers) {
    for (const port of c.ports ?? []) {
      const host = port.hostPort ?? port.containerPort;
      const ip = port.hostIP
        ? `${checkText(port.hostIP, `spec.containers[${c.name}].ports.hostIP`)}:`
        : "";
      if (ip !== "" && !/^[0-9a-fA-F.:]+:$/.test(ip))
        fail(
          "InvalidPod",
          `spec.containers[${c.name}].ports`,
          `hostIP ${JSON.stringify(port.hostIP)} is not an IP address`,
        );
      flags.push(
        `--publish=${ip.includes(":") && ip.split(":").length > 2 ? `[${ip.slice(0, -1)}]:` : ip}${host}:${port.containerPort}/${(port.protocol ?? "TCP").toLowerCase()}`,
      );
    }
  }
  return flags;
}

/** Kubernetes' default: `Always` for `:latest` or an untagged image without digest, else `IfNotPresent`. */
function defaultPullPolicy(image: string): "Always" | "IfNotPresent" {
  if (image.includes("@")) return "IfNotPresent";
  const last = image.slice(image.lastIndexOf("/") + 1);
  const colon = last.lastIndexOf(":");
  return colon < 0 || last.slice(colon + 1) === "latest" ? "Always" : "IfNotPresent";
}

function capability(name: string, path: string): string {
  if (!/^[A-Za-z_]{1,64}$/.test(name))
    fail("InvalidPod", path, `${JSON.stringify(name)} is not a capability name`);
  return name.toUpperCase();
}

/** Downward-API fields resolved at render time. `status.hostIP` / `status.podIP` are resolved at boot. */
function downward(
  field: string,
  meta: NonNullable<PodSpec["metadata"]>,
  spec: PodSpec["spec"],
): string | undefined {
  switch (field) {
    case "metadata.name":
      return meta.name ?? "";
    case "metadata.namespace":
      return meta.namespace ?? "default";
    case "metadata.uid":
      return meta.uid ?? "";
    case "spec.nodeName":
      return spec.nodeName ?? "";
    case "spec.serviceAccountName":
      return spec.serviceAccountName ?? "default";
  }
  const keyed = /^metadata\.(labels|annotations)\['([^']*)'\]$/.exec(field);
  if (keyed)
    return (keyed[1] === "labels" ? meta.labels : meta.annotations)?.[keyed[2] ?? ""] ?? "";
  return undefined;
}

/**
 * Kubernetes' `$(VAR)` expansion, as the kubelet applies it to env values, command and args:
 * `$(NAME)` becomes the value of an env var defined earlier (else of `fallback`'s, the Service
 * variables, as the kubelet's mapping falls back to them), `$$` becomes `$` (so `$$(NAME)` stays
 * literal), and a reference to an unknown name is left as written.
 */
export function expand(
  text: string,
  env: ReadonlyMap<string, string>,
  fallback?: ReadonlyMap<string, string>,
): string {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch !== "$" || i + 1 >= text.length) {
      out += ch;
      continue;
    }
    const next = text[i + 1];
    if (next === "$") {
      out += "$";
      i++;
    } else if (next === "(") {
      const close = text.indexOf(")", i + 2);
      if (close < 0) {
        out += "$(";
        i++;
        continue;
      }
      const name = text.slice(i + 2, close);
      const value = env.get(name) ?? fallback?.get(name);
      out += value ?? `$(${name})`;
      i = close;
    } else {
      out += ch;
    }
  }
  return out;
}
