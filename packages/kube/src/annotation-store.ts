/**
 * A {@link TeardownStore} that keeps a teardown record in an annotation on the Kubernetes object
 * being torn down, and writes it with a `resourceVersion` precondition (compare-and-swap).
 *
 * @packageDocumentation
 */
import {
  ApiException,
  type KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  PatchStrategy,
} from "@kubernetes/client-node";
import type {
  JsonValue,
  StoreSnapshot,
  StoreWrite,
  SubjectPatch,
  TeardownStore,
  WriteOutcome,
} from "@nebula/teardown";
import { z } from "zod";
import { KubeError, statusOf } from "./errors.js";

/** The annotation Nebula uses for teardown records (the same key as `POD_TEARDOWN_ANNOTATION`). */
export const DEFAULT_TEARDOWN_ANNOTATION = "teardown.nebula.dev/record";

const qualifiedName =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;

/** Options of {@link KubernetesAnnotationStore}, validated with zod. */
export const AnnotationStoreOptions = z.strictObject({
  /** API version of the subjects, e.g. `v1` (default) or `compute.nebula.dev/v1alpha1`. */
  apiVersion: z.string().min(1).default("v1"),
  /** Kind of the subjects, e.g. `Pod` (default). */
  kind: z.string().min(1).default("Pod"),
  /** The annotation that holds the record (default `teardown.nebula.dev/record`). */
  annotation: z
    .string()
    .max(316)
    .regex(qualifiedName, "must be a qualified annotation key")
    .default(DEFAULT_TEARDOWN_ANNOTATION),
  /** Field manager recorded on writes (default `nebula-teardown`). */
  fieldManager: z.string().min(1).max(128).default("nebula-teardown"),
});

/** Options accepted by {@link KubernetesAnnotationStore} (before defaults). */
export type AnnotationStoreOptionsInput = z.input<typeof AnnotationStoreOptions>;

/** A subject's reference, parsed from a store key. */
export interface ObjectRef {
  /** Namespace, absent for cluster-scoped objects. */
  readonly namespace?: string;
  /** Name. */
  readonly name: string;
}

const dnsName = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

/**
 * Parses a store key: `namespace/name` for a namespaced object, `name` for a cluster-scoped one.
 * Total: returns `undefined` for anything else.
 *
 * @example
 * ```ts
 * parseObjectKey("default/web-0"); // { namespace: "default", name: "web-0" }
 * ```
 */
export function parseObjectKey(key: string): ObjectRef | undefined {
  const parts = key.split("/");
  const valid = (s: string | undefined): s is string =>
    s !== undefined && s.length > 0 && s.length <= 253 && dnsName.test(s);
  if (parts.length === 1 && valid(parts[0])) return { name: parts[0] };
  if (parts.length === 2 && valid(parts[0]) && valid(parts[1])) {
    return { namespace: parts[0], name: parts[1] };
  }
  return undefined;
}

/**
 * The Kubernetes teardown store: each subject is a Kubernetes object (by default a Pod), its key
 * `namespace/name`; the record lives in one annotation; `write` is a JSON merge patch that carries
 * `metadata.resourceVersion` (and `metadata.uid` when given), so the API server applies it only to
 * the version that was read (409 Conflict otherwise). The subject patch of a phase goes into the
 * same merge patch, so the phase change and the subject change are one atomic write.
 *
 * Use it as the `store` of a `TeardownExecutor` (and of `@nebula/provider`'s durable teardown).
 * The credentials need `get` and `patch` on the subjects' resource.
 *
 * @example
 * ```ts
 * import { KubeConfig } from "@kubernetes/client-node";
 * import { TeardownExecutor, podTeardown } from "@nebula/teardown";
 * import { KubernetesAnnotationStore } from "@nebula/kube";
 *
 * const kc = new KubeConfig();
 * kc.loadFromDefault();
 * const store = new KubernetesAnnotationStore(kc); // Pods, annotation teardown.nebula.dev/record
 * const executor = new TeardownExecutor({ teardown: podTeardown, store, handlers, observe });
 * await executor.tick("default/web-0");
 * ```
 */
export class KubernetesAnnotationStore implements TeardownStore {
  readonly #api: KubernetesObjectApi;
  readonly #options: z.output<typeof AnnotationStoreOptions>;

  /**
   * @param kubeConfig - where and as whom to connect.
   * @param options - the subjects' kind and the annotation; see {@link AnnotationStoreOptions}.
   * @throws KubeError with code `InvalidOptions` for options that fail validation.
   */
  constructor(kubeConfig: KubeConfig, options: AnnotationStoreOptionsInput = {}) {
    const parsed = AnnotationStoreOptions.safeParse(options);
    if (!parsed.success) {
      throw new KubeError("InvalidOptions", z.prettifyError(parsed.error), { cause: parsed.error });
    }
    this.#options = parsed.data;
    this.#api = KubernetesObjectApi.makeApiClient(kubeConfig);
  }

  /** The annotation key this store reads and writes. */
  get annotation(): string {
    return this.#options.annotation;
  }

