/**
 * The Pod writes of the virtual node other than status: the finalizer, the placement annotation,
 * and the kubelet-style final delete. Every write names the Pod's UID, so it never lands on a newer
 * Pod that reuses the name.
 *
 * @packageDocumentation
 */
import {
  CoreV1Api,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
} from "@kubernetes/client-node";
import { VirtualNodeError } from "./errors.js";

/** Identifies one incarnation of a Pod. */
export interface PodRef {
  /** Namespace. */
  readonly namespace: string;
  /** Name. */
  readonly name: string;
  /** UID: every delete carries it as a precondition. */
  readonly uid: string;
}

/** The Pod writes the Pod controller makes (besides status). */
export interface PodApi {
  /** Adds `finalizer` to this incarnation of the Pod (no-op when present). */
  addFinalizer(pod: PodRef, finalizer: string): Promise<void>;
  /** Removes `finalizer` from this incarnation of the Pod (no-op when absent or when the Pod is gone). */
  removeFinalizer(pod: PodRef, finalizer: string): Promise<void>;
  /** Sets annotations on this incarnation of the Pod. */
  annotate(pod: PodRef, annotations: Record<string, string>): Promise<void>;
  /** Deletes this incarnation with grace 0 and a UID precondition; a gone or replaced Pod counts as done. */
  deleteNow(pod: PodRef): Promise<void>;
  /** Whether this incarnation of the Pod still exists (a read from the API server). */
  exists(pod: PodRef): Promise<boolean>;
}

function statusCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "number" ? code : undefined;
}

function failure(what: string, pod: PodRef, error: unknown): VirtualNodeError {
  const code = statusCode(error);
  return new VirtualNodeError(
    "RequestFailed",
    `${what} of pod ${pod.namespace}/${pod.name} failed${code === undefined ? "" : ` (HTTP ${code})`}`,
    { cause: error },
  );
}

/**
 * {@link PodApi} on the API server. Needs `get`, `patch` and `delete` on `pods`.
 *
 * @example
 * ```ts
 * const api = new KubernetesPodApi(kubeConfig);
 * await api.addFinalizer({ namespace: "default", name: "web-0", uid }, "nebula.dev/instance-teardown");
 * ```
 */
export class KubernetesPodApi implements PodApi {
  readonly #core: CoreV1Api;

  constructor(kubeConfig: KubeConfig) {
    this.#core = kubeConfig.makeApiClient(CoreV1Api);
  }

  async #read(pod: PodRef): Promise<V1Pod | undefined> {
    try {
      const read = await this.#core.readNamespacedPod({ name: pod.name, namespace: pod.namespace });
      return read.metadata?.uid === pod.uid ? read : undefined;
    } catch (error) {
      if (statusCode(error) === 404) return undefined;
      throw failure("GET", pod, error);
    }
  }

  async #jsonPatch(pod: PodRef, ops: object[], what: string): Promise<"done" | "retry" | "gone"> {
    try {
      await this.#core.patchNamespacedPod(
        { name: pod.name, namespace: pod.namespace, body: ops },
        setHeaderOptions("Content-Type", PatchStrategy.JsonPatch),
      );
      return "done";
    } catch (error) {
      const code = statusCode(error);
      if (code === 404) return "gone";
      // A failed `test` (the Pod changed under us) is 422; a conflict is 409: read again.
      if (code === 422 || code === 409) return "retry";
      throw failure(what, pod, error);
    }
  }

  async addFinalizer(pod: PodRef, finalizer: string): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const current = await this.#read(pod);
      if (current === undefined) return;
      const list = current.metadata?.finalizers;
      if (list?.includes(finalizer)) return;
      const ops = [
        { op: "test", path: "/metadata/uid", value: pod.uid },
        { op: "test", path: "/metadata/resourceVersion", value: current.metadata?.resourceVersion },
        list === undefined
          ? { op: "add", path: "/metadata/finalizers", value: [finalizer] }
          : { op: "add", path: "/metadata/finalizers/-", value: finalizer },
      ];
      if ((await this.#jsonPatch(pod, ops, "adding the finalizer")) !== "retry") return;
    }
    throw new VirtualNodeError(
      "RequestFailed",
      `adding the finalizer of pod ${pod.namespace}/${pod.name} kept conflicting`,
    );
  }

  async removeFinalizer(pod: PodRef, finalizer: string): Promise<void> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const current = await this.#read(pod);
      const index = current?.metadata?.finalizers?.indexOf(finalizer) ?? -1;
      if (index < 0) return;
      const ops = [
        { op: "test", path: "/metadata/uid", value: pod.uid },
        { op: "test", path: `/metadata/finalizers/${index}`, value: finalizer },
        { op: "remove", path: `/metadata/finalizers/${index}` },
      ];
      if ((await this.#jsonPatch(pod, ops, "removing the finalizer")) !== "retry") return;
    }
    throw new VirtualNodeError(
      "RequestFailed",
      `removing the finalizer of pod ${pod.namespace}/${pod.name} kept conflicting`,
    );
  }

  async annotate(pod: PodRef, annotations: Record<string, string>): Promise<void> {
    try {
      await this.#core.patchNamespacedPod(
        {
          name: pod.name,
          namespace: pod.namespace,
          body: { metadata: { uid: pod.uid, annotations } },
        },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
    } catch (error) {
      const code = statusCode(error);
      if (code === 404 || code === 409 || code === 422) return;
      throw failure("annotating", pod, error);
    }
  }

  async deleteNow(pod: PodRef): Promise<void> {
    try {
      await this.#core.deleteNamespacedPod({
        name: pod.name,
        namespace: pod.namespace,
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid: pod.uid } },
      });
    } catch (error) {
      const code = statusCode(error);
      if (code === 404 || code === 409) return;
      throw failure("DELETE", pod, error);
    }
  }

  async exists(pod: PodRef): Promise<boolean> {
    return (await this.#read(pod)) !== undefined;
  }

  /**
   * Asks the API server to evict this incarnation of the Pod (`policy/v1` Eviction, a UID
   * precondition), as `kubectl drain` does: it is deleted with its own grace period only if its
   * PodDisruptionBudgets allow it. Needs `create` on `pods/eviction`.
   *
   * @returns `evicted` (the API server took it: the Pod is being deleted), `blocked` (HTTP 429: a
   * PodDisruptionBudget allows no disruption now; ask again later), or `gone` (no such Pod, or
   * the name is another incarnation's now).
   * @throws VirtualNodeError `RequestFailed` for any other answer (its `cause` is the API error).
   */
  async evict(pod: PodRef): Promise<PodEviction> {
    try {
      await this.#core.createNamespacedPodEviction({
        name: pod.name,
        namespace: pod.namespace,
        body: {
          apiVersion: "policy/v1",
          kind: "Eviction",
          metadata: { name: pod.name, namespace: pod.namespace },
          deleteOptions: { preconditions: { uid: pod.uid } },
        },
      });
      return "evicted";
    } catch (error) {
      const code = statusCode(error);
      if (code === 429) return "blocked";
      if (code === 404 || code === 409) return "gone";
      throw failure("evicting", pod, error);
    }
  }
}

/** What {@link KubernetesPodApi.evict} got: evicted, blocked by a PodDisruptionBudget, or gone. */
export type PodEviction = "evicted" | "blocked" | "gone";
