/**
 * Generic reads and `/status` patches by group/version/plural, for built-in kinds (core group
 * `""`, e.g. Pods) and custom resources alike, returning plain JSON (times stay strings).
 *
 * Built on client-node's `CustomObjectsApi`, whose paths are `/apis/<group>/<version>/…`; for the
 * core group a request middleware rewrites `/apis//v1/` to `/api/v1/`. Every request carries its
 * Content-Type explicitly: client-node 2.x would otherwise send `application/json-patch+json`.
 *
 * @packageDocumentation
 */
import {
  type ConfigurationOptions,
  CustomObjectsApi,
  type KubeConfig,
  setHeaderOptions,
} from "@kubernetes/client-node";
import type { JsonObject } from "./status-values.js";

/** A resource type addressed by group, version and plural (and its kind, for apply bodies). */
export interface ResourceType {
  /** API group; `""` for the core group (Pods, Nodes, …). */
  readonly group: string;
  /** API version, e.g. `v1` or `v1alpha1`. */
  readonly version: string;
  /** Plural resource name, e.g. `pods` or `workloads`. */
  readonly plural: string;
  /** Kind, e.g. `Pod` (needed by server-side apply bodies). */
  readonly kind: string;
}

/** Core v1 Pods. */
export const PODS: ResourceType = Object.freeze({
  group: "",
  version: "v1",
  plural: "pods",
  kind: "Pod",
});

/** The `apiVersion` of a resource type: `v1` for the core group, else `group/version`. */
export function apiVersionOf(resource: ResourceType): string {
  return resource.group === "" ? resource.version : `${resource.group}/${resource.version}`;
}

/** An object's address: namespace (absent for cluster-scoped kinds) and name. */
export interface ObjectAddress {
  /** Namespace; omit for a cluster-scoped object. */
  readonly namespace?: string | undefined;
  /** Name. */
  readonly name: string;
}

function coreGroupOptions(contentType?: string): ConfigurationOptions {
  const header = contentType
    ? setHeaderOptions("Content-Type", contentType)
    : setHeaderOptions("Accept", "application/json");
  const [base] = header.middleware ?? [];
  if (base === undefined) return header;
  return {
    ...header,
    middleware: [
      {
        pre: (context) => {
          context.setUrl(context.getUrl().replace("/apis//", "/api/"));
          return base.pre(context);
        },
        post: (response) => base.post(response),
      },
    ],
    middlewareMergeStrategy: "append",
  };
}

/** Plain-JSON get and `/status` patch for one resource type. */
export class ResourceClient {
  readonly #api: CustomObjectsApi;
  readonly #resource: ResourceType;

  constructor(kubeConfig: KubeConfig, resource: ResourceType) {
    this.#api = kubeConfig.makeApiClient(CustomObjectsApi);
    this.#resource = resource;
  }

  /** GET the object; throws client-node's `ApiException` (404 when absent). */
  async get(address: ObjectAddress): Promise<JsonObject> {
    const { group, version, plural } = this.#resource;
    const options = coreGroupOptions();
    const object: unknown =
      address.namespace === undefined
        ? await this.#api.getClusterCustomObject(
            { group, version, plural, name: address.name },
            options,
          )
        : await this.#api.getNamespacedCustomObject(
            { group, version, plural, name: address.name, namespace: address.namespace },
            options,
          );
    return object as JsonObject;
  }

  /** PATCH `/status` with the given Content-Type, field manager and (apply only) `force`. */
  async patchStatus(
    address: ObjectAddress,
    body: JsonObject,
    contentType: string,
    query: { readonly fieldManager: string; readonly force?: boolean },
  ): Promise<JsonObject> {
    const { group, version, plural } = this.#resource;
    const options = coreGroupOptions(contentType);
    const extra = {
      fieldManager: query.fieldManager,
      ...(query.force !== undefined ? { force: query.force } : {}),
    };
    const object: unknown =
      address.namespace === undefined
        ? await this.#api.patchClusterCustomObjectStatus(
            { group, version, plural, name: address.name, body, ...extra },
            options,
          )
        : await this.#api.patchNamespacedCustomObjectStatus(
            {
              group,
              version,
              plural,
              name: address.name,
              namespace: address.namespace,
              body,
              ...extra,
            },
            options,
          );
    return object as JsonObject;
  }
}
