import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.integration.test.ts"],
    // One kube-apiserver + etcd and one moto for the whole run (the same entry other packages use
    // as "@nebula/test-peers/vitest-global-setup").
    globalSetup: ["./src/vitest-global-setup.ts"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
