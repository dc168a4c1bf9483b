/** Snapshots, fork and restore of HarnessSessions on Kubernetes (session-snapshot-scenarios.ts). */
import { sessionSnapshotScenarios } from "./session-snapshot-scenarios.ts";

sessionSnapshotScenarios({ engine: "kubernetes", suffix: "-k" });
