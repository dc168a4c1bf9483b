/**
 * The model gateway on Docker (model-gateway-scenarios.ts): the four shipped runtimes in session
 * containers on internal networks with no route to the model, reaching it through the runner's
 * gateway only; engine-side checks through dockerd.
 */
import { dockerProbe } from "../support/engine-probes.ts";
import { modelGatewayScenarios } from "./model-gateway-scenarios.ts";

modelGatewayScenarios({ engine: "docker", probe: () => dockerProbe() });
