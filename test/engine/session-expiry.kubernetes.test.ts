/** Expiry of HarnessSessions on Kubernetes (session-expiry-scenarios.ts). */
import { sessionExpiryScenarios } from "./session-expiry-scenarios.ts";

sessionExpiryScenarios({ engine: "kubernetes", suffix: "-k" });
