/**
 * The seed-004 agent-session lifecycle on Docker: `serve --no-runner` and a `runner --engine
 * docker` over the real WebSocket, real dockerd, real Pulumi stacks, the reference agent in the
 * reference image. The scenarios are shared with the Kubernetes run
 * (agent-lifecycle-scenarios.ts); engine-side checks and actions go through dockerd.
 */
import { agentLifecycleScenarios } from "./agent-lifecycle-scenarios.ts";
import { dockerProbe } from "../support/engine-probes.ts";
import { applyTestbedEnv } from "../support/testbed.ts";

applyTestbedEnv();

agentLifecycleScenarios({ engine: "docker", probe: () => dockerProbe() });
