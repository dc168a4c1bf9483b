/**
 * The HarnessSession scenarios on Docker: `serve --no-runner` and a `runner --engine docker` over
 * the real WebSocket, real dockerd, real Pulumi stacks, a real harness — the `compass` runtime
 * (our agent on the Oh My Pi SDK, behind the shared v1alpha2 adapter) — talking to the loopback
 * model server through its session network's gateway. The scenarios themselves are shared with
 * the Kubernetes run (harness-scenarios.ts), which runs them on the reference runtime: each file
 * runs once, so CI pays for the real harness on one engine here and for the seed-004 one on the
 * other (agent-lifecycle.kubernetes.test.ts). Engine-side checks go through dockerd.
 */
import { dockerProbe } from "../support/engine-probes.ts";
import { harnessSessionScenarios } from "./harness-scenarios.ts";

harnessSessionScenarios({ engine: "docker", probe: () => dockerProbe(), runtime: "compass" });
