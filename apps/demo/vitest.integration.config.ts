import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.integration.test.ts"],
    // The demo starts its own world: no shared peers.
    testTimeout: 420_000,
    hookTimeout: 60_000,
  },
});
