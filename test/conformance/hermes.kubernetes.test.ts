/** The runtime conformance suite (runtime-conformance.ts) against the hermes runtime on Kubernetes. */
import { runtimeConformance } from "./runtime-conformance.ts";

runtimeConformance("hermes", "kubernetes");
