import { z } from "zod";
import { UserDataError } from "./errors.js";

const str = z.string();
const port = z.union([z.number().int(), str]);
const Exec = z.looseObject({ command: z.array(str).optional() });
const HttpGet = z.looseObject({
  path: str.optional(),
  port,
  host: str.optional(),
  scheme: z.enum(["HTTP", "HTTPS"]).optional(),
  httpHeaders: z.array(z.looseObject({ name: str, value: str })).optional(),
});
const TcpSocket = z.looseObject({ port, host: str.optional() });
const seconds = z.number().int().min(0).optional();
const count = z.number().int().min(1).optional();

/** A probe as the Pod spec states it (`startupProbe`, `livenessProbe`, `readinessProbe`). */
const ProbeSpec = z.looseObject({
  exec: Exec.optional(),
  httpGet: HttpGet.optional(),
  tcpSocket: TcpSocket.optional(),
  grpc: z.looseObject({}).optional(),
  initialDelaySeconds: seconds,
  periodSeconds: count,
  timeoutSeconds: count,
  successThreshold: count,
  failureThreshold: count,
  terminationGracePeriodSeconds: z.number().int().min(1).optional(),
});
/** A lifecycle handler (`postStart`, `preStop`). */
const HandlerSpec = z.looseObject({
  exec: Exec.optional(),
  httpGet: HttpGet.optional(),
  tcpSocket: TcpSocket.optional(),
  sleep: z.looseObject({ seconds: z.number().int().min(0) }).optional(),
});
/** The probe and lifecycle fields of a container. */
export const ProbeFields = {
  startupProbe: ProbeSpec.optional(),
  livenessProbe: ProbeSpec.optional(),
  readinessProbe: ProbeSpec.optional(),
  lifecycle: z
    .looseObject({ postStart: HandlerSpec.optional(), preStop: HandlerSpec.optional() })
    .optional(),
  ports: z
    .array(z.looseObject({ containerPort: z.number().optional(), name: str.optional() }))
    .optional(),
};

type Probe = z.infer<typeof ProbeSpec>;
type Handler = z.infer<typeof HandlerSpec>;
type Ports = z.infer<typeof ProbeFields.ports>;

/**
 * A container's probes and hooks as the supervisor reads them: each a flat list of strings, empty
 * when absent. A probe is `kind delay period timeout success failure grace action…` (grace `-1`:
 * the Pod's); a hook is `kind action…`. The action of `exec` is its argv; of `http`, `scheme host
 * port path` and then header name/value pairs; of `tcp`, `host port`; of `sleep`, the seconds.
 */
export interface ProbePlan {
  readonly startup: readonly string[];
  readonly liveness: readonly string[];
  readonly readiness: readonly string[];
  readonly postStart: readonly string[];
  readonly preStop: readonly string[];
}

function fail(path: string, message: string, code: UserDataError["code"] = "InvalidPod"): never {
  throw new UserDataError(code, path, message);
}

function resolvePort(value: number | string, ports: Ports, path: string): string {
  if (typeof value === "number") {
    if (value < 1 || value > 65535) fail(path, `port ${value} is not between 1 and 65535`);
    return String(value);
  }
  if (/^[0-9]+$/.test(value)) return resolvePort(Number(value), ports, path);
  const named = (ports ?? []).find((p) => p.name === value);
  if (named?.containerPort === undefined)
    fail(path, `port ${JSON.stringify(value)} names no port of the container`);
  return resolvePort(named.containerPort, ports, path);
}

/**
 * Addresses a probe may not name: the instance metadata service and the rest of link-local (IPv4
 * 169.254.0.0/16, EC2's IPv6 IMDS `fd00:ec2::254`, the `instance-data` names that resolve to it).
 * Probes run on the host, outside the Pod's network namespace and its IMDS block, so one could
 * reach IMDS from there (GET only, and IMDSv2 answers 401 without a token: nothing leaks today;
 * refused anyway, so that no Pod spec makes the host call it).
 */
const METADATA_HOST = /^(169\.254\.\d{1,3}\.\d{1,3}|\[?fd00:ec2::254\]?|instance-data(\..*)?)$/i;

function host(value: string | undefined, path: string): string {
  const h = value ?? "";
  if (!/^[A-Za-z0-9.:_-]*$/.test(h))
    fail(path, `host ${JSON.stringify(h)} is not a host name or IP`);
  if (METADATA_HOST.test(h)) {
    fail(
      path,
      `host ${h} is the instance metadata service or link-local: probes run on the host and may not call it; leave host empty to probe the Pod`,
      "UnsupportedField",
    );
  }
  return h;
}

