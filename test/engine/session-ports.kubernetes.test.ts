/** A session's declared ports on Kubernetes (session-ports-scenarios.ts). */
import { sessionPortsScenarios } from "./session-ports-scenarios.ts";

sessionPortsScenarios({ engine: "kubernetes", suffix: "-k" });
