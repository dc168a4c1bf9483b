import { defineConfig } from "vitest/config";
export default defineConfig({
  test: {
    include: ["test/engine/**/*.test.ts"],
    reporters: ["default", "./test/support/flaky-reporter.ts"],
    setupFiles: ["test/engine/failure-logs.ts"],
    testTimeout: 300_000,
    hookTimeout: 600_000,
    fileParallelism: false,
  },
});
