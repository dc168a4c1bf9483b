/** The runtime conformance suite (runtime-conformance.ts) against the compass runtime on Kubernetes. */
import { runtimeConformance } from "./runtime-conformance.ts";

runtimeConformance("compass", "kubernetes");