  /**
   * Reads the subject. A missing object (404) is `{ found: false }`.
   * @throws KubeError (`InvalidKey`, `RequestFailed`) on a bad key or a failed request.
   */
  async read(key: string): Promise<StoreSnapshot> {
    const ref = this.#ref(key);
    let object: KubernetesObject;
    try {
      object = await this.#api.read(this.#spec(ref));
    } catch (error) {
      if (statusOf(error) === 404) return { found: false };
      throw requestFailed(`GET ${this.#options.kind} ${key}`, error);
    }
    const metadata = object.metadata ?? {};
    if (metadata.resourceVersion === undefined) {
      throw new KubeError("RequestFailed", `GET ${key}: the object has no resourceVersion`);
    }
    const record = metadata.annotations?.[this.#options.annotation];
    return {
      found: true,
      version: metadata.resourceVersion,
      ...(metadata.uid !== undefined ? { uid: metadata.uid } : {}),
      record,
      subject: object,
    };
  }

  /**
   * Writes the record (and the subject patch) as one merge patch with `resourceVersion` (and `uid`)
   * preconditions. 409 → `conflict`, unless the object now has another UID (recreated) → `gone`;
   * 404 → `gone`; 422 on a UID that no longer matches → `gone`.
   * @throws KubeError (`InvalidKey`, `RequestFailed`) on a bad key or any other failure.
   */
  async write(
    key: string,
    change: StoreWrite,
    expectedVersion: string,
    expectedUid?: string,
  ): Promise<WriteOutcome> {
    const ref = this.#ref(key);
    const ours: SubjectPatch = {
      metadata: {
        resourceVersion: expectedVersion,
        ...(expectedUid !== undefined ? { uid: expectedUid } : {}),
        annotations: { [this.#options.annotation]: change.record },
      },
    };
    const body = combinePatches(change.subject ?? {}, ours);
    const spec = {
      ...body,
      apiVersion: this.#options.apiVersion,
      kind: this.#options.kind,
      metadata: {
        ...(body.metadata as object),
        name: ref.name,
        ...(ref.namespace !== undefined ? { namespace: ref.namespace } : {}),
      },
    } as KubernetesObject;
    try {
      const written = await this.#api.patch(
        spec,
        undefined,
        undefined,
        this.#options.fieldManager,
        undefined,
        PatchStrategy.MergePatch,
      );
      const version = written.metadata?.resourceVersion;
      if (version === undefined) {
        throw new KubeError("RequestFailed", `PATCH ${key}: the response has no resourceVersion`);
      }
      return { status: "written", version };
    } catch (error) {
      if (error instanceof KubeError) throw error;
      const status = statusOf(error);
      if (status === 404) return { status: "gone" };
      if (status === 409) return this.#classifyConflict(key, expectedUid);
      // A UID that no longer matches is refused as "metadata.uid is immutable" (422) when the
      // resourceVersion happens not to: the object was replaced.
      if (status === 422 && expectedUid !== undefined) {
        const now = await this.read(key);
        if (!now.found || now.uid !== expectedUid) return { status: "gone" };
      }
      throw requestFailed(`PATCH ${this.#options.kind} ${key}`, error);
    }
  }

  /** A 409 means "someone else wrote first", unless the object was replaced (another UID). */
  async #classifyConflict(key: string, expectedUid: string | undefined): Promise<WriteOutcome> {
    if (expectedUid === undefined) return { status: "conflict" };
    const now = await this.read(key);
    if (!now.found || now.uid !== expectedUid) return { status: "gone" };
    return { status: "conflict" };
  }

  #ref(key: string): ObjectRef {
    const ref = parseObjectKey(key);
    if (ref === undefined) {
      throw new KubeError("InvalidKey", `"${key}" is not "namespace/name" or "name"`);
    }
    return ref;
  }

  #spec(ref: ObjectRef): KubernetesObject & { metadata: { name: string } } {
    return {
      apiVersion: this.#options.apiVersion,
      kind: this.#options.kind,
      metadata: {
        name: ref.name,
        ...(ref.namespace !== undefined ? { namespace: ref.namespace } : {}),
      },
    };
  }
}

/**
 * Combines two JSON merge patches into one that has the effect of applying `first`, then
 * `second` (objects merge recursively, `second` wins, `null` deletions are kept).
 *
 * @example
 * ```ts
 * combinePatches({ spec: { replicas: 0 } }, { metadata: { resourceVersion: "42" } });
 * // → { spec: { replicas: 0 }, metadata: { resourceVersion: "42" } }
 * ```
 */
export function combinePatches(first: SubjectPatch, second: SubjectPatch): SubjectPatch {
  const out: SubjectPatch = { ...first };
  for (const [key, value] of Object.entries(second)) {
    const existing = out[key];
    out[key] =
      isObject(existing) && isObject(value)
        ? combinePatches(existing, value)
        : (value as JsonValue);
  }
  return out;
}

function isObject(value: JsonValue | undefined): value is { [key: string]: JsonValue } {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function requestFailed(what: string, error: unknown): KubeError {
  const status = statusOf(error);
  const detail =
    error instanceof ApiException
      ? messageOf(error.body)
      : error instanceof Error
        ? error.message
        : "";
  return new KubeError(
    "RequestFailed",
    `${what} failed${status !== undefined ? ` (HTTP ${status})` : ""}${detail ? `: ${detail}` : ""}`,
    { cause: error },
  );
}

function messageOf(body: unknown): string {
  if (typeof body === "string") {
    try {
      return messageOf(JSON.parse(body));
    } catch {
      return body.slice(0, 200);
    }
  }
  if (typeof body === "object" && body !== null && "message" in body) return String(body.message);
  return "";
}
