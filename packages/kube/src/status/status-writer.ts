/**
 * Writes an object's `/status` subresource only when it changes, without erasing conditions
 * owned by others, at the precision the API server stores.
 *
 * @packageDocumentation
 */
import { type KubeConfig, type KubernetesObject, PatchStrategy } from "@kubernetes/client-node";
import { z } from "zod";
import { KubeError, statusOf } from "../errors.js";
import { apiVersionOf, type ObjectAddress, ResourceClient } from "./resource-client.js";
import { type JsonObject, planStatus } from "./status-values.js";

/** Options of {@link StatusWriter} (validated with zod; `equal` is checked separately). */
export const StatusWriterOptions = z.strictObject({
  /** The resource type written, e.g. {@link PODS} or `{ group, version, plural, kind }` of a CRD. */
  resource: z.strictObject({
    group: z.string(),
    version: z.string().min(1),
    plural: z.string().min(1),
    kind: z.string().min(1),
  }),
  /**
   * `merge` (default): a JSON merge patch of `status` carrying `metadata.resourceVersion`
   * (compare-and-swap). `apply`: server-side apply of the desired status with `fieldManager` and
   * `force` (conditions merge by type on the server when the list is a map, as on Pods).
   */
  strategy: z.enum(["merge", "apply"]).default("merge"),
  /** Field manager recorded on writes (default `nebula`). */
  fieldManager: z.string().min(1).max(128).default("nebula"),
  /** Condition types this writer owns even when a desired status omits them (they are removed then). */
  ownedConditions: z.array(z.string().min(1)).default([]),
  /** How precisely the server stores times in this status (default `seconds`, as every `metav1.Time`). */
  timePrecision: z.enum(["seconds", "exact"]).default("seconds"),
});

/** Options accepted by {@link StatusWriter}. */
export type StatusWriterOptionsInput<S> = z.input<typeof StatusWriterOptions> & {
  /**
   * Whether the stored status equals the status after the write (then nothing is written).
   * Default {@link statusEquals}: semantic (key order, null vs absent, times at server precision).
   */
  readonly equal?: (stored: S | JsonObject | undefined, next: S) => boolean;
};

/** What a status write did. */
export type StatusWriteOutcome = StatusWriteResult["outcome"];

/** The result of {@link StatusWriter.write}. */
export type StatusWriteResult =
  /** The status changed and was written; the object's new `resourceVersion`. */
  | { readonly outcome: "written"; readonly resourceVersion: string }
  /** The stored status already equals the desired one: nothing was sent. */
  | { readonly outcome: "unchanged"; readonly resourceVersion: string }
  /** Someone else changed the object since it was read (409): re-read and retry later. */
  | { readonly outcome: "conflict" }
  /** The object no longer exists, or the name now belongs to another UID. */
  | { readonly outcome: "gone" };

/** Per-write options of {@link StatusWriter.write}. */
export interface StatusWriteOptions {
  /**
   * The object as last seen (e.g. from an informer cache). Saves the GET: the comparison is made
   * against its status and its `resourceVersion` guards the write (stale → `conflict`).
   */
  readonly current?: KubernetesObject & { readonly status?: unknown };
  /** Write only to this incarnation of the object; another UID under the name is `gone`. */
  readonly uid?: string;
}

/**
 * Writes `/status` only when the new status differs from the stored one, as a JSON merge patch
 * (with the merge-patch Content-Type and a `resourceVersion` precondition) or as server-side
 * apply with a field manager. Conditions of types this writer does not own are kept exactly as
 * stored, times are written at server precision (whole seconds for `metav1.Time`), and a repeat
 * of an unchanged status costs no write. Works for any resource with a status subresource:
 * {@link PODS} or a custom resource by group/version/plural.
 *
 * Needs `get` on the resource (unless `current` is always passed) and `patch` on its `/status`.
 *
 * @example
 * ```ts
 * const writer = new StatusWriter(kc, { resource: PODS, fieldManager: "nebula-vnode" });
 * const result = await writer.write({ namespace: "default", name: "web-0" }, {
 *   phase: "Running",
 *   conditions: [{ type: "Ready", status: "True", lastTransitionTime: new Date() }],
 * });
 * // result.outcome: "written" the first time, then "unchanged" for the same status
 * ```
 */
export class StatusWriter<S extends object = JsonObject> {
  readonly #client: ResourceClient;
  readonly #options: z.output<typeof StatusWriterOptions>;
  readonly #equal: StatusWriterOptionsInput<S>["equal"];

