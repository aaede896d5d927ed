/**
 * An informer cache over client-node's `ListWatch`, with the gaps of client-node 2.x closed:
 *
 * - `ListWatch` stops for good on any error other than 410 Gone and its own inactivity timeout;
 *   this informer restarts it with capped exponential back-off and jitter (from the last
 *   resourceVersion, so a restart re-lists only when the server says 410).
 * - A throw in a `ListWatch` callback becomes an unhandled rejection that kills the process; here
 *   handlers are called inside try/catch and should only enqueue keys.
 * - Objects from the list are deserialised by the typed API (timestamps are `Date`s) while watch
 *   events are raw JSON (timestamps are strings); here every cached object has one form (see
 *   {@link InformerOptions.objectType}).
 * - A periodic resync hands every cached key to the handlers again.
 *
 * @packageDocumentation
 */
import {
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  ListWatch,
  type V1Pod,
  Watch,
} from "@kubernetes/client-node";
// The model serializer is not re-exported from the package root (the package has no exports map).
import { ObjectSerializer } from "@kubernetes/client-node/dist/serializer.js";
import { KubeError } from "../errors.js";
import type { Logger } from "../observability/logger.js";
import { silentLogger } from "../observability/logger.js";
import type { ControllerMetrics } from "../observability/metrics.js";
import { abortableSleep } from "../sleep.js";
import { withSignal } from "./request-options.js";

/** Selectors restricting what an informer lists and watches. */
interface Selectors {
  /** Label selector, e.g. `app=web,tier!=db`. */
  readonly labelSelector?: string;
  /** Field selector, e.g. `spec.nodeName=vnode-1`. */
  readonly fieldSelector?: string;
}

/**
 * Lists the watched collection with the informer's selectors. `signal` aborts when the informer
 * stops or the list deadline passes: hand it to the request (see the factories).
 */
type ListFunction<T extends KubernetesObject> = (
  selectors: Selectors,
  signal: AbortSignal,
) => Promise<KubernetesListObject<T>>;

/** Back-off between informer restarts. */
export interface RestartBackoff {
  /** First delay in ms (default 1000). */
  readonly initialMs?: number;
  /** Largest delay in ms (default 30 000). */
  readonly maxMs?: number;
}

/** Options shared by every informer factory. */
interface InformerCommonOptions extends Selectors {
  /** Name in logs and metrics (default: the path). */
  readonly name?: string;
  /** Hand every cached key to the handlers again this often, in ms (0 or absent: never). */
  readonly resyncPeriodMs?: number;
  /** Back-off between restarts after an error. */
  readonly restartBackoff?: RestartBackoff;
  /** Deadline of each list request, in ms (default 60 000). */
  readonly listTimeoutMs?: number;
  /** Logger (default: silent). */
  readonly logger?: Logger;
  /** Records restarts and sync state. */
  readonly metrics?: ControllerMetrics;
}

/** Options of {@link Informer}. */
export interface InformerOptions<T extends KubernetesObject> extends InformerCommonOptions {
  /** Configuration of the cluster. */
  readonly kubeConfig: KubeConfig;
  /** Collection path watched, e.g. `/api/v1/pods` or `/apis/g/v1/namespaces/ns/things`. */
  readonly path: string;
  /** Lists the collection; must honour the selectors it is given. */
  readonly list: ListFunction<T>;
  /**
   * client-node model name (e.g. `V1Pod`). When given, every cached object is deserialised into
   * that model (timestamps are `Date`s, as the typed API returns them); when absent (custom
   * resources), every cached object is plain JSON (timestamps are RFC 3339 strings).
   */
  readonly objectType?: string;
}

/** What happened to a cached object. */
type InformerEventType = "add" | "update" | "delete" | "resync";

/** One change of the cache, handed to handlers. */
export interface InformerEvent<T> {
  /** `add`, `update`, `delete`, or `resync` (periodic re-delivery of an unchanged object). */
  readonly type: InformerEventType;
  /** `namespace/name`, or `name` for cluster-scoped objects. */
  readonly key: string;
  /** The object (for `delete`: its last known state). */
  readonly object: T;
  /** For `update`: the object it replaced. */
  readonly oldObject?: T;
}

