/** The runtime conformance suite (runtime-conformance.ts) against compass, our agent on the Oh My Pi SDK. */
import { runtimeConformance } from "./runtime-conformance.ts";

runtimeConformance("compass");
