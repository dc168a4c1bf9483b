/**
 * The HarnessSession scenarios on the test bed's Kubernetes cluster: the same scenarios as
 * harness-sessions.docker.test.ts, with a runner started `--engine kubernetes` (the session program's
 * PVC, Deployment, ClusterIP Service and NetworkPolicy in namespace agent-sessions; the agent over
 * the pods/exec stream; requests to the adapter through the Service via kube-proxy). Engine-side
 * checks go through the API server and the test bed's kubectl.
 */
import { randomBytes } from "node:crypto";
import { kubernetesProbe } from "../support/engine-probes.ts";
import { harnessSessionScenarios } from "./harness-scenarios.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

harnessSessionScenarios({
  engine: "kubernetes",
  probe: () => kubernetesProbe("agent-sessions"),
  // A name of its own: the cluster and the repository's Pulumi.<stack>.yaml files are shared.
  sessionName: `kchat-${randomBytes(2).toString("hex")}`,
});
