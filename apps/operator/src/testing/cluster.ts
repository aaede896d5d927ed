/**
 * Helpers for the integration tests against the real kube-apiserver: install the CRDs, make a
 * namespace, create the API's objects. Test-only.
 */
import {
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Pod,
} from "@kubernetes/client-node";
import { API_VERSION, GROUP, VERSION } from "@nebula/api";
import { installCrd } from "@nebula/kube/crd";
import { operatorCrds } from "../crds.js";
import { podStatus, podTemplate } from "./pods.js";

/** Installs (server-side applies) the three CRDs and waits until they are Established. */
export async function installCrds(kubeConfig: KubeConfig): Promise<void> {
  for (const crd of operatorCrds()) await installCrd(kubeConfig, crd, { timeoutMs: 60_000 });
}

/** Creates a namespace with a unique name starting with `prefix`. */
export async function createNamespace(kubeConfig: KubeConfig, prefix: string): Promise<string> {
  const name = `${prefix}-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e6).toString(36)}`;
  await kubeConfig.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name } } });
  return name;
}

/** The plural of each kind. */
export const PLURALS = {
  Workload: "workloads",
  WorkloadDeployment: "workloaddeployments",
  Instance: "instances",
} as const;

/** Creates an object of the API with strict field validation (as kubectl does). */
export async function createObject(
  kubeConfig: KubeConfig,
  namespace: string,
  kind: keyof typeof PLURALS,
  name: string,
  body: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  return (await kubeConfig.makeApiClient(CustomObjectsApi).createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PLURALS[kind],
    body: { apiVersion: API_VERSION, kind, metadata: { name, namespace }, ...body },
    fieldValidation: "Strict",
  })) as Record<string, unknown>;
}

/** Reads an object of the API. */
export async function getObject(
  kubeConfig: KubeConfig,
  namespace: string,
  kind: keyof typeof PLURALS,
  name: string,
): Promise<
  Record<string, unknown> & { metadata: { resourceVersion: string; generation?: number } }
> {
  return (await kubeConfig.makeApiClient(CustomObjectsApi).getNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PLURALS[kind],
    name,
  })) as never;
}

/** Merge-patches an object's status (as a provider writes an Instance's). */
export async function patchStatus(
  kubeConfig: KubeConfig,
  namespace: string,
  kind: keyof typeof PLURALS,
  name: string,
  status: Record<string, unknown>,
): Promise<void> {
  await kubeConfig
    .makeApiClient(CustomObjectsApi)
    .patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace, plural: PLURALS[kind], name, body: { status } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
}

/** Polls `probe` until it returns a value other than undefined, or fails after `timeoutMs`. */
export async function eventually<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`, { cause: last });
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * One Workload `web` with one placement `eu`, its WorkloadDeployment `web-eu` selecting
 * `app=web`, and one Pod `web-0` (no status yet). Returns the Pod as created.
 */
export async function createWeb(kubeConfig: KubeConfig, namespace: string): Promise<V1Pod> {
  await createObject(kubeConfig, namespace, "Workload", "web", {
    spec: { placements: [{ name: "eu", replicas: 1 }] },
  });
  await createObject(kubeConfig, namespace, "WorkloadDeployment", "web-eu", {
    spec: {
      workloadRef: { name: "web" },
      placement: "eu",
      replicas: 1,
      selector: { matchLabels: { app: "web" } },
    },
  });
  return kubeConfig.makeApiClient(CoreV1Api).createNamespacedPod({
    namespace,
    body: podTemplate("web-0", namespace, { app: "web" }),
  });
}

/**
 * {@link createWeb} with `web-0`'s status saying its container is crash-looping: the smallest
 * world in which the operator has a reason to roll up. Returns the Pod with that status.
 */
export async function createCrashingWeb(kubeConfig: KubeConfig, namespace: string): Promise<V1Pod> {
  const created = await createWeb(kubeConfig, namespace);
  return kubeConfig.makeApiClient(CoreV1Api).replaceNamespacedPodStatus({
    name: "web-0",
    namespace,
    body: { ...created, status: podStatus(created, "crashing") },
  });
}
