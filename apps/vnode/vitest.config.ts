import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.test.ts"],
    exclude: ["src/**/*.integration.test.ts"],
    // The binary tests start the 10 MB bundle; on a loaded machine that takes seconds.
    testTimeout: 60_000,
  },
});