function action(h: Handler | Probe, ports: Ports, where: string, allowSleep: boolean): string[] {
  const kinds = (["exec", "httpGet", "tcpSocket", "grpc", "sleep"] as const).filter(
    (k) => (h as Record<string, unknown>)[k] !== undefined,
  );
  if (kinds.length !== 1)
    fail(
      where,
      `${where} must set exactly one of exec, httpGet, tcpSocket${allowSleep ? ", sleep" : ", grpc"}`,
    );
  const kind = kinds[0];
  if (kind === "grpc")
    fail(
      `${where}.grpc`,
      "gRPC probes are not run on the host (no gRPC health client there); use an exec probe with grpc_health_probe in the image, or tcpSocket",
      "UnsupportedField",
    );
  if (kind === "exec") {
    const argv = h.exec?.command ?? [];
    if (argv.length === 0) fail(`${where}.exec.command`, `${where}.exec has no command`);
    if (argv.some((a) => a.includes("\0")))
      fail(`${where}.exec.command`, "a NUL byte in exec.command");
    return ["exec", ...argv];
  }
  if (kind === "httpGet" && h.httpGet) {
    const g = h.httpGet;
    const path = g.path ?? "/";
    if (!/^[\x21-\x7e]*$/.test(path))
      fail(
        `${where}.httpGet.path`,
        `path ${JSON.stringify(path)} has spaces or control characters`,
      );
    const headers = (g.httpHeaders ?? []).flatMap((x) => {
      if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(x.name) || /[\r\n\0]/.test(x.value))
        fail(
          `${where}.httpGet.httpHeaders[${x.name}]`,
          `header ${JSON.stringify(x.name)} is not a valid HTTP header`,
        );
      return [x.name, x.value];
    });
    return [
      "http",
      (g.scheme ?? "HTTP").toLowerCase(),
      host(g.host, `${where}.httpGet.host`),
      resolvePort(g.port, ports, `${where}.httpGet.port`),
      path.startsWith("/") ? path : `/${path}`,
      ...headers,
    ];
  }
  if (kind === "tcpSocket" && h.tcpSocket) {
    return [
      "tcp",
      host(h.tcpSocket.host, `${where}.tcpSocket.host`),
      resolvePort(h.tcpSocket.port, ports, `${where}.tcpSocket.port`),
    ];
  }
  if (!allowSleep) fail(where, `${where} cannot sleep`);
  return ["sleep", String((h as Handler).sleep?.seconds ?? 0)];
}

function probe(p: Probe | undefined, ports: Ports, where: string, oneSuccess: boolean): string[] {
  if (p === undefined) return [];
  const success = p.successThreshold ?? 1;
  if (oneSuccess && success !== 1)
    fail(`${where}.successThreshold`, `${where}.successThreshold must be 1`);
  const [kind, ...rest] = action(p, ports, where, false);
  return [
    kind ?? "",
    String(p.initialDelaySeconds ?? 0),
    String(p.periodSeconds ?? 10),
    String(p.timeoutSeconds ?? 1),
    String(success),
    String(p.failureThreshold ?? 3),
    String(oneSuccess ? (p.terminationGracePeriodSeconds ?? -1) : -1),
    ...rest,
  ];
}

/**
 * Validates a container's probes and lifecycle hooks into a {@link ProbePlan}, as the kubelet
 * interprets them (defaults: period 10 s, timeout 1 s, success 1, failure 3). Throws
 * {@link UserDataError}: `UnsupportedField` for gRPC, `InvalidPod` for the rest.
 */
export function planProbes(
  c: {
    startupProbe?: Probe | undefined;
    livenessProbe?: Probe | undefined;
    readinessProbe?: Probe | undefined;
    lifecycle?: { postStart?: Handler | undefined; preStop?: Handler | undefined } | undefined;
    ports?: Ports;
  },
  where: string,
): ProbePlan {
  const hook = (h: Handler | undefined, name: string) =>
    h === undefined ? [] : action(h, c.ports, `${where}.lifecycle.${name}`, true);
  return {
    startup: probe(c.startupProbe, c.ports, `${where}.startupProbe`, true),
    liveness: probe(c.livenessProbe, c.ports, `${where}.livenessProbe`, true),
    readiness: probe(c.readinessProbe, c.ports, `${where}.readinessProbe`, false),
    postStart: hook(c.lifecycle?.postStart, "postStart"),
    preStop: hook(c.lifecycle?.preStop, "preStop"),
  };
}