  /** @throws KubeError `InvalidOptions` when the options fail validation. */
  constructor(kubeConfig: KubeConfig, options: StatusWriterOptionsInput<S>) {
    const { equal, ...rest } = options;
    const parsed = StatusWriterOptions.safeParse(rest);
    if (!parsed.success) {
      throw new KubeError(
        "InvalidOptions",
        `invalid StatusWriter options: ${parsed.error.message}`,
        {
          cause: parsed.error,
        },
      );
    }
    if (equal !== undefined && typeof equal !== "function") {
      throw new KubeError("InvalidOptions", "StatusWriter option equal must be a function");
    }
    this.#options = parsed.data;
    this.#equal = equal;
    this.#client = new ResourceClient(kubeConfig, parsed.data.resource);
  }

  /**
   * Writes `desired` to the object's status if that changes it. Fields `desired` leaves out are
   * left as stored (merge) or to their other managers (apply); `null` removes a field (merge).
   *
   * @throws KubeError `RequestFailed` for failures other than 404/409 (transport, RBAC, 422).
   */
  async write(
    address: ObjectAddress,
    desired: S,
    options: StatusWriteOptions = {},
  ): Promise<StatusWriteResult> {
    let current: KubernetesObject & { status?: unknown };
    if (options.current !== undefined) {
      current = options.current;
    } else {
      const read = await this.#read(address);
      if (read === undefined) return { outcome: "gone" };
      current = read;
    }
    const uid = options.uid ?? current.metadata?.uid;
    if (options.uid !== undefined && current.metadata?.uid !== options.uid)
      return { outcome: "gone" };
    const resourceVersion = current.metadata?.resourceVersion ?? "";
    const plan = planStatus<S>({
      stored: current.status as S | JsonObject | undefined,
      desired,
      ownedConditions: this.#options.ownedConditions,
      precision: this.#options.timePrecision,
      ...(this.#equal !== undefined ? { equal: this.#equal } : {}),
    });
    if (!plan.changed) return { outcome: "unchanged", resourceVersion };

    try {
      const written =
        this.#options.strategy === "merge"
          ? await this.#client.patchStatus(
              address,
              {
                metadata: {
                  ...(resourceVersion !== "" ? { resourceVersion } : {}),
                  ...(uid !== undefined ? { uid } : {}),
                },
                status: plan.patch,
              },
              PatchStrategy.MergePatch,
              { fieldManager: this.#options.fieldManager },
            )
          : await this.#client.patchStatus(
              address,
              {
                apiVersion: apiVersionOf(this.#options.resource),
                kind: this.#options.resource.kind,
                metadata: {
                  name: address.name,
                  ...(address.namespace !== undefined ? { namespace: address.namespace } : {}),
                  ...(uid !== undefined ? { uid } : {}),
                },
                status: plan.patch,
              },
              PatchStrategy.ServerSideApply,
              { fieldManager: this.#options.fieldManager, force: true },
            );
      const metadata = written.metadata as { resourceVersion?: string } | undefined;
      return { outcome: "written", resourceVersion: metadata?.resourceVersion ?? "" };
    } catch (error) {
      const status = statusOf(error);
      if (status === 404) return { outcome: "gone" };
      if (status === 409 || (status === 422 && uid !== undefined && mentionsUid(error))) {
        // Another writer won, or the name now belongs to another object: one re-read tells which.
        const now = await this.#read(address);
        if (now === undefined || (uid !== undefined && now.metadata?.uid !== uid)) {
          return { outcome: "gone" };
        }
        return { outcome: "conflict" };
      }
      throw this.#failure("PATCH", address, error);
    }
  }

  async #read(
    address: ObjectAddress,
  ): Promise<(KubernetesObject & { status?: unknown }) | undefined> {
    try {
      return (await this.#client.get(address)) as KubernetesObject & { status?: unknown };
    } catch (error) {
      if (statusOf(error) === 404) return undefined;
      throw this.#failure("GET", address, error);
    }
  }

  #failure(verb: string, address: ObjectAddress, error: unknown): KubeError {
    const status = statusOf(error);
    const where = `${address.namespace ? `${address.namespace}/` : ""}${address.name}`;
    return new KubeError(
      "RequestFailed",
      `${verb} ${this.#options.resource.plural} ${where}/status failed${status ? ` (HTTP ${status})` : ""}`,
      { cause: error },
    );
  }
}

function mentionsUid(error: unknown): boolean {
  const body = (error as { body?: unknown }).body;
  return typeof body === "string" && body.includes("uid");
}
