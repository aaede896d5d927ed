/**
 * The kubelet API the virtual node serves (docs/contracts.md, "The kubelet API"): routing, the kubelet's authorization
 * attributes, `PodLogOptions` parsing and validation, which container run a log request reads,
 * and the `/pods`, `/runningpods/`, `/stats/summary` and `/metrics/resource` bodies. Pure: no I/O;
 * `kubelet-handler.ts` answers requests with them, and the log and usage sources
 * (`@nebula/provider`, CloudWatch) are outside.
 *
 * @packageDocumentation
 */
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { z } from "zod";

/** One container run: the unit a log stream holds (`<namespace>/<pod>/<pod-uid>/<container>/<restart>`). */
export interface ContainerRunRef {
  /** The Pod's namespace. */
  readonly namespace: string;
  /** The Pod's name. */
  readonly pod: string;
  /** The Pod's UID. */
  readonly podUid: string;
  /** The container's name. */
  readonly container: string;
  /** 0 for the first run, then the container's restart count at that run. */
  readonly restart: number;
}

/** One line of a container's output. */
export interface LogLine {
  /** When the line was read on the host. */
  readonly timestamp: Date;
  /** The line, without its newline. */
  readonly message: string;
}

/** Which lines of a run to read. */
export interface LogReadOptions {
  /** The last this many lines only. */
  readonly tailLines?: number;
  /** Lines read at or after this time only. */
  readonly since?: Date;
}

/**
 * Where container output is read from (implemented by `@nebula/provider`'s
 * `CloudWatchContainerLogs`). It outlives the instance: a terminated Pod's runs stay readable.
 * Both methods stream: `/containerLogs` writes each line as it comes and stops asking for more
 * once the client is gone or `limitBytes` is reached, so a source should fetch its lines lazily
 * (a page when the line after the last one is asked for), never the whole run first.
 */
export interface ContainerLogSource {
  /**
   * The run's lines, oldest first (every line, or the last `tailLines` of those at or after
   * `since`); nothing when the run wrote nothing (no stream). Ends, without an error, when
   * `signal` aborts; an iteration the caller stops (`break`) reads no further.
   */
  lines(
    ref: ContainerRunRef,
    options?: LogReadOptions & { readonly signal?: AbortSignal },
  ): AsyncIterable<LogLine>;
  /**
   * The run's lines as {@link ContainerLogSource.lines} gives them, then every new line, until
   * `signal` aborts or `done()` is true after a poll that found nothing new.
   */
  follow(
    ref: ContainerRunRef,
    options: LogReadOptions & {
      readonly signal: AbortSignal;
      readonly pollMs?: number;
      readonly done?: () => boolean | Promise<boolean>;
    },
  ): AsyncIterable<LogLine>;
}

/** A container's latest usage, as the supervisor published it. */
export interface ContainerUsageSample {
  /** CPU time of the current run, in core-seconds (a counter: it restarts at 0 with each run). */
  readonly cpuCoreSeconds: number;
  /** CPU in cores, from the two latest samples of the run; `undefined` when unknown. */
  readonly cpuCores: number | undefined;
  /** Memory working set, in bytes. */
  readonly memoryWorkingSetBytes: number;
  /** When the sample was taken. */
  readonly timestamp: Date;
}

/** Usage by Pod UID, then by container name. */
export type PodUsage = ReadonlyMap<string, ReadonlyMap<string, ContainerUsageSample>>;

/** Where container usage is read from (implemented by `@nebula/provider`'s `CloudWatchUsage`). */
export interface UsageSource {
  /** The latest usage of these Pods' containers; containers without data are absent. */
  podUsage(
    pods: ReadonlyArray<{ readonly uid: string; readonly containers: readonly string[] }>,
    now?: Date,
  ): Promise<PodUsage>;
}

/** What a kubelet API path asks for. */
export type KubeletRoute =
  | { readonly kind: "healthz" }
  | { readonly kind: "pods" }
  | { readonly kind: "runningPods" }
  | { readonly kind: "statsSummary" }
  | { readonly kind: "metricsResource" }
  | {
      readonly kind: "containerLogs";
      /** Decoded path segments; empty when missing (the kubelet answers 400 then). */
      readonly namespace: string;
      readonly pod: string;
      readonly container: string;
    }
  | {
      /** `/exec` or `/attach`: a stream to a container, relayed to the Pod's host agent. */
      readonly kind: "exec" | "attach";
      /** Decoded path segments. */
      readonly namespace: string;
      readonly pod: string;
      /** The Pod's UID when the path has one (`/exec/{ns}/{pod}/{uid}/{container}`). */
      readonly uid: string | undefined;
      readonly container: string;
    }
  | {
      /** `/portForward`: a stream to the Pod's ports, relayed to the Pod's host agent. */
      readonly kind: "portForward";
      /** Decoded path segments. */
      readonly namespace: string;
      readonly pod: string;
      /** The Pod's UID when the path has one (`/portForward/{ns}/{pod}/{uid}`). */
      readonly uid: string | undefined;
    }
  | {
      readonly kind: "redirect";
      /** Where to: a subtree root asked for without its slash (Go's `ServeMux` answers 301). */
      readonly location: string;
    }
  | { readonly kind: "notFound" };

