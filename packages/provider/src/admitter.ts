import type { V1Pod, V1PodCondition, V1PodStatus } from "@kubernetes/client-node";
import {
  type PodParameter,
  type PodSourceRefs,
  type PodSources,
  podSourceRefs,
  type RenderNotice,
  type RenderOptionsInput,
  type RenderResult,
  renderUserData,
} from "@nebula/userdata";
import { type Admission, admitPod, CAPACITY_HOLD_REASON } from "./admission.js";
import { NO_BACKOFF } from "./capacity.js";
import type { ProviderConfig } from "./config.js";
import { ProviderError, toProviderError } from "./errors.js";
import type { InstanceTypeInfo } from "./instance-catalogue.js";
import { buildRunInstancesInput, type LaunchInput } from "./launch.js";
import { isPoolToken } from "./ownership.js";
import { type PodFacts, podFacts } from "./pod.js";
import type { PodTokens } from "./pod-tokens.js";
import type { ObservedInstance } from "./poll.js";
import {
  deliveryOf,
  disprove,
  type IssuedTokens,
  observe,
  type PodRecord,
  type ProviderContext,
} from "./record.js";
import { CREATE_CONTAINER_CONFIG_ERROR, configErrorStatus, LAUNCHED_CONDITION } from "./status.js";
import { type ReadServiceAccount, withWebIdentity } from "./web-identity.js";

/**
 * A rendered Pod as a `renderUserData` override may return it: `@nebula/userdata`'s
 * `RenderedUserData` or any object with its `userData` and `bytes`, and the parameters and notices
 * when there are any.
 */
export interface RenderedPod {
  /** Base64 of the user-data. */
  readonly userData: string;
  /** Its size in bytes before base64. */
  readonly bytes: number;
  /** Pod parameters to write before `RunInstances` (`podDelivery: "parameters"`). */
  readonly parameters?: readonly PodParameter[];
  /** The supervisor's parameters, shared by every Pod: written once per process (create-only). */
  readonly sharedParameters?: readonly PodParameter[];
  /** Event-worthy facts (`OptionalSecretNotFound`, ...), published as Warning Events. */
  readonly notices?: readonly RenderNotice[];
}

/** How Pods are rendered and their sources read (the provider's options of the same names). */
export interface AdmitterOptions {
  readonly userData?: RenderOptionsInput | undefined;
  readonly renderUserData?:
    | ((
        pod: V1Pod,
        sources: PodSources | undefined,
      ) => LaunchInput["userData"] | RenderedPod | RenderResult)
    | undefined;
  readonly readSources?: ((pod: V1Pod, refs: PodSourceRefs) => Promise<PodSources>) | undefined;
  readonly readServiceAccount?: ReadServiceAccount | undefined;
  readonly serviceProxy?: { readonly caCert: string } | undefined;
  readonly hostAgent?: { readonly clientFingerprints: readonly string[] } | undefined;
}

/** A rendered Pod, or why it is held. */
type Rendered =
  | {
      readonly userData: LaunchInput["userData"];
      readonly parameters: readonly PodParameter[];
      readonly sharedParameters: readonly PodParameter[];
      readonly notices: readonly RenderNotice[];
    }
  | { readonly held: { readonly reason: string; readonly message: string } };

/** The Pod's sources, or why they could not be read. */
type SourcesRead =
  | {
      readonly ok: true;
      readonly sources: PodSources | undefined;
      /** Its service-account tokens (none: it projects none, or user-data delivery). */
      readonly tokens?: IssuedTokens | undefined;
      /** The Pod as rendered for its host (its ServiceAccount's role added); undefined: the Pod. */
      readonly hostPod?: V1Pod | undefined;
    }
  | { readonly ok: false; readonly reason: string; readonly message: string };

const NO_READ: SourcesRead = { ok: true, sources: undefined };
const NO_SOURCES: PodSources = { configMaps: {}, secrets: {} };

/**
 * Decides what the provider does with a Pod before any launch: builds its record from the Pod and
 * its ledger entry, admits it (launch, hold a DaemonSet Pod, refuse), renders its user-data and
 * parameters (reading its ConfigMaps and Secrets with `podDelivery: "parameters"`), and holds it
 * with `CreateContainerConfigError` while a mandatory source is missing.
 */
export class Admitter {
  readonly #ctx: ProviderContext;
  readonly #options: AdmitterOptions;
  readonly #tokens: PodTokens;

  constructor(ctx: ProviderContext, options: AdmitterOptions, tokens: PodTokens) {
    this.#ctx = ctx;
    this.#options = options;
    this.#tokens = tokens;
  }

