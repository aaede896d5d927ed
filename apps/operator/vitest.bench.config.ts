import { defineConfig } from "vitest/config";

/** `npm run bench`: the reconcile throughput against a real kube-apiserver (figures, not CI). */
export default defineConfig({
  test: {
    include: ["bench/**/*.bench.test.ts"],
    globalSetup: ["./vitest.peers.ts"],
    testTimeout: 3_600_000,
    hookTimeout: 600_000,
  },
});
