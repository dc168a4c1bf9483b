/**
 * The Kubernetes runner's own settings: the namespace its sessions live in, and how a session's
 * NetworkPolicy recognises the runner's connections (its pod labels, the labels of the namespace
 * it runs in when that is not the sessions namespace, its node CIDR when it runs outside the
 * cluster). Part of the runner's config (config.ts, field `kubernetes`); read from the environment:
 *
 *   AGENT_SESSIONS_KUBERNETES_NAMESPACE     sessions namespace            (default agent-sessions)
 *   AGENT_SESSIONS_RUNNER_POD_LABELS        "k=v,k=v": the runner pod's labels
 *   AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS  "k=v,k=v": its namespace's labels (another namespace)
 *   AGENT_SESSIONS_RUNNER_CIDR              CIDR it connects from outside the cluster
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

export const KubernetesRunnerConfig = z.object({
  /** Namespace the session objects live in; the runner's watch and RBAC cover this one. */
  namespace: DnsLabel.default("agent-sessions"),
  /**
   * The runner pod's labels: a session's NetworkPolicy admits pods with these labels (its
   * ingress `podSelector`). Unset: the session spec's runnerSelector (component=runner).
   */
  podLabels: LabelMap.optional(),
  /**
   * Labels of the namespace the runner pod runs in, when that is not the sessions namespace (the
   * control plane's): the ingress peer becomes those pods in those namespaces.
   */
  namespaceLabels: LabelMap.optional(),
  /** CIDR the runner connects from when it runs outside the cluster (on a node). */
  runnerCidr: z
    .string()
    .regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, "must be an IPv4 CIDR")
    .optional(),
});
export type KubernetesRunnerConfig = z.infer<typeof KubernetesRunnerConfig>;

/** `k=v,k=v` as a label map; the schema checks keys and values. Throws on a pair without `=`. */
function labelPairs(text: string | undefined): Record<string, string> | undefined {
  if (text === undefined || text.trim() === "") return undefined;
  const labels: Record<string, string> = {};
  for (const pair of text.split(",").map((p) => p.trim())) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new Error(`a label must be key=value, got "${pair}"`);
    labels[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return labels;
}

/** The environment's Kubernetes runner settings, unparsed (the runner config's schema parses them). */
export function kubernetesRunnerSource(source: NodeJS.ProcessEnv): z.input<typeof KubernetesRunnerConfig> {
  const podLabels = labelPairs(source.AGENT_SESSIONS_RUNNER_POD_LABELS);
  const namespaceLabels = labelPairs(source.AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS);
  return {
    ...(source.AGENT_SESSIONS_KUBERNETES_NAMESPACE
      ? { namespace: source.AGENT_SESSIONS_KUBERNETES_NAMESPACE }
      : {}),
    ...(podLabels ? { podLabels } : {}),
    ...(namespaceLabels ? { namespaceLabels } : {}),
    ...(source.AGENT_SESSIONS_RUNNER_CIDR ? { runnerCidr: source.AGENT_SESSIONS_RUNNER_CIDR } : {}),
  };
}
