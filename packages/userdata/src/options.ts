import { RESTART_LIMIT_ANNOTATION as STATE_RESTART_LIMIT_ANNOTATION } from "@nebula/state-mapping";
import { z } from "zod";

const dnsLabel = z
  .string()
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "must be a DNS label (lower-case letters, digits, '-')")
  .max(63);
const noNul = z.string().refine((s) => !s.includes("\0"), "must not contain NUL");
const mountPath = noNul.refine(
  (s) => s.startsWith("/") && !/[,\n"]/.test(s),
  "must be an absolute path without ',', '\"' or newlines",
);

/**
 * Annotation that sets a Pod's restart cap (cost guard): a non-negative integer or `unlimited`.
 * The same constant `@nebula/state-mapping` names in the Pod's message when the cap ends a Pod.
 */
export const RESTART_LIMIT_ANNOTATION: typeof STATE_RESTART_LIMIT_ANNOTATION =
  STATE_RESTART_LIMIT_ANNOTATION;

/** Restart cap used when the Pod has no {@link RESTART_LIMIT_ANNOTATION} and the options set none. */
const DEFAULT_RESTART_LIMIT = 10;

/**
 * Annotation a Pod must carry, set to `"true"`, to run with `hostNetwork: true`. Host networking gives
 * every container the instance's own network: IMDS and so the instance role's credentials, the
 * report tags, and raw access to the host's interfaces. Without it such a Pod is refused.
 */
export const HOST_NETWORK_ANNOTATION = "nebula.dev/allow-host-network";

/** The Pod sandbox image (holds the Pod's network namespace) used when the options name none. */
export const DEFAULT_SANDBOX_IMAGE = "registry.k8s.io/pause:3.10";

/** EC2's limit on user-data, in bytes, before base64. */
export const MAX_USER_DATA_BYTES = 16384;

/**
 * An agent daemon (for example a sandbox daemon such as "sandd") started by a shim inside a container: the shim starts
 * every agent in the background and then `exec`s the workload as PID 1, so an agent never outlives
 * its workload. The container image must have `/bin/sh`.
 */
const AgentOptions = z.object({
  /** Agent name, for logs. */
  name: dnsLabel,
  /** Argument vector of the agent inside the container (first element: the program). */
  command: z.array(noNul).min(1),
  /** Host paths bind-mounted into the container for the agent (its binary, its socket dir). */
  mounts: z
    .array(
      z.object({
        /** Absolute host path. */
        hostPath: mountPath,
        /** Absolute path inside the container. */
        containerPath: mountPath,
        /** Mount read-only (default `true`). */
        readOnly: z.boolean().default(true),
      }),
    )
    .default([]),
  /** Names of the Pod's containers that get this agent; default: every regular (non-init) container. */
  containers: z.array(dnsLabel).optional(),
});

/** The CloudWatch metric namespace of the containers' usage when the options name none. */
export const DEFAULT_METRICS_NAMESPACE = "Nebula";

/**
 * Container logs to CloudWatch Logs through Docker's `awslogs` log driver: one stream per
 * container run, `<namespace>/<pod>/<pod-uid>/<container>/<restart>`, in this log group. The group
 * must exist (the host never creates it) and the instance role needs
 * `policies/instance-logs-metrics.json`.
 */
export const LogsOptions = z.object({
  /** The CloudWatch log group (1 to 512 characters of `A-Z a-z 0-9 . - _ / #`). */
  group: z
    .string()
    .regex(
      /^[.\-_/#A-Za-z0-9]{1,512}$/,
      "must be a CloudWatch log group name: 1 to 512 characters of letters, digits, '.', '-', '_', '/', '#'",
    ),
});

/**
 * Container usage to CloudWatch metrics: the supervisor samples every running container's CPU and
 * memory with `docker stats` every `sampleSeconds` and sends every sample since the last call in one
 * `PutMetricData` per `publishSeconds` (metrics `CPUUsageCoreSeconds`, `MemoryWorkingSetBytes`,
 * dimensions `PodUID` and `Container`).
 */
export const MetricsOptions = z
  .object({
    /**
     * The metric namespace (default `Nebula`; the instance role's policy allows only `Nebula`).
     * 1 to 255 characters of `A-Z a-z 0-9 . - _ / # :`, not starting with `AWS/`.
     */
    namespace: z
      .string()
      .regex(
        /^[.\-_/#:A-Za-z0-9]{1,255}$/,
        "must be a CloudWatch namespace: 1 to 255 characters of letters, digits, '.', '-', '_', '/', '#', ':'",
      )
      .refine(
        (s) => !s.startsWith("AWS/"),
        "must not start with 'AWS/' (reserved for AWS services)",
      )
      .default(DEFAULT_METRICS_NAMESPACE),
    /** Seconds between two samples (default 15, at least 5). */
    sampleSeconds: z.number().int().min(5).max(300).default(15),
    /** Seconds between two `PutMetricData` calls (default 60; from `sampleSeconds` to 300). */
    publishSeconds: z.number().int().min(5).max(300).default(60),
  })
  .refine((m) => m.publishSeconds >= m.sampleSeconds, {
    message: "publishSeconds must be at least sampleSeconds",
    path: ["publishSeconds"],
  });

/**
 * The SQS "doorbell": after every report whose tags it wrote, the host sends one `SendMessage` to
 * this queue with the body `{"v":1,"instance":"<instance id>","seq":<report seq>}`, so the
 * controller reads that instance at once instead of at its next poll. The message proves nothing
 * (the tags stay the report): one try of about 3 s, a failure logged and forgotten. The instance
 * role needs `policies/instance-doorbell.json`; `AWS_ENDPOINT_URL_SQS` overrides the endpoint.
 */
const DoorbellOptions = z.object({
  /** The queue's URL, as SQS names it (`https://sqs.<region>.amazonaws.com/<account>/<name>`); at most 1024 characters. */
  queueUrl: z
    .string()
    .max(1024)
    .regex(
      /^https?:\/\/[^\s"\\]+$/,
      "must be an http or https URL without whitespace, '\"' or '\\'",
    )
    .refine((s) => URL.canParse(s), "must be an http or https URL"),
});

/**
 * Cluster DNS, as the kubelet's `clusterDNS` and `clusterDomain`: a Pod with `dnsPolicy:
 * ClusterFirst` (the default) gets these nameservers, the search path
 * `<ns>.svc.<clusterDomain> svc.<clusterDomain> <clusterDomain>` and `ndots:5`. Set them only
 * where the instances reach those addresses (a VPC-routable DNS Service, NodeLocal DNS, an
 * internal load balancer). Empty (the default): every policy but `None` uses the instance's
 * resolver, as the kubelet falls back when it has no cluster DNS.
 */
export const DnsOptions = z.object({
  /** Up to 3 nameserver addresses (the cluster DNS Service's IPs). */
  clusterDNS: z
    .array(z.union([z.ipv4(), z.ipv6()]))
    .max(3)
    .default([]),
  /** The cluster's DNS domain (default `cluster.local`). */
  clusterDomain: z
    .string()
    .regex(
      /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/,
      "must be a DNS domain",
    )
    .max(253)
    .default("cluster.local"),
});

/** An address the hosts reach: an IPv4 or IPv6 address or a DNS name, and a port (default 443). */
const HostAndPort = z.object({
  host: z.union([
    z.ipv4(),
    z.ipv6(),
    z
      .string()
      .max(253)
      .regex(
        /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/i,
        "must be a DNS name or an IP address",
      ),
  ]),
  port: z.number().int().min(1).max(65535).default(443),
});

/**
 * The service proxy of a Pod's host: the real kube-proxy (iptables mode), run by the supervisor
 * inside the Pod sandbox's network namespace, so the containers reach ClusterIP Services (the
 * `kubernetes` Service among them) at their cluster IPs as on a kubelet node, and its rules touch
 * that namespace only, never the host's own tables. It reads Services and EndpointSlices with a
 * token of its own (a `system:node-proxier` ServiceAccount's, bound to the virtual node's Node,
 * delivered and renewed in the Pod's token parameter under the key `p`), which cannot read
 * Secrets. The parameters delivery only; not for `hostNetwork` Pods (their network is the host's).
 */
const ServiceProxyOptions = z.strictObject({
  /** Where the host reaches the API server (an EKS endpoint's host name and 443, a private address). */
  apiServer: HostAndPort,
  /** The PEM CA bundle that signed the API server's serving certificate. */
  caCert: z
    .string()
    .max(65_536)
    .regex(/-----BEGIN CERTIFICATE-----/, "must be a PEM CA bundle"),
  /** The virtual node's Node name (kube-proxy's `--hostname-override`). */
  nodeName: z
    .string()
    .max(253)
    .regex(
      /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/,
      "must be a DNS subdomain",
    ),
  /** The kube-proxy binary on the host: a name on PATH or an absolute path (default `kube-proxy`). */
  binary: z
    .string()
    .max(256)
    .regex(/^[A-Za-z0-9._/+-]+$/, "must be a file name or path without spaces or shell characters")
    .default("kube-proxy"),
});

/**
 * The host agent (`nebula-agent`, apps/host-agent): the supervisor runs it beside the Pod so the
 * virtual node can serve `kubectl exec`, `attach` and `port-forward`. It listens with mutual TLS
 * on `port` of the instance's private address; its certificate is made on the host (the key never
 * leaves it) and the reports carry its SHA-256 in the tag `nebula:agent`, which the
 * virtual node pins; it serves only clients whose certificate's SHA-256 is one of
 * `clientFingerprints` (the virtual node's). The parameters delivery only.
 */
const HostAgentOptions = z.strictObject({
  /** The agent binary on the host: a name on PATH or an absolute path (default `nebula-agent`). */
  binary: z
    .string()
    .max(256)
    .regex(/^[A-Za-z0-9._/+-]+$/, "must be a file name or path without spaces or shell characters")
    .default("nebula-agent"),
  /** The TCP port it listens on (default 10250, a kubelet's: the security group opens it to the virtual node only). */
  port: z.number().int().min(1).max(65_535).default(10_250),
  /**
   * Lowercase hex SHA-256 of the DER of each client certificate the agent accepts (the virtual
   * node's; two while one is being rotated).
   */
  clientFingerprints: z
    .array(z.string().regex(/^[0-9a-f]{64}$/, "must be a lowercase hex SHA-256 (64 digits)"))
    .min(1)
    .max(4),
});

/** Options of {@link renderUserData}. Every field has a default; `{}` is valid. */
export const RenderOptions = z.object({
  /** Cluster name, written into the unit's description and the host log (informational). */
  cluster: z.string().max(128).default(""),
  /** Agent daemons to run through the in-container shim. */
  agents: z.array(AgentOptions).default([]),
  /** Restart back-off, as the kubelet's: `initialSeconds` doubling to `maxSeconds`, reset after `resetAfterSeconds` running. */
  backoff: z
    .object({
      /** First delay before a restart (kubelet: 10). */
      initialSeconds: z.number().int().min(1).max(3600).default(10),
      /** Cap of the delay (kubelet: 300). */
      maxSeconds: z.number().int().min(1).max(86400).default(300),
      /** A run at least this long resets the back-off and the restart cap's count (kubelet: 600). */
      resetAfterSeconds: z.number().int().min(1).max(86400).default(600),
    })
    .default({ initialSeconds: 10, maxSeconds: 300, resetAfterSeconds: 600 }),
  /** Image pulls: tried this many times with the restart back-off between tries, then the Pod is terminal (`ImagePullBackOff`). */
  imagePull: z
    .object({
      /** Pull attempts per container before giving up (default 10, about 30 minutes with the default back-off). */
      maxAttempts: z.number().int().min(1).max(1000).default(10),
    })
    .default({ maxAttempts: 10 }),
  /** Restart cap when the Pod has no `nebula.dev/restart-limit` annotation: a count, or `"unlimited"`. */
  defaultRestartLimit: z
    .union([z.number().int().min(0).max(1_000_000), z.literal("unlimited")])
    .default(DEFAULT_RESTART_LIMIT),
  /** How the host retries `CreateTags` (jittered exponential back-off). */
  report: z
    .object({
      /** Attempts per report (default 8). */
      retryAttempts: z.number().int().min(1).max(50).default(8),
      /** First back-off in milliseconds, doubled per attempt, capped at 20 s, with jitter (default 500). */
      retryBaseMs: z.number().int().min(10).max(60000).default(500),
    })
    .default({ retryAttempts: 8, retryBaseMs: 500 }),
  /**
   * The Pod sandbox: a container that only holds the Pod's own network namespace, which every
   * container of the Pod joins (as the kubelet's pause container). `command` overrides its
   * entrypoint (empty: the image's).
   */
  sandbox: z
    .object({
      image: noNul
        .refine(
          (s) => s !== "" && !s.startsWith("-") && !/\s/.test(s),
          "must be an image reference",
        )
        .default(DEFAULT_SANDBOX_IMAGE),
      command: z.array(noNul).default([]),
    })
    .default({ image: DEFAULT_SANDBOX_IMAGE, command: [] }),
  /** `auto` gzips only when the script exceeds 16 KiB; `always` / `never` force it. */
  compression: z.enum(["auto", "always", "never"]).default("auto"),
  /**
   * Where the Pod's rendered spec goes. `user-data` (the default): into the user-data itself, so
   * Secrets are refused (anyone who may describe the instance reads user-data). `parameters`: into
   * SSM `SecureString` parameters only the Pod's own instance may read (the result's `parameters`,
   * which the caller writes before launching); the user-data holds only the supervisor and their
   * names, and ConfigMap and Secret references are resolved from the `sources` given.
   */
  delivery: z.enum(["user-data", "parameters"]).default("user-data"),
  /**
   * With `delivery: "parameters"`: how long the host keeps trying to read the supervisor's
   * parameters, then the Pod's (readable once the caller tagged them with the instance's ARN),
   * before it says why on the console and powers the instance off.
   */
  parameterWaitSeconds: z.number().int().min(10).max(3600).default(600),
  /**
   * With `delivery: "parameters"` and a Pod that projects service-account tokens: how often the
   * host reads the Pod's token parameter for renewed tokens. Default: a tenth of the shortest
   * token lifetime, at least 60 s (`tokenPollSeconds`), which the controller's renewal at 80 %
   * of a token's life is paced for; set it lower only in tests.
   */
  tokenPollSeconds: z.number().int().min(1).max(3600).optional(),
  /**
   * The longest grace the host gives the containers to stop (`terminationGracePeriodSeconds`,
   * the stop's own grace): a Pod asking for more (a year) gets this, so no instance bills for
   * longer after its stop. The virtual node's teardown caps the grace the same way.
   */
  maxGracePeriodSeconds: z.number().int().min(0).max(86_400).default(3600),
  /** Cluster DNS for `dnsPolicy: ClusterFirst` Pods ({@link DnsOptions}); default: none. */
  dns: DnsOptions.default({ clusterDNS: [], clusterDomain: "cluster.local" }),
  /**
   * Where the hosts reach the API server (an EKS cluster's endpoint host name, a private address
   * and port): the containers' `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` (and the
   * `KUBERNETES_PORT*` variables) name it instead of the `kubernetes` Service's cluster IP, so
   * in-cluster clients with the Pod's service-account token connect without a service proxy. Its
   * certificate must name `host` (an EKS endpoint's does). Absent: the cluster IP, as on a kubelet
   * node (routed only with {@link ServiceProxyOptions | serviceProxy}).
   */
  kubernetesService: HostAndPort.optional(),
  /**
   * Run the service proxy (kube-proxy) in each Pod's network namespace ({@link ServiceProxyOptions});
   * the parameters delivery only. Absent: none (cluster IPs are not routed on the host).
   */
  serviceProxy: ServiceProxyOptions.optional(),
  /**
   * Run the host agent for `kubectl exec`, `attach` and `port-forward` ({@link HostAgentOptions});
   * the parameters delivery only. Absent: none (the virtual node does not serve them).
   */
  hostAgent: HostAgentOptions.optional(),
  /** Container logs to CloudWatch Logs (`awslogs` driver); absent: Docker's default log driver. */
  logs: LogsOptions.optional(),
  /** Container CPU and memory to CloudWatch metrics; absent: no sampling. `{}` turns it on with the defaults. */
  metrics: MetricsOptions.optional(),
  /**
   * The SQS doorbell: after each report whose tags it wrote, the host sends this queue one message,
   * `{"v":1,"instance":"<instance id>","seq":<report seq>}`, so the controller reads the instance at
   * once; one try of about 3 s, a failure logged and forgotten. The role needs
   * `policies/instance-doorbell.json`. Absent: none.
   */
  doorbell: DoorbellOptions.optional(),
});

/** Options of {@link renderUserData}, as the caller writes them (every field optional). */
export type RenderOptionsInput = z.input<typeof RenderOptions>;
/** Options after defaults. */
export type ResolvedRenderOptions = z.output<typeof RenderOptions>;
