import { createTestPeersSetup } from "@nebula/test-peers/vitest";

// A whole control plane (the controller manager turns Deployments into Pods, the scheduler binds
// them to the virtual Node, node-lifecycle watches its Lease) and moto.
export default createTestPeersSetup({
  controlPlane: { controllers: true, scheduler: true },
  moto: true,
});
