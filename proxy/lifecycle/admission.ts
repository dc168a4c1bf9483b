import { EgressGuard } from "./egress-guard.ts";
import { NamespaceQuotas } from "./namespace-quotas.ts";
import { RuntimeApproval } from "./runtime-approval.ts";

/**
 * What the operator's configuration admits, whatever a resource's writer says: where sessions and
 * runs may connect to (egress-guard.ts), which runtimes may be provisioned at all
 * (runtime-approval.ts) and how much each namespace may hold (namespace-quotas.ts). Built once
 * from the server config (main.ts); code paths built without one (unit tests, RPC-only setups) get the defaults.
 */
export type Admission = {
  egress: EgressGuard;
  runtimes: RuntimeApproval;
  /** Per-namespace quotas (namespace-quotas.ts). @default none */
  quotas?: NamespaceQuotas;
};

export function defaultAdmission(): Admission {
  return { egress: new EgressGuard(), runtimes: new RuntimeApproval(), quotas: new NamespaceQuotas() };
}
