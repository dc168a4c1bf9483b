/** The workspace files API on Docker (workspace-files-scenarios.ts). */
import { dockerProbe } from "../support/engine-probes.ts";
import { workspaceFilesScenarios } from "./workspace-files-scenarios.ts";

const probe = dockerProbe();

workspaceFilesScenarios({
  engine: "docker",
  probe: () => probe,
  // The files API acts in the workload container: outside /workspace its writable place is /tmp.
  outside: { dir: "/tmp", sh: (container, script) => probe.exec(container, ["sh", "-c", script]) },
});
