import { DnsOptions, LogsOptions, MetricsOptions, RenderOptions } from "@nebula/userdata";
import { z } from "zod";
import { ProviderError } from "./errors.js";
import { MAX_USER_TAGS, RESERVED_TAG_COUNT } from "./tags.js";

/** Annotation a Pod can carry to ask for an instance type (when it has no node selector for it). */
export const INSTANCE_TYPE_ANNOTATION = "nebula.dev/instance-type";
/** Annotation a Pod can carry to choose its capacity type, where `capacity.annotationNamespaces` allows. */
export const CAPACITY_TYPE_ANNOTATION = "nebula.dev/requested-capacity-type";
/** The well-known node label a Pod's `nodeSelector` can use to ask for an instance type. */
export const INSTANCE_TYPE_NODE_SELECTOR = "node.kubernetes.io/instance-type";

const instanceType = z
  .string()
  .regex(
    /^[a-z][a-z0-9-]*\.[a-z0-9-]+$/,
    'must look like an EC2 instance type, "family.size" (e.g. "m7i.large")',
  );

const typeOrFamily = z
  .string()
  .regex(
    /^[a-z][a-z0-9-]*\.([a-z0-9-]+|\*)$/,
    'must be an EC2 instance type ("m7i.large") or a family with its sizes ("m7i.*")',
  );

// Keys legal with instance-metadata tags enabled: letters, digits and + - = . , _ : @ ; not "." or "..".
const userTagKey = z
  .string()
  .min(1)
  .max(127, "tag keys have at most 127 characters")
  .regex(
    /^[A-Za-z0-9+\-=.,_:@]+$/,
    "tag keys may use letters, digits and + - = . , _ : @ only (no spaces or /: they must stay legal in instance metadata)",
  )
  .refine((key) => key !== "." && key !== "..", 'a tag key cannot be "." or ".."')
  .refine((key) => !key.toLowerCase().startsWith("aws:"), 'the "aws:" prefix is reserved by AWS')
  .refine((key) => !key.startsWith("nebula:"), 'the "nebula:" prefix is reserved for Nebula')
  .refine((key) => key !== "Name", '"Name" is set by the provider (<node>/<namespace>/<pod>)');

