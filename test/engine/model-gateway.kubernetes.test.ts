/**
 * The model gateway on the test bed's Kubernetes cluster (model-gateway-scenarios.ts): the four
 * shipped runtimes in session pods whose NetworkPolicy allows the runner's gateway and not the
 * model; engine-side checks through the API server (pod spec, the credentials Secret).
 */
import { kubernetesProbe } from "../support/engine-probes.ts";
import { applyTestbedEnv } from "../support/testbed.ts";
import { modelGatewayScenarios } from "./model-gateway-scenarios.ts";

applyTestbedEnv();

modelGatewayScenarios({ engine: "kubernetes", probe: () => kubernetesProbe("agent-sessions") });