  /** Builds (and registers) the record of a Pod from the Pod and its ledger entry. */
  async load(pod: V1Pod, facts: PodFacts): Promise<PodRecord> {
    const { config, ledger, now } = this.#ctx;
    const parametersDelivery = config.podDelivery === "parameters";
    const entry = await ledger.get(facts.uid);
    const launch = entry?.launch;
    // A Pod to admit (not terminal, not going, no instance recorded) needs EC2's instance types
    // with a catalogue: a failed first read throws before anything is recorded (retried later).
    const admitting =
      facts.apiPhase !== "Succeeded" &&
      facts.apiPhase !== "Failed" &&
      !facts.deleting &&
      (launch?.instanceId === undefined || isPoolToken(launch.clientToken));
    const catalogue = admitting ? await this.#ctx.instanceTypes?.current() : undefined;
    const record: PodRecord = {
      pod: structuredClone(pod),
      facts,
      mode: "launch",
      launchRequested: launch?.requestedAt !== undefined || launch?.instanceId !== undefined,
      unknownOutcome: launch?.requestedAt !== undefined && launch.instanceId === undefined,
      backoff: NO_BACKOFF,
      launching: false,
      // After a restart, an instance launched within the parameter grace may still wait for the
      // instance-ARN tag on its parameters (the process may have died before writing it).
      parametersUntagged:
        parametersDelivery &&
        (launch?.launchedAt === undefined
          ? launch?.instanceId === undefined
          : now() - launch.launchedAt < config.leakCollection.parameterGraceSeconds * 1000),
      ledgerDirty: false,
      seen: false,
      missing: false,
      events: [],
      deleted: facts.deleting,
    };
    if (launch?.instanceId !== undefined) record.instanceId = launch.instanceId;
    if (launch?.requestedAt !== undefined) record.requestedAt = launch.requestedAt;
    if (launch?.clientToken !== undefined) record.clientToken = launch.clientToken;
    if (launch?.launchedAt !== undefined) record.launchedAt = new Date(launch.launchedAt);
    this.#ctx.records.set(facts.uid, record);
    if (facts.apiPhase === "Succeeded" || facts.apiPhase === "Failed") {
      // Terminal in the API: the stored status is the truth; never launched again.
      record.mode = "terminal";
      if (pod.status) {
        record.status = structuredClone(pod.status);
        record.delivered = deliveryOf(record, record.status);
      }
      return record;
    }
    // A warm-pool host the ledger assigned is rendered again: a crash may have come before its
    // start, which then needs the Pod's user-data (`WarmPool.resume`).
    if (record.deleted || (record.instanceId !== undefined && !isPoolToken(record.clientToken))) {
      return record;
    }
    // Not launched yet, or a launch whose outcome is unknown (repeated with the same token if no
    // instance turns up). The parameters delivery reads the Pod's ConfigMaps and Secrets first.
    const admission = admitPod(facts, config, catalogue);
    const sources = admission.kind === "launch" ? await this.#readSources(record) : NO_READ;
    this.#admit(record, admission, sources);
    return record;
  }

  /** Takes a newer Pod object (its deletion grace, labels, annotations). */
  refresh(record: PodRecord, pod: V1Pod): void {
    record.pod = structuredClone(pod);
    const facts = podFacts(pod);
    record.facts = facts;
    if (facts.deleting) record.deleted = true;
  }

