/** A session's logs on Kubernetes (session-logs-scenarios.ts). */
import { sessionLogsScenarios } from "./session-logs-scenarios.ts";

sessionLogsScenarios({ engine: "kubernetes", suffix: "-k" });
