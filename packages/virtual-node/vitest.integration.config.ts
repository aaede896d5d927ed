import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.integration.test.ts"],
    globalSetup: [fileURLToPath(import.meta.resolve("@nebula/test-peers/vitest-global-setup"))],
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
