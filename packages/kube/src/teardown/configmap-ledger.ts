/**
 * The Pod ledger on Kubernetes: one ConfigMap per Pod UID in the controller's own namespace, so
 * that the state the controller acts on (which instance a Pod launched, how far its teardown got)
 * lives where a tenant who can edit Pods cannot write.
 *
 * @packageDocumentation
 */
import {
  type CoreV1Api,
  CoreV1Api as CoreV1ApiClass,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1ConfigMap,
} from "@kubernetes/client-node";
import {
  decodeLaunch,
  type LaunchEntry,
  LaunchEntry as LaunchEntrySchema,
  type LedgerEntry,
  type PodLedger,
  type StoreSnapshot,
  type StoreWrite,
  type WriteOutcome,
} from "@nebula/teardown";
import { z } from "zod";
import { KubeError, statusOf } from "../errors.js";

/** Label on every ledger ConfigMap (value `true`); `list` selects by it. */
export const LEDGER_LABEL = "teardown.nebula.dev/pod-ledger";
/** Label carrying the Pod UID of a ledger ConfigMap. */
const LEDGER_POD_UID_LABEL = "teardown.nebula.dev/pod-uid";
/** Data key of the launch entry (JSON). */
export const LEDGER_LAUNCH_KEY = "launch";
/** Data key of the teardown record. */
const LEDGER_RECORD_KEY = "record";

const uidPattern = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/** Options of {@link ConfigMapPodLedger}, validated with zod. */
export const ConfigMapLedgerOptions = z.strictObject({
  /** The controller's namespace: only the controller's ServiceAccount may write ConfigMaps there. */
  namespace: z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "must be a namespace name"),
  /** Name prefix of the ConfigMaps (default `nebula-pod-`): the name is the prefix + Pod UID. */
  prefix: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]*)?$/)
    .max(40)
    .default("nebula-pod-"),
  /** Field manager of writes (default `nebula-ledger`). */
  fieldManager: z.string().min(1).max(128).default("nebula-ledger"),
  /** Attempts of a launch merge that meets concurrent writers (default 5). */
  maxAttempts: z.number().int().min(1).max(20).default(5),
});

/** Options accepted by {@link ConfigMapPodLedger} (before defaults). */
export type ConfigMapLedgerOptionsInput = z.input<typeof ConfigMapLedgerOptions>;

/**
 * A {@link PodLedger} on ConfigMaps: `<prefix><pod-uid>` in the controller's namespace, no owner
 * (Pods live in other namespaces), labelled {@link LEDGER_LABEL}. `data.launch` holds the launch
 * entry (JSON), `data.record` the teardown record; teardown writes are JSON merge patches with a
 * `resourceVersion` precondition (compare-and-swap). Keys are Pod UIDs.
 *
 * RBAC: `get`, `list`, `create`, `patch`, `delete` on `configmaps` in that namespace only; no
 * tenant should have write access there.
 *
 * @example
 * ```ts
 * const ledger = new ConfigMapPodLedger(kc, { namespace: "nebula-system" });
 * await ledger.recordLaunch({ podUid, namespace: "default", name: "web-0" }, { requestedAt: Date.now() });
 * ```
 */
export class ConfigMapPodLedger implements PodLedger {
  readonly #api: CoreV1Api;
  readonly #options: z.output<typeof ConfigMapLedgerOptions>;

  /**
   * @param kubeConfig - where and as whom to connect.
   * @param options - see {@link ConfigMapLedgerOptions}.
   * @throws KubeError `InvalidOptions` for options that fail validation.
   */
  constructor(kubeConfig: KubeConfig, options: ConfigMapLedgerOptionsInput) {
    const parsed = ConfigMapLedgerOptions.safeParse(options);
    if (!parsed.success) {
      throw new KubeError("InvalidOptions", z.prettifyError(parsed.error), { cause: parsed.error });
    }
    this.#options = parsed.data;
    this.#api = kubeConfig.makeApiClient(CoreV1ApiClass);
  }

  /** The ConfigMap name of a Pod UID. */
  nameOf(podUid: string): string {
    if (!uidPattern.test(podUid)) {
      throw new KubeError("InvalidKey", `"${podUid}" is not a Pod UID`);
    }
    return `${this.#options.prefix}${podUid}`;
  }

  async ensure(launch: LaunchEntry): Promise<LedgerEntry> {
    const existing = await this.#get(launch.podUid);
    if (existing) return toEntry(existing);
    const created = await this.#create(LaunchEntrySchema.parse(launch));
    return toEntry(created ?? (await this.#mustGet(launch.podUid)));
  }

  async recordLaunch(base: LaunchEntry, fields: Partial<LaunchEntry>): Promise<LedgerEntry> {
    for (let attempt = 0; attempt < this.#options.maxAttempts; attempt++) {
      const existing = await this.#get(base.podUid);
      const current = existing ? (decodeLaunch(existing.data?.[LEDGER_LAUNCH_KEY]) ?? base) : base;
      const launch = LaunchEntrySchema.parse({ ...current, ...fields, podUid: base.podUid });
      if (!existing) {
        const created = await this.#create(launch);
        if (created) return toEntry(created);
        continue;
      }
      const written = await this.#patch(base.podUid, {
        metadata: { resourceVersion: existing.metadata?.resourceVersion ?? "" },
        data: { [LEDGER_LAUNCH_KEY]: JSON.stringify(launch) },
      });
      if (written !== "conflict" && written !== "gone") return toEntry(written);
    }
    throw new KubeError(
      "RequestFailed",
      `recording the launch of Pod ${base.podUid}: ${this.#options.maxAttempts} conflicting writes in a row`,
    );
  }

