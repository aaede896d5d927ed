import { createTestPeersSetup } from "@nebula/test-peers/vitest";

export default createTestPeersSetup({ controlPlane: true, moto: false });
