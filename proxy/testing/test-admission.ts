import { type Admission, defaultAdmission } from "../lifecycle/admission.ts";
import { EgressGuard } from "../lifecycle/egress-guard.ts";

/** The private range unit tests' Agents name (the test bed's bridge 10.213.0.1 among them). */
export const TEST_EGRESS_ALLOW = [{ cidr: "10.0.0.0/8" }] as const;

/**
 * defaultAdmission() with the egress the tests' Agents name allowed: the default allows no egress
 * (AGENT_SESSIONS_EGRESS_ALLOW is the operator's), so a test that provisions one says so.
 */
export function testAdmission(): Admission {
  return { ...defaultAdmission(), egress: new EgressGuard({ allow: TEST_EGRESS_ALLOW }) };
}
