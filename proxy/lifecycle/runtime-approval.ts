import { z } from "zod";
import type { AgentRuntime } from "../../contracts/resources.ts";
import { DEFAULT_APPROVED_REGISTRIES } from "../../policies/policy-config.ts";
import { registryOf } from "../../policies/image-reference.ts";
import { SHIPPED_NAMESPACE, SHIPPED_RUNTIMES, type ShippedRuntimeImages } from "../../runtimes/catalogue.ts";

/**
 * Which AgentRuntimes may be provisioned: the operator's configuration, never a field whoever
 * writes the runtime sets. A runtime is approved when its image comes from an approved registry
 * (AGENT_SESSIONS_APPROVED_REGISTRIES, the policy pack's default list unless set) and its
 * `namespace/name` matches AGENT_SESSIONS_APPROVED_RUNTIMES (`ns/name`, `ns/*`, `*`; default `*`).
 * The runtimes the server ships (runtimes/catalogue.ts: `default/<name>` pinned to its image
 * setting, e.g. AGENT_SESSIONS_PI_IMAGE) are approved by that configuration; the same name with
 * another image is judged like any other.
 */

/** A comma-separated list of `namespace/name`, `namespace/*` or `*`. */
export const ApprovedRuntimeList = z.string().transform((text, ctx) => {
  const items = text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const item of items)
    if (!/^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?\/(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?))$/.test(item)) {
      ctx.addIssue({ code: "custom", message: `"${item}" is not namespace/name, namespace/* or *` });
      return z.NEVER;
    }
  return items;
});

/** A comma-separated list of registry hosts (`host[:port]`), compared case-insensitively. */
export const ApprovedRegistryList = z
  .string()
  .transform((text) =>
    text
      .split(",")
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
  )
  .pipe(z.array(z.string().regex(/^[a-z0-9.-]+(:\d{1,5})?$/, "must be a registry host[:port]")).min(1));

export type RuntimeApprovalOptions = {
  /** @default the policy pack's default approved registries (127.0.0.1:5000) */
  registries?: readonly string[];
  /** @default ["*"] */
  runtimes?: readonly string[];
  /** The image each shipped runtime is approved with (its setting, e.g. AGENT_SESSIONS_PI_IMAGE). @default none */
  shippedImages?: ShippedRuntimeImages;
};

export type ApprovalVerdict = { approved: true; message: string } | { approved: false; message: string };

export class RuntimeApproval {
  readonly #registries: readonly string[];
  readonly #runtimes: readonly string[];
  /** The shipped runtimes, each with the image the server's configuration pins it to. */
  readonly #shipped: { namespace: string; name: string; image: string | undefined; setting: string }[];

  constructor(options: RuntimeApprovalOptions = {}) {
    this.#registries = (options.registries ?? DEFAULT_APPROVED_REGISTRIES).map((r) => r.toLowerCase());
    this.#runtimes = options.runtimes ?? ["*"];
    this.#shipped = SHIPPED_RUNTIMES.map((r) => ({
      namespace: SHIPPED_NAMESPACE,
      name: r.name,
      image: options.shippedImages?.[r.name],
      setting: r.imageSetting,
    }));
  }

  verdict(runtime: AgentRuntime): ApprovalVerdict {
    const { namespace, name } = runtime.metadata;
    const ref = `${namespace}/${name}`;
    const image = runtime.spec.image;
    const shipped = this.#shipped.find(
      (r) => r.namespace === namespace && r.name === name && r.image !== undefined && r.image === image,
    );
    if (shipped) return { approved: true, message: `the server's ${name} runtime (${shipped.setting})` };
    const registry = registryOf(image);
    if (!this.#registries.includes(registry))
      return {
        approved: false,
        message: `its image comes from registry ${registry}, which is not approved (AGENT_SESSIONS_APPROVED_REGISTRIES: ${this.#registries.join(", ")})`,
      };
    const listed = this.#runtimes.some((r) => r === "*" || r === ref || r === `${namespace}/*`);
    if (!listed)
      return {
        approved: false,
        message: `it is not listed in AGENT_SESSIONS_APPROVED_RUNTIMES (${this.#runtimes.join(", ")})`,
      };
    return { approved: true, message: `image from approved registry ${registry}` };
  }
}
