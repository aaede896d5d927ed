import { createTestPeersSetup } from "@nebula/test-peers/vitest";

// A whole control plane (the controller manager turns the chart's Deployments into Pods, the
// scheduler places them or says why not) and moto (the EC2 the chart's vnode configuration names).
export default createTestPeersSetup({
  controlPlane: { controllers: true, scheduler: true },
  moto: true,
});
