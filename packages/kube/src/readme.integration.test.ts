/** Runs the README example against the real API server (kubeconfig from @nebula/test-peers). */
import { CoreV1Api, KubernetesObjectApi } from "@kubernetes/client-node";
import { type PodTeardownObservation, podTeardown, TeardownExecutor } from "@nebula/teardown";
import { useTestPeers } from "@nebula/test-peers/vitest";
import { expect, it } from "vitest";
import { deleteWithPreconditions, KubernetesAnnotationStore } from "./index.js";

it("the README example deletes default/web-0 through a recorded teardown", async () => {
  const kc = useTestPeers().controlPlane.kubeConfig();
  await kc.makeApiClient(CoreV1Api).createNamespacedPod({
    namespace: "default",
    body: {
      metadata: { name: "web-0" },
      spec: { containers: [{ name: "app", image: "busybox" }] },
    },
  });

  // --- README example from here (after loading the kubeconfig) ---
  const objects = KubernetesObjectApi.makeApiClient(kc);
  const store = new KubernetesAnnotationStore(kc); // Pods; annotation teardown.nebula.dev/record

  const snapshot = await store.read("default/web-0");
  if (!snapshot.found) throw new Error("no Pod default/web-0");

  const executor = new TeardownExecutor({
    teardown: podTeardown,
    store,
    handlers: {
      StopInstance: async () => {}, // your EC2 calls (see @nebula/provider)
      TerminateInstance: async () => {},
      DeleteAuxiliary: async ({ object }) => {
        if (object.uid) await deleteWithPreconditions(objects, { ...object, uid: object.uid });
      },
      DeletePod: async (effect) => {
        await deleteWithPreconditions(objects, { ...effect, apiVersion: "v1", kind: "Pod" });
      },
    },
    observe: async (): Promise<PodTeardownObservation> => ({
      instance: "absent", // no instance in this example
      pod: (await store.read("default/web-0")).found ? "present" : "absent",
    }),
  });

  await executor.request("default/web-0", {
    cause: "DeletionRequested",
    params: { namespace: "default", name: "web-0", podUid: snapshot.uid ?? "" },
  });
  const result = await executor.settle("default/web-0"); // { status: "absent" }: the Pod was deleted
  // --- end of the README example ---

  expect(result).toEqual({ status: "absent" });
});
