/** Per-session metrics on Docker (session-metrics-scenarios.ts). */
import { sessionMetricsScenarios } from "./session-metrics-scenarios.ts";

sessionMetricsScenarios({ engine: "docker" });