function decodeSegment(segment: string | undefined): string {
  if (segment === undefined) return "";
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The routes of a stream to a container or a Pod's ports (`/exec`, `/attach`, `/portForward`). */
export type StreamRoute = Extract<
  KubeletRoute,
  { readonly kind: "exec" | "attach" | "portForward" }
>;

/**
 * Whether a route is a stream ({@link StreamRoute}): relayed to the Pod's host agent. The kubelet
 * registers them for GET and POST only (any other method is `405 Method Not Allowed`).
 */
export function isStreamRoute(route: KubeletRoute): route is StreamRoute {
  return route.kind === "exec" || route.kind === "attach" || route.kind === "portForward";
}

/**
 * The stream routes as the kubelet registers them (go-restful, GET and POST each):
 * `/exec/{podNamespace}/{podID}/{containerName}`, `/exec/{podNamespace}/{podID}/{uid}/{containerName}`,
 * the same for `/attach`, and `/portForward/{podNamespace}/{podID}` and
 * `/portForward/{podNamespace}/{podID}/{uid}`. Any other number of segments, or an empty one, is
 * no route (`undefined`).
 */
function streamRoute(clean: string): StreamRoute | undefined {
  const [, head, ...rest] = clean.split("/");
  if (rest.some((s) => s === "")) return undefined;
  const [namespace, pod, third, fourth] = rest.map(decodeSegment) as [
    string,
    string,
    string,
    string,
  ];
  if (head === "exec" || head === "attach") {
    if (rest.length === 3) return { kind: head, namespace, pod, uid: undefined, container: third };
    if (rest.length === 4) return { kind: head, namespace, pod, uid: third, container: fourth };
    return undefined;
  }
  if (head === "portForward") {
    if (rest.length === 2) return { kind: head, namespace, pod, uid: undefined };
    if (rest.length === 3) return { kind: head, namespace, pod, uid: third };
  }
  return undefined;
}

/** The checks the kubelet's `/healthz` runs, each also served at `/healthz/<name>`. */
const HEALTHZ_CHECKS = ["ping", "log", "syncloop"];

/**
 * Routes a request path (without its query) as the kubelet's server does
 * (`pkg/kubelet/server/server.go`, `InstallAuthNotRequiredHandlers` and
 * `InstallAuthRequiredHandlers`): `/pods` (also `/pods/`), `/runningpods/` (registered with its
 * trailing slash, so `/runningpods` is a 301 to it), `/stats/summary`, `/metrics/resource`,
 * `/healthz` and `/healthz/{ping,log,syncloop}`, `/containerLogs/{namespace}/{pod}/{container}`,
 * and the streams (`exec`, `attach`, `portForward`: {@link StreamRoute}, segments decoded; a
 * handler without host agents answers them as `notFound`). Paths the virtual node does not serve
 * (`/run`, `/spec`, `/configz`, `/metrics`, `/metrics/cadvisor`...) are `notFound`.
 */
export function kubeletRoute(path: string): KubeletRoute {
  if (path === "/runningpods") return { kind: "redirect", location: "/runningpods/" };
  if (path === "/runningpods/") return { kind: "runningPods" };
  if (path === "/pods" || path === "/pods/") return { kind: "pods" };
  if (path === "/healthz") return { kind: "healthz" };
  if (path.startsWith("/healthz/") && HEALTHZ_CHECKS.includes(path.slice("/healthz/".length))) {
    return { kind: "healthz" };
  }
  const clean = path.replace(/\/+$/, "") || "/";
  if (clean === "/stats/summary") return { kind: "statsSummary" };
  if (clean === "/metrics/resource") return { kind: "metricsResource" };
  if (clean === "/containerLogs" || clean.startsWith("/containerLogs/")) {
    const [namespace, pod, container] = clean.slice("/containerLogs/".length).split("/");
    return {
      kind: "containerLogs",
      namespace: decodeSegment(namespace),
      pod: decodeSegment(pod),
      container: decodeSegment(container),
    };
  }
  return streamRoute(clean) ?? { kind: "notFound" };
}

/**
 * Whether a route answers GET only (the kubelet's `GETOnlyRestfulFilter` or a go-restful GET
 * route: any other method is `405 Method Not Allowed` with `Allow: GET`). `/healthz` and
 * `/metrics/resource` are plain handlers that answer any method; a redirect or an unknown path is
 * not a route.
 */
export function isGetOnlyRoute(route: KubeletRoute): boolean {
  return (
    route.kind === "pods" ||
    route.kind === "runningPods" ||
    route.kind === "statsSummary" ||
    route.kind === "containerLogs"
  );
}

/** The attributes a request is authorized with (a `SubjectAccessReview`'s `resourceAttributes`). */
export interface KubeletAuthorization {
  /** The API verb from the HTTP method (`get`, `create`, `update`, `patch`, `delete`; else empty). */
  readonly verb: string;
  /** Always `nodes`. */
  readonly resource: "nodes";
  /** `stats`, `metrics`, `log`, `checkpoint`, `pods`, `healthz`, `configz`, `statusz` or `proxy`. */
  readonly subresource: string;
  /** The Node's name. */
  readonly name: string;
}

/** The kubelet's `isSubpath`: the path itself, or below it (a trailing slash of `prefix` ignored). */
function isSubpath(path: string, prefix: string): boolean {
  const base = prefix.replace(/\/$/, "");
  return path === base || path.startsWith(`${base}/`);
}

/**
 * The attributes the kubelet authorizes a request with, in the order it tries them (its
 * `GetRequestAttributes` in `pkg/kubelet/server/auth.go`, with `KubeletFineGrainedAuthz`, on by
 * default since Kubernetes 1.33): resource `nodes`, name the Node, verb from the HTTP method
 * (`GET` → `get`, `POST` → `create`, `PUT` → `update`, `PATCH` → `patch`, `DELETE` → `delete`,
 * anything else, `HEAD` included, empty). `/stats` → `stats`, `/metrics` → `metrics`, `/logs` →
 * `log`, `/checkpoint` → `checkpoint`; `/pods` and `/runningpods` → `pods` then `proxy`;
 * `/healthz` → `healthz` then `proxy`; `/configz` → `configz` then `proxy`; `/statusz` →
 * `statusz` then `proxy`; anything else (`/containerLogs`, `/exec`, `/attach`, `/portForward`
 * included) → `proxy`: the API server's `POST` of `kubectl exec` is `create` on `nodes/proxy`, a
 * `GET` is `get`. The request is allowed when any of them is.
 */
export function kubeletAuthorizations(
  method: string,
  path: string,
  nodeName: string,
): readonly KubeletAuthorization[] {
  const verbs: Record<string, string> = {
    GET: "get",
    POST: "create",
    PUT: "update",
    PATCH: "patch",
    DELETE: "delete",
  };
  const verb = verbs[method] ?? "";
  const subresources: string[] = [];
  if (isSubpath(path, "/pods")) subresources.push("pods");
  else if (isSubpath(path, "/healthz")) subresources.push("healthz");
  else if (isSubpath(path, "/configz")) subresources.push("configz");
  else if (isSubpath(path, "/statusz")) subresources.push("statusz");
  else if (isSubpath(path, "/runningpods/")) subresources.push("pods");
  subresources.push(
    isSubpath(path, "/stats/")
      ? "stats"
      : isSubpath(path, "/metrics")
        ? "metrics"
        : isSubpath(path, "/logs/")
          ? "log"
          : isSubpath(path, "/checkpoint/")
            ? "checkpoint"
            : "proxy",
  );
  return subresources.map((subresource) => ({
    verb,
    resource: "nodes",
    subresource,
    name: nodeName,
  }));
}

/**
 * The one attribute a kubelet without `KubeletFineGrainedAuthz` authorizes a request with: the
 * last of {@link kubeletAuthorizations} (`stats`, `metrics`, `log`, `checkpoint` or `proxy`).
 */
export function kubeletAuthorization(
  method: string,
  path: string,
  nodeName: string,
): KubeletAuthorization {
  const all = kubeletAuthorizations(method, path, nodeName);
  return (
    all[all.length - 1] ?? { verb: "", resource: "nodes", subresource: "proxy", name: nodeName }
  );
}

/**
 * The kubelet's words for a request none of whose attributes is allowed: `Forbidden (user=…,
 * verb=…, resource=nodes, subresource(s)=[pods proxy])` and a newline.
 */
export function forbiddenMessage(
  user: string,
  attributes: readonly KubeletAuthorization[],
): string {
  const first = attributes[0];
  const subresources = attributes.map((a) => a.subresource).join(" ");
  return `Forbidden (user=${user}, verb=${first?.verb ?? ""}, resource=${first?.resource ?? "nodes"}, subresource(s)=[${subresources}])\n`;
}

/** A parsed and validated `PodLogOptions`. */
export interface KubeletLogOptions {
  /** Stream new lines until the run ends. */
  readonly follow: boolean;
  /** The run before the current one. */
  readonly previous: boolean;
  /** Prefix each line with its RFC 3339 time (nanoseconds, fixed width). */
  readonly timestamps: boolean;
  /** The last this many lines. */
  readonly tailLines?: number;
  /** Stop after this many bytes of output. */
  readonly limitBytes?: number;
  /** Lines at or after this time (from `sinceSeconds` or `sinceTime`). */
  readonly since?: Date;
}

/** A request the kubelet refuses, with its status and its words. */
export interface KubeletRefusal {
  /** HTTP status. */
  readonly status: number;
  /** The body (plain text), as the kubelet writes it. */
  readonly message: string;
}

const boolParam = z.enum([
  "true",
  "false",
  "1",
  "0",
  "t",
  "f",
  "T",
  "F",
  "TRUE",
  "FALSE",
  "True",
  "False",
]);
const intParam = z.string().regex(/^[+-]?\d+$/);
const LogQuery = z.object({
  follow: boolParam.optional(),
  previous: boolParam.optional(),
  timestamps: boolParam.optional(),
  tailLines: intParam.optional(),
  limitBytes: intParam.optional(),
  sinceSeconds: intParam.optional(),
  sinceTime: z.iso.datetime({ offset: true }).optional(),
  container: z.string().optional(),
  insecureSkipTLSVerifyBackend: boolParam.optional(),
  stream: z.enum(["All", "Stdout", "Stderr"]).optional(),
});

const truthy = (value: string | undefined): boolean =>
  value !== undefined && ["true", "1", "t", "T", "TRUE", "True"].includes(value);

/**
 * Parses a `/containerLogs` query as the kubelet does: `tail` is the old name of `tailLines`
 * (`all` = no limit); an undecodable query is `400 {"message": "Unable to decode query."}`; an
 * invalid one (`tailLines` < 0, `limitBytes` < 1, `sinceSeconds` < 1, both `sinceSeconds` and
 * `sinceTime`) is `422 {"message": "Invalid request."}`. `stream` other than `All` is refused
 * (the stream holds stdout and stderr as one).
 */
export function parseLogQuery(
  query: URLSearchParams,
  now: Date,
):
  | { readonly ok: true; readonly options: KubeletLogOptions }
  | ({ readonly ok: false } & KubeletRefusal) {
  const raw: Record<string, string> = {};
  for (const [key, value] of query) {
    if (!(key in raw)) raw[key] = value;
  }
  if (raw.tail !== undefined) {
    if (raw.tail !== "all") raw.tailLines = raw.tail;
    else delete raw.tailLines;
    delete raw.tail;
  }
  const known = Object.fromEntries(Object.entries(raw).filter(([key]) => key in LogQuery.shape));
  const parsed = LogQuery.safeParse(known);
  if (!parsed.success) {
    return { ok: false, status: 400, message: '{"message": "Unable to decode query."}' };
  }
  const q = parsed.data;
  const tailLines = q.tailLines === undefined ? undefined : Number(q.tailLines);
  const limitBytes = q.limitBytes === undefined ? undefined : Number(q.limitBytes);
  const sinceSeconds = q.sinceSeconds === undefined ? undefined : Number(q.sinceSeconds);
  const invalid =
    (tailLines !== undefined && tailLines < 0) ||
    (limitBytes !== undefined && limitBytes < 1) ||
    (sinceSeconds !== undefined && sinceSeconds < 1) ||
    (sinceSeconds !== undefined && q.sinceTime !== undefined) ||
    (q.stream !== undefined && q.stream !== "All" && tailLines !== undefined);
  if (invalid) return { ok: false, status: 422, message: '{"message": "Invalid request."}' };
  if (q.stream !== undefined && q.stream !== "All") {
    return {
      ok: false,
      status: 400,
      message: `stream ${q.stream} is not available: the virtual node keeps stdout and stderr as one stream`,
    };
  }
  const since =
    sinceSeconds !== undefined
      ? new Date(now.getTime() - sinceSeconds * 1000)
      : q.sinceTime !== undefined
        ? new Date(q.sinceTime)
        : undefined;
  return {
    ok: true,
    options: {
      follow: truthy(q.follow),
      previous: truthy(q.previous),
      timestamps: truthy(q.timestamps),
      ...(tailLines === undefined ? {} : { tailLines }),
      ...(limitBytes === undefined ? {} : { limitBytes }),
      ...(since === undefined ? {} : { since }),
    },
  };
}

function containerStatus(pod: V1Pod, name: string): V1ContainerStatus | undefined {
  const status = pod.status;
  return (
    status?.containerStatuses?.find((c) => c.name === name) ??
    status?.initContainerStatuses?.find((c) => c.name === name) ??
    status?.ephemeralContainerStatuses?.find((c) => c.name === name)
  );
}

/** Whether the Pod's spec has a container (regular, init or ephemeral) of this name. */
export function hasContainer(pod: V1Pod, name: string): boolean {
  const spec = pod.spec;
  return [
    ...(spec?.containers ?? []),
    ...(spec?.initContainers ?? []),
    ...(spec?.ephemeralContainers ?? []),
  ].some((c) => c.name === name);
}

/** Which run a log request reads, and whether that run may still write. */
export interface LogRun {
  /** The run. */
  readonly ref: ContainerRunRef;
  /** The run is the container's current one and it is running (`follow` waits for more). */
  readonly running: boolean;
}

/**
 * Picks the run a log request reads, from the Pod's status, with the kubelet's rules and words
 * (`validateContainerLogStatus`): `previous` is the last terminated run; otherwise the running
 * run, else the terminated current run, else the last terminated one; a container that never
 * ran is "waiting to start". Runs are numbered by the restart count at their start, so the
 * current run is `restartCount` and the last terminated one `restartCount - 1` while the next is
 * pending (the supervisor counts a restart when it decides it).
 */
export function logRun(
  pod: V1Pod,
  container: string,
  previous: boolean,
): ({ readonly ok: true } & LogRun) | ({ readonly ok: false } & KubeletRefusal) {
  const podName = pod.metadata?.name ?? "";
  const base = {
    namespace: pod.metadata?.namespace ?? "default",
    pod: podName,
    podUid: pod.metadata?.uid ?? "",
    container,
  };
  const refuse = (message: string) => ({ ok: false as const, status: 400, message });
  const status = containerStatus(pod, container);
  if (status === undefined) {
    return refuse(`container "${container}" in pod "${podName}" is not available`);
  }
  const count = Math.max(0, status.restartCount ?? 0);
  const state = status.state;
  const last = status.lastState?.terminated;
  const run = (restart: number, running: boolean) => ({
    ok: true as const,
    ref: { ...base, restart },
    running,
  });
  if (previous) {
    if (last === undefined || count < 1) {
      return refuse(`previous terminated container "${container}" in pod "${podName}" not found`);
    }
    return run(count - 1, false);
  }
  if (state?.running !== undefined) return run(count, true);
  if (state?.terminated !== undefined) return run(count, false);
  if (last !== undefined && count >= 1) return run(count - 1, false);
  if (state?.waiting !== undefined) {
    const reason = state.waiting.reason ?? "";
    if (reason === "ErrImagePull") {
      return refuse(
        `container "${container}" in pod "${podName}" is waiting to start: image can't be pulled`,
      );
    }
    if (reason === "ImagePullBackOff") {
      return refuse(
        `container "${container}" in pod "${podName}" is waiting to start: trying and failing to pull image`,
      );
    }
    return refuse(`container "${container}" in pod "${podName}" is waiting to start: ${reason}`);
  }
  return refuse(`container "${container}" in pod "${podName}" is waiting to start - no logs yet`);
}

/** The kubelet's log timestamp: RFC 3339 with nine fraction digits, UTC. */
export function logTimestamp(time: Date): string {
  const ms = Number.isNaN(time.getTime()) ? 0 : time.getTime();
  const iso = new Date(ms).toISOString(); // 2026-12-01T05:00:00.123Z
  return `${iso.slice(0, 23)}000000Z`;
}

/**
 * Encodes lines as the kubelet writes them (`line\n`, with `timestamps` prefixed by the time and
 * a space) and enforces `limitBytes` across calls: {@link LogEncoder.encode} returns the bytes
 * to write, cut at the limit, and `done` once it is reached.
 */
export class LogEncoder {
  #left: number;
  readonly #timestamps: boolean;
  constructor(options: Pick<KubeletLogOptions, "timestamps" | "limitBytes">) {
    this.#timestamps = options.timestamps;
    this.#left = options.limitBytes ?? Number.POSITIVE_INFINITY;
  }
  /** True once `limitBytes` bytes have been given out. */
  get done(): boolean {
    return this.#left <= 0;
  }
  /** The bytes of one line (possibly cut short by the limit); empty once done. */
  encode(line: LogLine): Buffer {
    if (this.#left <= 0) return Buffer.alloc(0);
    const text = this.#timestamps
      ? `${logTimestamp(line.timestamp)} ${line.message}\n`
      : `${line.message}\n`;
    let bytes = Buffer.from(text, "utf8");
    if (bytes.length > this.#left) bytes = bytes.subarray(0, this.#left);
    this.#left -= bytes.length;
    return bytes;
  }
}

/** A Pod's containers that are running, from its status. */
function runningContainers(pod: V1Pod): V1ContainerStatus[] {
  return [
    ...(pod.status?.containerStatuses ?? []),
    ...(pod.status?.initContainerStatuses ?? []),
  ].filter((c) => c.state?.running !== undefined);
}

/** The Pods a `/stats/summary` or `/metrics/resource` covers: those with a running container. */
function activePods(pods: readonly V1Pod[]): V1Pod[] {
  return pods.filter((p) => p.metadata?.uid !== undefined && runningContainers(p).length > 0);
}

/** What {@link podUsageQuery} asks a {@link UsageSource} for: each active Pod's running containers. */
export function podUsageQuery(
  pods: readonly V1Pod[],
): Array<{ readonly uid: string; readonly containers: readonly string[] }> {
  return activePods(pods).map((p) => ({
    uid: p.metadata?.uid ?? "",
    containers: runningContainers(p).map((c) => c.name),
  }));
}

/**
 * A `v1.PodList` as the kubelet encodes one (its `encodePods`): `kind` and `apiVersion` set,
 * empty list metadata, `items` `null` when there are none (Go's nil slice, which the kubelet's
 * `PodList` does not omit). Items are given as they are to be written.
 */
function encodePodList(items: readonly object[]): object {
  return {
    kind: "PodList",
    apiVersion: "v1",
    metadata: {},
    items: items.length === 0 ? null : items,
  };
}

/**
 * `/pods` (the kubelet's `getPods`): every Pod bound to the Node, as its Pod manager holds them
 * (the Pods whose `spec.nodeName` is the Node, terminal ones included, until they are gone from
 * the API), whole: spec and status. Each Pod is passed in already as JSON (an API object);
 * `kind` and `apiVersion` are dropped from the items, as a typed Go list writes them.
 */
export function podList(pods: readonly Record<string, unknown>[]): object {
  return encodePodList(pods.map(({ kind: _kind, apiVersion: _apiVersion, ...rest }) => rest));
}

/** The phases after which a Pod's containers never run again. */
const TERMINAL_PHASES = new Set(["Succeeded", "Failed"]);

/**
 * Whether a Pod is running now, as far as what was observed says: it is not terminal (`phase`
 * `Succeeded` or `Failed`), a container of it runs (its status), and, once it is being deleted,
 * the virtual node's latest look at its instance still saw it running (`instanceState`: the
 * state EC2 last listed for the Pod's instance, `undefined` when none is listed: its teardown
 * stopped or terminated it). A Pod not being deleted is judged by its status alone.
 */
export function isRunningPod(
  pod: V1Pod,
  instanceState?: (podUid: string) => string | undefined,
): boolean {
  const uid = pod.metadata?.uid;
  if (uid === undefined || uid === "") return false;
  if (TERMINAL_PHASES.has(pod.status?.phase ?? "")) return false;
  if (runningContainers(pod).length === 0) return false;
  if (pod.metadata?.deletionTimestamp != null && instanceState !== undefined) {
    return instanceState(uid) === "running";
  }
  return true;
}

/**
 * `/runningpods/` (the kubelet's `getRunningPods`): the Pods running now ({@link isRunningPod}),
 * each as the kubelet's `Pod.ToAPIPod` builds it from the runtime: metadata `name`, `namespace`,
 * `uid` only; `spec.containers` the running containers with `name` and `image` only (and the
 * empty `resources` Go writes); empty `status`. A `PodList`, `items` `null` when none runs.
 */
export function runningPodList(
  pods: readonly V1Pod[],
  instanceState?: (podUid: string) => string | undefined,
): object {
  return encodePodList(
    pods
      .filter((p) => isRunningPod(p, instanceState))
      .map((p) => ({
        metadata: {
          name: p.metadata?.name,
          namespace: p.metadata?.namespace,
          uid: p.metadata?.uid,
        },
        spec: {
          containers: runningContainers(p).map((c) => ({
            name: c.name,
            image: c.image,
            resources: {},
          })),
        },
        status: {},
      })),
  );
}

interface CpuStats {
  time: string;
  usageNanoCores?: number;
  usageCoreNanoSeconds: number;
}
interface MemoryStats {
  time: string;
  workingSetBytes: number;
}

const nanos = (seconds: number): number => Math.round(seconds * 1e9);

function iso(date: Date | string | undefined): string | undefined {
  if (date === undefined) return undefined;
  const d = typeof date === "string" ? new Date(date) : date;
  return Number.isNaN(d.getTime()) ? undefined : `${d.toISOString().slice(0, 19)}Z`;
}

function sum(
  samples: readonly ContainerUsageSample[],
): { cpu: CpuStats; memory: MemoryStats } | undefined {
  if (samples.length === 0) return undefined;
  const latest = new Date(Math.max(...samples.map((s) => s.timestamp.getTime())));
  const cores = samples.every((s) => s.cpuCores !== undefined)
    ? samples.reduce((n, s) => n + (s.cpuCores ?? 0), 0)
    : undefined;
  return {
    cpu: {
      time: latest.toISOString(),
      ...(cores === undefined ? {} : { usageNanoCores: nanos(cores) }),
      usageCoreNanoSeconds: nanos(samples.reduce((n, s) => n + s.cpuCoreSeconds, 0)),
    },
    memory: {
      time: latest.toISOString(),
      workingSetBytes: samples.reduce((n, s) => n + s.memoryWorkingSetBytes, 0),
    },
  };
}

/** The Node's sums with its own CPU counter, when given (never below the sum of its runs'). */
function withNodeCounter(
  stats: { cpu: CpuStats; memory: MemoryStats } | undefined,
  counterSeconds: number | undefined,
): { cpu: CpuStats; memory: MemoryStats } | undefined {
  if (stats === undefined || counterSeconds === undefined || !Number.isFinite(counterSeconds)) {
    return stats;
  }
  const counter = Math.max(stats.cpu.usageCoreNanoSeconds, nanos(counterSeconds));
  return { ...stats, cpu: { ...stats.cpu, usageCoreNanoSeconds: counter } };
}

/** What the `/stats/summary` and `/metrics/resource` bodies are built from. */
export interface UsageView {
  /** The Node's name. */
  readonly nodeName: string;
  /** When the virtual node started (the node's `startTime`). */
  readonly startTime: Date;
  /** The Pods bound to the Node. */
  readonly pods: readonly V1Pod[];
  /** Their usage ({@link UsageSource.podUsage}). */
  readonly usage: PodUsage;
  /**
   * The Node's CPU counter, core-seconds, from a {@link NodeCpuCounter} fed every read, so it
   * keeps ended runs and never drops; absent: the sum of the running containers' counters.
   */
  readonly nodeCpuCoreSeconds?: number;
}

/**
 * `/stats/summary` (the kubelet's `statsapi.Summary`): every active Pod with every running
 * container, each with `cpu` and `memory` when the supervisor has published usage for it; the
 * Pod's and the Node's figures are the sums of their containers'.
 */
export function statsSummary(view: UsageView): object {
  const all: ContainerUsageSample[] = [];
  const pods = activePods(view.pods).map((pod) => {
    const uid = pod.metadata?.uid ?? "";
    const byContainer = view.usage.get(uid);
    const samples: ContainerUsageSample[] = [];
    const containers = runningContainers(pod).map((c) => {
      const sample = byContainer?.get(c.name);
      const stats = sample === undefined ? undefined : sum([sample]);
      if (sample !== undefined) samples.push(sample);
      return {
        name: c.name,
        startTime: iso(c.state?.running?.startedAt),
        ...(stats ?? {}),
      };
    });
    all.push(...samples);
    const podStats = sum(samples);
    return {
      podRef: { name: pod.metadata?.name, namespace: pod.metadata?.namespace, uid },
      startTime: iso(pod.status?.startTime),
      containers,
      ...(podStats ?? {}),
    };
  });
  const nodeStats = withNodeCounter(sum(all), view.nodeCpuCoreSeconds);
  return {
    node: {
      nodeName: view.nodeName,
      startTime: iso(view.startTime),
      ...(nodeStats ?? {}),
    },
    pods,
  };
}

function label(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function number(value: number): string {
  return Number.isFinite(value) ? String(value) : "0";
}

/**
 * The smallest CPU counter `/metrics/resource` reports: 1 ns. A container that has started has
 * used some CPU, so the kubelet's cgroup counter is never 0; ours is integrated from `docker stats`
 * percentages (0.01 % of a core per sample interval), and an idle container reads 0.00 %.
 * metrics-server drops a whole Pod when any of its containers reports 0 CPU (and a Node reporting
 * 0), so `kubectl top` would show nothing for a Pod with one idle container; 1 ns is below the
 * measurement's resolution and shows as `0m`.
 */
const MIN_CPU_SECONDS = 1e-9;

function cpuCounter(seconds: number): string {
  return number(Number.isFinite(seconds) ? Math.max(seconds, MIN_CPU_SECONDS) : MIN_CPU_SECONDS);
}

/**
 * `/metrics/resource` as the kubelet exposes it (Prometheus text 0.0.4), the series
 * metrics-server scrapes, families sorted by name, labels `container`, `namespace`, `pod` in
 * that order, each sample with its timestamp in milliseconds: `container_cpu_usage_seconds_total`,
 * `container_memory_working_set_bytes`, `container_start_time_seconds`,
 * `node_cpu_usage_seconds_total`, `node_memory_working_set_bytes`, `pod_cpu_usage_seconds_total`,
 * `pod_memory_working_set_bytes`, `resource_scrape_error`. A CPU counter is at least 1 ns: an
 * idle container's reads 0 from `docker stats`, and metrics-server would drop its whole Pod.
 */
export function resourceMetrics(view: UsageView, scrapeError = false): string {
  const container = { cpu: [] as string[], memory: [] as string[], start: [] as string[] };
  const pod = { cpu: [] as string[], memory: [] as string[] };
  const all: ContainerUsageSample[] = [];
  for (const p of activePods(view.pods)) {
    const uid = p.metadata?.uid ?? "";
    const ns = label(p.metadata?.namespace ?? "");
    const name = label(p.metadata?.name ?? "");
    const samples: ContainerUsageSample[] = [];
    for (const c of runningContainers(p)) {
      const sample = view.usage.get(uid)?.get(c.name);
      if (sample === undefined) continue;
      samples.push(sample);
      const labels = `{container="${label(c.name)}",namespace="${ns}",pod="${name}"}`;
      const ts = sample.timestamp.getTime();
      container.cpu.push(
        `container_cpu_usage_seconds_total${labels} ${cpuCounter(sample.cpuCoreSeconds)} ${ts}`,
      );
      container.memory.push(
        `container_memory_working_set_bytes${labels} ${number(sample.memoryWorkingSetBytes)} ${ts}`,
      );
      const started = c.state?.running?.startedAt;
      if (started !== undefined) {
        const at = new Date(started).getTime();
        if (!Number.isNaN(at)) {
          container.start.push(`container_start_time_seconds${labels} ${at / 1000} ${at}`);
        }
      }
    }
    const total = sum(samples);
    if (total !== undefined) {
      const ts = new Date(total.cpu.time).getTime();
      const labels = `{namespace="${ns}",pod="${name}"}`;
      pod.cpu.push(
        `pod_cpu_usage_seconds_total${labels} ${cpuCounter(total.cpu.usageCoreNanoSeconds / 1e9)} ${ts}`,
      );
      pod.memory.push(
        `pod_memory_working_set_bytes${labels} ${total.memory.workingSetBytes} ${ts}`,
      );
    }
    all.push(...samples);
  }
  const node = withNodeCounter(sum(all), view.nodeCpuCoreSeconds);
  // A family without samples is left out, as the Prometheus registry the kubelet uses does.
  const family = (name: string, help: string, type: string, lines: readonly string[]) =>
    lines.length === 0
      ? ""
      : `# HELP ${name} [STABLE] ${help}\n# TYPE ${name} ${type}\n${lines.map((l) => `${l}\n`).join("")}`;
  const nodeTs = node === undefined ? undefined : new Date(node.cpu.time).getTime();
  return [
    family(
      "container_cpu_usage_seconds_total",
      "Cumulative cpu time consumed by the container in core-seconds",
      "counter",
      container.cpu,
    ),
    family(
      "container_memory_working_set_bytes",
      "Current working set of the container in bytes",
      "gauge",
      container.memory,
    ),
    family(
      "container_start_time_seconds",
      "Start time of the container since unix epoch in seconds",
      "gauge",
      container.start,
    ),
    family(
      "node_cpu_usage_seconds_total",
      "Cumulative cpu time consumed by the node in core-seconds",
      "counter",
      node === undefined
        ? []
        : [
            `node_cpu_usage_seconds_total ${cpuCounter(node.cpu.usageCoreNanoSeconds / 1e9)} ${nodeTs}`,
          ],
    ),
    family(
      "node_memory_working_set_bytes",
      "Current working set of the node in bytes",
      "gauge",
      node === undefined
        ? []
        : [`node_memory_working_set_bytes ${node.memory.workingSetBytes} ${nodeTs}`],
    ),
    family(
      "pod_cpu_usage_seconds_total",
      "Cumulative cpu time consumed by the pod in core-seconds",
      "counter",
      pod.cpu,
    ),
    family(
      "pod_memory_working_set_bytes",
      "Current working set of the pod in bytes",
      "gauge",
      pod.memory,
    ),
    family(
      "resource_scrape_error",
      "1 if there was an error while getting container metrics, 0 otherwise",
      "gauge",
      [`resource_scrape_error ${scrapeError ? 1 : 0}`],
    ),
  ].join("");
}
