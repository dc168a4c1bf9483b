// Entry of the root Pulumi project (Pulumi.yaml `main`): the stack's outputs are this module's exports.
// A session's stack exports the session outputs; a snapshot's stack only `storage` (an undefined
// export is no output).
import { sessionProgram } from "./program.ts";

const outputs: Partial<Record<string, unknown>> = await sessionProgram();
export const resolvedImageDigest = outputs.resolvedImageDigest;
export const workloadName = outputs.workloadName;
export const endpoint = outputs.endpoint;
export const volumeName = outputs.volumeName;
export const replicas = outputs.replicas;
export const storage = outputs.storage;
