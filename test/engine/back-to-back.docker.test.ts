/**
 * Stop and resume back to back on Docker through a real server and runner
 * (back-to-back-scenarios.ts, shared with the Kubernetes run).
 */
import { dockerProbe } from "../support/engine-probes.ts";
import { backToBackScenarios } from "./back-to-back-scenarios.ts";

backToBackScenarios({ engine: "docker", probe: () => dockerProbe() });
