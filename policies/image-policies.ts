import type { ReportViolation, ResourceValidationPolicy } from "@pulumi/policy";
import { isDigestPinned, registryOf } from "./image-reference.ts";
import { containersOf, validateKinds } from "./judged-resources.ts";
import { approvedRegistriesOf, approvedRegistriesSchema } from "./policy-config.ts";

/** Images a session runs: what was reviewed is what runs, and only from where we allow. */

export const imagePinnedByDigest: ResourceValidationPolicy = {
  name: "image-pinned-by-digest",
  description: "Every container image is pinned by digest (repo@sha256:<64 hex>), never by a movable tag.",
  validateResource: validateKinds({
    podSpec: (spec, report) => {
      for (const { container, label } of containersOf(spec)) checkPinned(container.image, label, report);
    },
    dockerContainer: (container, report) => checkPinned(container.image, "the container", report),
  }),
};

export const imageFromApprovedRegistry: ResourceValidationPolicy = {
  name: "image-from-approved-registry",
  description:
    "Every container image is pulled from a registry on the approved list (config approvedRegistries).",
  configSchema: approvedRegistriesSchema,
  validateResource: validateKinds({
    podSpec: (spec, report, args) => {
      const approved = approvedRegistriesOf(args);
      for (const { container, label } of containersOf(spec)) {
        checkRegistry(container.image, label, approved, report);
      }
    },
    dockerContainer: (container, report, args) =>
      checkRegistry(container.image, "the container", approvedRegistriesOf(args), report),
  }),
};

function checkPinned(image: string | undefined, label: string, report: ReportViolation): void {
  if (image === undefined || !isDigestPinned(image)) {
    report(`${label} image "${image ?? ""}" is not pinned by digest (expected repo@sha256:<64 hex>)`);
  }
}

function checkRegistry(
  image: string | undefined,
  label: string,
  approved: readonly string[],
  report: ReportViolation,
): void {
  const registry = registryOf(image ?? "");
  if (!approved.includes(registry)) {
    report(`${label} image "${image ?? ""}" comes from ${registry}, not from ${approved.join(", ")}`);
  }
}
