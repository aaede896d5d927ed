/**
 * The ready-made vitest global setup: one kube-apiserver + etcd and one moto for the whole run,
 * provided to tests as `nebulaTestPeers` (read it with `useTestPeers()` from
 * `@nebula/test-peers/vitest`). Name this module in `test.globalSetup`.
 */
import { createTestPeersSetup } from "./vitest.js";

/** Starts the control plane and moto; returns the teardown that stops both. */
export default createTestPeersSetup({ controlPlane: true, moto: true });
