// Entry of the control-plane project (Pulumi.yaml `main`): the stack's outputs are this module's exports.
import { readControlPlaneConfig, readDatabaseUrl } from "./config.ts";
import { ControlPlane } from "./control-plane.ts";

const databaseUrl = readDatabaseUrl();
const controlPlane = new ControlPlane("agent-sessions", {
  config: readControlPlaneConfig(),
  ...(databaseUrl ? { databaseUrl } : {}),
});
export const namespace = controlPlane.namespace;
export const sessionsNamespace = controlPlane.sessionsNamespace;
export const serverUrl = controlPlane.serverUrl;
export const serverService = controlPlane.serverService;
export const runnerServiceAccount = controlPlane.runnerServiceAccount;
export const adminToken = controlPlane.adminToken;
