/** A session's logs on Docker (session-logs-scenarios.ts). */
import { sessionLogsScenarios } from "./session-logs-scenarios.ts";

sessionLogsScenarios({ engine: "docker" });
