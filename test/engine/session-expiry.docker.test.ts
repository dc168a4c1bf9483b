/** Expiry of HarnessSessions on Docker (session-expiry-scenarios.ts). */
import { sessionExpiryScenarios } from "./session-expiry-scenarios.ts";

sessionExpiryScenarios({ engine: "docker" });
