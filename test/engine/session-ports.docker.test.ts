/** A session's declared ports on Docker (session-ports-scenarios.ts). */
import { sessionPortsScenarios } from "./session-ports-scenarios.ts";

sessionPortsScenarios({ engine: "docker" });
