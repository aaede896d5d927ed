import { createHash } from "node:crypto";
import type { ServiceEnvSource } from "./service-env.js";

/**
 * The Parameter Store delivery of a Pod: with `delivery: "parameters"`, the Pod's rendered spec and
 * the values of its ConfigMaps and Secrets travel in SSM `SecureString` parameters that only the
 * Pod's own instance may read, and the user-data holds only the supervisor and their names.
 */

/** Root of every Pod parameter's name. */
export const POD_PARAMETER_ROOT = "/nebula";
/** At most this many parameters carry one Pod (`<prefix>0` … `<prefix>7`). */
export const MAX_POD_PARAMETERS = 8;
/** Characters per parameter value: the Standard tier's 4 KB, so parameters cost nothing to store. */
export const POD_PARAMETER_VALUE_CHARS = 4096;
/**
 * Tag key on each Pod parameter: the ARN of the instance allowed to read it. The instance role's
 * policy (`policies/instance-pod-parameters.json`) compares it with `${ec2:SourceInstanceARN}`.
 */
export const PARAMETER_INSTANCE_TAG = "nebula:instance-arn";

/** One SSM parameter to write before the Pod's instance boots (type `SecureString`). */
export interface PodParameter {
  /** Full name, `/nebula/<cluster>/pods/<pod-uid>/<i>`. */
  readonly name: string;
  /** The value (at most {@link POD_PARAMETER_VALUE_CHARS} characters of base64). */
  readonly value: string;
}

/** An Event-worthy fact found while rendering (the Pod still renders). */
export interface RenderNotice {
  /** Kubernetes Event reason, e.g. `OptionalConfigMapNotFound`. */
  readonly reason: string;
  /** What happened, in the kubelet's words where it has some. */
  readonly message: string;
}

/**
 * A ConfigMap or Secret as the API server returns it: `data` (a Secret's values in base64, a
 * ConfigMap's in clear) and `binaryData` (a ConfigMap's binary values, base64).
 */
export interface SourceObject {
  readonly data?: Readonly<Record<string, string>> | undefined;
  readonly binaryData?: Readonly<Record<string, string>> | undefined;
}

/**
 * The ConfigMaps and Secrets of the Pod's namespace that the caller could read, by name. A name the
 * Pod references and that is absent here is missing: a mandatory reference then holds the Pod
 * (`CreateContainerConfigError`), an optional one is skipped.
 */
export interface PodSources {
  readonly configMaps: Readonly<Record<string, SourceObject>>;
  readonly secrets: Readonly<Record<string, SourceObject>>;
  /**
   * The Services the containers' environment names (`serviceEnvironment`): the Pod's
   * namespace's (when `enableServiceLinks` is not false) and `default/kubernetes`, as read at
   * launch. Absent: none.
   */
  readonly services?: readonly ServiceEnvSource[] | undefined;
}

/** The names of the ConfigMaps and Secrets a Pod references (what to fetch before rendering). */
export interface PodSourceRefs {
  readonly configMaps: readonly string[];
  readonly secrets: readonly string[];
}

const SAFE_SEGMENT = /^[A-Za-z0-9_.-]{1,128}$/;

/**
 * The cluster's segment of a parameter name: the cluster name when Parameter Store allows it
 * (`[A-Za-z0-9_.-]`), otherwise `c-` and 16 hex digits of its SHA-256.
 */
export function clusterSegment(cluster: string): string {
  if (SAFE_SEGMENT.test(cluster)) return cluster;
  return `c-${createHash("sha256").update(cluster).digest("hex").slice(0, 16)}`;
}

/** `/nebula/<cluster>/pods/<pod-uid>/`: the prefix of every parameter of one Pod. */
export function podParameterPrefix(cluster: string, podUid: string): string {
  const uid = SAFE_SEGMENT.test(podUid)
    ? podUid
    : createHash("sha256").update(podUid).digest("hex").slice(0, 32);
  return `${POD_PARAMETER_ROOT}/${clusterSegment(cluster)}/pods/${uid}/`;
}

/**
 * `/nebula/<cluster>/supervisor/<sha256, 16 hex>/`: the prefix of the host supervisor's parameters
 * (not secret; the same for every Pod of the cluster rendered by one version of this package).
 */
export function supervisorParameterPrefix(cluster: string, sha256: string): string {
  return `${POD_PARAMETER_ROOT}/${clusterSegment(cluster)}/supervisor/${sha256.slice(0, 16)}/`;
}

/**
 * Every name a Pod's parameters can have: the {@link MAX_POD_PARAMETERS} of its spec
 * (`<prefix>0` …) and its service-account tokens' (`<prefix>t`). What teardown deletes.
 */
export function podParameterNames(cluster: string, podUid: string): string[] {
  const prefix = podParameterPrefix(cluster, podUid);
  return [...Array.from({ length: MAX_POD_PARAMETERS }, (_, i) => `${prefix}${i}`), `${prefix}t`];
}

/** The Pod UID in a Pod parameter's name, or undefined when the name is not one of this cluster's. */
export function podUidOfParameter(cluster: string, name: string): string | undefined {
  const prefix = `${POD_PARAMETER_ROOT}/${clusterSegment(cluster)}/pods/`;
  if (!name.startsWith(prefix)) return undefined;
  const rest = name.slice(prefix.length).split("/");
  return rest.length === 2 && rest[0] !== "" ? rest[0] : undefined;
}

type Loose = Record<string, unknown>;
const obj = (v: unknown): Loose | undefined =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Loose) : undefined;
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const name = (v: unknown): string | undefined => {
  const n = obj(v)?.name;
  return typeof n === "string" && n !== "" ? n : undefined;
};

/**
 * The ConfigMaps and Secrets a Pod references: `env[].valueFrom.{configMapKeyRef,secretKeyRef}`,
 * `envFrom[].{configMapRef,secretRef}` of every container and init container, `configMap`/`secret`
 * volumes (and their `projected` sources), and `imagePullSecrets`. Total: a malformed Pod gives the
 * references it has.
 */
export function podSourceRefs(pod: unknown): PodSourceRefs {
  const configMaps = new Set<string>();
  const secrets = new Set<string>();
  const add = (set: Set<string>, v: string | undefined) => {
    if (v !== undefined) set.add(v);
  };
  const spec = obj(obj(pod)?.spec);
  for (const c of [...arr(spec?.initContainers), ...arr(spec?.containers)]) {
    const container = obj(c);
    for (const e of arr(container?.env)) {
      const from = obj(obj(e)?.valueFrom);
      add(configMaps, name(from?.configMapKeyRef));
      add(secrets, name(from?.secretKeyRef));
    }
    for (const f of arr(container?.envFrom)) {
      add(configMaps, name(obj(f)?.configMapRef));
      add(secrets, name(obj(f)?.secretRef));
    }
  }
  for (const v of arr(spec?.volumes)) {
    const volume = obj(v);
    add(configMaps, name(volume?.configMap));
    const secret = obj(volume?.secret)?.secretName;
    if (typeof secret === "string" && secret !== "") secrets.add(secret);
    for (const s of arr(obj(volume?.projected)?.sources)) {
      add(configMaps, name(obj(s)?.configMap));
      add(secrets, name(obj(s)?.secret));
    }
  }
  for (const s of arr(spec?.imagePullSecrets)) add(secrets, name(s));
  return { configMaps: [...configMaps].sort(), secrets: [...secrets].sort() };
}
