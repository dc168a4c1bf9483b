/** The runtime conformance suite (runtime-conformance.ts) against the reference runtime on Docker. */
import { runtimeConformance } from "./runtime-conformance.ts";

runtimeConformance("reference");
