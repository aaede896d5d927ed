import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.test.ts"],
    exclude: ["src/**/*.integration.test.ts"],
    // The supervisor tests run real bash processes with back-off delays of a second or more.
    testTimeout: 120_000,
  },
});