/** Receives cache changes. Must be quick and should only enqueue keys; a throw is logged and ignored. */
export type InformerHandler<T> = (event: InformerEvent<T>) => void;

/** The read side of an informer: a typed store keyed `namespace/name`. */
export interface Store<T> {
  /** The cached object with this key. */
  get(key: string): T | undefined;
  /** Every cached object, or those in `namespace`. */
  list(namespace?: string): readonly T[];
  /** Every cached key. */
  keys(): readonly string[];
  /** Whether the initial list has been loaded into the cache (stays true once true). */
  hasSynced(): boolean;
}

/**
 * The cache key of an object: `namespace/name`, or `name` for cluster-scoped objects.
 *
 * @example
 * ```ts
 * objectKey({ metadata: { namespace: "default", name: "web-0" } }); // "default/web-0"
 * ```
 */
export function objectKey(object: KubernetesObject): string {
  const name = object.metadata?.name ?? "";
  const namespace = object.metadata?.namespace;
  return namespace ? `${namespace}/${name}` : name;
}

/**
 * One object in one form: with a model name, the client-node deserialisation of its JSON (so list
 * items and watch events both carry `Date`s); without, its plain JSON (both carry strings).
 */
export function normalizeObject<T>(object: T, objectType?: string): T {
  const json: unknown = JSON.parse(JSON.stringify(object));
  return objectType === undefined
    ? (json as T)
    : (ObjectSerializer.deserialize(json, objectType) as T);
}

/**
 * The delay before restart number `attempt + 1`: jittered exponential back-off,
 * `initial * 2^attempt` capped at `max`, times a random 0.5-1.0 (replicas do not restart in step).
 */
export function restartDelay(attempt: number, backoff: RestartBackoff | undefined): number {
  const initial = backoff?.initialMs ?? 1000;
  const max = backoff?.maxMs ?? 30_000;
  const ceiling = Math.min(max, initial * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling * (0.5 + Math.random() / 2));
}

/**
 * A typed informer cache. Start it with {@link Informer.run}; read it through the {@link Store}
 * methods; subscribe with {@link Informer.onEvent}.
 *
 * @example
 * ```ts
 * const pods = podInformer(kubeConfig, { fieldSelector: "spec.nodeName=vnode-1", resyncPeriodMs: 60_000 });
 * pods.onEvent(({ key }) => queue.add(key));
 * void pods.run(signal);
 * await pods.waitForSync(signal);
 * pods.get("default/web-0"); // V1Pod | undefined
 * ```
 */
export class Informer<T extends KubernetesObject> implements Store<T> {
  /** Name in logs and metrics. */
  readonly name: string;
  readonly #options: InformerOptions<T>;
  readonly #objects = new Map<string, T>();
  readonly #handlers = new Set<InformerHandler<T>>();
  readonly #syncWaiters = new Set<() => void>();
  readonly #log: Logger;
  #synced = false;
  #running = false;
  #restarts = 0;

  constructor(options: InformerOptions<T>) {
    this.#options = options;
    this.name = options.name ?? options.path;
    this.#log = (options.logger ?? silentLogger()).child({ informer: this.name });
  }

  get(key: string): T | undefined {
    return this.#objects.get(key);
  }

