import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.integration.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // One moto per file; files run one at a time (2-core machines).
    fileParallelism: false,
  },
});
