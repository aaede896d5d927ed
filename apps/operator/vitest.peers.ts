// The integration tests need only the control plane (no moto): one kube-apiserver + etcd per run.
import { createTestPeersSetup } from "@nebula/test-peers/vitest";

export default createTestPeersSetup({ controlPlane: true, moto: false });
