/** Snapshots, fork and restore of HarnessSessions on Docker (session-snapshot-scenarios.ts). */
import { sessionSnapshotScenarios } from "./session-snapshot-scenarios.ts";

sessionSnapshotScenarios({ engine: "docker" });
