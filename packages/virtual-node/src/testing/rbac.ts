/**
 * Test helper: applies the deploy manifests' RBAC to a real API server and returns a client that
 * authenticates as the app's ServiceAccount, so tests run with exactly the permissions a cluster
 * grants the app.
 *
 * @packageDocumentation
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import {
  CoreV1Api,
  type KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  loadAllYaml,
} from "@kubernetes/client-node";

/** The deploy folder of the app. */
const DEPLOY_DIR = fileURLToPath(new URL("../../../../deploy/vnode/", import.meta.url));

/** The app's ServiceAccount as an API-server user name. */
export const VNODE_SERVICE_ACCOUNT = "system:serviceaccount:nebula-system:nebula-vnode";

/** The groups a ServiceAccount token carries. */
export const SERVICE_ACCOUNT_GROUPS = [
  "system:serviceaccounts",
  "system:serviceaccounts:nebula-system",
];

/** Creates (or leaves as is) every object of a manifest file in the deploy folder. */
export async function applyManifest(admin: KubeConfig, file: string): Promise<KubernetesObject[]> {
  const objects = loadAllYaml(readFileSync(`${DEPLOY_DIR}${file}`, "utf8")) as KubernetesObject[];
  const api = KubernetesObjectApi.makeApiClient(admin);
  const core = admin.makeApiClient(CoreV1Api);
  for (const object of objects) {
    const ns = object.metadata?.namespace;
    if (ns !== undefined) {
      await core.createNamespace({ body: { metadata: { name: ns } } }).catch(() => undefined);
    }
    await api.create(object).catch((error: { code?: number }) => {
      if (error.code !== 409) throw error;
    });
  }
  return objects;
}
