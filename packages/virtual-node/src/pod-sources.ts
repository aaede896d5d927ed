/**
 * Reads the ConfigMaps and Secrets a Pod references, for a provider that delivers them to the
 * Pod's machine (`@nebula/provider`'s `readSources`). Kubernetes I/O the virtual node owns, next to
 * {@link KubernetesPodApi}.
 *
 * @packageDocumentation
 */
import { CoreV1Api, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { z } from "zod";

/** The names of the ConfigMaps and Secrets a Pod references (`@nebula/userdata`'s `PodSourceRefs`). */
interface PodSourceRefs {
  readonly configMaps: readonly string[];
  readonly secrets: readonly string[];
}

/** The parts of a ConfigMap or Secret the host needs (`@nebula/userdata`'s `SourceObject`). */
interface SourceObject {
  readonly data?: Readonly<Record<string, string>> | undefined;
  readonly binaryData?: Readonly<Record<string, string>> | undefined;
}

/** The parts of a Service its environment variables come from (`@nebula/userdata`'s `ServiceEnvSource`). */
interface ServiceSource {
  readonly metadata: { readonly name: string; readonly namespace: string };
  readonly spec: {
    readonly clusterIP?: string | undefined;
    readonly ports?:
      | ReadonlyArray<{ readonly name?: string; readonly port: number; readonly protocol?: string }>
      | undefined;
  };
}

/** The referenced objects found, by name, and the Services (`@nebula/userdata`'s `PodSources`). */
interface PodSources {
  readonly configMaps: Readonly<Record<string, SourceObject>>;
  readonly secrets: Readonly<Record<string, SourceObject>>;
  readonly services: readonly ServiceSource[];
}

/** The parts of a ConfigMap or Secret the host needs; anything else the API server returns is dropped. */
const SourceObjectSchema = z.object({
  data: z.record(z.string(), z.string()).nullish(),
  binaryData: z.record(z.string(), z.string()).nullish(),
});

/**
 * What a Service's variables need; a Service listed without it is left out (the renderer checks
 * the values again: an IP, ports in range).
 */
const ServiceSchema = z.object({
  metadata: z.object({ name: z.string(), namespace: z.string() }),
  spec: z.object({
    clusterIP: z.string().nullish(),
    ports: z
      .array(
        z.object({
          name: z.string().nullish(),
          port: z.number(),
          protocol: z.string().nullish(),
        }),
      )
      .nullish(),
  }),
});

/** `default/kubernetes`: in every Pod's environment, whatever `enableServiceLinks`. */
const MASTER_SERVICE = { namespace: "default", name: "kubernetes" };

/**
 * Reads the ConfigMaps and Secrets a Pod references, from the Pod's own namespace only, at launch
 * (the parameters delivery). A 404 leaves the name out (the renderer decides: a mandatory
 * reference holds the Pod with `CreateContainerConfigError`, an optional one is skipped); any
 * other failure throws, and the provider holds the Pod and reads again on its next poll. Plain
 * GETs rather than a cluster-wide Secret informer: nothing but what bound Pods reference is read
 * or kept in memory. Also lists the Services of the Pod's containers' environment, as the kubelet
 * names them: the Pod's namespace's (unless `enableServiceLinks: false`) and `default/kubernetes`
 * (a kubelet's are those of its informer at container start; these are those of the launch).
 * Needs `get` on `configmaps` and `secrets`, `list` on `services`.
 *
 * @example
 * ```ts
 * const provider = new Ec2PodProvider({ config, ledger, readSources: podSourceReader(kubeConfig) });
 * ```
 */
export function podSourceReader(
  kubeConfig: KubeConfig,
): (pod: V1Pod, refs: PodSourceRefs) => Promise<PodSources> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const read = async (
    kind: "ConfigMap" | "Secret",
    namespace: string,
    name: string,
  ): Promise<SourceObject | undefined> => {
    let object: unknown;
    try {
      object =
        kind === "ConfigMap"
          ? await core.readNamespacedConfigMap({ name, namespace })
          : await core.readNamespacedSecret({ name, namespace });
    } catch (error) {
      if ((error as { code?: number }).code === 404) return undefined;
      throw new Error(`reading ${kind} ${namespace}/${name}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const parsed = SourceObjectSchema.safeParse(object);
    if (!parsed.success)
      throw new Error(
        `${kind} ${namespace}/${name} is malformed: ${z.prettifyError(parsed.error)}`,
      );
    return {
      data: parsed.data.data ?? undefined,
      binaryData: parsed.data.binaryData ?? undefined,
    };
  };
  const listServices = async (
    namespace: string,
    fieldSelector?: string,
  ): Promise<ServiceSource[]> => {
    let list: { items?: unknown[] };
    try {
      list = await core.listNamespacedService({
        namespace,
        ...(fieldSelector === undefined ? {} : { fieldSelector }),
      });
    } catch (error) {
      const message = `listing the Services of namespace ${namespace}: ${(error as Error).message}`;
      throw new Error(message, { cause: error });
    }
    const out: ServiceSource[] = [];
    for (const item of list.items ?? []) {
      const parsed = ServiceSchema.safeParse(item);
      if (!parsed.success) continue;
      const { metadata, spec } = parsed.data;
      out.push({
        metadata,
        spec: {
          clusterIP: spec.clusterIP ?? undefined,
          ports: (spec.ports ?? []).map((p) => ({
            ...(p.name ? { name: p.name } : {}),
            port: p.port,
            ...(p.protocol ? { protocol: p.protocol } : {}),
          })),
        },
      });
    }
    return out;
  };
  return async (pod, refs) => {
    const namespace = pod.metadata?.namespace ?? "default";
    const links = pod.spec?.enableServiceLinks !== false;
    const collect = async (kind: "ConfigMap" | "Secret", names: readonly string[]) => {
      const table: Record<string, SourceObject> = {};
      for (const name of names) {
        const object = await read(kind, namespace, name);
        if (object !== undefined) table[name] = object;
      }
      return table;
    };
    return {
      configMaps: await collect("ConfigMap", refs.configMaps),
      secrets: await collect("Secret", refs.secrets),
      // One list when the Pod's own namespace is `default` and its Services are wanted: that
      // list holds `kubernetes` already.
      services:
        links && namespace === MASTER_SERVICE.namespace
          ? await listServices(namespace)
          : [
              ...(await listServices(
                MASTER_SERVICE.namespace,
                `metadata.name=${MASTER_SERVICE.name}`,
              )),
              ...(links ? await listServices(namespace) : []),
            ],
    };
  };
}
