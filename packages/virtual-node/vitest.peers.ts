import { createTestPeersSetup } from "@nebula/test-peers/vitest";

// The control plane with one controller: the disruption controller, which counts the Pods a
// PodDisruptionBudget covers (the eviction test needs the API server's own budget check). No moto.
export default createTestPeersSetup({
  controlPlane: { controllers: ["disruption-controller"] },
});
