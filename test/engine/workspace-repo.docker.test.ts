/** A workstream that is a repository, on Docker (workspace-repo-scenarios.ts). */
import { dockerProbe } from "../support/engine-probes.ts";
import { workspaceRepoScenarios } from "./workspace-repo-scenarios.ts";

workspaceRepoScenarios({ engine: "docker", probe: () => dockerProbe() });
