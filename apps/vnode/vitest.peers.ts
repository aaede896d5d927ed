import { createTestPeersSetup } from "@nebula/test-peers/vitest";

// A whole control plane (the controller manager turns Deployments into Pods, the scheduler binds
// them to the virtual Node, node-lifecycle watches its Lease) and moto.
export default createTestPeersSetup({
  // kube-controller-manager's own node-monitor grace (50 s), not the test peers' shorter 20 s: a
  // vnode restarted (SIGTERM and down 10 s, or an HA takeover after the 15 s leader lease) must not
  // outlast it, or the node lifecycle controller marks its Pods not Ready and the vnode's restoring
  // write would be counted against the restart.
  controlPlane: { controllers: true, scheduler: true, nodeMonitorGracePeriodSeconds: 50 },
  moto: true,
});
