/**
 * The HarnessSession scenarios on Docker: `serve --no-runner` and a `runner --engine docker` over
 * the real WebSocket, real dockerd, real Pulumi stacks, the reference image talking to the
 * loopback model server through its session network's gateway. The scenarios themselves are
 * shared with the Kubernetes run (harness-scenarios.ts); engine-side checks go through dockerd.
 */
import { dockerProbe } from "../support/engine-probes.ts";
import { harnessSessionScenarios } from "./harness-scenarios.ts";

harnessSessionScenarios({ engine: "docker", probe: () => dockerProbe() });
