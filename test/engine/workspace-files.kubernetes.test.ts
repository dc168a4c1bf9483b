/**
 * The workspace files API on the test bed's Kubernetes cluster (workspace-files-scenarios.ts): the
 * runner execs into the session pod's `workspace` sidecar (runner/kubernetes/workspace-files.ts), never
 * into the agent's container; what the agent sees is read in the adapter container.
 */
import { randomBytes } from "node:crypto";
import { kubernetesProbe } from "../support/engine-probes.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { workspaceFilesScenarios } from "./workspace-files-scenarios.ts";

applyTestbedEnv();

workspaceFilesScenarios({
  engine: "kubernetes",
  probe: () => kubernetesProbe("agent-sessions"),
  suffix: `-k${randomBytes(2).toString("hex")}`,
});
