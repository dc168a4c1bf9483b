import { describe, expect, it } from "vitest";
import { parseLabelPairs, parseRunnerConfig } from "./config.ts";

const base = {
  AGENT_SESSIONS_SERVER_URL: "http://127.0.0.1:8787",
  AGENT_SESSIONS_RUNNER_TOKEN: "runner-token-0123456789",
  AGENT_SESSIONS_DATA_DIR: "/tmp/x",
};

describe("runner config: capacity and labels", () => {
  it("reads labels and capacity from the environment, flags (overrides) winning", () => {
    const config = parseRunnerConfig({
      ...base,
      AGENT_SESSIONS_RUNNER_LABELS: "zone=a, gpu=true,example.com/tier=gold",
      AGENT_SESSIONS_RUNNER_CAPACITY: "3",
      AGENT_SESSIONS_RUNNER_NAME: "runner-1",
    });
    expect(config).toMatchObject({
      name: "runner-1",
      capacity: 3,
      labels: { zone: "a", gpu: "true", "example.com/tier": "gold" },
    });
    const flagged = parseRunnerConfig(
      { ...base, AGENT_SESSIONS_RUNNER_LABELS: "zone=a", AGENT_SESSIONS_RUNNER_CAPACITY: "3" },
      { labels: { zone: "b" }, capacity: 7 },
    );
    expect(flagged).toMatchObject({ capacity: 7, labels: { zone: "b" } });
    expect(parseRunnerConfig(base)).toMatchObject({ capacity: 100, labels: {} });
  });

  it("parses key=value pairs, repeated or comma-separated; an empty value is a value", () => {
    expect(parseLabelPairs(["zone=a", "disk=ssd,gpu="])).toEqual({ zone: "a", disk: "ssd", gpu: "" });
    expect(() => parseLabelPairs(["zone"])).toThrow('a label must be key=value, got "zone"');
    expect(() => parseLabelPairs(["=a"])).toThrow("key=value");
    expect(() => parseLabelPairs(["zone=a", "zone=b"])).toThrow("label zone is given twice");
  });

  it("refuses labels, names and capacities placement could not use", () => {
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_LABELS: "bad key=x" })).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_LABELS: "zone=has space" })).toThrow();
    expect(() =>
      parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_LABELS: `k=${"v".repeat(64)}` }),
    ).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_NAME: "a/b" })).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_CAPACITY: "0" })).toThrow();
    expect(() => parseRunnerConfig({ ...base, AGENT_SESSIONS_RUNNER_CAPACITY: "two" })).toThrow();
  });
});
