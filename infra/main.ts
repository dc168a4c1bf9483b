// Entry of the root Pulumi project (Pulumi.yaml `main`): the stack's outputs are this module's exports.
import { sessionProgram } from "./program.ts";

const outputs = await sessionProgram();
export const resolvedImageDigest = outputs.resolvedImageDigest;
export const workloadName = outputs.workloadName;
export const endpoint = outputs.endpoint;
export const volumeName = outputs.volumeName;
export const replicas = outputs.replicas;