/** An image reference a warm-pool host pulls while it prepares (no spaces, quotes or newlines). */
const poolImage = z
  .string()
  .min(1)
  .max(512)
  .regex(/^[^\s"'`$\\]+$/, "must be an image reference (no spaces, quotes, $ or backslashes)");

/**
 * One entry of the warm pool: hosts of one shape that boot once, prepare (the listed images
 * pulled), stop themselves, and wait to be started for a Pod that fits them.
 */
export const WarmPoolEntrySchema = z.strictObject({
  /** The entry's name: the hosts' `nebula:pool` tag and the metrics' `entry` label. */
  name: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$/, "must be a DNS label of at most 32 characters"),
  /** The hosts' instance type; a Pod takes one only when this type is among those it may run on. */
  instanceType,
  /** The hosts' subnet (one of `subnetIds`; default: the first of them). */
  subnetId: z.string().min(1).optional(),
  /** The hosts' image (default: `imageId`). A Pod that asks for GPUs never takes a pool host. */
  imageId: z.string().min(1).optional(),
  /** How many prepared, stopped hosts to keep (0: none; the pool is off by default). */
  size: z.number().int().min(0).max(100).default(0),
  /** Images the hosts pull while they prepare, so a Pod that runs them skips the pull. */
  images: z.array(poolImage).max(20).default([]),
  /** The root volume's size in GiB, for the pool's cost (a stopped host bills its volume). */
  volumeGiB: z.number().positive().max(65536).default(8),
  /** USD per GiB-month of that volume (gp3 in us-east-1: 0.08). */
  volumeUsdPerGiBMonth: z.number().min(0).max(10).default(0.08),
  /**
   * The most the entry's stopped hosts may cost, USD per hour: the pool keeps fewer than `size`
   * when `size` of them would cost more.
   */
  maxHourlyCostUsd: z.number().positive().optional(),
  /** The most a host may take to prepare and stop before it is terminated and replaced, s. */
  prepareSeconds: z.number().int().min(60).max(7200).default(900),
});

/** One rule of the resource → instance type mapping. */
const InstanceTypeRule = z.strictObject({
  /** The instance type to use. */
  instanceType,
  /** vCPUs the type offers; a Pod whose CPU requests exceed it does not match. */
  cpu: z.number().positive().optional(),
  /** Memory the type offers, MiB; a Pod whose memory requests exceed it does not match. */
  memoryMiB: z.number().positive().optional(),
  /** GPUs the type offers (`nvidia.com/gpu`, `amd.com/gpu`); default 0. */
  gpus: z.number().int().min(0).optional(),
});

/**
 * The provider's configuration. Parse it with {@link parseProviderConfig}; the defaults are
 * written here and in the README.
 */
export const ProviderConfigSchema = z
  .strictObject({
    /** Name of the Kubernetes cluster; tagged `nebula:cluster` on every instance. */
    clusterName: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[A-Za-z0-9+\-=.,_:@/ ]+$/, "cluster name has characters EC2 tags do not allow"),
    /** Name of the virtual Node; tagged `nebula:node`. Polling and leak collection only see these. */
    nodeName: z.string().min(1).max(253),
    /** AWS Region, e.g. `eu-west-1`. */
    region: z
      .string()
      .regex(/^[a-z]{2}(-[a-z]+)+-\d+$/, 'must be an AWS Region such as "us-east-1"'),
    /** Subnets to launch into; a Pod's instance goes to the subnet picked by its UID (stable). */
    subnetIds: z
      .array(z.string().regex(/^subnet-[0-9a-f]+$/, 'must be a subnet ID, "subnet-…"'))
      .min(1, "at least one subnet is needed"),
    /** Security groups for the instance's network interface (EC2 allows 5 by default). */
    securityGroupIds: z
      .array(z.string().regex(/^sg-[0-9a-f]+$/, 'must be a security group ID, "sg-…"'))
      .min(1, "at least one security group is needed")
      .max(16),
    /** The AMI every instance boots (it must have bash, Docker and the AWS CLI or curl). */
    imageId: z.string().regex(/^ami-[0-9a-f]+$/, 'must be an AMI ID, "ami-…"'),
    /**
     * The host AMI for a Pod that requests GPUs (`nvidia.com/gpu`, `amd.com/gpu`, any `…/gpu`
     * resource): an image with the GPU driver and container toolkit. Unset: `imageId` for them too.
     */
    acceleratedImageId: z
      .string()
      .regex(/^ami-[0-9a-f]+$/, 'must be an AMI ID, "ami-…"')
      .optional(),
    /**
     * Instance profile for the host: an ARN (`arn:aws:iam::…:instance-profile/…`) or a name. Its
     * role may tag only its own instance, with report keys only (see the policy in the README).
     */
    instanceProfile: z
      .string()
      .min(1)
      .max(2048)
      .regex(/^(arn:aws[a-z-]*:iam::\d{12}:instance-profile\/.+|[\w+=,.@-]+)$/, {
        message: "must be an instance profile ARN or name",
      }),
    /** Instance type choice; see {@link resolveInstanceType}. */
    instanceTypes: z
      .strictObject({
        /** Type used when nothing else decides. */
        default: instanceType,
        /**
         * Ordered rules (put cheapest first): the first whose capacity covers the Pod's requests
         * wins. Used when the Pod names no type itself.
         */
        byResources: z.array(InstanceTypeRule).default([]),
        /**
         * The only types a Pod may run on (asked for by node selector or annotation, or chosen by
         * the rules). Default: the default type, the `byResources` types and their fallbacks.
         */
        allowed: z.array(instanceType).optional(),
        /**
         * Types to try, in order, when EC2 has no capacity for a type the provider chose (never for
         * a type the Pod asked for by name), e.g. `{ "m7i.large": ["m6i.large", "m5.large"] }`.
         */
        fallbacks: z.record(instanceType, z.array(instanceType).max(8)).default({}),
        /**
         * Choose from EC2's own catalogue (`DescribeInstanceTypes`, read on first use and every
         * `refreshMinutes`) instead of `default` and `byResources`: for a Pod that names no type,
         * the allowed types of the host image's architecture whose vCPUs, memory and GPUs, less
         * `reserved`, cover its requests, smallest first; the first is launched and the next
         * `maxCandidates - 1` are its fallbacks on a capacity error. See `candidateTypes`.
         */
        catalogue: z
          .strictObject({
            /** Type names (`m7i.large`) and families (`m7i.*`, no bare metal) Pods may run on. */
            allowed: z.array(typeOrFamily).min(1),
            /** Architecture of the host image (`imageId`), as EC2 names it. */
            architecture: z.enum(["x86_64", "arm64"]).default("x86_64"),
            /** What the host keeps for itself: vCPUs and MiB not offered to the Pod. */
            reserved: z
              .strictObject({
                cpu: z.number().min(0).max(64).default(0.1),
                memoryMiB: z.number().min(0).max(65_536).default(512),
              })
              .default({ cpu: 0.1, memoryMiB: 512 }),
            /** Types tried per Pod (the first, then fallbacks on capacity errors). */
            maxCandidates: z.number().int().min(1).max(60).default(20),
            /** How old the catalogue may get before it is read again. */
            refreshMinutes: z.number().int().min(1).max(10_080).default(360),
          })
          .optional(),
      })
      .refine((t) => t.allowed === undefined || t.allowed.includes(t.default), {
        message: "the default instance type must be in the allowed list",
      }),
    /** Extra tags on every instance (and the budget: see {@link MAX_USER_TAGS}). */
    tags: z
      .record(userTagKey, z.string().max(256, "tag values have at most 256 characters"))
      .default({})
      .refine((tags) => Object.keys(tags).length <= MAX_USER_TAGS, {
        message: `at most ${MAX_USER_TAGS} extra tags: EC2 allows 50 per instance and Nebula reserves ${RESERVED_TAG_COUNT} (17 for the exit report, 4 identity tags, Name, the orphan mark, the stop grace, the host agent, 2 for the warm pool)`,
      }),
    /**
     * Pod labels copied to instance (and volume) tags, label key → tag key, for cost allocation
     * (e.g. `{ "app.kubernetes.io/name": "app", team: "team" }`). Counts against the tag budget.
     */
    podLabelTags: z.record(z.string().min(1).max(317), userTagKey).default({}),
    /**
     * Pods owned by a DaemonSet: `skip` (default) leaves them Pending with the reason
     * `DaemonSetPodNotLaunched` (one instance per DaemonSet Pod is rarely wanted); `launch` runs them.
     */
    daemonSetPods: z.enum(["skip", "launch"]).default("skip"),
    /**
     * Cluster DNS for the Pods' containers, as the kubelet's `clusterDNS` and `clusterDomain`
     * (`@nebula/userdata`'s `DnsOptions`): a `dnsPolicy: ClusterFirst` Pod (the default) gets these
     * nameservers, the search path `<ns>.svc.<domain> svc.<domain> <domain>` and `ndots:5`, its
     * `dnsConfig` merged as the kubelet merges it. Set `clusterDNS` only to addresses the
     * instances reach (a VPC-routable DNS Service, an internal load balancer in front of
     * CoreDNS). Empty (the default): the instance's resolver, as the kubelet falls back.
     */
    dns: DnsOptions.default({ clusterDNS: [], clusterDomain: "cluster.local" }),
    /**
     * Where the instances reach the API server (`{ host, port }`: an EKS cluster's endpoint host
     * name and 443, or a private address): the containers' `KUBERNETES_SERVICE_HOST`/`PORT` name
     * it instead of the `kubernetes` Service's cluster IP, which nothing on a Nebula host routes,
     * so in-cluster clients with the Pod's service-account token connect (`@nebula/userdata`'s
     * `RenderOptions.kubernetesService`). Absent: the cluster IP, as on a kubelet node.
     */
    kubernetesService: RenderOptions.shape.kubernetesService,
    /**
     * Route cluster IPs on the hosts: the supervisor runs the real kube-proxy (iptables mode)
     * inside each Pod's network namespace (`@nebula/userdata`'s `RenderOptions.serviceProxy`), so
     * its containers reach ClusterIP Services, the `kubernetes` Service included, as on a kubelet
     * node. It reaches the API server at `kubernetesService` (required) and reads Services and
     * EndpointSlices with a token of `serviceAccount` (bound to `system:node-proxier`, which
     * cannot read Secrets; deploy/vnode/service-proxy.yaml), bound to this virtual node's Node and
     * delivered and renewed in each Pod's token parameter (so `podDelivery: "parameters"` only).
     * `binary`: kube-proxy on the host AMI (deploy/host-image installs it). Absent: no proxy.
     */
    serviceProxy: z
      .strictObject({
        serviceAccount: z
          .string()
          .regex(
            /^[a-z0-9]([-a-z0-9]*[a-z0-9])?\/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/,
            "must be <namespace>/<name> of a ServiceAccount",
          )
          .default("nebula-system/nebula-service-proxy"),
        binary: z
          .string()
          .max(256)
          .regex(
            /^[A-Za-z0-9._/+-]+$/,
            "must be a file name or path without spaces or shell characters",
          )
          .default("kube-proxy"),
      })
      .optional(),
    /**
     * Serve `kubectl exec`, `attach` and `port-forward`: each host runs the host agent
     * (`@nebula/userdata`'s `RenderOptions.hostAgent`; `binary` on the host AMI, deploy/host-image
     * installs it) on `port` of its private address, with mutual TLS: the virtual node pins the
     * certificate the host made and reports (`nebula:agent` tag), the agent accepts only the
     * virtual node's client certificate (its fingerprints come with each Pod's parameters, so
     * `podDelivery: "parameters"` only). The security group must let the virtual node, and
     * nothing else, reach `port` of the hosts. Absent: not served (as before).
     */
    hostAgent: z
      .strictObject({
        /**
         * The virtual node's client certificate (PEM file; the first certificate in it is the
         * one presented, every certificate in it is accepted by the hosts launched from now on,
         * so a bundle of the new and the old one rotates it). Read by the virtual node app.
         */
        clientCertFile: z.string().min(1),
        /** Its private key (PEM file). Read by the virtual node app. */
        clientKeyFile: z.string().min(1),
        port: z.number().int().min(1).max(65_535).default(10_250),
        binary: z
          .string()
          .max(256)
          .regex(
            /^[A-Za-z0-9._/+-]+$/,
            "must be a file name or path without spaces or shell characters",
          )
          .default("nebula-agent"),
      })
      .optional(),
    /**
     * How a Pod's instance is bought: `on-demand`, `spot`, or `spot-then-on-demand` (Spot
     * placements first; On-Demand once EC2 has no Spot capacity for any of them). A Pod may
     * choose with the annotation `nebula.dev/requested-capacity-type` only in
     * `annotationNamespaces` (`"*"`: all); elsewhere such a Pod is refused.
     *
     * `onRebalance`: what a Spot instance's rebalance recommendation (EC2: elevated risk of
     * interruption) does. `report` (default): an Event and a metric, the Pod keeps running (EC2
     * may never interrupt it). `evict`: the Pod is also evicted through the API server's Eviction
     * API, as `kubectl drain` does, so its controller replaces it before an interruption; its
     * PodDisruptionBudgets apply (a refused eviction is asked again every 30 s), and a Pod no
     * controller owns is not evicted (nothing would replace it). Needs `create` on
     * `pods/eviction` for the vnode (deploy/vnode/rbac-rebalance-eviction.yaml).
     */
    capacity: z
      .strictObject({
        default: z.enum(["on-demand", "spot", "spot-then-on-demand"]).default("on-demand"),
        annotationNamespaces: z.array(z.string().min(1).max(253)).default([]),
        onRebalance: z.enum(["report", "evict"]).default("report"),
      })
      .default({ default: "on-demand", annotationNamespaces: [], onRebalance: "report" }),
    /**
     * Upper bound of the grace period a Pod's teardown gives its containers (from
     * `metadata.deletionGracePeriodSeconds`, else `spec.terminationGracePeriodSeconds`), so that
     * every teardown completes and no Pod can hold its instance for longer.
     */
    maxGracePeriodSeconds: z.number().int().min(0).max(86_400).default(3600),
    /**
     * How long EC2's eventual consistency may hide an instance after its launch request: within
     * this window, "not listed" is not proof that no instance exists.
     */
    eventualConsistencySeconds: z.number().min(0).max(3600).default(120),
    /** Capacity back-off: first and longest wait of one Pod after a capacity or quota error. */
    capacityBackoff: z
      .strictObject({
        /** Seconds after the first failure (doubling per failure). */
        initialSeconds: z.number().min(0).max(3600).default(10),
        /** Ceiling of the per-Pod wait. */
        maxSeconds: z.number().min(0).max(86_400).default(300),
        /** How long a (subnet, type) without capacity, or the whole account after a quota error, is skipped by every Pod. */
        poolSeconds: z.number().min(0).max(3600).default(60),
      })
      .default({ initialSeconds: 10, maxSeconds: 300, poolSeconds: 60 }),
    /**
     * What proves an instance is Nebula's before it is stopped or terminated (teardown and leak
     * collection): its cluster, node and Pod UID tags and the configured instance profile always;
     * `clientToken` (default true) also requires EC2's `ClientToken` to be the Pod UID's (tags can be
     * written by anyone with `ec2:CreateTags`; the token only by the launch). Turn it off only for an
     * endpoint that does not report `ClientToken` (moto).
     */
    ownership: z
      .strictObject({ clientToken: z.boolean().default(true) })
      .default({ clientToken: true }),
    /** Seconds between two polls in normal operation. */
    pollIntervalSeconds: z.number().min(1).max(3600).default(10),
    /** Upper bound of the poll interval when EC2 throttles or fails (the loop doubles up to it). */
    maxPollIntervalSeconds: z.number().min(1).max(3600).default(120),
    /**
     * Seconds added to a Pod's `terminationGracePeriodSeconds` before its instance is terminated
     * after a stop request (EC2 and API observation headroom; see docs/contracts.md#pod-teardown).
     */
    apiHeadroomSeconds: z.number().min(0).max(3600).default(30),
    /** Consecutive failed polls (not throttling) after which the region is reported unavailable. */
    outageAfterFailures: z.number().int().min(1).max(100).default(3),
    /** Leak collection. */
    leakCollection: z
      .strictObject({
        /** An orphan younger than this (since launch) is left alone. */
        graceSeconds: z.number().min(0).default(300),
        /** Seconds between passes (the first pass runs at start-up). */
        intervalSeconds: z.number().min(1).default(120),
        /**
         * With `podDelivery: "parameters"`: a Pod parameter last modified less than this long ago
         * is never collected (a launch in progress may be writing it); a launch that keeps waiting
         * writes its parameters again before they are half this old.
         */
        parameterGraceSeconds: z.number().min(0).default(600),
      })
      .default({ graceSeconds: 300, intervalSeconds: 120, parameterGraceSeconds: 600 }),
    /** Seconds an instance must have been seen stopped without report tags before the console is read. */
    consoleSettleSeconds: z.number().min(0).default(30),
    /** `MaxResults` of each `DescribeInstances` page (EC2 allows 5 to 1000). */
    pageSize: z.number().int().min(5).max(1000).default(1000),
    /** Instance IDs per `StopInstances` / `TerminateInstances` / `CreateTags` call. */
    batchSize: z.number().int().min(1).max(1000).default(500),
    /** Milliseconds to gather stop/terminate requests into one call. */
    batchWindowMs: z.number().int().min(0).max(10000).default(100),
    /** `HttpPutResponseHopLimit` for IMDSv2 (1 unless containers must reach IMDS). */
    metadataHopLimit: z.number().int().min(1).max(64).default(1),
    /** SDK attempts per call (adaptive retry mode). */
    maxAttempts: z.number().int().min(1).max(20).default(5),
    /**
     * The longest one attempt of any AWS call may take, from its request sent to its answer read,
     * in milliseconds; then it fails with the SDK's `TimeoutError` (a `ProviderError`
     * `Unavailable`, retryable) and the SDK's retry takes over, up to `maxAttempts`. Without it
     * a hung `RunInstances` would hold its Pod's launch for as long as the socket lives. With
     * `events` it must leave room for the queue's long poll (`events.waitSeconds` + 2 s).
     */
    requestTimeoutMs: z.number().int().min(100).max(600_000).default(30_000),
    /** The longest the TCP (and TLS) connection of one attempt may take to open, in milliseconds. */
    connectionTimeoutMs: z.number().int().min(100).max(60_000).default(5_000),
    /**
     * The On-Demand price at launch (AWS Price List Query API, `pricing:GetProducts`): an
     * On-Demand launch reads its type's Linux, shared-tenancy price in `region` of the provider
     * (cached per type for 12 hours, a failure too) into the `Launched` Event and the Pod's
     * `nebula.dev/price-usd-per-hour`. `onDemand: false` turns the read off. The Price List
     * Query API answers in a few Regions only (`us-east-1`, `eu-central-1`, `ap-south-1`):
     * `region` is where it is asked, not whose prices.
     */
    pricing: z
      .strictObject({
        /** Read On-Demand prices (default true). */
        onDemand: z.boolean().default(true),
        /** The Region of the Price List Query API endpoint. */
        region: z
          .string()
          .regex(/^[a-z]{2}(-[a-z]+)+-\d+$/, 'must be an AWS Region such as "us-east-1"')
          .default("us-east-1"),
      })
      .default({ onDemand: true, region: "us-east-1" }),
    /**
     * This node's share of the account's EC2 request budget, per API (EC2 throttles each API per
     * account and Region; several virtual nodes and the hosts' own report writes share it). Reads
     * are Describe/Get/List/Search APIs, writes every other one. EC2's published defaults are a
     * bucket of 100 with 20 calls/s for most reads and 50 with 5 calls/s for most writes (plus
     * `RunInstances`' 2 instances/s of launch tokens): with N virtual nodes, give each at most a
     * 1/N share (docs/operating.md#sizing). When EC2 throttles anyway, the node halves its rate
     * and climbs back as calls go through.
     */
    ec2Budget: z
      .strictObject({
        /** Calls per second and burst of each read API. */
        reads: z
          .strictObject({
            perSecond: z.number().positive().max(10_000).default(10),
            burst: z.number().int().min(1).max(10_000).default(50),
          })
          .default({ perSecond: 10, burst: 50 }),
        /** Calls per second and burst of each write API. */
        writes: z
          .strictObject({
            perSecond: z.number().positive().max(10_000).default(2),
            burst: z.number().int().min(1).max(10_000).default(50),
          })
          .default({ perSecond: 2, burst: 50 }),
        /** A call that would wait longer than this for its turn fails as `Throttled` and is retried later. */
        maxWaitSeconds: z.number().min(0).max(600).default(10),
      })
      .default({
        reads: { perSecond: 10, burst: 50 },
        writes: { perSecond: 2, burst: 50 },
        maxWaitSeconds: 10,
      }),
    /**
     * Where a Pod's rendered spec goes (`@nebula/userdata`'s `delivery`). `user-data`: into the
     * instance's user-data, readable by anyone allowed `ec2:DescribeInstanceAttribute`; a Pod that
     * takes a value from a Secret or a ConfigMap is refused. `parameters` (default): into SSM
     * Parameter Store `SecureString` parameters
     * (`/nebula/<cluster>/pods/<pod-uid>/<i>`) that only the Pod's own instance may read, with the
     * values of the Pod's ConfigMaps and Secrets (fetched through the `readSources` option); they
     * are written before `RunInstances`, tagged with the instance's ARN after it, and deleted when
     * the Pod's teardown releases it (or by the leak collector). The user-data then holds only the
     * supervisor and the parameters' names. Needs the controller's SSM permissions
     * (`policies/controller.json`) and the host role's `@nebula/userdata` policy.
     */
    podDelivery: z.enum(["user-data", "parameters"]).default("parameters"),
    /**
     * The KMS key of the Pod parameters (`podDelivery: "parameters"`): a key ID, ARN or alias.
     * Default: the customer managed key `alias/nebula/<clusterName>/pod-parameters`, created by
     * the operator with `policies/pod-parameters-key-policy.json` as its key policy, which lets
     * only the controller encrypt and only the host role decrypt this cluster's Pod parameters
     * (through Parameter Store). `alias/aws/ssm`, the AWS managed key, also works but lets every
     * principal of the account with `ssm:GetParameter*` read the values (`docs/security.md`).
     */
    parameterKeyId: z.string().min(1).max(2048).optional(),
    /**
     * Container logs to CloudWatch Logs (default: off, Docker's own log driver on the host): every
     * Pod container logs through Docker's `awslogs` driver to the log group `group`, one stream
     * per container run, `<namespace>/<pod>/<pod-uid>/<container>/<restart>`, which the virtual
     * node reads back for `kubectl logs` (`CloudWatchContainerLogs`). The group must exist
     * (the operator creates it; hosts never do); the host role needs `@nebula/userdata`'s
     * `policies/instance-logs-metrics.json`, the controller `logs:GetLogEvents` on the group
     * (`policies/controller.json`, `${LogGroupName}`). Passed to `renderUserData` as `logs`.
     */
    logs: LogsOptions.strict().optional(),
    /**
     * Container CPU and memory to CloudWatch metrics (default: off): the host samples every
     * running container with `docker stats` every `sampleSeconds` (default 15) and publishes the
     * samples every `publishSeconds` (default 60) in namespace `namespace` (default `Nebula`),
     * metrics `CPUUsageCoreSeconds` and `MemoryWorkingSetBytes`, dimensions `PodUID` and
     * `Container`; the virtual node reads them back for `/stats/summary` and `/metrics/resource`
     * (`CloudWatchUsage`, `cloudwatch:GetMetricData`). `{}` turns it on with the defaults.
     * Passed to `renderUserData` as `metrics`.
     */
    metrics: MetricsOptions.strict().optional(),
    /**
     * The event channel (default: off): an SQS queue of this virtual node that hosts ring after
     * every exit report (a doorbell: `{"v":1,"instance":"i-…","seq":N}`) and EventBridge fills
     * with EC2's own instance events (state changes, Spot interruption warnings, rebalance
     * recommendations). A message proves nothing: it is only a reason to read those instances now
     * (one batched, node-filtered `DescribeInstances`, at most one per `windowMs`), so an exit reaches its
     * Pod's status in about a second. The poll stays as the safety net, every
     * `pollIntervalSeconds` of this object while the queue answers (the top-level one while it
     * does not). Passed to `renderUserData` as `doorbell`. Needs `policies/controller.json`'s
     * queue statement and `@nebula/userdata`'s `policies/instance-doorbell.json`.
     */
    events: z
      .strictObject({
        /** The queue's URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`). */
        queueUrl: z.url().max(1024),
        /**
         * The least time from one read's end to the next read's start: a doorbell after a quiet
         * spell is read at once; those arriving during a read or within the window after it are
         * gathered into the next `DescribeInstances`.
         */
        windowMs: z.number().int().min(0).max(5000).default(100),
        /** `ReceiveMessage`'s long-poll wait (SQS allows 0 to 20). */
        waitSeconds: z.number().int().min(0).max(20).default(20),
        /** The safety-net poll's interval while the queue answers. */
        pollIntervalSeconds: z.number().min(1).max(3600).default(60),
      })
      .optional(),
    /**
     * The warm pool (default: none): per entry, hosts launched with generic user-data that
     * prepare and stop themselves; a Pod that fits an entry takes one of its stopped hosts (its
     * parameters written and the host assigned to it in the ledger and its tags before
     * `StartInstances`) instead of a cold launch, and the pool refills in the background. On-Demand
     * only: see docs/operating.md. Needs `ec2:StartInstances` and `ec2:ModifyInstanceAttribute`
     * (`policies/controller.json`).
     */
    warmPool: z.array(WarmPoolEntrySchema).max(20).default([]),
    /**
     * EC2 endpoint override, for tests only (moto). Production leaves it unset. With
     * `podDelivery: "parameters"` the SSM client uses it too (moto serves both on one endpoint),
     * and so does the Price List client (moto serves no Price List: every read fails, at once).
     */
    endpoint: z.url().optional(),
  })
  .refine((c) => c.maxPollIntervalSeconds >= c.pollIntervalSeconds, {
    message: "maxPollIntervalSeconds must be at least pollIntervalSeconds",
    path: ["maxPollIntervalSeconds"],
  })
  .refine((c) => Object.keys(c.tags).length + Object.keys(c.podLabelTags).length <= MAX_USER_TAGS, {
    message: `tags and podLabelTags together may add at most ${MAX_USER_TAGS} tags`,
    path: ["podLabelTags"],
  })
  .refine((c) => c.serviceProxy === undefined || c.kubernetesService !== undefined, {
    message:
      "serviceProxy needs kubernetesService: where the hosts' kube-proxy reaches the API server (an EKS endpoint's host name and 443)",
    path: ["serviceProxy"],
  })
  .refine((c) => c.hostAgent === undefined || c.podDelivery === "parameters", {
    message:
      "hostAgent needs podDelivery: \"parameters\": the hosts learn the virtual node's client certificate with the Pod's parameters",
    path: ["hostAgent"],
  })
  .refine((c) => c.serviceProxy === undefined || c.podDelivery === "parameters", {
    message:
      'serviceProxy needs podDelivery: "parameters": its token is delivered and renewed through Parameter Store, never in user-data',
    path: ["serviceProxy"],
  })
  .refine((c) => new Set(c.warmPool.map((e) => e.name)).size === c.warmPool.length, {
    message: "warmPool entries need distinct names",
    path: ["warmPool"],
  })
  .refine(
    (c) => c.warmPool.every((e) => e.subnetId === undefined || c.subnetIds.includes(e.subnetId)),
    { message: "a warmPool entry's subnetId must be one of subnetIds", path: ["warmPool"] },
  )
  .refine(
    (c) => c.events === undefined || c.requestTimeoutMs >= (c.events.waitSeconds + 2) * 1000,
    {
      message:
        "requestTimeoutMs must be at least events.waitSeconds + 2 s: the queue's long poll holds each ReceiveMessage that long",
      path: ["requestTimeoutMs"],
    },
  );

