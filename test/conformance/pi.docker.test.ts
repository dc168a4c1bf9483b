/** The runtime conformance suite (runtime-conformance.ts) against the Pi coding agent runtime on Docker. */
import { runtimeConformance } from "./runtime-conformance.ts";

runtimeConformance("pi");
