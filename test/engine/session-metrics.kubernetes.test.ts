/** Per-session metrics on Kubernetes (session-metrics-scenarios.ts). */
import { sessionMetricsScenarios } from "./session-metrics-scenarios.ts";

sessionMetricsScenarios({ engine: "kubernetes", suffix: "-k" });