  /**
   * A Pod held for a missing ConfigMap or Secret, on a poll: its instance when a lost launch left
   * one, else its sources read and the Pod rendered again (it launches once it renders).
   */
  async readmit(record: PodRecord, listed: ObservedInstance | undefined): Promise<void> {
    if (record.readmitting) return;
    record.readmitting = true;
    try {
      if (
        record.launchRequested &&
        listed &&
        disprove(this.#ctx, listed, record.facts.uid) === undefined
      ) {
        observe(this.#ctx, record, listed);
        record.ledgerDirty = true;
        this.leaveConfigHold(record);
        return;
      }
      const sources = await this.#readSources(record);
      if (record.mode !== "config" || record.deleted) return;
      const catalogue = this.#ctx.instanceTypes?.latest();
      this.#admit(record, admitPod(record.facts, this.#ctx.config, catalogue), sources);
    } finally {
      record.readmitting = false;
    }
  }

  /**
   * A Pod held because no allowed type that fits it is offered in the node's zones, on a poll:
   * admitted again from the catalogue as it is now (a stale one is refreshed in the background),
   * and launched once a type is offered. While it is still held nothing changes and nothing is
   * said again (its status and Event already say why).
   */
  async reconsiderHold(record: PodRecord): Promise<void> {
    if (record.mode !== "hold" || record.holdReason !== CAPACITY_HOLD_REASON) return;
    if (record.deleted || record.readmitting) return;
    record.readmitting = true;
    try {
      let catalogue: readonly InstanceTypeInfo[] | undefined;
      try {
        catalogue = await this.#ctx.instanceTypes?.current();
      } catch {
        return; // No catalogue to decide from: the next poll asks again.
      }
      const admission = admitPod(record.facts, this.#ctx.config, catalogue);
      if (admission.kind !== "launch") return;
      const sources = await this.#readSources(record);
      if (record.mode !== "hold" || record.deleted) return;
      // Admitted: the hold's reason and condition go; the launch (or a config hold) says the rest.
      record.mode = "launch";
      record.holdReason = undefined;
      if (record.status) {
        const { reason: _reason, message: _message, ...rest } = record.status;
        record.status = {
          ...rest,
          conditions: (rest.conditions ?? []).filter((c) => c.type !== LAUNCHED_CONDITION),
        };
      }
      this.#admit(record, admission, sources);
      if (record.mode === "launch") {
        this.#ctx.log(
          "info",
          `pod ${record.facts.key}: an allowed instance type that fits it is offered now (${admission.instanceTypes.join(", ")}); launching`,
        );
      }
    } finally {
      record.readmitting = false;
    }
  }

  /** The Pod renders (or has an instance) now: it is launched, or observed, from here on. */
  leaveConfigHold(record: PodRecord): void {
    if (record.mode !== "config") return;
    record.mode = "launch";
    record.configError = undefined;
    if (record.status) {
      // The hold's condition is not carried into the launched Pod's status.
      record.status = {
        ...record.status,
        conditions: (record.status.conditions ?? []).filter((c) => c.type !== LAUNCHED_CONDITION),
      };
    }
  }

  /**
   * The Pod's ConfigMaps and Secrets, the Services of its environment, and its service-account
   * tokens (`podDelivery: "parameters"` only; never throws). Read for every Pod: the Services are
   * in every Pod's environment (`default/kubernetes` at least), referenced or not. A token that
   * cannot be issued holds the Pod (`FailedMount`, as the kubelet says it), like a missing Secret.
   */
  async #readSources(record: PodRecord): Promise<SourcesRead> {
    if (this.#ctx.config.podDelivery !== "parameters") return NO_READ;
    const refs = podSourceRefs(record.pod);
    const read = this.#options.readSources;
    let sources = NO_SOURCES;
    if (read !== undefined) {
      try {
        sources = await read(record.pod, refs);
      } catch (error) {
        return {
          ok: false,
          reason: "FailedToReadSources",
          message: `the ConfigMaps, Secrets and Services of pod ${record.facts.key} could not be read: ${error instanceof Error ? error.message : String(error)}`,
        };
      }
    }
    const hostPod = await this.hostPod(record.pod);
    if (!hostPod.ok) return { ok: false, reason: "FailedToReadSources", message: hostPod.message };
    if (hostPod.warning !== undefined) {
      record.notices ??= new Set();
      const key = `InvalidRoleArn\n${hostPod.warning}`;
      if (!record.notices.has(key)) {
        record.notices.add(key);
        record.events.push({ type: "Warning", reason: "InvalidRoleArn", message: hostPod.warning });
      }
    }
    const tokens = await this.#tokens.forLaunch(record, hostPod.pod);
    if (!tokens.ok) return { ok: false, reason: "FailedMount", message: tokens.message };
    return { ok: true, sources, tokens: tokens.issued, hostPod: hostPod.pod };
  }

  /**
   * The Pod as rendered for its host: with its ServiceAccount's AWS role (`withWebIdentity`) when
   * the `readServiceAccount` option reads one; `warning` when the annotation is not a role ARN.
   * Never throws.
   */
  async hostPod(
    pod: V1Pod,
  ): Promise<
    { ok: true; pod: V1Pod; warning?: string | undefined } | { ok: false; message: string }
  > {
    const read = this.#options.readServiceAccount;
    if (read === undefined || this.#ctx.config.podDelivery !== "parameters") {
      return { ok: true, pod };
    }
    let account: Awaited<ReturnType<ReadServiceAccount>>;
    try {
      account = await read(pod);
    } catch (error) {
      return {
        ok: false,
        message: `the serviceaccount of pod ${pod.metadata?.namespace}/${pod.metadata?.name} could not be read: ${error instanceof Error ? error.message : String(error)}`,
      };
    }
    const identity = withWebIdentity(pod, account?.annotations, this.#ctx.config.region);
    return { ok: true, pod: identity.pod, warning: identity.warning };
  }

  /** Holds the Pod `Pending` with `CreateContainerConfigError` (one Warning per distinct message). */
  #holdForConfig(record: PodRecord, reason: string, message: string): void {
    record.mode = "config";
    const previous =
      record.status === undefined ? record.pod : { ...record.pod, status: record.status };
    record.status = configErrorStatus(previous, message, new Date(this.#ctx.now()));
    if (record.configError !== message) {
      record.events.push({ type: "Warning", reason, message });
      record.configError = message;
    }
  }

  /**
   * Applies the admission decision; renders the user-data of a Pod to launch (may refuse it, or
   * hold it for a missing ConfigMap or Secret).
   */
  #admit(record: PodRecord, admission: Admission, sources: SourcesRead): void {
    const { config } = this.#ctx;
    const now = new Date(this.#ctx.now());
    if (admission.kind === "launch") {
      if (!sources.ok) {
        this.#holdForConfig(record, sources.reason, sources.message);
        return;
      }
      try {
        const rendered = this.#render(record, sources.sources, sources.hostPod ?? record.pod);
        if ("held" in rendered) {
          this.#holdForConfig(record, rendered.held.reason, rendered.held.message);
          return;
        }
        // Measures it (16 KiB) before anything is recorded or launched.
        buildRunInstancesInput({
          pod: record.facts,
          config,
          instanceType: admission.instanceType,
          userData: rendered.userData,
        });
        record.instanceType = admission.instanceType;
        record.instanceTypes = admission.instanceTypes;
        record.capacityTypes = admission.capacityTypes;
        record.userData = rendered.userData;
        const delivery = config.podDelivery === "parameters";
        const tokens = delivery ? sources.tokens : undefined;
        const parameters = delivery
          ? [...rendered.parameters, ...(tokens === undefined ? [] : [tokens.parameter])]
          : [];
        record.tokens = tokens;
        record.hostPod = delivery ? sources.hostPod : undefined;
        record.sharedParameters = delivery ? rendered.sharedParameters : [];
        if (JSON.stringify(parameters) !== JSON.stringify(record.parameters)) {
          record.parameters = parameters;
          record.parametersWrittenAt = undefined;
        }
        record.notices ??= new Set();
        for (const notice of rendered.notices) {
          const key = `${notice.reason}\n${notice.message}`;
          if (record.notices.has(key)) continue;
          record.notices.add(key);
          record.events.push({ type: "Warning", reason: notice.reason, message: notice.message });
        }
        this.leaveConfigHold(record);
        return;
      } catch (error) {
        const wrapped = error instanceof ProviderError ? error : toProviderError(error, "render");
        const reason = /user-data is \d+ bytes/.test(wrapped.message)
          ? "UserDataTooLarge"
          : (wrapped.reason ?? wrapped.code);
        admission = { kind: "refuse", reason, message: wrapped.message };
      }
    }
    if (admission.kind === "hold") {
      record.mode = "hold";
      record.holdReason = admission.reason;
      record.status = heldStatus(record.pod, admission.reason, admission.message, now);
      record.events.push({ type: "Normal", reason: admission.reason, message: admission.message });
      return;
    }
    record.mode = "refused";
    record.status = refusedStatus(record.pod, admission.reason, admission.message, now);
    record.events.push({ type: "Warning", reason: admission.reason, message: admission.message });
  }

  /**
   * Renders the Pod as its host gets it (`pod`: with its role, see {@link Admitter.hostPod}) with
   * `@nebula/userdata` or the `renderUserData` override: its user-data, its
   * parameters and notices, or `held` for a missing mandatory ConfigMap or Secret. Throws a
   * `ProviderError` (`InvalidPodSpec`, with the renderer's code as `reason`) for a Pod to refuse.
   */
  #render(record: PodRecord, sources: PodSources | undefined, pod: V1Pod): Rendered {
    const override = this.#options.renderUserData;
    const out = override
      ? override(pod, sources)
      : renderUserData(
          pod,
          renderOptionsOf(
            this.#ctx.config,
            this.#options.userData,
            this.#options.serviceProxy,
            this.#options.hostAgent,
          ),
          sources,
        );
    if (typeof out === "string" || out instanceof Uint8Array) {
      return { userData: out, parameters: [], sharedParameters: [], notices: [] };
    }
    if (!("ok" in out)) return renderedOf(out);
    if (out.ok) return renderedOf(out.value);
    if (out.error.code === CREATE_CONTAINER_CONFIG_ERROR) {
      return { held: { reason: out.error.reason ?? out.error.code, message: out.error.message } };
    }
    const error = new ProviderError(
      "InvalidPodSpec",
      `pod ${record.facts.key}: ${out.error.path}: ${out.error.message}`,
      { cause: out.error },
    );
    error.reason = out.error.code;
    throw error;
  }
}

/**
 * The options the provider gives `@nebula/userdata`'s `renderUserData`: `cluster` defaults to the
 * configured `clusterName` (the `userData` option may set it); `delivery` is always the configured
 * `podDelivery`; `logs` and `metrics` are the configured ones when set (so that the hosts write
 * where the virtual node reads), else whatever the `userData` option says; the hosts ring the
 * event channel's queue (`doorbell`) when `events` is on; the host's grace is
 * capped at the configured `maxGracePeriodSeconds`, as the teardown's is; `dns` and
 * `kubernetesService` are the configured ones unless the `userData` option sets them; with
 * `serviceProxy` configured and its access given, the hosts run it against `kubernetesService`
 * with the access's CA, as this virtual node's Node; with `hostAgent` configured and the client
 * fingerprints given, the hosts run the host agent for them.
 */
export function renderOptionsOf(
  config: ProviderConfig,
  userData: RenderOptionsInput | undefined,
  serviceProxy?: { readonly caCert: string },
  hostAgent?: { readonly clientFingerprints: readonly string[] },
): RenderOptionsInput {
  const apiServer = userData?.kubernetesService ?? config.kubernetesService;
  return {
    cluster: config.clusterName,
    ...userData,
    ...(config.logs === undefined ? {} : { logs: config.logs }),
    ...(config.metrics === undefined ? {} : { metrics: config.metrics }),
    ...(config.events === undefined ? {} : { doorbell: { queueUrl: config.events.queueUrl } }),
    delivery: config.podDelivery,
    maxGracePeriodSeconds: config.maxGracePeriodSeconds,
    dns: userData?.dns ?? config.dns,
    ...(config.kubernetesService === undefined ? {} : { kubernetesService: apiServer }),
    ...(config.serviceProxy === undefined || serviceProxy === undefined || apiServer === undefined
      ? {}
      : {
          serviceProxy: {
            apiServer,
            caCert: serviceProxy.caCert,
            nodeName: config.nodeName,
            binary: config.serviceProxy.binary,
          },
        }),
    ...(config.hostAgent === undefined || hostAgent === undefined
      ? {}
      : {
          hostAgent: {
            port: config.hostAgent.port,
            binary: config.hostAgent.binary,
            clientFingerprints: [...hostAgent.clientFingerprints],
          },
        }),
  };
}

function renderedOf(value: RenderedPod): Rendered {
  return {
    userData: { userData: value.userData, bytes: value.bytes },
    parameters: value.parameters ?? [],
    sharedParameters: value.sharedParameters ?? [],
    notices: value.notices ?? [],
  };
}

function launchCondition(
  reason: string,
  message: string,
  now: Date,
  previous: V1PodStatus | undefined,
): V1PodCondition {
  const before = previous?.conditions?.find((c) => c.type === LAUNCHED_CONDITION);
  return {
    type: LAUNCHED_CONDITION,
    status: "False",
    reason,
    message,
    lastTransitionTime:
      before?.status === "False" && before.lastTransitionTime ? before.lastTransitionTime : now,
  };
}

/** A Pod left `Pending`, not launched, with a reason (a DaemonSet Pod). */
function heldStatus(pod: V1Pod, reason: string, message: string, now: Date): V1PodStatus {
  return {
    ...(pod.status ?? {}),
    phase: "Pending",
    reason,
    message,
    conditions: [launchCondition(reason, message, now, pod.status)],
  };
}

/** A Pod refused at once: `Failed`, with the reason and a message naming the field. */
function refusedStatus(pod: V1Pod, reason: string, message: string, now: Date): V1PodStatus {
  return {
    phase: "Failed",
    reason,
    message,
    conditions: [launchCondition(reason, message, now, pod.status)],
    containerStatuses: (pod.spec?.containers ?? []).map((c) => ({
      name: c.name,
      image: c.image ?? "",
      imageID: "",
      ready: false,
      restartCount: 0,
      started: false,
      state: { waiting: { reason, message } },
    })),
  };
}
