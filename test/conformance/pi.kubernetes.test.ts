/** The runtime conformance suite (runtime-conformance.ts) against the pi runtime on Kubernetes. */
import { runtimeConformance } from "./runtime-conformance.ts";

runtimeConformance("pi", "kubernetes");
