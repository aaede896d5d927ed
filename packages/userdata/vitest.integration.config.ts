import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["src/**/*.integration.test.ts"],
    testTimeout: 600_000,
    hookTimeout: 300_000,
    // The files share one podman storage root and clean it after each test: one file at a time.
    fileParallelism: false,
  },
});
