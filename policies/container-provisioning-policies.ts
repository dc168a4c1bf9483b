import type { ResourceValidationPolicy } from "@pulumi/policy";
import { containersOf, validateKinds } from "./judged-resources.ts";

/** What a session container is given: credentials only by reference, and bounded compute. */

/** Environment variable names that carry credentials (API keys, tokens, passwords, …). */
export const CREDENTIAL_NAME = /(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)/i;

export const noLiteralCredentialsInEnv: ResourceValidationPolicy = {
  name: "no-literal-credentials-in-env",
  description:
    "Credential-like environment variables never carry a literal value: Kubernetes env uses " +
    "valueFrom.secretKeyRef, Docker credentials go in secretEnv (a Pulumi secret), never in env.",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const { container, label } of containersOf(spec)) {
        for (const variable of container.env ?? []) {
          if (!CREDENTIAL_NAME.test(variable.name)) continue;
          if (variable.value !== undefined) {
            report(`${label} sets credential ${variable.name} as a literal value`);
          } else if (variable.valueFrom?.secretKeyRef === undefined) {
            report(`${label} takes credential ${variable.name} from somewhere other than a secretKeyRef`);
          }
        }
      }
    },
    dockerContainer: (container, report) => {
      for (const name of Object.keys(container.env ?? {})) {
        if (CREDENTIAL_NAME.test(name)) {
          report(`the container sets credential ${name} in env; credentials belong in secretEnv`);
        }
      }
    },
  }),
};

export const resourceLimitsSet: ResourceValidationPolicy = {
  name: "resource-limits-set",
  description:
    "Every container has bounded compute: cpu and memory requests and limits (Kubernetes); " +
    "memoryBytes, nanoCpus and pidsLimit above zero (Docker).",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const { container, label } of containersOf(spec)) {
        const { requests = {}, limits = {} } = container.resources ?? {};
        const missing = [
          ["requests.cpu", requests.cpu],
          ["requests.memory", requests.memory],
          ["limits.cpu", limits.cpu],
          ["limits.memory", limits.memory],
        ]
          .filter(([, quantity]) => !isPositiveQuantity(quantity))
          .map(([field]) => field);
        if (missing.length > 0) report(`${label} has no positive resources.${missing.join(", resources.")}`);
      }
    },
    dockerContainer: (container, report) => {
      const limits = {
        memoryBytes: container.memoryBytes,
        nanoCpus: container.nanoCpus,
        pidsLimit: container.pidsLimit,
      };
      for (const [field, value] of Object.entries(limits)) {
        if (typeof value !== "number" || !(value > 0)) report(`the container's ${field} is not above zero`);
      }
    },
  }),
};

/**
 * A Kubernetes quantity ("500m", "1Gi", 2) above zero. Its leading number decides: the suffix
 * only scales it, and "0", "0Mi" or "" set no bound at all.
 */
function isPositiveQuantity(quantity: string | number | undefined): boolean {
  if (quantity === undefined) return false;
  const value = Number.parseFloat(String(quantity));
  return Number.isFinite(value) && value > 0;
}
