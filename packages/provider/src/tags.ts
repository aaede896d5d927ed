import { REPORT_TAG_BUDGET } from "@nebula/state-mapping";

/** Tag key: the cluster this instance belongs to. Set at launch. */
export const CLUSTER_TAG = "nebula:cluster";
/** Tag key: the virtual node (Node name) that launched the instance. Set at launch. */
export const NODE_TAG = "nebula:node";
/** Tag key: the UID of the Pod the instance runs. Set at launch; the leak collector's key. */
export const POD_UID_TAG = "nebula:pod-uid";
/** Tag key: `namespace/name` of the Pod, for people reading the EC2 console. Set at launch. */
export const POD_TAG = "nebula:pod";
/**
 * Tag key the leak collector writes (an ISO time) on an instance whose Pod is gone: the first of
 * its two phases. The instance is terminated on a later pass if it is still orphaned then.
 */
export const ORPHANED_TAG = "nebula:orphaned-at";
/**
 * Tag key the controller writes (whole seconds) on an instance just before `StopInstances`: the
 * grace of the stop (a deletion's `--grace-period` may be shorter than the Pod's
 * `terminationGracePeriodSeconds`). The host supervisor reads it from the instance's metadata
 * tags when the stop reaches it and stops the containers with it, never longer than the Pod's.
 */
export const STOP_GRACE_TAG = "nebula:stop-grace-seconds";
/**
 * Tag key the host supervisor writes with every report when it runs the host agent:
 * `v1 port=<port> sha256=<64 hex digits>`, the SHA-256 of the agent's certificate, which the host
 * made (its key never leaves the host) and the virtual node pins when it relays `kubectl exec`.
 * Only the instance itself (its role may tag only itself, with the report's keys and this one) and
 * the controller can write it.
 */
export const HOST_AGENT_TAG = "nebula:agent";

/**
 * Tag key of a warm-pool host: the name of its pool entry (`warmPool[].name`). Set at its launch;
 * kept after a Pod takes it (the host then also carries the Pod's identity tags).
 */
export const POOL_TAG = "nebula:pool";
/**
 * Tag key of a warm-pool host: a digest of its entry's shape (type, subnet, image, images, the
 * pool user-data) at launch. A host whose digest is not its entry's current one is replaced.
 */
export const POOL_SPEC_TAG = "nebula:pool-spec";

/** EC2's limit of tags per resource. */
const EC2_MAX_TAGS = 50;

/**
 * Tags the provider and the host may write on an instance besides the user's: the exit report
 * ({@link REPORT_TAG_BUDGET}), the four identity tags, `Name`, the orphan mark, the stop grace,
 * the host agent's certificate and a warm-pool host's two ({@link POOL_TAG}, {@link POOL_SPEC_TAG}).
 */
export const RESERVED_TAG_COUNT = REPORT_TAG_BUDGET + 4 + 1 + 1 + 1 + 1 + 2;

/** How many extra tags a configuration may add: {@link EC2_MAX_TAGS} − {@link RESERVED_TAG_COUNT}. */
export const MAX_USER_TAGS = EC2_MAX_TAGS - RESERVED_TAG_COUNT;

/** Identity of the instance a Pod gets, as the tags set at launch. */
export interface IdentityTags {
  /** Cluster name (`nebula:cluster`). */
  readonly cluster: string;
  /** Virtual node name (`nebula:node`). */
  readonly node: string;
  /** Pod UID (`nebula:pod-uid`). */
  readonly podUid: string;
  /** Pod `namespace/name` (`nebula:pod`). */
  readonly pod: string;
}

/**
 * The tags an instance is created with: identity tags, `Name` (`<node>/<namespace>/<name>`,
 * cut to 256 characters), then the user's extra tags (which cannot override the identity tags:
 * the configuration schema rejects the `nebula:` prefix).
 */
export function launchTags(
  identity: IdentityTags,
  extra: Readonly<Record<string, string>>,
): Array<{ Key: string; Value: string }> {
  const tags: Record<string, string> = {
    ...extra,
    Name: `${identity.node}/${identity.pod}`.slice(0, 256),
    [CLUSTER_TAG]: identity.cluster,
    [NODE_TAG]: identity.node,
    [POD_UID_TAG]: identity.podUid,
    [POD_TAG]: identity.pod.slice(0, 256),
  };
  return Object.entries(tags).map(([Key, Value]) => ({ Key, Value }));
}

/** Turns the `{ Key, Value }` list `DescribeInstances` returns into a plain map. Total. */
export function tagMap(tags: unknown): ReadonlyMap<string, string> {
  const map = new Map<string, string>();
  if (!Array.isArray(tags)) return map;
  for (const tag of tags) {
    if (tag && typeof tag === "object") {
      const { Key, Value } = tag as { Key?: unknown; Value?: unknown };
      if (typeof Key === "string") map.set(Key, typeof Value === "string" ? Value : "");
    }
  }
  return map;
}
