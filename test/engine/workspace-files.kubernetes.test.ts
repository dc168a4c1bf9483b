/**
 * The workspace files API on the test bed's Kubernetes cluster (workspace-files-scenarios.ts): the
 * runner execs into the session pod's `workspace` sidecar (runner/kubernetes/workspace-files.ts), never
 * into the agent's container; what the agent sees is read in the adapter container.
 */
import { randomBytes } from "node:crypto";
import { WORKSPACE_CONTAINER, WORKSPACE_SCRATCH } from "../../contracts/session-pod.ts";
import { kubectl } from "../support/control-plane.ts";
import { kubernetesProbe } from "../support/engine-probes.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { workspaceFilesScenarios } from "./workspace-files-scenarios.ts";

applyTestbedEnv();

const NAMESPACE = "agent-sessions";

workspaceFilesScenarios({
  engine: "kubernetes",
  probe: () => kubernetesProbe(NAMESPACE),
  suffix: `-k${randomBytes(2).toString("hex")}`,
  // The files script runs in the sidecar: outside /workspace its writable place is its scratch dir.
  outside: {
    dir: WORKSPACE_SCRATCH,
    sh: async (container, script) => {
      const r = await kubectl(
        ...["-n", NAMESPACE, "exec", `deploy/${container}`, "-c", WORKSPACE_CONTAINER],
        ...["--", "sh", "-c", script],
      );
      if (r.code !== 0) throw new Error(`${script} in the sidecar exited ${r.code}: ${r.stderr}`);
      return r.stdout;
    },
  },
});