/**
 * The instance types Pods may run on: `instanceTypes.allowed` when configured, else the default
 * type, every `byResources` type and every fallback (an allow-list is always in force).
 */
export function allowedInstanceTypes(config: ProviderConfig): ReadonlySet<string> {
  const { allowed, byResources, fallbacks } = config.instanceTypes;
  if (allowed !== undefined) return new Set(allowed);
  return new Set([
    config.instanceTypes.default,
    ...byResources.map((r) => r.instanceType),
    ...Object.keys(fallbacks),
    ...Object.values(fallbacks).flat(),
  ]);
}

/** One parsed, defaulted warm-pool entry (`warmPool[]`). */
export type WarmPoolEntry = z.infer<typeof WarmPoolEntrySchema>;

/** A parsed, defaulted provider configuration. */
export type ProviderConfig = z.infer<typeof ProviderConfigSchema>;
/** What a caller may pass: the configuration before defaults are applied. */
export type ProviderConfigInput = z.input<typeof ProviderConfigSchema>;

/**
 * Validates a configuration and applies the defaults. Throws a {@link ProviderError} with code
 * `InvalidConfiguration` whose message lists every problem with its path.
 *
 * @example
 * ```ts
 * const config = parseProviderConfig({
 *   clusterName: "prod", nodeName: "nebula", region: "eu-west-1",
 *   subnetIds: ["subnet-0a1b2c3d"], securityGroupIds: ["sg-0a1b2c3d"],
 *   imageId: "ami-0a1b2c3d", instanceProfile: "nebula-host",
 *   instanceTypes: { default: "m7i.large" },
 * });
 * ```
 */
export function parseProviderConfig(input: unknown): ProviderConfig {
  const parsed = ProviderConfigSchema.safeParse(input);
  if (parsed.success) return parsed.data;
  const lines = parsed.error.issues.map((issue) => {
    const path = issue.path.length ? issue.path.map(String).join(".") : "(config)";
    // A bad record key (a tag key) carries its real reasons one level down.
    const inner =
      issue.code === "invalid_key" ? issue.issues.map((i) => i.message).join("; ") : issue.message;
    return `  - ${path}: ${inner}`;
  });
  throw new ProviderError(
    "InvalidConfiguration",
    `invalid provider configuration:\n${lines.join("\n")}`,
    { cause: parsed.error },
  );
}
