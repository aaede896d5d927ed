import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["**/*.integration.test.ts"],
    exclude: ["**/node_modules/**"],
    globalSetup: ["./vitest.peers.ts"],
    testTimeout: 180_000,
    hookTimeout: 300_000,
  },
});