  list(namespace?: string): readonly T[] {
    const all = [...this.#objects.values()];
    return namespace === undefined ? all : all.filter((o) => o.metadata?.namespace === namespace);
  }

  keys(): readonly string[] {
    return [...this.#objects.keys()];
  }

  hasSynced(): boolean {
    return this.#synced;
  }

  /** How often the informer restarted after an error since it was created. */
  restarts(): number {
    return this.#restarts;
  }

  /** Subscribes `handler` to every change; returns the unsubscribe function. */
  onEvent(handler: InformerHandler<T>): () => void {
    this.#handlers.add(handler);
    return () => this.#handlers.delete(handler);
  }

  /**
   * Resolves `true` once synced, `false` if `signal` aborts first (or the deadline passes when
   * `timeoutMs` is given).
   */
  waitForSync(signal?: AbortSignal, timeoutMs?: number): Promise<boolean> {
    if (this.#synced) return Promise.resolve(true);
    if (signal?.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const finish = (value: boolean): void => {
        this.#syncWaiters.delete(onSync);
        signal?.removeEventListener("abort", onAbort);
        if (timer !== undefined) clearTimeout(timer);
        resolve(value);
      };
      const onSync = (): void => finish(true);
      const onAbort = (): void => finish(false);
      const timer = timeoutMs === undefined ? undefined : setTimeout(onAbort, timeoutMs);
      this.#syncWaiters.add(onSync);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /**
   * Lists, watches and keeps the cache current until `signal` aborts; restarts after errors with
   * back-off. Resolves once stopped. The cache keeps its content after stopping.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (this.#running)
      throw new KubeError("AlreadyRunning", `informer ${this.name} is already running`);
    if (signal.aborted) return;
    this.#running = true;
    const { kubeConfig, path, list, labelSelector, fieldSelector, objectType } = this.#options;
    const selectors: Selectors = {
      ...(labelSelector === undefined ? {} : { labelSelector }),
      ...(fieldSelector === undefined ? {} : { fieldSelector }),
    };
    let listed = false;
    const listWatch = new ListWatch<T>(
      path,
      new Watch(kubeConfig),
      async () => {
        const deadline = AbortSignal.timeout(this.#options.listTimeoutMs ?? 60_000);
        const result = await list(selectors, AbortSignal.any([signal, deadline]));
        listed = true;
        return result;
      },
      false,
      labelSelector,
      fieldSelector,
    );
    const deliver = (type: InformerEventType, raw: T): void => {
      try {
        const key = objectKey(raw);
        const previous = this.#objects.get(key);
        if (type === "delete") {
          this.#objects.delete(key);
          this.#emit({ type, key, object: previous ?? normalizeObject(raw, objectType) });
          return;
        }
        const object = normalizeObject(raw, objectType);
        this.#objects.set(key, object);
        if (previous === undefined) this.#emit({ type: "add", key, object });
        else this.#emit({ type: "update", key, object, oldObject: previous });
      } catch (error) {
        this.#log.error({ err: error }, "informer could not apply an event");
      }
    };
    listWatch.on("add", (o) => deliver("add", o));
    listWatch.on("update", (o) => deliver("update", o));
    listWatch.on("delete", (o) => deliver("delete", o));

    let attempt = 0;
    let starting: Promise<void> = Promise.resolve();
    let failed: { error: unknown } | undefined;
    let wake: (() => void) | undefined;
    listWatch.on("error", (error?: unknown) => {
      failed = { error };
      wake?.();
    });
    const onAbort = (): void => {
      void listWatch.stop();
      wake?.();
    };
    signal.addEventListener("abort", onAbort, { once: true });
    const resync = this.#startResync(signal);
    try {
      while (!signal.aborted) {
        failed = undefined;
        try {
          // Stopping does not wait for a list in flight (its request is aborted meanwhile).
          starting = listWatch.start();
          await Promise.race([starting, aborted(signal)]);
        } catch (error) {
          failed = { error };
        }
        if (signal.aborted) break;
        // The list's items are in the cache once start() returns after a successful list.
        if (listed && !this.#synced) this.#markSynced();
        // Wait until ListWatch gives up (error) or we are stopped.
        if (failed === undefined && !signal.aborted) {
          attempt = 0;
          await new Promise<void>((resolve) => {
            wake = resolve;
          });
          wake = undefined;
        }
        if (signal.aborted) break;
        const delay = restartDelay(attempt, this.#options.restartBackoff);
        attempt += 1;
        this.#restarts += 1;
        this.#options.metrics?.informerRestarts.inc({ informer: this.name });
        this.#log.warn(
          { err: failed?.error, delayMs: delay, restarts: this.#restarts },
          "informer stopped on an error; restarting",
        );
        await abortableSleep(delay, signal);
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      clearInterval(resync);
      await listWatch.stop();
      // A watch request still connecting when stop() ran is not aborted by it (ListWatch keeps
      // the request only once connected): let the start finish (bounded), then stop again.
      await Promise.race([starting.catch(() => undefined), delay(5000)]);
      await listWatch.stop();
      this.#running = false;
    }
  }

  #markSynced(): void {
    this.#synced = true;
    this.#options.metrics?.informerSynced.set({ informer: this.name }, 1);
    this.#log.debug({ objects: this.#objects.size }, "informer synced");
    for (const wake of [...this.#syncWaiters]) wake();
  }

  #startResync(signal: AbortSignal): ReturnType<typeof setInterval> | undefined {
    const period = this.#options.resyncPeriodMs ?? 0;
    if (!(period > 0)) return undefined;
    const timer = setInterval(() => {
      if (signal.aborted || !this.#synced) return;
      for (const [key, object] of this.#objects) this.#emit({ type: "resync", key, object });
    }, period);
    timer.unref();
    return timer;
  }

  #emit(event: InformerEvent<T>): void {
    for (const handler of this.#handlers) {
      try {
        handler(event);
      } catch (error) {
        this.#log.error(
          { err: error, key: event.key, event: event.type },
          "informer handler threw",
        );
      }
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

/** Options of {@link podInformer}. */
export interface PodInformerOptions extends InformerCommonOptions {
  /** Watch one namespace (default: all). */
  readonly namespace?: string;
}

/**
 * An informer of Pods (`V1Pod`, timestamps as `Date`s), optionally in one namespace, with label
 * and field selectors (`spec.nodeName=<node>` for the Pods bound to one Node).
 */
export function podInformer(
  kubeConfig: KubeConfig,
  options: PodInformerOptions = {},
): Informer<V1Pod> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const { namespace } = options;
  return new Informer<V1Pod>({
    ...options,
    kubeConfig,
    objectType: "V1Pod",
    name: options.name ?? (namespace === undefined ? "pods" : `pods/${namespace}`),
    path: namespace === undefined ? "/api/v1/pods" : `/api/v1/namespaces/${namespace}/pods`,
    list: (selectors, signal) =>
      namespace === undefined
        ? core.listPodForAllNamespaces(selectors, withSignal(signal))
        : core.listNamespacedPod({ namespace, ...selectors }, withSignal(signal)),
  });
}

/** Options of {@link customObjectInformer}. */
export interface CustomObjectInformerOptions extends InformerCommonOptions {
  /** API group, e.g. `compute.nebula.dev`. */
  readonly group: string;
  /** API version, e.g. `v1alpha1`. */
  readonly version: string;
  /** Resource plural, e.g. `workloads`. */
  readonly plural: string;
  /** Watch one namespace (default: all, or the cluster-scoped collection). */
  readonly namespace?: string;
}

/**
 * An informer of custom objects (plain JSON: timestamps are strings), namespaced or
 * cluster-scoped.
 */
export function customObjectInformer<T extends KubernetesObject>(
  kubeConfig: KubeConfig,
  options: CustomObjectInformerOptions,
): Informer<T> {
  const api = kubeConfig.makeApiClient(CustomObjectsApi);
  const { group, version, plural, namespace } = options;
  const base = `/apis/${group}/${version}`;
  return new Informer<T>({
    ...options,
    kubeConfig,
    name: options.name ?? (namespace === undefined ? plural : `${plural}/${namespace}`),
    path:
      namespace === undefined ? `${base}/${plural}` : `${base}/namespaces/${namespace}/${plural}`,
    list: async (selectors, signal) =>
      (namespace === undefined
        ? await api.listCustomObjectForAllNamespaces(
            { group, version, resourcePlural: plural, ...selectors },
            withSignal(signal),
          )
        : await api.listNamespacedCustomObject(
            { group, version, namespace, plural, ...selectors },
            withSignal(signal),
          )) as KubernetesListObject<T>,
  });
}
