import { EgressGuard } from "./egress-guard.ts";
import { RuntimeApproval } from "./runtime-approval.ts";

/**
 * What the operator's configuration admits, whatever a resource's writer says: where sessions and
 * runs may connect to (egress-guard.ts) and which runtimes may be provisioned at all
 * (runtime-approval.ts). Built once from the server config (main.ts); code paths
 * built without one (unit tests, RPC-only setups) get the defaults.
 */
export type Admission = { egress: EgressGuard; runtimes: RuntimeApproval };

export function defaultAdmission(): Admission {
  return { egress: new EgressGuard(), runtimes: new RuntimeApproval() };
}