  async get(podUid: string): Promise<LedgerEntry | undefined> {
    const map = await this.#get(podUid);
    return map ? toEntry(map) : undefined;
  }

  async list(): Promise<LedgerEntry[]> {
    const out: LedgerEntry[] = [];
    let token: string | undefined;
    do {
      let page: Awaited<ReturnType<CoreV1Api["listNamespacedConfigMap"]>>;
      try {
        page = await this.#api.listNamespacedConfigMap({
          namespace: this.#options.namespace,
          labelSelector: `${LEDGER_LABEL}=true`,
          limit: 500,
          ...(token ? { _continue: token } : {}),
        });
      } catch (error) {
        throw failed(`LIST ConfigMaps in ${this.#options.namespace}`, error);
      }
      for (const map of page.items) {
        const entry = toEntry(map);
        if (entry.launch.podUid !== "") out.push(entry);
      }
      token = page.metadata?._continue || undefined;
    } while (token);
    return out;
  }

  async remove(
    podUid: string,
    options: { readonly ifVersion?: string | undefined } = {},
  ): Promise<boolean> {
    try {
      await this.#api.deleteNamespacedConfigMap({
        name: this.nameOf(podUid),
        namespace: this.#options.namespace,
        // Only the entry as it was read: another writer's newer entry is not deleted.
        ...(options.ifVersion === undefined
          ? {}
          : { body: { preconditions: { resourceVersion: options.ifVersion } } }),
      });
      return true;
    } catch (error) {
      const status = statusOf(error);
      if (status === 404) return true;
      if (status === 409) return false;
      throw failed(`DELETE ConfigMap ${this.nameOf(podUid)}`, error);
    }
  }

  async read(key: string): Promise<StoreSnapshot> {
    const map = await this.#get(key);
    if (!map) return { found: false };
    const launch = decodeLaunch(map.data?.[LEDGER_LAUNCH_KEY]);
    return {
      found: true,
      version: map.metadata?.resourceVersion ?? "",
      // The Pod UID is the record's identity (the ConfigMap's own UID is not the Pod's).
      uid: launch?.podUid ?? key,
      record: map.data?.[LEDGER_RECORD_KEY],
      subject: map,
    };
  }

  async write(
    key: string,
    change: StoreWrite,
    expectedVersion: string,
    expectedUid?: string,
  ): Promise<WriteOutcome> {
    if (expectedUid !== undefined && expectedUid !== key) return { status: "gone" };
    const written = await this.#patch(key, {
      metadata: { resourceVersion: expectedVersion },
      data: { [LEDGER_RECORD_KEY]: change.record },
    });
    if (written === "conflict" || written === "gone") return { status: written };
    return { status: "written", version: written.metadata?.resourceVersion ?? "" };
  }

  async #get(podUid: string): Promise<V1ConfigMap | undefined> {
    try {
      return await this.#api.readNamespacedConfigMap({
        name: this.nameOf(podUid),
        namespace: this.#options.namespace,
      });
    } catch (error) {
      if (statusOf(error) === 404) return undefined;
      throw failed(`GET ConfigMap ${this.nameOf(podUid)}`, error);
    }
  }

  async #mustGet(podUid: string): Promise<V1ConfigMap> {
    const map = await this.#get(podUid);
    if (!map) throw new KubeError("RequestFailed", `ConfigMap ${this.nameOf(podUid)} vanished`);
    return map;
  }

  /** Creates the ConfigMap; `undefined` when it already exists (another writer created it). */
  async #create(launch: LaunchEntry): Promise<V1ConfigMap | undefined> {
    try {
      return await this.#api.createNamespacedConfigMap({
        namespace: this.#options.namespace,
        fieldManager: this.#options.fieldManager,
        body: {
          metadata: {
            name: this.nameOf(launch.podUid),
            namespace: this.#options.namespace,
            labels: { [LEDGER_LABEL]: "true", [LEDGER_POD_UID_LABEL]: launch.podUid },
          },
          data: { [LEDGER_LAUNCH_KEY]: JSON.stringify(launch) },
        },
      });
    } catch (error) {
      if (statusOf(error) === 409) return undefined;
      throw failed(`CREATE ConfigMap ${this.nameOf(launch.podUid)}`, error);
    }
  }

  async #patch(podUid: string, body: object): Promise<V1ConfigMap | "conflict" | "gone"> {
    try {
      return await this.#api.patchNamespacedConfigMap(
        {
          name: this.nameOf(podUid),
          namespace: this.#options.namespace,
          body,
          fieldManager: this.#options.fieldManager,
        },
        mergePatch,
      );
    } catch (error) {
      const status = statusOf(error);
      if (status === 404) return "gone";
      if (status === 409) return "conflict";
      throw failed(`PATCH ConfigMap ${this.nameOf(podUid)}`, error);
    }
  }
}

/** Request options that send a JSON merge patch. */
const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

function toEntry(map: V1ConfigMap): LedgerEntry {
  const launch = decodeLaunch(map.data?.[LEDGER_LAUNCH_KEY]) ?? {
    podUid: map.metadata?.labels?.[LEDGER_POD_UID_LABEL] ?? "",
    namespace: "unknown",
    name: "unknown",
  };
  return {
    launch,
    record: map.data?.[LEDGER_RECORD_KEY],
    version: map.metadata?.resourceVersion,
  };
}

function failed(what: string, error: unknown): KubeError {
  const status = statusOf(error);
  return new KubeError("RequestFailed", `${what} failed${status ? ` (HTTP ${status})` : ""}`, {
    cause: error,
  });
}
