/**
 * Stop and resume back to back on Kubernetes through a real server and runner
 * (back-to-back-scenarios.ts, shared with the Docker run).
 */
import { kubernetesProbe } from "../support/engine-probes.ts";
import { backToBackScenarios } from "./back-to-back-scenarios.ts";

backToBackScenarios({ engine: "kubernetes", probe: () => kubernetesProbe("agent-sessions") });
