import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.integration.test.ts"],
    globalSetup: ["./vitest.peers.ts"],
    // The end-to-end files share one moto and one control plane but each runs its own virtual
    // node and simulator; one file at a time keeps this 2-core machine's guests responsive.
    fileParallelism: false,
    testTimeout: 300_000,
    hookTimeout: 300_000,
  },
});
