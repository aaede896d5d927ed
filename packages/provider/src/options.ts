import type { CloudWatchClient } from "@aws-sdk/client-cloudwatch";
import type { CloudWatchLogsClient } from "@aws-sdk/client-cloudwatch-logs";
import type { EC2Client } from "@aws-sdk/client-ec2";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type { SSMClient } from "@aws-sdk/client-ssm";
import type { V1Pod } from "@kubernetes/client-node";
import type { PodLedger } from "@nebula/teardown";
import type { PodSourceRefs, PodSources, RenderOptionsInput, RenderResult } from "@nebula/userdata";
import type { RenderedPod } from "./admitter.js";
import type { Gateway } from "./gateway.js";
import type { LaunchInput } from "./launch.js";
import type { RequestServiceProxyToken, RequestToken } from "./pod-tokens.js";
import type { EvictPod } from "./rebalance.js";
import type { ReadServiceAccount } from "./web-identity.js";

/** Options of `Ec2PodProvider`. */
export interface Ec2PodProviderOptions {
  /** The configuration (validated with `parseProviderConfig`). */
  readonly config: unknown;
  /**
   * Options for `@nebula/userdata`'s `renderUserData`, which builds each Pod's user-data (the host
   * supervisor). `cluster` defaults to the configured `clusterName`; `delivery` is always the
   * configured `podDelivery`; `logs` and `metrics` are the configured ones when set.
   */
  readonly userData?: RenderOptionsInput;
  /**
   * Replaces `renderUserData` (tests, or a custom host). Returns a script or bytes (the provider
   * base64-encodes them), an already rendered `{ userData: base64, bytes, parameters?, notices? }`
   * ({@link RenderedPod}), or a whole `RenderResult` (whose `CreateContainerConfigError` holds the
   * Pod, and whose other errors refuse it). `sources` are the Pod's ConfigMaps and Secrets with
   * `podDelivery: "parameters"` (undefined otherwise).
   */
  readonly renderUserData?: (
    pod: V1Pod,
    sources: PodSources | undefined,
  ) => LaunchInput["userData"] | RenderedPod | RenderResult;
  /**
   * With `podDelivery: "parameters"`: reads the ConfigMaps and Secrets the Pod references
   * (`refs`, from `@nebula/userdata`'s `podSourceRefs`) in the Pod's namespace, as the API server
   * returns them, by name (a name left out is missing), and the Services of its environment
   * (`services`: the namespace's unless `enableServiceLinks: false`, and `default/kubernetes`).
   * Called for every Pod before it is rendered for launch, and again on every poll while a
   * mandatory reference is missing (`CreateContainerConfigError`). A rejection holds the Pod the
   * same way and is retried. Default: no sources (a Pod that needs one is held).
   */
  readonly readSources?: (pod: V1Pod, refs: PodSourceRefs) => Promise<PodSources>;
  /**
   * With `podDelivery: "parameters"`: requests a bound token of the Pod's ServiceAccount
   * (`TokenRequest`, bound to the Pod; `@nebula/virtual-node`'s `podTokenRequester`) for every
   * `serviceAccountToken` its projected volumes ask for (`kube-api-access-*` among them): issued
   * before the Pod launches, delivered in its token parameter, renewed at 80 % of their life while
   * it runs. Without it, a Pod that projects a token is held (`FailedMount`).
   */
  readonly requestToken?: RequestToken;
  /**
   * With `config.serviceProxy`: what the hosts' service proxy needs from the API server
   * (`@nebula/virtual-node/host`'s `serviceProxyAccess`): `caCert`, the PEM CA bundle its
   * kube-proxy verifies the API server with, and `requestToken`, a token of the configured
   * ServiceAccount bound to this virtual node's Node, issued with each Pod's tokens and renewed
   * with them. Without it, a Pod whose host would run the proxy is held (`FailedMount`).
   */
  readonly serviceProxy?: {
    readonly caCert: string;
    readonly requestToken: RequestServiceProxyToken;
  };
  /**
   * With `config.hostAgent`: the lowercase hex SHA-256 of the DER of each client certificate the
   * hosts' agents accept (the virtual node's, which presents it when it relays `kubectl exec`;
   * two while one is rotated). Without it, no host runs the agent.
   */
  readonly hostAgent?: { readonly clientFingerprints: readonly string[] };
  /**
   * With `podDelivery: "parameters"`: reads the Pod's ServiceAccount (`spec.serviceAccountName`,
   * in its namespace; undefined when it does not exist), for its AWS role: a ServiceAccount
   * annotated `eks.amazonaws.com/role-arn` gives its Pods that role, as EKS's IRSA webhook does
   * (`@nebula/virtual-node/host`'s `podServiceAccountReader`). Without it, only a Pod the webhook
   * already mutated gets a role. A rejection holds the Pod and is retried.
   */
  readonly readServiceAccount?: ReadServiceAccount;
  /**
   * UIDs of the Pods that exist and are bound to this node (from the virtual node's Pod informer).
   * The leak collector reads it after listing instances; an instance whose Pod UID is not in it
   * is an orphan.
   */
  readonly livePodUids: () => Promise<Iterable<string>> | Iterable<string>;
  /**
   * The durable Pod ledger: launches (the instance ID as soon as `RunInstances` returned) and
   * teardown records, keyed by Pod UID, where tenants cannot write (`@nebula/kube`'s
   * `ConfigMapPodLedger` in the controller's namespace). Default: in memory (lost on restart).
   */
  readonly ledger?: PodLedger;
  /** An EC2 client to use instead of the one built from the configuration (adaptive retry). */
  readonly client?: EC2Client;
  /** An SSM client to use instead of the one built from the configuration (`podDelivery: "parameters"`). */
  readonly ssmClient?: SSMClient;
  /** A CloudWatch Logs client to use instead of the one built from the configuration (with `config.logs`). */
  readonly logsClient?: CloudWatchLogsClient;
  /** A CloudWatch client to use instead of the one built from the configuration (with `config.metrics`). */
  readonly metricsClient?: CloudWatchClient;
  /** An SQS client to use instead of the one built from the configuration (with `config.events`). */
  readonly sqsClient?: SQSClient;
  /** Every AWS call through this instead of the SDK clients (unit tests pass a fake). */
  readonly gateway?: Gateway;
  /** The clock, ms since the epoch (tests pass a fake one). Default `Date.now`. */
  readonly now?: () => number;
  /**
   * Asks the API server to evict a Pod (`@nebula/virtual-node`'s `KubernetesPodApi.evict`), for
   * `capacity.onRebalance: evict`: the Pod of a Spot instance EC2 recommends moving off. Without
   * it that setting only says, in the Pod's Event, that it cannot act.
   */
  readonly evictPod?: EvictPod;
  /** Where the provider writes one-line diagnostics. Default: nowhere. */
  readonly log?: (level: "info" | "warn" | "error", message: string) => void;
}
