import { defineConfig } from "vitest/config";

// The engine tests that need the 1.35 test-bed cluster (NetworkPolicy enforced by kube-router),
// which the default test bed does not bring up (a cold build takes ~60 min). Run them with
//   scripts/testbed up kubernetes-current
//   export AGENT_SESSIONS_TESTBED_KUBERNETES=current; eval "$(scripts/testbed env)"
//   npx vitest run -c vitest.k135.config.ts
// and any other engine file on that cluster with K135_FILE=<its path> (KUBERNETES-CURRENT.md).
// No global setup: the cluster is brought up by hand, and each file fails (never skips) when the
// cluster it finds is not 1.35. See scripts/testbed.d/KUBERNETES-CURRENT.md.
export default defineConfig({
  test: {
    name: "engine-k135",
    reporters: ["default", "./test/support/flaky-reporter.ts"],
    include: process.env.K135_FILE ? [process.env.K135_FILE] : ["test/engine/**/*.k135.test.ts"],
    testTimeout: 300_000,
    hookTimeout: 600_000,
    fileParallelism: false,
    retry: 0,
    setupFiles: ["test/engine/failure-logs.ts"],
  },
});
