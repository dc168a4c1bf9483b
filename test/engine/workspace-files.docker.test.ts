/** The workspace files API on Docker (workspace-files-scenarios.ts). */
import { dockerProbe } from "../support/engine-probes.ts";
import { workspaceFilesScenarios } from "./workspace-files-scenarios.ts";

workspaceFilesScenarios({ engine: "docker", probe: () => dockerProbe() });
