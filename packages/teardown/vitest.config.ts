import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // A hang guard, not a speed check: property tests run thousands of cases and CI machines are
    // shared, so the 5 s default fails slow-but-correct runs.
    testTimeout: 60_000,
    include: ["src/**/*.test.ts"],
    exclude: ["src/**/*.integration.test.ts"],
  },
});
