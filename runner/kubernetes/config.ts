/**
 * The Kubernetes runner's own settings: the namespace its sessions live in, and how a session's
 * NetworkPolicy recognises the runner's connections (its pod labels, the labels of the namespace
 * it runs in when that is not the sessions namespace, its node CIDR when it runs outside the
 * cluster). A part of the runner's one schema (`RunnerEnv` in runner/config.ts spreads
 * `KubernetesRunnerEnv`), keyed by variable name like the rest; runner/config.ts resolves them
 * into `KubernetesRunnerConfig`, the options the driver takes. Nothing here reads the environment.
 */
import { z } from "zod";
import { DnsLabel } from "../../contracts/session-spec.ts";

/** Kubernetes label keys (optional DNS prefix, name of at most 63) and values (at most 63). */
const LabelKey = z
  .string()
  .regex(
    /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/,
    "must be a Kubernetes label key",
  );
const LabelValue = z
  .string()
  .regex(/^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/, "must be a Kubernetes label value");
const LabelMap = z
  .record(LabelKey, LabelValue)
  .refine((m) => Object.keys(m).length > 0, "must name at least one label");

/**
 * `k=v,k=v` as a label map (a later key wins; blank is unset); the map schema checks keys and
 * values. A pair without `=` is an issue, not a throw: the config error names the variable.
 */
const LabelPairs = z
  .string()
  .transform((text, ctx) => {
    if (text.trim() === "") return undefined;
    const labels: Record<string, string> = {};
    for (const pair of text.split(",").map((p) => p.trim())) {
      if (pair === "") continue;
      const eq = pair.indexOf("=");
      if (eq <= 0) {
        ctx.issues.push({ code: "custom", message: `a label must be key=value, got "${pair}"`, input: text });
        return z.NEVER;
      }
      labels[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
    return labels;
  })
  .pipe(LabelMap.optional());

/** The Kubernetes engine's variables: a part of the runner's one schema (runner/config.ts). */
export const KubernetesRunnerEnv = z.object({
  /** Namespace the session objects live in; the runner's watch and RBAC cover this one. @default agent-sessions */
  AGENT_SESSIONS_KUBERNETES_NAMESPACE: DnsLabel.default("agent-sessions"),
  /**
   * `k=v,k=v`: the runner pod's labels; a session's NetworkPolicy admits pods with these labels
   * (its ingress `podSelector`). @default unset: the session spec's runnerSelector (component=runner)
   */
  AGENT_SESSIONS_RUNNER_POD_LABELS: LabelPairs.optional(),
  /**
   * `k=v,k=v`: labels of the namespace the runner pod runs in, when that is not the sessions
   * namespace (the control plane's): the ingress peer becomes those pods in those namespaces.
   * @default unset: the sessions namespace
   */
  AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS: LabelPairs.optional(),
  /** IPv4 CIDR the runner connects from when it runs outside the cluster (on a node). @default unset */
  AGENT_SESSIONS_RUNNER_CIDR: z
    .string()
    .regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, "must be an IPv4 CIDR")
    .optional(),
});

/** The Kubernetes runner's resolved settings: what `KubernetesDriver` takes of them. */
export type KubernetesRunnerConfig = {
  /** AGENT_SESSIONS_KUBERNETES_NAMESPACE */
  namespace: string;
  /** AGENT_SESSIONS_RUNNER_POD_LABELS */
  podLabels?: Record<string, string>;
  /** AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS */
  namespaceLabels?: Record<string, string>;
  /** AGENT_SESSIONS_RUNNER_CIDR */
  runnerCidr?: string;
};
