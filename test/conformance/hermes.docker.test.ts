/** The runtime conformance suite (runtime-conformance.ts) against the Hermes runtime (`hermes acp`). */
import { runtimeConformance } from "./runtime-conformance.ts";

runtimeConformance("hermes");
