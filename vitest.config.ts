import { defineConfig } from "vitest/config";

// Two tiers. `unit` runs anywhere in seconds (mocks allowed only here, e.g. Pulumi setMocks).
// `engine` runs against the real engines the test bed starts (real dockerd, registry, Pulumi CLI,
// Kubernetes); its global setup brings the test bed up and fails loudly when it cannot.
export default defineConfig({
  test: {
    // The engine tier's retried tests are listed at the end (test/support/flaky-reporter.ts).
    reporters: ["default", "./test/support/flaky-reporter.ts"],
    projects: [
      {
        test: {
          name: "unit",
          include: [
            "{contracts,client,infra,stacks,policies,proxy,runner,runtimes,bin,test/unit}/**/*.test.ts",
          ],
          environment: "node",
          // The unit tier runs beside the engine tier in CI on two cores: a property test's
          // thousands of runs can take several seconds there without anything being wrong.
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: "engine",
          // test/conformance: the one suite every runtime the project ships passes.
          include: ["test/engine/**/*.test.ts", "test/conformance/**/*.test.ts"],
          globalSetup: ["test/engine/global-setup.ts"],
          // A failed test reports what the server and runner it started warned (flaky-reporter.ts).
          setupFiles: ["test/engine/failure-logs.ts"],
          testTimeout: 300_000,
          hookTimeout: 600_000,
          fileParallelism: false,
          // Once, and never silently: the flaky reporter names every test that needed it.
          retry: 1,
        },
      },
    ],
  },
});
