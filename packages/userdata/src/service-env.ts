import { z } from "zod";

/**
 * The parts of a Service that its environment variables come from (a `V1Service` as the API
 * server returns it fits; anything else it carries is ignored).
 */
export interface ServiceEnvSource {
  readonly metadata?: { readonly name?: string; readonly namespace?: string } | undefined;
  readonly spec?:
    | {
        readonly clusterIP?: string | undefined;
        readonly ports?:
          | ReadonlyArray<{
              readonly name?: string | undefined;
              readonly port: number;
              readonly protocol?: string | undefined;
            }>
          | undefined;
      }
    | undefined;
}

/** The Services of the cluster that every Pod's environment names, whatever `enableServiceLinks`. */
const MASTER_SERVICES = new Set(["kubernetes"]);

/** What a Service must look like to give variables; a Service that does not is left out. */
const ServiceShape = z.object({
  metadata: z.object({
    // DNS-1035 labels, as the API server validates Service names.
    name: z.string().regex(/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/),
    namespace: z.string().min(1),
  }),
  spec: z.object({
    // "None" (headless) and "" (ExternalName) have no variables, as on a kubelet.
    clusterIP: z.union([z.ipv4(), z.ipv6()]),
    ports: z
      .array(
        z.object({
          name: z
            .string()
            .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/)
            .or(z.literal(""))
            .optional()
            .nullable(),
          port: z.number().int().min(1).max(65535),
          protocol: z.enum(["TCP", "UDP", "SCTP"]).optional().nullable(),
        }),
      )
      .min(1),
  }),
});

/** `my-svc` → `MY_SVC`, as the kubelet names a Service's variables. */
const envName = (name: string): string => name.toUpperCase().replaceAll("-", "_");

/**
 * The Service environment variables the kubelet gives a Pod's containers, in its order: for the
 * master Services of the `default` namespace (`kubernetes`) always, and for every Service of the
 * Pod's own namespace when `enableServiceLinks` is true (the Pod's default). Per Service with a
 * cluster IP: `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`, `<NAME>_SERVICE_PORT_<PORT_NAME>` per
 * named port, and the Docker link variables (`<NAME>_PORT`, `<NAME>_PORT_<port>_<PROTO>` and its
 * `_PROTO`, `_PORT`, `_ADDR`). A Service of the Pod's namespace named like a master Service wins
 * over it, as on a kubelet. Headless and `ExternalName` Services, and anything malformed, give
 * nothing. With `apiServer` (where the hosts reach the API server), the `kubernetes` Service's
 * variables name that host and port instead of its cluster IP, so in-cluster clients (client-go's
 * `InClusterConfig`, every SDK's equivalent) connect where the host can route. Pure and total.
 *
 * @example
 * ```ts
 * serviceEnvironment(
 *   [{ metadata: { name: "redis-primary", namespace: "web" },
 *      spec: { clusterIP: "10.0.0.11", ports: [{ port: 6379, protocol: "TCP" }] } }],
 *   "web",
 *   true,
 * );
 * // [["REDIS_PRIMARY_SERVICE_HOST", "10.0.0.11"], ["REDIS_PRIMARY_SERVICE_PORT", "6379"],
 * //  ["REDIS_PRIMARY_PORT", "tcp://10.0.0.11:6379"], ["REDIS_PRIMARY_PORT_6379_TCP", "tcp://10.0.0.11:6379"], ...]
 * ```
 */
export function serviceEnvironment(
  services: readonly ServiceEnvSource[],
  namespace: string,
  enableServiceLinks: boolean,
  apiServer?: { readonly host: string; readonly port: number },
): Array<[string, string]> {
  const chosen = new Map<string, z.infer<typeof ServiceShape>>();
  if (apiServer !== undefined) {
    // Where the hosts reach the API server stands in for the `kubernetes` Service's cluster IP,
    // which nothing on a Nebula host routes; its port keeps the Service's name (`https`).
    const given = services.find(
      (s) => s.metadata?.name === "kubernetes" && s.metadata?.namespace === "default",
    );
    chosen.set("kubernetes", {
      metadata: { name: "kubernetes", namespace: "default" },
      spec: {
        clusterIP: apiServer.host,
        ports: [
          { name: given?.spec?.ports?.[0]?.name ?? "https", port: apiServer.port, protocol: "TCP" },
        ],
      },
    });
  }
  for (const raw of services) {
    const parsed = ServiceShape.safeParse(raw);
    if (!parsed.success) continue;
    const service = parsed.data;
    const { name } = service.metadata;
    if (service.metadata.namespace === "default" && MASTER_SERVICES.has(name)) {
      if (!chosen.has(name)) chosen.set(name, service);
    } else if (service.metadata.namespace === namespace && enableServiceLinks) {
      chosen.set(name, service);
    }
  }
  // A Map, as the kubelet's: names of two Services can meet (`a`'s `A_PORT_80_TCP_PORT` and
  // `a-port-80-tcp`'s `A_PORT_80_TCP_PORT`); one value per name, the later Service's.
  const out = new Map<string, string>();
  for (const name of [...chosen.keys()].sort()) {
    const { spec } = chosen.get(name) as z.infer<typeof ServiceShape>;
    const prefix = envName(name);
    const ip = spec.clusterIP;
    const first = spec.ports[0] as (typeof spec.ports)[number];
    out.set(`${prefix}_SERVICE_HOST`, ip);
    out.set(`${prefix}_SERVICE_PORT`, String(first.port));
    for (const port of spec.ports) {
      if (port.name) out.set(`${prefix}_SERVICE_PORT_${envName(port.name)}`, String(port.port));
    }
    spec.ports.forEach((port, i) => {
      const protocol = port.protocol ?? "TCP";
      const hostPort = ip.includes(":") ? `[${ip}]:${port.port}` : `${ip}:${port.port}`;
      const url = `${protocol.toLowerCase()}://${hostPort}`;
      if (i === 0) out.set(`${prefix}_PORT`, url);
      const portPrefix = `${prefix}_PORT_${port.port}_${protocol}`;
      out.set(portPrefix, url);
      out.set(`${portPrefix}_PROTO`, protocol.toLowerCase());
      out.set(`${portPrefix}_PORT`, String(port.port));
      out.set(`${portPrefix}_ADDR`, ip);
    });
  }
  return [...out];
}
