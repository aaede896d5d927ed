import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.integration.test.ts"],
    globalSetup: ["./vitest.peers.ts"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
