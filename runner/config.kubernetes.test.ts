import { describe, expect, it } from "vitest";
import { parseRunnerConfig } from "./config.ts";

// The Kubernetes variables are a part of the runner's one schema (runner/config.ts).
const base = {
  AGENT_SESSIONS_SERVER_URL: "http://127.0.0.1:8787",
  AGENT_SESSIONS_RUNNER_TOKEN: "runner-token-0123456789",
  AGENT_SESSIONS_RUNNER_DATA_DIR: "/tmp/x",
};
const kubernetesOf = (env: Record<string, string>) => parseRunnerConfig({ ...base, ...env }).kubernetes;

describe("the Kubernetes runner's config", () => {
  it("defaults to sessions in agent-sessions and the spec's runner selector", () => {
    expect(kubernetesOf({})).toEqual({ namespace: "agent-sessions" });
    expect(kubernetesOf({ AGENT_SESSIONS_RUNNER_POD_LABELS: " ", AGENT_SESSIONS_RUNNER_CIDR: "" })).toEqual({
      namespace: "agent-sessions",
    });
  });

  it("reads the sessions namespace, pod and namespace labels and node CIDR from the environment", () => {
    expect(
      kubernetesOf({
        AGENT_SESSIONS_KUBERNETES_NAMESPACE: "sessions",
        AGENT_SESSIONS_RUNNER_POD_LABELS: "agent-sessions.dev/component=runner, app=as",
        AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS: "agent-sessions.dev/component=control-plane",
        AGENT_SESSIONS_RUNNER_CIDR: "10.213.0.1/32",
      }),
    ).toEqual({
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
      { AGENT_SESSIONS_RUNNER_NAMESPACE_LABELS: "," },
      { AGENT_SESSIONS_RUNNER_CIDR: "10.213.0.1" },
    ];
    for (const env of bad)
      expect(() => kubernetesOf(env), JSON.stringify(env)).toThrow(new RegExp(Object.keys(env)[0] ?? "?"));
    expect(() => kubernetesOf({ AGENT_SESSIONS_RUNNER_POD_LABELS: "novalue" })).toThrow(/key=value/);
  });
});
