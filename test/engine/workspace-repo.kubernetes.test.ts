/**
 * A workstream that is a repository, on the test bed's Kubernetes cluster
 * (workspace-repo-scenarios.ts): the seed runs in the session pod's `workspace` sidecar, inside the
 * pod's network, with the credential handed over on the exec's stdin.
 */
import { randomBytes } from "node:crypto";
import { kubernetesProbe } from "../support/engine-probes.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { workspaceRepoScenarios } from "./workspace-repo-scenarios.ts";

applyTestbedEnv();

workspaceRepoScenarios({
  engine: "kubernetes",
  probe: () => kubernetesProbe("agent-sessions"),
  suffix: `-k${randomBytes(2).toString("hex")}`,
});
