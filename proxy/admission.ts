import { EgressGuard } from "./egress-guard.ts";

/**
 * What the operator's configuration admits, whatever a resource's writer says: where sessions and
 * runs may connect to (egress-guard.ts). Built once from the server config (main.ts); code paths
 * built without one (unit tests, RPC-only setups) get the defaults.
 */
export type Admission = { egress: EgressGuard };

export function defaultAdmission(): Admission {
  return { egress: new EgressGuard() };
}
