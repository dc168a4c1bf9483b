import { describe, expect, it } from "vitest";
import { KubernetesRunnerConfig, kubernetesRunnerSource } from "./config.ts";

describe("the Kubernetes runner's config", () => {
  it("defaults to sessions in agent-sessions and the spec's runner selector", () => {
    expect(KubernetesRunnerConfig.parse(kubernetesRunnerSource({}))).toEqual({ namespace: "agent-sessions" });
  });

  it("reads the sessions namespace, pod and namespace labels and node CIDR from the environment", () => {
    const parsed = KubernetesRunnerConfig.parse(
      kubernetesRunnerSource({
        AGENT_SESSIONS_KUBERNETES_NAMESPACE: "sessions",
        AGENT_SESSIONS_RUNNER_POD_LABELS: "agent-sessions.dev/component=runner, app=as",
        AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS: "agent-sessions.dev/component=control-plane",
        AGENT_SESSIONS_RUNNER_CIDR: "10.213.0.1/32",
      }),
    );
    expect(parsed).toEqual({
      namespace: "sessions",
      podLabels: { "agent-sessions.dev/component": "runner", app: "as" },
      namespaceLabels: { "agent-sessions.dev/component": "control-plane" },
      runnerCidr: "10.213.0.1/32",
    });
  });

  it("rejects what Kubernetes would: bad namespace, label key or value, pair without =, CIDR without a prefix", () => {
    const bad: Record<string, string>[] = [
      { AGENT_SESSIONS_KUBERNETES_NAMESPACE: "Not_A_Namespace" },
      { AGENT_SESSIONS_RUNNER_POD_LABELS: "-bad=x" },
      { AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS: "k=has space" },
      { AGENT_SESSIONS_RUNNER_CIDR: "10.213.0.1" },
    ];
    for (const env of bad)
      expect(KubernetesRunnerConfig.safeParse(kubernetesRunnerSource(env)).success, JSON.stringify(env)).toBe(
        false,
      );
    expect(() => kubernetesRunnerSource({ AGENT_SESSIONS_RUNNER_POD_LABELS: "novalue" })).toThrow(
      /key=value/,
    );
  });
});
